"""Train an MLP classifier on a synthetic spiral, eagerly and then with a compiled training step.

    python examples/train_mlp.py                 # defaults finish in a few seconds
    python examples/train_mlp.py --epochs 10 --batch-size 32 --lr 0.005

Written as a PyTorch script: only the import differs. It shows nn.Sequential, CrossEntropyLoss, Adam,
TensorDataset/DataLoader/random_split, jitorch.compile of a whole training step (forward, loss,
backward and optimizer update in one graph), jitorch.explain, and jitorch.save/jitorch.load.
"""

import argparse
import math
import os
import statistics
import tempfile
import time

import jitorch as torch
from jitorch import nn
from jitorch.utils.data import DataLoader, TensorDataset, random_split


def spiral(points_per_class, classes=3, noise=0.2):
    """Points on `classes` interleaved spiral arms in the plane, labelled by arm: learnable, but not linearly."""
    xs, ys = [], []
    for c in range(classes):
        radius = torch.linspace(0.05, 1.0, points_per_class)
        angle = torch.linspace(0.0, 4.0, points_per_class) + c * 2 * math.pi / classes
        angle = angle + noise * torch.randn(points_per_class)
        xs.append(torch.stack([radius * torch.sin(angle), radius * torch.cos(angle)], dim=1))
        ys.append(torch.full((points_per_class,), c, dtype=torch.long))
    return torch.cat(xs), torch.cat(ys)


def make_model(hidden=64, classes=3):
    return nn.Sequential(
        nn.Linear(2, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def accuracy(model, subset):
    """Fraction of a random_split part classified correctly, evaluated in one batch without autograd."""
    x, y = subset.dataset[subset.indices]
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad():
        correct = (model(x.to(device)).argmax(dim=1) == y.to(device)).float().mean().item()
    model.train()
    return correct


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6, help="the first runs eagerly, the rest compiled")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--points", type=int, default=400, help="points per class")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = spiral(args.points)
    train_set, test_set = random_split(TensorDataset(x, y), [0.8, 0.2],
                                       generator=torch.Generator().manual_seed(0))
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(1))
    print(f"data: {len(train_set)} training and {len(test_set)} test points, 3 spiral arms")

    model = make_model().to(args.device)
    print(model)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def train_step(inputs, targets):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    # The model and optimizer are captured from this scope: the compiled graph reads the parameters and
    # Adam's state at each call and updates them in place, exactly as the eager step does.
    compiled_step = torch.compile(train_step)

    step_times = {"eager": [], "compiled": []}
    for epoch in range(1, args.epochs + 1):
        mode = "eager" if epoch == 1 else "compiled"
        step = train_step if mode == "eager" else compiled_step
        losses = []
        for inputs, targets in loader:
            inputs, targets = inputs.to(args.device), targets.to(args.device)
            start = time.perf_counter()
            loss = step(inputs, targets)
            step_times[mode].append(time.perf_counter() - start)
            losses.append(loss.item())
        print(f"epoch {epoch} ({mode:8}): loss {statistics.mean(losses):.4f}  "
              f"train accuracy {accuracy(model, train_set):.3f}  test accuracy {accuracy(model, test_set):.3f}")

    # The first compiled call traces and compiles; the median of the rest is the steady state.
    eager_ms = statistics.median(step_times["eager"]) * 1e3
    compiled_ms = statistics.median(step_times["compiled"][1:]) * 1e3
    print(f"step time: eager {eager_ms:.2f} ms, compiled {compiled_ms:.2f} ms "
          f"({eager_ms / compiled_ms:.1f}x faster; first compiled call {step_times['compiled'][0] * 1e3:.0f} ms)")

    # What the compiled step holds: guards, and the fused kernels in launch order with the eager ops
    # (matmuls, gathers) between them. The full graph follows in the report; print up to it.
    report = str(torch.explain(compiled_step, inputs, targets))
    print(report[:report.index("  graph:")])

    # Save the trained weights, load them into a fresh model, and check both predict alike.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mlp.pt")
        torch.save(model.state_dict(), path)
        fresh = make_model().to(args.device)
        fresh.load_state_dict(torch.load(path))
    test_x = test_set.dataset[test_set.indices][0].to(args.device)
    model.eval()
    fresh.eval()
    with torch.no_grad():
        same = torch.equal(model(test_x), fresh(test_x))
    print(f"saved to {os.path.basename(path)} and reloaded into a fresh model: predictions equal: {same}")
    print(f"final accuracy: {accuracy(model, test_set):.3f}")


if __name__ == "__main__":
    main()
