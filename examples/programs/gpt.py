"""A GPT in nanoGPT's style, trained on a built-in character corpus.

    python examples/programs/gpt.py                     # a few hundred steps on CPU
    python examples/programs/gpt.py --steps 5 --batch-size 4 --compile

Written as a PyTorch script would be: only the ``torch`` name is used, so the same file runs
under ``import torch``. ``main(argv)`` returns the losses, the reloaded model's agreement and a
sample so that tests can run it in-process.
"""

import argparse
import inspect
import math
import os
import tempfile

import jitorch as torch
import jitorch.nn as nn
import jitorch.nn.functional as F

TEXT = (
    "First Citizen: Before we proceed any further, hear me speak. "
    "All: Speak, speak. First Citizen: You are all resolved rather to die than to famish? "
    "All: Resolved. resolved. First Citizen: First, you know Caius Marcius is chief enemy to the people. "
)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout, flash):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.dropout = dropout
        # flash attention where the library has it, else the attention written out with a causal mask buffer
        self.flash = flash and hasattr(torch.nn.functional, "scaled_dot_product_attention")
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                               dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout, flash):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout, flash)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout, flash=True):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout, flash) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
        extra_args = dict(fused=True) if fused_available and device_type == "cuda" else dict()
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra_args)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--sample-tokens", type=int, default=40)
    p.add_argument("--eval-iters", type=int, default=4)
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="bfloat16")
    p.add_argument("--attention", choices=["flash", "manual"], default="flash")
    p.add_argument("--compile", action="store_true")
    return p.parse_args(argv)


def get_lr(step, args):
    """Linear warmup, then cosine decay to a tenth of the peak, as nanoGPT does."""
    if step < args.warmup:
        return args.lr * (step + 1) / (args.warmup + 1)
    ratio = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(ratio, 1.0))))


def get_batch(data, args, device):
    ix = torch.randint(len(data) - args.block_size, (args.batch_size,))
    x = torch.stack([data[i:i + args.block_size] for i in ix.tolist()])
    y = torch.stack([data[i + 1:i + 1 + args.block_size] for i in ix.tolist()])
    return x.to(device), y.to(device)


@torch.no_grad()
def estimate_loss(model, data, args, device, ctx):
    """The mean loss over ``args.eval_iters`` batches, in eval mode."""
    model.eval()
    losses = torch.zeros(args.eval_iters)
    for k in range(args.eval_iters):
        x, y = get_batch(data, args, device)
        with ctx:
            _, loss = model(x, y)
        losses[k] = loss.item()
    model.train()
    return losses.mean().item()


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    device_type = "cuda" if "cuda" in device else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    ctx = torch.autocast(device_type=device_type, dtype=ptdtype, enabled=args.dtype != "float32")

    chars = sorted(set(TEXT))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for ch, i in stoi.items()}
    data = torch.tensor([stoi[c] for c in TEXT], dtype=torch.long)

    def make_model():
        return GPT(len(chars), args.block_size, args.n_layer, args.n_head, args.n_embd, args.dropout,
                   flash=args.attention == "flash").to(device)

    model = make_model()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    optimizer = model.configure_optimizers(args.weight_decay, args.lr, (0.9, 0.95), device_type)
    scaler = torch.amp.GradScaler(device_type, enabled=args.dtype == "float16")
    forward = torch.compile(model) if args.compile else model

    losses = []
    model.train()
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(step, args)
        x, y = get_batch(data, args, device)
        with ctx:
            _, loss = forward(x, y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if args.grad_clip > 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}: loss {losses[-1]:.4f}, lr {get_lr(step, args):.2e}")

    print(f"estimated loss {estimate_loss(model, data, args, device, ctx):.4f}")
    model.eval()
    x, y = get_batch(data, args, device)
    with torch.no_grad():
        _, eval_loss = model(x, y)
    with tempfile.TemporaryDirectory() as out_dir:
        path = os.path.join(out_dir, "ckpt.pt")
        torch.save({"model": model.state_dict(), "step": args.steps}, path)
        reloaded = make_model()
        checkpoint = torch.load(path)
        reloaded.load_state_dict(checkpoint["model"])
    reloaded.eval()
    with torch.no_grad():
        _, reloaded_loss = reloaded(x, y)
    print(f"eval loss {eval_loss.item():.4f}, reloaded {reloaded_loss.item():.4f}")

    prompt = torch.tensor([[stoi[c] for c in "First"]], dtype=torch.long, device=device)
    greedy = model.generate(prompt, args.sample_tokens, top_k=1)[0].tolist()
    sampled = model.generate(prompt, args.sample_tokens, temperature=0.8, top_k=5)[0].tolist()
    print("greedy:", repr("".join(itos[i] for i in greedy)))
    print("top-k: ", repr("".join(itos[i] for i in sampled)))
    return {"losses": losses, "eval_loss": eval_loss.item(), "reloaded_loss": reloaded_loss.item(),
            "greedy": greedy, "sampled": sampled, "vocab_size": len(chars)}


if __name__ == "__main__":
    main()
