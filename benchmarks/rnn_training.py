"""An LSTM word language model's training step (vocabulary 10000, emsize 200, nhid 200, 2 layers,
bptt 35, batch 20; embedding, LSTM, decoder, cross-entropy, SGD), float32, one thread.

    python benchmarks/rnn_training.py [--rounds N] [--gru] [--composed] [--numpy-cells] [--lstm-only]

Systems, timed interleaved round by round (median wall and process CPU ms per step): jitorch eager and
compiled (its LSTM layers as the fused op ``_rnn_layer``, whose steps run a generated cell kernel:
jitorch/codegen/recurrence.py), torch eager and, with ``--composed``, jitorch eager and compiled with the
layers composed step by step (the path before the fused op; its compile is slow), with ``--numpy-cells``
jitorch eager and compiled with the fused op's NumPy cells (its loops before the generated cells).
``--gru``: the same model with a GRU.
Also prints the time of each compiled step's first call (trace and compile). ``--lstm-only``
times the LSTM alone (forward and backward of a sum of its outputs, no update): the decoder's
200 x 10000 products dominate the whole step.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import jitorch as jt  # noqa: E402
from jitorch.nn.modules import rnn as jt_rnn  # noqa: E402
from jitorch.ops import recurrences  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

VOCAB, EMSIZE, NHID, LAYERS, BPTT, BATCH, LR = 10000, 200, 200, 2, 35, 20, 0.1


def make_lstm_step(lib, seed=0, mode="LSTM"):
    """Forward and backward of a fresh 2-layer LSTM (or ``mode``) of ``lib`` on a fixed (bptt, batch, emsize)
    input."""
    lib.manual_seed(seed)
    lstm = getattr(lib.nn, mode)(EMSIZE, NHID, LAYERS)
    x = lib.tensor(np.random.default_rng(seed).standard_normal((BPTT, BATCH, EMSIZE)).astype(np.float32))

    def step(x):
        loss = lstm(x)[0].sum()
        loss.backward()
        return loss
    return step, (x,)


def make_step(lib, seed=0, mode="LSTM"):
    """A training step of a fresh model of ``lib`` (jitorch or torch; an LSTM or ``mode``) on fixed data:
    step() -> loss."""
    lib.manual_seed(seed)
    nn = lib.nn
    emb, lstm, dec = nn.Embedding(VOCAB, EMSIZE), getattr(nn, mode)(EMSIZE, NHID, LAYERS), nn.Linear(NHID, VOCAB)
    params = [*emb.parameters(), *lstm.parameters(), *dec.parameters()]
    opt = lib.optim.SGD(params, lr=LR)
    rng = np.random.default_rng(seed)
    data = lib.tensor(rng.integers(0, VOCAB, (BPTT, BATCH)))
    target = lib.tensor(rng.integers(0, VOCAB, (BPTT * BATCH,)))

    def step(data, target):
        opt.zero_grad()
        out, _ = lstm(emb(data))
        loss = nn.functional.cross_entropy(dec(out).reshape(-1, VOCAB), target)
        loss.backward()
        opt.step()
        return loss
    return step, (data, target)


@contextlib.contextmanager
def composed_layers():
    """The recurrent layers composed step by step (as before the fused op) while inside."""
    fusable = jt_rnn._fusable
    jt_rnn._fusable = lambda *args: False
    try:
        yield
    finally:
        jt_rnn._fusable = fusable


@contextlib.contextmanager
def numpy_cells():
    """The fused layers' steps in NumPy (as before the generated cell kernels) while inside."""
    cell = recurrences.CELL_KERNEL
    recurrences.CELL_KERNEL = None
    try:
        yield
    finally:
        recurrences.CELL_KERNEL = cell


def system(make, lib, compiled=False, guard=None):
    """(name, timed call, first-call seconds or None) of the step ``make(lib)`` builds, run inside ``guard``
    (`composed_layers` or `numpy_cells`) where given."""
    step, args = make(lib)
    label = {composed_layers: " (composed)", numpy_cells: " (NumPy cells)"}.get(guard, "")
    guard = guard or contextlib.nullcontext
    if compiled:
        step = jt.compile(step)
    with guard():
        start = time.perf_counter()
        step(*args)
        first = time.perf_counter() - start
    name = ("torch" if lib is torch else "jitorch") + (" compiled" if compiled else " eager") + label

    def call():
        with guard():
            step(*args)
    return name, call, first if compiled else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--composed", action="store_true", help="also time the step-by-step composed layers")
    p.add_argument("--numpy-cells", action="store_true", help="also time the fused layers with NumPy cells")
    p.add_argument("--lstm-only", action="store_true", help="time the LSTM's forward and backward alone")
    p.add_argument("--gru", action="store_true", help="a GRU in place of the LSTM")
    a = p.parse_args(argv)
    make = functools.partial(make_lstm_step if a.lstm_only else make_step, mode="GRU" if a.gru else "LSTM")
    jt.set_num_threads(1)
    systems = [system(make, jt), system(make, jt, compiled=True)]
    if torch is not None:
        torch.set_num_threads(1)
        systems.append(system(make, torch))
    for guard, wanted in ((composed_layers, a.composed), (numpy_cells, a.numpy_cells)):
        if wanted:
            systems += [system(make, jt, guard=guard), system(make, jt, compiled=True, guard=guard)]
    times = {name: [] for name, _, _ in systems}
    cpu_times = {name: [] for name, _, _ in systems}
    for _ in range(a.rounds):
        for name, call, _ in systems:
            start, cpu = time.perf_counter(), time.process_time()
            call()
            times[name].append(time.perf_counter() - start)
            cpu_times[name].append(time.process_time() - cpu)
    for name, _, first in systems:
        extra = f"   first call (trace + compile) {first:.1f} s" if first is not None else ""
        print(f"{name:34s} {1e3 * statistics.median(times[name]):8.1f} ms/step, "
              f"CPU {1e3 * statistics.median(cpu_times[name]):8.1f}{extra}")


if __name__ == "__main__":
    main()
