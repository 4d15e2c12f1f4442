"""Hogwild training: several processes update one model's shared parameters, without locks.

    python examples/hogwild.py                   # 2 processes, a few seconds
    python examples/hogwild.py --processes 4 --epochs 6

Written as PyTorch's mnist_hogwild example is: ``model.share_memory()`` moves the parameters into shared
memory, ``jitorch.multiprocessing.spawn`` starts the workers and passes them the model (its parameters travel
as handles to that memory, not as copies), and each worker trains with its own optimizer on its own shard of
the data. The parent process never trains: what it sees afterwards is what the workers wrote.
"""

import argparse
import os

import jitorch as torch
import jitorch.multiprocessing as mp
from jitorch import nn
from jitorch.utils.data import DataLoader, Subset, TensorDataset, random_split

from train_mlp import accuracy, make_model, spiral


def train(rank, model, train_set, args):
    """One worker: Adam over every ``processes``-th training point, into the shared parameters."""
    torch.manual_seed(100 + rank)
    shard = Subset(train_set, range(rank, len(train_set), args.processes))
    loader = DataLoader(shard, batch_size=args.batch_size, shuffle=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    shared = all(p.is_shared() for p in model.parameters())
    for epoch in range(args.epochs):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
    print(f"worker {rank} (pid {os.getpid()}): {args.epochs} epochs on {len(shard)} points, "
          f"parameters shared: {shared}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--points", type=int, default=400, help="points per class")
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = spiral(args.points)
    train_set, test_set = random_split(TensorDataset(x, y), [0.8, 0.2], generator=torch.Generator().manual_seed(0))
    model = make_model()
    model.share_memory()
    print(f"before training: test accuracy {accuracy(model, test_set):.3f}")
    mp.spawn(train, args=(model, train_set, args), nprocs=args.processes)
    print(f"after {args.processes} hogwild workers: final accuracy: {accuracy(model, test_set):.3f}")


if __name__ == "__main__":
    main()
