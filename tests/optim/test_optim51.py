"""A compiled optimizer step's kernels, one per parameter, dealt among the threads as one fork
(`jit.kernel_runs.shared_groups`, `SharedPrograms`): the same bits at one and two threads, torch's values,
and the grouping rule that keeps kernels that touch each other's memory apart."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.optim as optim
from jitorch.jit.compile import CompiledFunction
from jitorch.jit.kernel_runs import KernelRun, deal, shared_groups

# two parameter groups (decay on the matrices), sizes whose kernels hold more than PARALLEL_MIN_WORK together
SHAPES = [(128, 192), (192,), (64, 160), (160,), (40, 40), (7,)]


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    before = jt.get_num_threads()
    jt.set_num_threads(request.param)
    yield request.param
    jt.set_num_threads(before)


def _params(lib, dtype, rng):
    return [lib.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in SHAPES]


def _groups(params, options):
    return [{"params": [p for p in params if p.dim() >= 2], **options.get("decay", {})},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


CASES = {
    "AdamW": (lambda lib, groups: lib.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.95)),
              {"decay": {"weight_decay": 0.1}}),
    "Adam-amsgrad-maximize": (lambda lib, groups: lib.optim.Adam(groups, lr=0.02, amsgrad=True, maximize=True),
                              {"decay": {"weight_decay": 0.05, "lr": 0.005}}),
    "SGD": (lambda lib, groups: lib.optim.SGD(groups, lr=0.1), {}),
}


def _weights(lib, dtype, rng):
    return [lib.tensor(rng.standard_normal((3, s[0])).astype(dtype)) for s in SHAPES]


def _step_of(lib, params, weights, opt):
    """A training step whose gradients come from matrix products (so that the updates are kernels of their own,
    not fused with the backward), clipped (one sum of squares per gradient), the last parameter left out of the
    loss (its gradient None)."""
    def step():
        opt.zero_grad()
        loss = sum((w @ p.reshape(p.shape[0], -1)).tanh().sum() for p, w in zip(params[:-1], weights[:-1]))
        loss.backward()
        lib.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss
    return step


def _train(lib, case, dtype, steps, compiled):
    """Steps of ``case``'s optimizer on `SHAPES` with in-graph gradients (`_step_of`): (parameters, optimizer,
    the step)."""
    make, options = CASES[case]
    rng = np.random.default_rng(5)
    params = _params(lib, dtype, rng)
    weights = _weights(lib, dtype, rng)
    opt = make(lib, _groups(params, options))
    step = _step_of(lib, params, weights, opt)

    run = lib.compile(step) if compiled else step
    for _ in range(steps):
        run()
    return params, opt, run


def _shared_groups_of(run):
    """The shared groups' kernel counts in ``run``'s compiled graphs."""
    gc.collect()
    counts = []
    for entry in run.cache.values() if isinstance(run, CompiledFunction) else ():
        for unit in entry.executable.runs or ():
            if type(unit) is KernelRun:
                counts += [len(seg) for seg, shared in zip(unit.segments, unit.shared) if shared]
    return counts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_step_dealt_among_threads_gives_the_one_thread_bits(case, dtype):
    """The compiled step at two threads (its update kernels in a shared group) against the same step at one
    thread: the same bits; and against torch's eager step, within rounding."""
    before = jt.get_num_threads()
    try:
        results = {}
        for n in (1, 2):
            jt.set_num_threads(n)
            params, opt, run = _train(jt, case, dtype, 3, True)
            results[n] = [p.detach().numpy().copy() for p in params]
            if n == 2:
                assert _shared_groups_of(run), "no shared group formed"
                state = [{k: v.numpy().copy() for k, v in opt.state[p].items()} for p in params[:-1]]
                assert params[-1].grad is None and not opt.state[params[-1]]
    finally:
        jt.set_num_threads(before)
    for a, b in zip(results[1], results[2]):
        np.testing.assert_array_equal(a, b)
    t_params, t_opt, _ = _train(torch, case, dtype, 3, False)
    # (Adam's early steps are near sign(g) * lr: a gradient near zero, rounded otherwise by another product,
    # moves its element by up to a step's size, so the bound is a small part of one step, lr = 0.01)
    tol = dict(rtol=2e-5, atol=1e-4) if dtype is np.float32 else dict(rtol=1e-12, atol=1e-9)
    for mine, theirs in zip(results[2], t_params):
        np.testing.assert_allclose(mine, theirs.detach().numpy(), **tol)
    for mine, p in zip(state, t_params[:-1]):
        for key, value in t_opt.state[p].items():
            np.testing.assert_allclose(mine[key], value.numpy(), **tol)


