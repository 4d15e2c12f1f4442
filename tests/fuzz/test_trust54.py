"""Session 54's fuzz campaigns: programs exported with ``jitorch.export``, saved to a file, loaded back and called on
three layouts (``--export``, `oracle.run_exported`), and statements inside grad-mode and autocast regions
(``--regions``, `generator.Generator.in_region`), which no fuzzer drew before; with the bugs they found."""


import numpy as np
import pytest

import torch

import jitorch
from jitorch.export import ExportError
from tests.export.helpers import round_trip, shares
from tests.fuzz.generator import REGIONS, generate
from tests.fuzz.oracle import CPU_MODES, EXPORTED, check, run_exported
from tests.fuzz.reach import PARTS, Reach, program_regions


pytestmark = pytest.mark.usefixtures("quiet_warnings")


def test_exported_output_views_its_input_after_an_index_write_seed_1005(tmp_path):
    """Fuzz seed 1005 (``--export``), minimised: ``x1[:, ::1] = x0; return x1[0:4:2, 2]``. The exported program's
    output was a slice of the graph's written value, not of ``x1``: the right values, but a write through it missed
    ``x1``. Eager, ``torch.export`` and ``jitorch.compile`` return a view of ``x1``; so does the loaded program now,
    from the view it recorded at export in ``x1``'s indices (the manifest's ``input_views``)."""
    def fn(x0, x1):
        x1[:, ::1] = x0
        return (x1[0:4:2, 2],)

    x0 = jitorch.tensor([1.5, -2.0, 0.25, 3.0, -0.5], dtype=jitorch.bfloat16)
    loaded = round_trip(fn, (x0, jitorch.zeros(4, 5, dtype=jitorch.int16)), tmp_path)
    assert loaded.views == {0: (1, (5, 1), (10,), 2, (((2, 0),), (0, 2)))}
    x1 = jitorch.zeros(4, 5, dtype=jitorch.int16)
    (out,) = loaded(x0, x1)
    assert shares(out, x1) and out.stride() == (10,) and out.storage_offset() == 2
    assert out.tolist() == [0, 0]  # (0.25 truncated to int16)
    out.fill_(7)
    assert x1[:, 2].tolist() == [7, 0, 7, 0]


def test_exported_output_views_a_stepped_or_permuted_input_as_eager(tmp_path):
    """An input in another layout than the graph reads (every other element of a buffer, a transpose) is copied
    into the graph's; the outputs viewing it viewed that copy. They view the caller's tensor now, at eager's
    strides and offset, and show the graph's in-place write into it."""
    def fn(x):
        x.mul_(2)
        return x.t()[1:], x[2], x

    loaded = round_trip(fn, (jitorch.zeros(3, 4),), tmp_path)
    assert sorted(loaded.views) == [0, 1, 2]
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    for make in (lambda t: jitorch.zeros(6, 8)[::2, ::2].copy_(t), lambda t: t.t().contiguous().t()):
        x, y = make(jitorch.tensor(values)), make(jitorch.tensor(values))
        got, want = loaded(x), fn(y)
        for g, w in zip(got, want):
            assert shares(g, x) and g.stride() == w.stride() and g.storage_offset() == w.storage_offset()
            assert g.tolist() == w.tolist()
        assert x.tolist() == (2 * values).tolist()


def test_export_refuses_an_in_place_view_op_on_an_input_seed_3000022():
    """Fuzz seed 3000022 (``--export``): ``x1.as_strided_([3, 3], [2, 2])`` (and seed 3000169's ``x2.unsqueeze_(0)``).
    The exported program left the caller's input at its old shape and strides, where eager gives it the new ones; a
    program called from a file cannot change its caller's tensor's geometry, and ``torch.export`` refuses such
    metadata mutations: so does ``jitorch.export`` now, naming the input."""
    def fn(x0, x1):
        x1.as_strided_([3, 3], [2, 2])
        return ()

    with pytest.raises(ExportError, match=r"geometry of input 1 \(\[1, 5, 2\]\) in place, to shape \[3, 3\]"):
        jitorch.export(fn, (jitorch.zeros(1, 5, 2), jitorch.zeros(1, 5, 2)))


@pytest.mark.parametrize("seed, exported", [(3000022, False), (3000293, True), (3000490, True), (3000768, True)])
def test_export_seeds_agree_with_eager_and_torch(seed, exported):
    """Seeds that failed ``--export`` (3000022: refused now; 3000293: ``as_strided(x0.contiguous(), ...)`` exported on a permuted
    ``x0``, whose second call's contiguous ``x0`` eager returns itself; 3000490: ``as_strided_`` of a slice of an input,
    whose second call's stepped input eager reads between its elements: docs/differences-from-torch.md; 3000768:
    ``x0.reshape(-1, 1)``, a view merging dims, of an input at a storage offset; 3000353: ``x0.type_as(x0)``
    returned beside ``x0``, the same tensor twice): torch, eager and the exported program's calls agree, or the
    export refuses."""
    program, _ = generate(seed)
    with Reach() as reach:
        outcome = check(program, ("torch", "eager", EXPORTED))
        reached = reach.program(program.grad, exported=outcome.exported)
    assert not outcome.mismatches, "\n".join(str(m) for m in outcome.mismatches)
    assert outcome.exported is exported and ("exported" in reached) is exported
    if exported:
        assert len(run_exported(program)) == 3


