"""Data-parallel training: the spiral MLP on N ranks with DistributedDataParallel and compiled steps.

    python -m jitorch.distributed.run --nproc-per-node 2 examples/train_ddp.py
    python examples/train_ddp.py                  # a world of one process

Written as a torchrun script: each rank reads its share of the data through a DistributedSampler, wraps the
model in DistributedDataParallel, and runs a compiled training step whose graph holds the gradient all-reduces.
Rank 0 saves a checkpoint after each epoch (the others wait at a barrier) and reports the accuracy, which every
rank computes alike since their models stay equal.
"""

import argparse
import os
import tempfile

import jitorch as torch
import jitorch.distributed as dist
from jitorch import nn
from jitorch.nn.parallel import DistributedDataParallel as DDP
from jitorch.utils.data import DataLoader, DistributedSampler, TensorDataset, random_split

from train_mlp import accuracy, make_model, spiral


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--points", type=int, default=400, help="points per class")
    args = parser.parse_args()

    os.environ.setdefault("RANK", "0")  # started without the launcher: a world of one
    os.environ.setdefault("WORLD_SIZE", "1")
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # every rank makes the same data; the sampler gives each its share
    x, y = spiral(args.points)
    train_set, test_set = random_split(TensorDataset(x, y), [0.8, 0.2], generator=torch.Generator().manual_seed(0))
    sampler = DistributedSampler(train_set, shuffle=True, seed=1, drop_last=True)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    torch.manual_seed(rank)  # different initial weights: DDP broadcasts rank 0's
    model = DDP(make_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    @torch.compile
    def train_step(inputs, targets):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    checkpoint = os.path.join(tempfile.gettempdir(), f"train_ddp_{os.getppid()}.pt")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            loss = train_step(inputs, targets)
        if rank == 0:
            torch.save(model.module.state_dict(), checkpoint)
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}, test accuracy {accuracy(model.module, test_set):.3f} "
                  f"({len(loader)} steps on each of {world} ranks)", flush=True)

    fresh = make_model()
    fresh.load_state_dict(torch.load(checkpoint))
    same = all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.module.parameters()))
    mine = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])
    first = mine.clone()
    dist.broadcast(first, src=0)
    report = str(torch.explain(train_step, inputs, targets))
    graphs = "one graph" if "eagerly" not in report else "eager fallback"
    print(f"rank {rank}: replicas equal: {torch.equal(mine, first)}, checkpoint reloads: {same}, "
          f"compiled step: {graphs} with {report.count('_c10d_all_reduce (external)')} all-reduce nodes",
          flush=True)
    dist.barrier()
    if rank == 0:
        os.remove(checkpoint)
        print(f"final accuracy: {accuracy(model.module, test_set):.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