def test_compiled_step_state_dict_round_trip_with_shared_group(threads):
    """A state dict saved after compiled steps loads into a fresh optimizer whose compiled steps continue as
    the first one's do, bit for bit."""
    params, opt, run = _train(jt, "AdamW", np.float32, 2, True)
    saved = opt.state_dict()
    copies = [p.detach().clone().requires_grad_(True) for p in params]
    twin = optim.AdamW(_groups(copies, CASES["AdamW"][1]), lr=0.01, betas=(0.9, 0.95))
    twin.load_state_dict({"state": {k: {n: t.clone() for n, t in v.items()} for k, v in saved["state"].items()},
                          "param_groups": saved["param_groups"]})
    rng = np.random.default_rng(5)
    _params(jt, np.float32, rng)
    run_twin = jt.compile(_step_of(jt, copies, _weights(jt, np.float32, rng), twin))
    for _ in range(2):
        run()
        run_twin()
    for a, b in zip(params, copies):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def _step(inputs, outputs, work=1 << 14, mode="thread", outer=128):
    kernel = SimpleNamespace(source=SimpleNamespace(work=work, mode=mode, outer=outer), parallel=False)
    return SimpleNamespace(inputs=inputs, outputs=outputs, views={}, compacted=set(), kernel=kernel)


def test_shared_groups_keep_kernels_touching_written_memory_apart():
    """Read after write, write after read (an arena slot a later kernel reuses) and write after write each
    end a group; independent kernels share one; a kernel whose iterations are not independent stands alone,
    unless it has one."""
    memory = {"a": "m1", "b": "m2", "c": "m3", "d": "m4", "e": "m1", "f": "m5", "g": "m6", "h": "m7"}.get
    independent = [_step(["a"], ["b"]), _step(["c"], ["d"])]
    assert [(len(g), s) for g, s in shared_groups(independent, memory)] == [(2, True)]
    raw = [_step(["a"], ["b"]), _step(["b"], ["c"])]
    assert [len(g) for g, _ in shared_groups(raw, memory)] == [1, 1]
    war = [_step(["a"], ["b"]), _step(["c"], ["e"])]  # e reuses a's memory
    assert [len(g) for g, _ in shared_groups(war, memory)] == [1, 1]
    waw = [_step(["a"], ["b"]), _step(["c"], ["b"])]
    assert [len(g) for g, _ in shared_groups(waw, memory)] == [1, 1]
    block = [_step(["a"], ["b"]), _step(["c"], ["d"], mode="block"), _step(["f"], ["g"]), _step(["h"], ["h"])]
    assert [(len(g), s) for g, s in shared_groups(block, memory)] == [(1, False), (1, False), (2, True)]
    # (a full reduction, one outer iteration, goes whole to one thread)
    sums = [_step(["a"], ["b"], mode="block", outer=1), _step(["c"], ["d"], mode="block", outer=1)]
    assert [(len(g), s) for g, s in shared_groups(sums, memory)] == [(2, True)]
    small = [_step(["a"], ["b"], work=10), _step(["c"], ["d"], work=10)]
    assert [(len(g), s) for g, s in shared_groups(small, memory)] == [(2, False)]
    assert shared_groups(independent, None) == [(independent, False)]


@pytest.mark.parametrize("n", [1, 2, 3, 16])
def test_deal_covers_every_row_once_in_near_equal_parts(n):
    items = [(1, 10, 128, 128), (2, 20, 1, 5000), (3, 30, 49152, 49152), (4, 40, 7, 7 * 512), (5, 50, 3, 3),
             (6, 60, 5, 0)]  # (the last: rows of an empty tensor's kernel)
    parts = deal(items, n)
    assert 1 <= len(parts) <= n
    covered = {}
    for part in parts:
        for entry, args, lo, hi in part:
            assert lo < hi
            covered.setdefault((entry, args), []).append((lo, hi))
    for entry, args, outer, _ in items:
        ranges = sorted(covered[(entry, args)])
        assert ranges[0][0] == 0 and ranges[-1][1] == outer
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    per_row = {(e, a): w / o for e, a, o, w in items}
    works = [sum((hi - lo) * per_row[(e, a)] for e, a, lo, hi in part) for part in parts]
    total = sum(w for *_, w in items)
    assert max(works) <= total / len(parts) + 5000  # (at most one unsplittable item over a share)
