"""An MLP training step (784-256-128-10, ReLU, cross-entropy, SGD, batch 256), float32.

    python benchmarks/training.py [--quick]

Systems, timed in one run (median ms per step): jitorch eager, jitorch
compiled (forward + backward + update in one compiled step), NumPy with a
hand-written backward, torch eager and torch.compile (when installed). Every
system runs the same maths: logits, log-softmax cross-entropy against one-hot
labels, and an in-place SGD update.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch as jt  # noqa: E402
from timing import median_time  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

SIZES = (784, 256, 128, 10)
BATCH = 256
LR = 0.01


def data():
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((i, o)) * np.sqrt(2.0 / i)).astype(np.float32) for i, o in zip(SIZES, SIZES[1:])]
    bs = [np.zeros(o, np.float32) for o in SIZES[1:]]
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    onehot = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)]
    return ws, bs, x, onehot


def loss_of(lib, params, x, onehot):
    w1, b1, w2, b2, w3, b3 = params
    h = (x @ w1 + b1).relu()
    h = (h @ w2 + b2).relu()
    logits = h @ w3 + b3
    return -(logits.log_softmax(-1) * onehot).sum(-1).mean()


def make_step(lib):
    def step(w1, b1, w2, b2, w3, b3, x, onehot):
        params = (w1, b1, w2, b2, w3, b3)
        loss = loss_of(lib, params, x, onehot)
        loss.backward()
        with lib.no_grad():
            for p in params:
                p.sub_(LR * p.grad)
                p.grad = None
        return loss
    return step


def numpy_step(params, x, onehot):
    w1, b1, w2, b2, w3, b3 = params
    z1 = x @ w1 + b1
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w2 + b2
    h2 = np.maximum(z2, 0)
    logits = h2 @ w3 + b3
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    loss = -(logp * onehot).sum(-1).mean()
    dlogits = (np.exp(logp) - onehot) / BATCH
    dw3, db3 = h2.T @ dlogits, dlogits.sum(0)
    dz2 = (dlogits @ w3.T) * (z2 > 0)
    dw2, db2 = h1.T @ dz2, dz2.sum(0)
    dz1 = (dz2 @ w2.T) * (z1 > 0)
    dw1, db1 = x.T @ dz1, dz1.sum(0)
    for p, g in zip(params, (dw1, db1, dw2, db2, dw3, db3)):
        p -= LR * g
    return loss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    repeat = 10 if args.quick else 40
    ws, bs, x, onehot = data()

    def jt_params():
        return [jt.tensor(a, requires_grad=True) for pair in zip(ws, bs) for a in pair]

    results = {}
    step = make_step(jt)
    p_eager, p_comp = jt_params(), jt_params()
    xt, ot = jt.from_numpy(x), jt.from_numpy(onehot)
    results["jitorch eager"] = median_time(lambda: step(*p_eager, xt, ot), repeat, warmup=2)
    compiled = jt.compile(step)
    results["jitorch compiled"] = median_time(lambda: compiled(*p_comp, xt, ot), repeat, warmup=2)
    np_params = [a.copy() for pair in zip(ws, bs) for a in pair]
    results["numpy hand-written"] = median_time(lambda: numpy_step(np_params, x, onehot), repeat, warmup=2)
    if torch is not None:
        tstep = make_step(torch)
        tp = [torch.tensor(a, requires_grad=True) for pair in zip(ws, bs) for a in pair]
        tx, to = torch.from_numpy(x), torch.from_numpy(onehot)
        results["torch eager"] = median_time(lambda: tstep(*tp, tx, to), repeat, warmup=2)
        try:
            tc = torch.compile(tstep)
            tp2 = [torch.tensor(a, requires_grad=True) for pair in zip(ws, bs) for a in pair]
            results["torch.compile"] = median_time(lambda: tc(*tp2, tx, to), repeat, warmup=2)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"(torch.compile failed: {type(e).__name__}: {e})")
    ref = results["jitorch compiled"]
    print(f"{'system':<22}{'ms/step':>10}{'vs jitorch compiled':>22}")
    for name, t in results.items():
        print(f"{name:<22}{t * 1e3:>10.2f}{t / ref:>21.2f}x")


if __name__ == "__main__":
    main()
