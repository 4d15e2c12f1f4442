"""A tiny character-level transformer language model, trained with a compiled AdamW step.

    python examples/char_transformer.py                  # defaults finish in a few seconds
    python examples/char_transformer.py --steps 300 --layers 2

The model is GPT-shaped: token and position embeddings, pre-LayerNorm blocks of causal
MultiheadAttention(batch_first=True) and a GELU MLP with residual connections, and a Linear head.
It learns the paragraph below well enough for a greedy sample to continue a prompt from it.
"""

import argparse
import time

import jitorch as torch
from jitorch import nn

TEXT = (
    "The PyTorch paper argues that a deep learning library should be an ordinary Python library: "
    "models are classes, training loops are loops, and data loaders are iterators. Eager execution "
    "makes programs easy to write and to debug, and a compiler can then make the same program fast "
    "without asking its author to write it again. "
)


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, causal_mask):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=causal_mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    def __init__(self, vocab, context, dim=64, heads=4, layers=1):
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        length = idx.shape[1]
        # True above the diagonal: position i may not attend to the positions after it
        causal_mask = torch.triu(torch.ones(length, length, dtype=torch.bool, device=idx.device), diagonal=1)
        x = self.token(idx) + self.position(torch.arange(length, device=idx.device))
        for block in self.blocks:
            x = block(x, causal_mask)
        return self.head(self.norm(x))


def generate(model, prompt, length, stoi, itos, context, device="cpu"):
    """Extend `prompt` greedily by `length` characters (eager: the input grows each step)."""
    idx = torch.tensor([[stoi[c] for c in prompt]], device=device)
    model.eval()
    with torch.no_grad():
        for _ in range(length):
            logits = model(idx[:, -context:])
            idx = torch.cat([idx, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    model.train()
    return "".join(itos[i] for i in idx[0].tolist())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    chars = sorted(set(TEXT))
    stoi, itos = {c: i for i, c in enumerate(chars)}, dict(enumerate(chars))
    data = torch.tensor([stoi[c] for c in TEXT], device=args.device)
    print(f"text: {len(TEXT)} characters, vocabulary of {len(chars)}")

    def batch():
        """Random windows of the text; each target is its input shifted by one character."""
        starts = torch.randint(0, len(data) - args.context - 1, (args.batch_size, 1), device=args.device)
        offsets = starts + torch.arange(args.context, device=args.device)
        return data[offsets], data[offsets + 1]

    model = CharTransformer(len(chars), args.context, args.dim, layers=args.layers).to(args.device)
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters")
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    @torch.compile
    def train_step(inputs, targets):
        optimizer.zero_grad()
        logits = model(inputs)
        loss = loss_fn(logits.view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        optimizer.step()
        return loss

    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = train_step(*batch())
        if step == 1 or step % 20 == 0:
            print(f"step {step:4d}: loss {loss.item():.4f}")
    print(f"{args.steps} compiled steps in {time.perf_counter() - start:.1f} s "
          f"(the first traces twice, as AdamW makes its state, and compiles)")

    prompt = "The PyTorch paper"
    print(f"greedy sample: {generate(model, prompt, 60, stoi, itos, args.context, args.device)!r}")
    print(f"final loss: {loss.item():.4f}")


if __name__ == "__main__":
    main()
