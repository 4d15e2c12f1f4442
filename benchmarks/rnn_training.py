"""An LSTM word language model's training step (vocabulary 10000, emsize 200, nhid 200, 2 layers,
bptt 35, batch 20; embedding, LSTM, decoder, cross-entropy, SGD), float32, one thread.

    python benchmarks/rnn_training.py [--rounds N] [--composed] [--lstm-only]

Systems, timed interleaved round by round (median ms per step): jitorch eager and compiled (its LSTM
layers as the fused op ``_rnn_layer``), torch eager and, with ``--composed``, jitorch eager and
compiled with the layers composed step by step (the path before the fused op; its compile is slow).
Also prints the time of each compiled step's first call (trace and compile). ``--lstm-only``
times the LSTM alone (forward and backward of a sum of its outputs, no update): the decoder's
200 x 10000 products dominate the whole step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import jitorch as jt  # noqa: E402
from jitorch.nn.modules import rnn as jt_rnn  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

VOCAB, EMSIZE, NHID, LAYERS, BPTT, BATCH, LR = 10000, 200, 200, 2, 35, 20, 0.1


def make_lstm_step(lib, seed=0):
    """Forward and backward of a fresh 2-layer LSTM of ``lib`` on a fixed (bptt, batch, emsize) input."""
    lib.manual_seed(seed)
    lstm = lib.nn.LSTM(EMSIZE, NHID, LAYERS)
    x = lib.tensor(np.random.default_rng(seed).standard_normal((BPTT, BATCH, EMSIZE)).astype(np.float32))

    def step(x):
        loss = lstm(x)[0].sum()
        loss.backward()
        return loss
    return step, (x,)


def make_step(lib, seed=0):
    """A training step of a fresh model of ``lib`` (jitorch or torch) on fixed data: step() -> loss."""
    lib.manual_seed(seed)
    nn = lib.nn
    emb, lstm, dec = nn.Embedding(VOCAB, EMSIZE), nn.LSTM(EMSIZE, NHID, LAYERS), nn.Linear(NHID, VOCAB)
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


def system(make, lib, compiled=False, composed=False):
    """(name, timed call, first-call seconds or None) of the step ``make(lib)`` builds."""
    step, args = make(lib)
    guard = composed_layers if composed else contextlib.nullcontext
    if compiled:
        step = jt.compile(step)
    with guard():
        start = time.perf_counter()
        step(*args)
        first = time.perf_counter() - start
    name = ("torch" if lib is torch else "jitorch") + (" compiled" if compiled else " eager")
    name += " (composed)" if composed else ""

    def call():
        with guard():
            step(*args)
    return name, call, first if compiled else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--composed", action="store_true", help="also time the step-by-step composed layers")
    p.add_argument("--lstm-only", action="store_true", help="time the LSTM's forward and backward alone")
    a = p.parse_args(argv)
    make = make_lstm_step if a.lstm_only else make_step
    jt.set_num_threads(1)
    systems = [system(make, jt), system(make, jt, compiled=True)]
    if torch is not None:
        torch.set_num_threads(1)
        systems.append(system(make, torch))
    if a.composed:
        systems += [system(make, jt, composed=True), system(make, jt, compiled=True, composed=True)]
    times = {name: [] for name, _, _ in systems}
    for _ in range(a.rounds):
        for name, call, _ in systems:
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    for name, _, first in systems:
        extra = f"   first call (trace + compile) {first:.1f} s" if first is not None else ""
        print(f"{name:32s} {1e3 * statistics.median(times[name]):8.1f} ms/step{extra}")


if __name__ == "__main__":
    main()
