"""Per-sample gradients with jitorch.func: ``vmap(grad(loss))`` over a batch, as torch.func does it.

A small MLP classifier; the gradient of each sample's loss with respect to every parameter, for the whole
batch at once (what differential privacy clips, or what influence estimates read). vmap batches the forward
and the backward (each op once on the batch, by its batching rule); the same gradients come from a Python
loop over the samples, which the script checks, timing both in CPU time.

    python examples/per_sample_gradients.py [--batch 64]
"""

import argparse
import time

import numpy as np

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.func import batching, functional_call, grad, vmap


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    jt.manual_seed(0)
    model = jt.nn.Sequential(jt.nn.Linear(10, 32), jt.nn.ReLU(), jt.nn.Linear(32, 4))
    params = {name: p.detach() for name, p in model.named_parameters()}
    x, y = jt.randn(args.batch, 10), jt.randint(0, 4, (args.batch,))

    def loss(params, sample, target):
        logits = functional_call(model, params, (sample.unsqueeze(0),))
        return F.cross_entropy(logits, target.unsqueeze(0))

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    before = {k: v.copy() for k, v in batching.STATS.items()}
    start = time.process_time()
    grads = per_sample(params, x, y)
    batched_time = time.process_time() - start
    batched = sum((batching.STATS["batched"] - before["batched"]).values())
    looped = sorted(batching.STATS["per_sample"] - before["per_sample"])

    start = time.process_time()
    loop = [grad(loss)(params, x[i], y[i]) for i in range(args.batch)]
    loop_time = time.process_time() - start

    for name, g in grads.items():
        print(f"{name}: per-sample gradients of shape {list(g.shape)}")
    equal = all(np.allclose(grads[k].numpy(), jt.stack([g[k] for g in loop]).numpy(), rtol=1e-5, atol=1e-6)
                for k in params)
    print(f"per-sample gradients equal the loop: {equal}")
    print(f"ops run batched: {batched}, per sample: {looped}")
    print(f"CPU time: vmap {batched_time * 1e3:.1f} ms, loop over {args.batch} samples {loop_time * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