def test_regions_are_drawn_only_where_asked_and_run_alike_seed_5003():
    """``regions`` draws statements into ``no_grad``, ``inference_mode``, ``autocast``... regions, after drawing the
    statement (without it a seed's program is the one it was); seed 5003's program, with a ``no_grad`` and an
    ``inference_mode`` region, agrees in every CPU mode, its gradient run included."""
    for seed in range(5000, 5012):
        plain = generate(seed)[0]
        assert plain == generate(seed, regions=0.0)[0] and not program_regions(plain)
    program, _ = generate(5003, regions=0.3)
    heads = [s.lines[0] for s in program.body if s.lines[0].startswith("with ")]
    assert heads == ["with T.no_grad():", "with T.inference_mode():"] and program.grad
    with Reach() as reach:
        outcome = check(program, CPU_MODES)
        reached = reach.program(program.grad, regions=program_regions(program))
    assert not outcome.mismatches, "\n".join(str(m) for m in outcome.mismatches)
    assert {"grad-mode region", "gradient run"} <= reached <= set(PARTS) and "autocast region" not in reached


def test_regions_cover_grad_modes_and_autocast():
    """Over seeds 5000..5004 at ``regions=0.3`` every region of `REGIONS` is drawn."""
    heads = {s.lines[0][len("with "):-1] for seed in range(5000, 5005)
             for s in generate(seed, regions=0.3)[0].body if s.lines[0].startswith("with T.")}
    assert heads == set(REGIONS)
    assert torch.is_grad_enabled() and jitorch.is_grad_enabled()


@pytest.mark.parametrize("region", ["no_grad", "inference_mode"])
def test_compiled_view_made_without_grad_gives_its_parameter_no_gradient_seed_5100145(region):
    """Fuzz seed 5100145 (``--regions 0.3 --nets 0.3``), minimised: ``with T.inference_mode(): v0 = c0[2:6]``, then
    ``return v0[..., -2]`` of a captured ``c0`` that requires grad. Eager's (and torch's) result requires grad, but its
    ``SelectBackward0`` leads nowhere, so ``c0.grad`` stays None; the compiled call rebuilt the result as an autograd
    view of ``c0`` (`jit.results.returned_view`) and gave ``c0`` a gradient. The trace now finds that the view's
    backward reaches no input or captured tensor (`tracer.CUT`) and returns a view whose backward ends at a tensor of
    its own."""
    c0 = jitorch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)

    def fn(x):
        with getattr(jitorch, region)():
            v0 = c0[2:6]
        return (v0[..., -2],)

    compiled = jitorch.compile(fn)
    for f in (fn, compiled):
        (out,) = f(jitorch.tensor(2.0))
        assert out.requires_grad and not out.is_leaf and out.untyped_storage().data_ptr() == c0.untyped_storage().data_ptr()
        (out * 3).backward()
        assert c0.grad is None and out.item() == 3.0
    (entry,) = compiled.cache.values()
    assert [history for _, (*_, history) in entry.graph.output_aliases.values()] == ["view without a backward path"]
    w = jitorch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    (out,) = jitorch.compile(lambda x: (w[1:][0] * 1, w[2:][0]))(jitorch.tensor(2.0))[1:]
    out.backward()
    assert w.grad.tolist() == [0.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_eager_neg_in_place_of_a_stepped_view_seed_5200931(dtype):
    """Fuzz seed 5200931 (``--export --regions 0.3``), minimised: ``v0 = x0[..., -3, 0]; v0.neg_()`` of a float32
    ``x0[2, 4, 1]``. Eager wrote ``-x0[0, 2, 0]`` into ``x0[1, 1, 0]``: NumPy 2.4.6's float32 and int32
    ``negative`` in place into a strided array reads the elements as if they were contiguous. The in-place fast path
    leaves such a write to the general path (a new result, copied in), as it did for (n, 1) arrays."""
    values = np.arange(8).astype(dtype)
    for T in (torch, jitorch):
        x = T.tensor(values)
        x[1::4].neg_()
        x2 = T.tensor(values.reshape(2, 4, 1))
        x2[..., -3, 0].neg_()
        assert x.tolist() == [0, -1, 2, 3, 4, -5, 6, 7] and x2.flatten().tolist() == x.tolist()
