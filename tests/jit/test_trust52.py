"""Shared groups (`jit.kernel_runs.shared_groups`, session 51) keep kernels that touch each other's memory apart:
checked deterministically by running every shared group backwards, its kernels cut into pieces
(`tests.fuzz.shared._reversed_run`), so that a kernel the grouping wrongly put beside one it depends on reads the
other's old or new values against program order, whatever the threads' timing. The bits must be one thread's,
and the values torch's."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.jit import kernel_runs
from tests.fuzz.shared import _reversed_run, _shared_groups, check_shared, generate_shared

# sizes whose kernels together hold more than PARALLEL_MIN_WORK elements, so that shared groups form
SHAPES = [(256, 96), (64, 400), (200,)]


def _compiled_bits(fn, make, backwards, monkeypatch):
    """``fn`` compiled and called twice on ``make()``'s tensors (captured or passed: ``make`` returns the call's
    arguments and the tensors to read back), at one thread, or at two with every shared group run backwards;
    the last call's outputs and the tensors, and how many kernels ran in shared groups."""
    jt.set_num_threads(2 if backwards else 1)
    with monkeypatch.context() as m:
        if backwards:
            m.setattr(kernel_runs.SharedPrograms, "run", _reversed_run)
        args, tensors = make()
        compiled = jt.compile(fn)
        for _ in range(2):
            out = compiled(*args)
    return [o.numpy().copy() for o in (*out, *tensors)], _shared_groups(compiled)


@pytest.fixture
def threads():
    before = jt.get_num_threads()
    yield
    jt.set_num_threads(before)


def _parameters(lib, seed):
    rng = np.random.default_rng(seed)
    return [lib.tensor(rng.standard_normal(s).astype(np.float32)) for s in SHAPES]


def test_sums_of_parameters_read_them_before_their_in_place_updates_in_shared_groups(threads, monkeypatch):
    """Each parameter's sum of squares, then its update in place (write after read of a captured tensor that the
    update writes in place): the sums must see the old values."""
    def program(lib, params, grads):
        norms = [p.pow(2).sum() for p in params]
        for p, g in zip(params, grads):
            p.add_(g * -0.1)
        return norms

    results = {}
    for backwards in (False, True):
        params, grads = _parameters(jt, 0), _parameters(jt, 1)
        results[backwards], shared = _compiled_bits(lambda: program(jt, params, grads), lambda: ((), params),
                                                    backwards, monkeypatch)
    assert shared == 6  # (the three sums, then the three updates)
    params, grads = _parameters(torch, 0), _parameters(torch, 1)
    for _ in range(2):
        norms = program(torch, params, grads)
    for one, back, want in zip(results[False], results[True], [*norms, *params]):
        np.testing.assert_array_equal(back, one)
        np.testing.assert_allclose(one, want.numpy(), rtol=1e-5)


def test_a_full_sum_written_into_the_arena_slot_an_earlier_kernel_of_the_run_reads_waits_for_it(threads,
                                                                                                 monkeypatch):
    """Two clipping-like coefficients in a row (fuzz seed 14 of tests/fuzz/shared.py): the second full sum takes
    the first's arena slot once the product by the first coefficient has read it (write after read of a reused
    slot); both products and the sums must keep their order. (A grouping that ignores arena slots deals the
    second sum beside the first product.)"""
    def program(lib, a, b, c):
        v0 = b.t() * (c.pow(2).sum() + 1).rsqrt()
        v1 = v0[115:] * (a.pow(2).sum() + 1).rsqrt()
        return v0, v1, a.tanh() * 3

    rng = np.random.default_rng(14)
    data = [rng.standard_normal(s).astype(np.float32) for s in [(17161,), (128, 128), (128, 128)]]
    results = {}
    for backwards in (False, True):
        results[backwards], _ = _compiled_bits(lambda *t: program(jt, *t),
                                               lambda: ([jt.tensor(x) for x in data], ()), backwards, monkeypatch)
    for one, back, want in zip(results[False], results[True], program(torch, *map(torch.tensor, data))):
        np.testing.assert_array_equal(back, one)
        np.testing.assert_allclose(one, want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", [12])
def test_fuzzed_programs_of_views_and_in_place_updates_give_one_threads_bits_with_shared_groups_backwards(seed,
                                                                                                       threads):
    """tests/fuzz/shared.py's seed 12 (writes of whole inputs in place among kernels over views of them: the
    grouping without in-place targets puts an update beside a reader of the value it overwrites)."""
    problems, shared = check_shared(generate_shared(seed))
    assert shared > 0 and problems == []
