"""Predict the next value of noisy sine waves with an LSTM, then with a Transformer encoder, both trained
with compiled steps.

    python examples/sequence_models.py               # defaults finish in a few seconds
    python examples/sequence_models.py --steps 600 --length 64

Each batch holds waves of random frequency and phase; the models read a wave and predict, at every
position, the value that comes next. The LSTM (one fused recurrence node per layer) and the encoder's
causal attention are traced into one graph per training step (forward, loss, backward, Adam), whose
elementwise parts are fused into LLVM kernels.
"""

import argparse
import math
import statistics
import time

import jitorch as torch
from jitorch import nn


def waves(batch, length, generator):
    """(inputs, targets): [batch, length, 1] samples of sines and the sample after each."""
    freq = 0.1 + 0.3 * torch.rand(batch, 1, generator=generator)
    phase = 2 * math.pi * torch.rand(batch, 1, generator=generator)
    t = torch.arange(length + 1).float()
    signal = (freq * t + phase).sin() + 0.05 * torch.randn(batch, length + 1, generator=generator)
    return signal[:, :-1].unsqueeze(-1), signal[:, 1:].unsqueeze(-1)


class LSTMPredictor(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


class TransformerPredictor(nn.Module):
    def __init__(self, hidden, length):
        super().__init__()
        self.embed = nn.Linear(1, hidden)
        self.position = nn.Parameter(0.02 * torch.randn(length, hidden))
        layer = nn.TransformerEncoderLayer(hidden, nhead=4, dim_feedforward=2 * hidden, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1)
        self.head = nn.Linear(hidden, 1)
        # each position may attend only to itself and the positions before it
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length), persistent=False)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x) + self.position, mask=self.mask, is_causal=True))


def train(name, model, args, device):
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    def step(x, y):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    compiled = torch.compile(step)
    generator = torch.Generator().manual_seed(1)
    times = {"eager": [], "compiled": []}
    for i in range(1, args.steps + 1):
        x, y = (t.to(device) for t in waves(args.batch_size, args.length, generator))
        # a few eager steps first, for the comparison; the first compiled call traces and compiles
        mode = "eager" if i <= 5 else "compiled"
        start = time.perf_counter()
        loss = (step if mode == "eager" else compiled)(x, y).item()
        times[mode].append(time.perf_counter() - start)
        if i == 1 or i % (args.steps // 4) == 0:
            print(f"{name} step {i:4d}: loss {loss:.4f}")
    eager_ms = statistics.median(times["eager"]) * 1e3
    compiled_ms = statistics.median(times["compiled"][1:]) * 1e3
    kernels = len(compiled.lower(x, y).kernels)
    print(f"{name}: step eager {eager_ms:.1f} ms, compiled {compiled_ms:.1f} ms ({eager_ms / compiled_ms:.1f}x), "
          f"{kernels} fused kernels, first compiled call {times['compiled'][0]:.1f} s")
    return loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--length", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    baseline = waves(512, args.length, torch.Generator().manual_seed(2))
    print(f"predicting the last value again would give a loss of "
          f"{nn.functional.mse_loss(baseline[0], baseline[1]).item():.4f}")
    lstm_loss = train("LSTM", LSTMPredictor(args.hidden), args, args.device)
    transformer_loss = train("Transformer", TransformerPredictor(args.hidden, args.length), args, args.device)
    print(f"final losses: LSTM {lstm_loss:.4f}, Transformer {transformer_loss:.4f}")


if __name__ == "__main__":
    main()
