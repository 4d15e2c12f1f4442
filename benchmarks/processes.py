"""DataLoader workers and tensor sending between processes: jitorch against torch.

    python benchmarks/processes.py            # about a minute
    python benchmarks/processes.py --quick    # tiny sizes (the suite runs this)

Two tables:
1. DataLoader throughput on a decode-heavy dataset (each sample inflates a zlib-compressed image, blurs it
   in a few NumPy passes and normalises it), in samples per second with 0, 1 and 2 workers, and as the speed-up over 0 workers.
2. The time to send a tensor to another process and have it read one element back, for growing sizes: the
   first send (which moves the tensor into shared memory) and a send of a tensor already there. Sending passes
   a handle, so the second column must not grow with the size.
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib

import numpy as np
import torch
import torch.multiprocessing as torch_mp
import torch.utils.data

import jitorch as jt
import jitorch.multiprocessing as jt_mp
from jitorch.utils.data import DataLoader, Dataset

LIBS = {"jitorch": (jt, DataLoader, jt_mp), "torch": (torch, torch.utils.data.DataLoader, torch_mp)}


class Compressed:
    """Images stored zlib-compressed, decoded and normalised per sample: the work workers take off the loop."""

    def __init__(self, lib, n, side):
        rng = np.random.default_rng(0)
        smooth = np.cumsum(rng.integers(0, 3, size=(n, 3, side, side), dtype=np.uint8), axis=-1, dtype=np.uint8)
        self.blobs = [zlib.compress(img.tobytes(), 6) for img in smooth]
        self.lib, self.shape, self.smoothing = lib, (3, side, side), 24

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        img = np.frombuffer(zlib.decompress(self.blobs[i]), np.uint8).reshape(self.shape).astype(np.float32)
        for _ in range(self.smoothing):  # augmentation-like work: a few passes of a small blur
            img = (img + np.roll(img, 1, axis=-1) + np.roll(img, 1, axis=-2)) / 3
        img = (img - img.mean(axis=(1, 2), keepdims=True)) / (img.std(axis=(1, 2), keepdims=True) + 1e-5)
        return self.lib.from_numpy(np.ascontiguousarray(img[:, ::-1])), i % 10


class OurCompressed(Compressed, Dataset):
    pass


class TheirCompressed(Compressed, torch.utils.data.Dataset):
    pass


def loader_rate(name, workers, n, side, batch):
    lib, loader_type, _ = LIBS[name]
    dataset = (OurCompressed if name == "jitorch" else TheirCompressed)(lib, n, side)
    loader = loader_type(dataset, batch_size=batch, num_workers=workers)
    start = time.perf_counter()
    count = sum(len(y) for _, y in loader)
    return count / (time.perf_counter() - start)


def _echo(queue, replies):
    while True:
        t = queue.get()
        if t is None:
            return
        replies.put(float(t[-1]))


def send_times(name, sizes, repeat):
    """{bytes: (first send, send of a shared tensor)} in seconds, round trip to a forked process."""
    lib, _, mp = LIBS[name]
    context = mp.get_context("fork")
    queue, replies = context.Queue(), context.Queue()
    child = context.Process(target=_echo, args=(queue, replies), daemon=True)
    child.start()
    queue.put(lib.zeros(1))
    replies.get()
    results = {}
    for nbytes in sizes:
        first, again = [], []
        for _ in range(repeat):
            t = lib.ones(nbytes // 4)
            start = time.perf_counter()
            queue.put(t)
            replies.get()
            first.append(time.perf_counter() - start)
            start = time.perf_counter()
            queue.put(t)
            replies.get()
            again.append(time.perf_counter() - start)
        results[nbytes] = (statistics.median(first), statistics.median(again))
    queue.put(None)
    child.join()
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    args = p.parse_args(argv)
    n, side, batch = (64, 16, 8) if args.quick else (2048, 96, 32)
    sizes = [1 << 16, 1 << 20] if args.quick else [1 << 20, 10 << 20, 100 << 20]
    repeat = 2 if args.quick else 5
    jt.set_num_threads(1)
    torch.set_num_threads(1)

    print(f"DataLoader on {n} zlib-compressed {side}x{side} RGB images, batch {batch} (samples/s)")
    print(f"{'workers':>8} {'jitorch':>10} {'torch':>10} {'jitorch/torch':>14} {'jitorch speed-up':>17}")
    base = None
    for workers in (0, 1, 2):
        ours, theirs = loader_rate("jitorch", workers, n, side, batch), loader_rate("torch", workers, n, side, batch)
        base = base or ours
        print(f"{workers:>8} {ours:>10.0f} {theirs:>10.0f} {ours / theirs:>13.2f}x {ours / base:>16.2f}x")

    print("\nsending a float32 tensor to another process and reading one element back (ms)")
    print(f"{'size':>8} {'jitorch first':>14} {'jitorch again':>14} {'torch first':>12} {'torch again':>12}")
    ours, theirs = send_times("jitorch", sizes, repeat), send_times("torch", sizes, repeat)
    for nbytes in sizes:
        row = [*ours[nbytes], *theirs[nbytes]]
        print(f"{nbytes / 2**20:>6.2f}MB " + " ".join(f"{t * 1e3:>{w}.2f}" for t, w in zip(row, (14, 14, 12, 12))))


if __name__ == "__main__":
    main()
