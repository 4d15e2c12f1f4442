"""Compile a function with @jitorch.compile, and read what jitorch did with jitorch.explain.

    python examples/compile_and_explain.py
    JITORCH_LOGS=graph,guards,recompiles python examples/compile_and_explain.py   # log each stage
"""

import jitorch as jt


@jt.compile
def gelu_mlp(x, w1, b1, w2):
    h = x @ w1 + b1
    h = 0.5 * h * (1 + jt.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))
    return (h @ w2).softmax(dim=-1)


jt.manual_seed(0)
x, w1, b1, w2 = jt.randn(8, 16), jt.randn(16, 32), jt.randn(32), jt.randn(32, 4)

out = gelu_mlp(x, w1, b1, w2)          # first call: traces, caches the graph under guards
again = gelu_mlp(x, w1, b1, w2)        # same argument kinds: the cached graph runs
print("rows sum to one:", out.sum(dim=-1))

# What was traced, under which guards, and what the cache holds:
print(jt.explain(gelu_mlp, x, w1, b1, w2))

# The graph of one specialisation, as text that jitorch.ir.parse reads back:
print(gelu_mlp.lower(x, w1, b1, w2).text())

# A new batch size misses the guards and traces again:
gelu_mlp(jt.randn(2, 16), w1, b1, w2)
print("cache entries:", len(gelu_mlp.cache))

# Data-dependent Python cannot be traced: jitorch runs such a function eagerly, and says why.
@jt.compile
def clip_if_large(x):
    return x.clamp(-1, 1) if x.abs().max() > 1 else x


import warnings  # noqa: E402

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    clip_if_large(jt.randn(3))
print("eager fallback:", caught[0].message)
