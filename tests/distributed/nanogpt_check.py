"""A nanoGPT-style train.py written for torch (its DDP parts as nanoGPT's train.py has them), run with
``import jitorch as torch`` under the launcher. Changing that one line to ``import torch`` runs it under torch.

Every rank trains a small GPT (weights tied between the embedding and the head, as nanoGPT's) with DDP,
gradient accumulation (``no_sync()`` on odd iterations, nanoGPT's ``require_backward_grad_sync`` on even ones),
a DistributedSampler with ``set_epoch``, AdamW with weight-decay groups, gradient clipping, a GradScaler that is
off, an all-reduced loss for logging, and a checkpoint on rank 0; ``--compile`` compiles the model before DDP
wraps it, as nanoGPT does. Alongside, each rank trains a copy alone on every rank's micro-batches together: the
two must agree to float32 noise after every iteration. Prints "rank R: nanogpt ddp == whole batch (MODE)".
"""

import inspect
import math
import os
import sys
import tempfile
from contextlib import nullcontext

import numpy as np

import jitorch as torch  # the only line that differs from the torch script

dist, nn, F = torch.distributed, torch.nn, torch.nn.functional
DDP = torch.nn.parallel.DistributedDataParallel
DistributedSampler = torch.utils.data.distributed.DistributedSampler


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd), wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying: one parameter used twice
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **(dict(fused=True) if fused else {}))


def difference(model, whole, read):
    """The largest difference between ``read`` of ``model``'s parameters and of ``whole``'s of the same names
    (``model``'s may be a compiled module's, named "_orig_mod." and then ``whole``'s name)."""
    mine = {name.removeprefix("_orig_mod."): p for name, p in model.named_parameters()}
    return max((read(mine[name]) - read(p)).abs().max().item() for name, p in whole.named_parameters())


@torch.no_grad()
def estimate_loss(model, data, block_size, eval_iters=3):
    """nanoGPT's: the mean loss of a few batches read from a NumPy array, in eval mode."""
    model.eval()
    losses = torch.zeros(eval_iters)
    for k in range(eval_iters):
        ix = torch.randint(len(data) - block_size - 1, (4,), generator=torch.Generator().manual_seed(k))
        x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix.tolist()])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix.tolist()])
        _, loss = model(x, y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


def main():
    compile_model = "--compile" in sys.argv
    ddp = int(os.environ.get("RANK", -1)) != -1
    assert ddp, "run me under the launcher"
    dist.init_process_group(backend="gloo")
    ddp_rank, ddp_world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    device = "cpu"
    master_process = ddp_rank == 0
    torch.manual_seed(1337 + ddp_rank)  # different weights per rank: DDP broadcasts rank 0's
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    ctx = nullcontext() if device == "cpu" else torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16)
    accumulation, batch_size, block_size = 2, 2, 8

    tokens = torch.randint(0, 32, (400,), generator=torch.Generator().manual_seed(0))
    starts = torch.arange(0, 400 - block_size - 1, 14)
    windows = torch.stack([tokens[s:s + block_size + 1] for s in starts.tolist()])
    dataset = torch.utils.data.TensorDataset(windows[:, :-1], windows[:, 1:])
    sampler = DistributedSampler(dataset, shuffle=True, seed=3, drop_last=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)

    model = GPT().to(device)
    scaler = torch.amp.GradScaler("cuda", enabled=False)  # nanoGPT: enabled only for float16
    optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), "cpu")
    if compile_model:
        model = torch.compile(model)
    model = DDP(model, device_ids=[ddp_local_rank] if device != "cpu" else None)
    raw_model = model.module
    assert type(raw_model).__name__ == ("OptimizedModule" if compile_model else "GPT")  # torch's name too

    whole = GPT()  # alone, on the micro-batches of every rank at once, from rank 0's weights
    whole.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in raw_model.state_dict().items()})
    whole_optimizer = whole.configure_optimizers(0.1, 1e-2, (0.9, 0.95), "cpu")
    everyone = [DistributedSampler(dataset, ddp_world_size, r, shuffle=True, seed=3, drop_last=True)
                for r in range(ddp_world_size)]

    iter_num, worst, grad_worst = 0, 0.0, 0.0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for s in everyone:
            s.set_epoch(epoch)
        shares = [list(s) for s in everyone]
        batches = iter(loader)
        for step in range(len(loader) // accumulation):
            for micro_step in range(accumulation):
                last = micro_step == accumulation - 1
                if iter_num % 2 == 0:  # nanoGPT's way
                    model.require_backward_grad_sync = last
                    syncing = nullcontext()
                else:
                    syncing = nullcontext() if last else model.no_sync()
                X, Y = next(batches)
                with ctx, syncing:
                    logits, loss = model(X, Y)
                    loss = loss / accumulation
                scaler.scale(loss).backward()
                first = (step * accumulation + micro_step) * batch_size
                rows = [i for share in shares for i in share[first:first + batch_size]]
                _, whole_loss = whole(*dataset[rows])
                (whole_loss / accumulation).backward()
            model.require_backward_grad_sync = True
            grad_worst = max(grad_worst, difference(raw_model, whole, lambda p: p.grad))
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            torch.nn.utils.clip_grad_norm_(whole.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            whole_optimizer.step()
            whole_optimizer.zero_grad(set_to_none=True)
            logged = loss.detach() * accumulation
            dist.all_reduce(logged, op=dist.ReduceOp.SUM)  # the mean loss over the ranks, for the log
            logged /= ddp_world_size
            assert math.isclose(logged.item(), whole_loss.item(), rel_tol=1e-4, abs_tol=1e-6), \
                (logged.item(), whole_loss.item())
            worst = max(worst, difference(raw_model, whole, lambda p: p.detach()))
            iter_num += 1
        val = estimate_loss(model, tokens.numpy().astype(np.uint16), block_size)
        assert math.isclose(val.item(), estimate_loss(whole, tokens.numpy().astype(np.uint16), block_size).item(),
                            rel_tol=1e-3) and model.module.training
    # AdamW turns float32 noise in a gradient of about zero (the attention's key bias has exactly zero) into
    # updates of up to its lr: the gradients are DDP's result, the weights only follow them
    assert grad_worst < 1e-6 and worst < 1e-3, (grad_worst, worst)

    checkpoint_path = os.path.join(tempfile.gettempdir(), f"nanogpt_check_{os.getppid()}.pt")
    if master_process:
        torch.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num,
                    "best_val_loss": val}, checkpoint_path)
    dist.barrier()
    checkpoint = torch.load(checkpoint_path, map_location=device)
    state = {k.removeprefix("_orig_mod."): v for k, v in checkpoint["model"].items()}
    resumed = GPT()
    resumed.load_state_dict(state)
    assert difference(raw_model, resumed, lambda p: p.detach()) == 0
    assert checkpoint["iter_num"] == iter_num
    dist.barrier()
    if master_process:
        os.remove(checkpoint_path)
    mode = "compiled" if compile_model else "eager"
    print(f"rank {ddp_rank}: nanogpt ddp == whole batch ({mode}), {iter_num} iterations, gradients within "
          f"{grad_worst:.0e}, loss {logged.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
