"""The jitorch demo: train a digit classifier eagerly, then with a compiled step, export it, reload it.

    jitorch demo [--epochs N] [--batch-size B] [--hidden H] [--device cpu|cuda]
    python -m jitorch.demo ...

The data is scikit-learn's bundled 8x8 handwritten digits (1,797 images, no
download). The script is ordinary PyTorch-style code: an ``nn.Sequential``
MLP, ``CrossEntropyLoss``, ``SGD`` with momentum and a ``DataLoader``. The
first epoch runs eagerly; later epochs run the same training step compiled
by `jitorch.compile` (forward, backward and the optimizer's update in one
graph of fused kernels). It prints the step times of both, the accuracy, the
kernels the compiler made, then exports the trained model to a file and
checks that the loaded program predicts the same classes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter

import jitorch as torch
from jitorch import nn
from jitorch.utils.data import DataLoader, TensorDataset, random_split


def load_digits():
    """The digits as (images flattened to 64 floats in [0, 1], labels)."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise SystemExit("the demo needs scikit-learn's bundled digits: pip install 'jitorch[demo]'") from None
    digits = sklearn_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    return x, y


def progress(iterable, desc, quiet):
    """A tqdm progress bar (plain iteration when tqdm is missing or output is quiet)."""
    if quiet:
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, desc=desc, leave=False, ncols=80)


def make_model(hidden):
    return nn.Sequential(
        nn.Linear(64, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, 10),
    )


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / len(y)


def parse(argv):
    p = argparse.ArgumentParser(prog="jitorch demo", description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8, help="training epochs; the first runs eagerly (default 8)")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step (default 64)")
    p.add_argument("--hidden", type=int, default=256, help="width of the two hidden layers (default 256)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--export-to", default=None, help="where to write the exported model (default: a temp file)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error("--epochs must be at least 2: one eager epoch, then compiled ones")
    return args


def run_epoch(step, loader, desc, quiet, times):
    """One pass over ``loader``; appends each step's seconds to ``times``; returns the mean loss."""
    total, count = 0.0, 0
    bar = progress(loader, desc, quiet)
    for xb, yb in bar:
        start = time.perf_counter()
        loss = step(xb, yb).item()
        times.append(time.perf_counter() - start)
        total += loss
        count += 1
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{loss:.3f}")
    return total / count


def main(argv=None):
    """Run the demo; returns the exit status."""
    args = parse(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("jitorch demo: CUDA is not available on this machine; run with --device cpu", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    x, y = load_digits()
    x, y = x.to(device), y.to(device)
    train_set, test_set = random_split(TensorDataset(x, y), [0.8, 0.2],
                                       generator=torch.Generator().manual_seed(args.seed))
    x_test = torch.stack([x for x, _ in test_set])
    y_test = torch.stack([y for _, y in test_set])
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(args.seed))
    model = make_model(args.hidden).to(device)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    def train_step(xb, yb):
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    print(f"jitorch {torch.__version__} demo: {len(x)} handwritten digits (8x8), {len(train_set)} to train, "
          f"{len(test_set)} to test")
    print(f"model: MLP 64-{args.hidden}-{args.hidden}-10, SGD(lr={args.lr}, momentum=0.9), "
          f"batch {args.batch_size}, device {device}")
    eager_times, compiled_times = [], []
    loss = run_epoch(train_step, loader, "epoch 1 (eager)", args.quiet, eager_times)
    print(f"epoch 1 (eager)     loss {loss:.4f}  test accuracy {accuracy(model, x_test, y_test):.3f}")

    compiled_step = torch.compile(train_step, fullgraph=True)
    first = time.perf_counter()
    xb, yb = next(iter(loader))
    compiled_step(xb, yb)  # traces (twice: the optimizer made its state on the first call) and compiles
    compiled_step(xb, yb)
    compile_seconds = time.perf_counter() - first
    for epoch in range(2, args.epochs + 1):
        loss = run_epoch(compiled_step, loader, f"epoch {epoch} (compiled)", args.quiet, compiled_times)
        print(f"epoch {epoch} (compiled)  loss {loss:.4f}  test accuracy {accuracy(model, x_test, y_test):.3f}")

    final_accuracy = accuracy(model, x_test, y_test)
    eager_ms = 1e3 * sorted(eager_times)[len(eager_times) // 2]
    compiled_ms = 1e3 * sorted(compiled_times)[len(compiled_times) // 2]
    print()
    print(f"{'training step':<24}{'median ms':>10}")
    print(f"{'eager':<24}{eager_ms:>10.3f}")
    print(f"{'compiled':<24}{compiled_ms:>10.3f}")
    print(f"{'speed-up':<24}{eager_ms / compiled_ms:>9.2f}x")
    print(f"(first compiled calls, tracing and compiling: {compile_seconds:.2f} s)")
    print()
    lowered = compiled_step.lower(xb, yb)
    library = Counter(n.op.name for step in lowered.steps for n in getattr(step, "nodes", ())
                      if not hasattr(step, "kernel"))
    print(f"the compiled step: {len(lowered.optimized_graph.nodes)} ops in one graph, {len(lowered.kernels)} fused "
          f"kernels, and ops run by library code: " + ", ".join(f"{n} {name}" for name, n in library.most_common()))
    for k in lowered.kernels:
        print(f"  {k.name}: {' '.join(k.ops)}")
    print()
    print(f"final test accuracy: {final_accuracy:.3f}")
    return export_and_check(model, x_test, args)


def export_and_check(model, x_test, args):
    """Export the trained model, load the file back and compare its predictions."""
    model.eval()
    program = torch.export(model, (x_test,))
    path = args.export_to or os.path.join(tempfile.mkdtemp(prefix="jitorch-demo-"), "digits.jitorch")
    program.save(path)
    loaded = torch.load(path)
    with torch.no_grad():
        expected = model(x_test).argmax(1)
    same = bool((loaded(x_test).argmax(1) == expected).all())
    size = os.path.getsize(path)
    print(f"exported to {path} ({size / 1024:.0f} KiB); the loaded program predicts "
          f"{'the same classes' if same else 'DIFFERENT classes'} on {len(x_test)} test images")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
