"""Run on 2 ranks (session 52's checks); prints "rank R of N: K checks passed". With a directory argument it
then writes its pid there (``rankR.pid``) and waits to be stopped: the launcher's SIGINT test.

- One-element all-reduces of float32 and float64 by SUM, AVG and PRODUCT (reduced in Python's floats,
  `collectives._Scalar`): every call's result bit for bit NumPy's reduction in rank order, on values whose
  rounding matters (random magnitudes, subnormals, infinities, NaN, -0.0, overflow), 0-d, 1-d and 2-d, sync and
  async; a disagreement on the scalar raises on every rank, its tensor unwritten.
- A compiled DDP step with a bucket per parameter: one graph whose all-reduces sit where each bucket's gradient
  is ready, between backward's work for the other layers (not after it), with eager DDP's gradients.
- DDP's default buckets: 25 MiB after a first of 1 MiB, as torch's.
"""

import os
import sys
import time

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import check, raises
from jitorch.distributed.process_group import resolve
from jitorch.nn.parallel import DistributedDataParallel
from jitorch.nn.parallel.distributed import FIRST_BUCKET_BYTES

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
R = dist.ReduceOp
NUMPY = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply}


def scalars(dtype, call):
    """Every rank's value at ``call`` (the same on every rank): on even calls a pair of special values (rank r
    holding the pair's r % 2-th), on odd ones random values of every magnitude the dtype holds, subnormals
    included."""
    info = np.finfo(dtype)
    pairs = [(np.inf, -np.inf), (np.nan, 1.0), (-0.0, 0.0), (-0.0, -0.0), (info.max, info.max),
             (info.smallest_subnormal, 3 * info.smallest_subnormal), (1.0 / 3, -info.tiny), (info.max, -info.max)]
    if call % 2 == 0:
        return np.array([pairs[call // 2 % len(pairs)][r % 2] for r in range(size)]).astype(dtype)
    rng = np.random.default_rng(52 + call)
    exponents = rng.integers(info.minexp - info.nmant, info.maxexp, size)
    return np.array([rng.standard_normal() * 2.0 ** int(e) for e in exponents]).astype(dtype)


def reduced(op, rows):
    """NumPy's reduction of the ranks' values in rank order, each step in the dtype; AVG then divides."""
    out = rows[:1].copy()
    for row in rows[1:]:
        out = NUMPY[op](out, row).astype(rows.dtype)
    return out / np.array(size, rows.dtype) if op == "AVG" else out


def same_bits(got, want):
    """``got`` is ``want`` bit for bit (any NaN for a NaN: NumPy's and MPI's NaN payloads are theirs)."""
    got, want = np.asarray(got).reshape(-1), np.asarray(want).reshape(-1)
    assert (np.isnan(got) & np.isnan(want)).all() or got.tobytes() == want.tobytes(), (got, want)
    check.passed += 1


with np.errstate(over="ignore", invalid="ignore"):  # overflow to infinity is one of the checked cases
    for dtype in ("float32", "float64"):
        for op in ("SUM", "AVG", "PRODUCT"):
            for shape in ((), (1,), (1, 1)):
                t = jt.zeros(shape, dtype=getattr(jt, dtype))
                for call in range(16):
                    rows = scalars(dtype, call)
                    t.fill_(float(rows[rank]))
                    work = dist.all_reduce(t, op=getattr(R, op), async_op=call == 5)
                    if work is not None:
                        work.wait()
                    same_bits(t.numpy(), reduced(op, rows))
                assert resolve(None).signatures.hot[2].scalar is not None  # the path checked is the scalar one
    # a disagreement on the hot scalar: every rank raises naming each call, the tensors unwritten
    t = jt.full((1,), 2.0)
    for _ in range(3):
        dist.all_reduce(t)  # 2 * size ** 3: the group's hot all-reduce
    given = jt.full((1,), 5.0, dtype=jt.float64) if rank else t
    before = given.clone()
    raises("all_reduce: the ranks disagree on the collective or on the tensors' dtype and shape: rank 0: "
           "all_reduce(float32[1]); rank 1: all_reduce(float64[1])", lambda: dist.all_reduce(given))
    assert jt.equal(given, before)
    dist.all_reduce(t)
    check(t, np.array([2.0 * size ** 4], np.float32))

# a compiled DDP step, a bucket per parameter (the cap below the smallest's bytes)
jt.manual_seed(0)
layers = [jt.nn.Linear(6, 32), jt.nn.Tanh(), jt.nn.Linear(32, 32), jt.nn.Tanh(), jt.nn.Linear(32, 3)]
eager = jt.nn.Sequential(*layers)
compiled = jt.nn.Sequential(*[jt.nn.Linear(6, 32), jt.nn.Tanh(), jt.nn.Linear(32, 32), jt.nn.Tanh(),
                              jt.nn.Linear(32, 3)])
compiled.load_state_dict(eager.state_dict())
ddps = [DistributedDataParallel(m, bucket_cap_mb=1e-5) for m in (eager, compiled)]
assert [len(d._buckets) for d in ddps] == [6, 6]


def step(ddp, x, y):
    loss = ((ddp(x) - y) ** 2).mean()
    loss.backward()
    return loss


compiled_step = jt.compile(lambda x, y: step(ddps[1], x, y))
gen = jt.Generator().manual_seed(rank)
for _ in range(3):
    x, y = jt.randn(8, 6, generator=gen), jt.randn(8, 3, generator=gen)
    for d in ddps:
        d.zero_grad()
    step(ddps[0], x, y)
    compiled_step(x, y)
    for a, b in zip(eager.parameters(), compiled.parameters()):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-5, atol=1e-6)
        check.passed += 1
lines = [line.strip() for line in str(jt.explain(compiled_step, x, y)).splitlines()
         if line.strip().startswith(("eager:", "kernel "))]
reduces = [i for i, line in enumerate(lines) if line == "eager: _c10d_all_reduce (external)"]
assert len(reduces) == 6, lines
# backward's work for the earlier layers' gradients (their products, however they run: kernels or BLAS) lies
# between the first bucket's all-reduce and the last's, not before all of them; views and the buckets' copies
# (cat) do not count
work = [i for i, line in enumerate(lines) if reduces[0] < i < reduces[-1] and "_c10d_all_reduce" not in line
        and not line.endswith("(view)") and line != "eager: cat (external)"]
assert len(work) >= 3, lines
check.passed += 1

# DDP's default cap: 25 MiB after the first bucket's 1 MiB (two 16 MiB weights and a bias: [1, 2, 1]
# parameters for any cap from 16 to 32 MiB)
big = jt.nn.Sequential(jt.nn.Linear(2048, 2048), jt.nn.Linear(2048, 2048))
ddp = DistributedDataParallel(big)
params = list(big.parameters())
want = DistributedDataParallel._bucketed(params[::-1], FIRST_BUCKET_BYTES, 25 * 2 ** 20)
assert [[id(p) for p in b.params] for b in ddp._buckets] == [[id(p) for p in b.params] for b in want]
assert [len(b.params) for b in ddp._buckets] == [1, 2, 1]
check.passed += 1

print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
if len(sys.argv) > 1:
    dist.barrier()  # every rank has reported before the test stops them
    path = os.path.join(sys.argv[1], f"rank{rank}.pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(60)
dist.destroy_process_group()
