"""Export, save and load: functions, modules, pytrees, dynamic dims, artifacts, training steps."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

import jitorch as jt
from jitorch.export import Dim, ExportedProgram, ExportError
from tests.support import classifier_step

from .helpers import rewrite, run_python, small_program


def _np(tree):
    return [t.numpy() if isinstance(t, jt.Tensor) else t for t in jt.runtime.pytree.tree_leaves(tree)]


def _assert_same(a, b, rtol=1e-5):
    la, lb = _np(a), _np(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-6)


def test_export_is_callable_package():
    assert callable(jt.export) and jt.export.ExportedProgram is ExportedProgram
    assert jt.export.load and jt.export.ExportError is ExportError


def test_function_round_trip_in_memory_and_file_object(tmp_path):
    f, args, ep = small_program()
    _assert_same(ep(*args), f(*args))
    buf = io.BytesIO()
    ep.save(buf)
    buf.seek(0)
    back = jt.export.load(buf)
    _assert_same(back(*args), f(*args))
    assert str(back.graph) == str(ep.graph)
    assert set(back.constants) == {"w"}
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        assert z.read("manifest.json").startswith(b"{")
        assert "graph.txt" in z.namelist() and "constants/0.npy" in z.namelist()


@pytest.mark.parametrize("trust, stats", [(False, "{'used': 0, 'rebuilt': 2}"), (True, "{'used': 2, 'rebuilt': 0}")],
                         ids=["rebuilt", "trusted"])
def test_fresh_process_without_source(saved, tmp_path, trust, stats):
    """A fresh process runs the file without the source: its kernels rebuilt from the graph, or, when the
    caller trusts the file, from its object code."""
    path, args, expected = saved
    np.save(tmp_path / "x.npy", args[0].numpy())
    np.save(tmp_path / "y.npy", args[1].numpy())
    for i, e in enumerate(expected):
        np.save(tmp_path / f"e{i}.npy", e)
    out = run_python(
        "import numpy as np, jitorch as jt\n"
        f"p = jt.export.load({str(path)!r}, trust_object_code={trust})\n"
        "h, s = p(jt.from_numpy(np.load('x.npy')), jt.from_numpy(np.load('y.npy')))\n"
        "assert np.allclose(h.numpy(), np.load('e0.npy')) and np.allclose(s.numpy(), np.load('e1.npy'))\n"
        "print(p.artifact_stats)\n", tmp_path)
    assert out.strip() == stats


def test_artifacts_removed_are_rebuilt(saved, tmp_path):
    path, args, _ = saved
    bare = rewrite(path, tmp_path / "bare.jtx", manifest=lambda m: dict(m, artifacts=[]))
    out = run_python(
        "import jitorch as jt\n"
        f"p = jt.export.load({str(bare)!r}, trust_object_code=True)\n"
        "p(jt.ones(5, 4), jt.ones(3))\n"
        "print(p.artifact_stats)\n", tmp_path)
    assert out.strip() == "{'used': 0, 'rebuilt': 2}"


def test_a_negative_zero_argument_survives_export_and_load(tmp_path):
    # the graph's text once left out nan=-0.0 as if it were the default 0.0: the program wrote +0.0 for NaN
    def f(x):
        return jt.nan_to_num(x, nan=-0.0)
    x = jt.tensor([float("nan"), 1.0, -float("inf")])
    path = tmp_path / "f.jitorch"
    program = jt.export(f, (x,))
    program.save(path)
    expected = np.array([-0.0, 1.0, np.finfo(np.float32).min], np.float32)
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(torch.nan_to_num(torch.tensor(x.numpy()), nan=-0.0).numpy(), expected)
    for out in (f(x), program(x), jt.export.load(path)(x)):
        got = out.numpy()
        np.testing.assert_array_equal(got, expected)
        assert np.signbit(got[0])


def test_save_without_artifacts(tmp_path):
    _, args, ep = small_program()
    ep.save(tmp_path / "p.jtx", artifacts_for=())
    with zipfile.ZipFile(tmp_path / "p.jtx") as z:
        assert not [n for n in z.namelist() if n.startswith("artifacts/")]
    _assert_same(jt.export.load(tmp_path / "p.jtx")(*args), ep(*args))


class _Linear:
    """A duck-typed module: named_parameters/named_buffers/forward, as jitorch.nn.Module has."""

    def __init__(self):
        self.weight = jt.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
        self.bias = jt.tensor(np.array([0.1, 0.2, 0.3], dtype=np.float32))
        self.steps = jt.zeros(1)

    def named_parameters(self):
        return iter([("lin.weight", self.weight), ("lin.bias", self.bias)])

    def named_buffers(self):
        return iter([("steps", self.steps)])

    def forward(self, x):
        self.steps.add_(1)
        return x @ self.weight.t() + self.bias

    __call__ = forward


def test_module_parameters_become_named_constants(tmp_path):
    m = _Linear()
    x = jt.randn(2, 4)
    ep = jt.export(m, (x,))
    assert set(ep.constants) == {"lin.weight", "lin.bias", "steps"}
    ep.save(tmp_path / "m.jtx")
    back = jt.export.load(tmp_path / "m.jtx")
    np.testing.assert_allclose(back.module()(x).numpy(), x.numpy() @ m.weight.numpy().T + m.bias.numpy(), rtol=1e-5)
    back(x)
    assert back.constants["steps"].numpy().tolist() == [2.0]  # the buffer update is the program's state


def test_pytree_inputs_and_outputs(tmp_path):
    def f(batch, scale=2.0):
        a, b = batch["pair"]
        return {"sum": (a + b) * scale, "parts": [a.neg(), (b, b.abs())]}
    batch = {"pair": (jt.randn(3), jt.randn(3))}
    ep = jt.export(f, (batch,), {"scale": 3.0})
    ep.save(tmp_path / "t.jtx")
    back = jt.export.load(tmp_path / "t.jtx")
    got = back(batch, scale=3.0)
    assert set(got) == {"sum", "parts"} and isinstance(got["parts"][1], tuple)
    _assert_same(got, f(batch, scale=3.0))
    with pytest.raises(ValueError, match="input 'scale' was 3.0 when the program was exported"):
        back(batch, scale=4.0)


def test_namedtuple_output_comes_back_with_fields(tmp_path):
    ep = jt.export(lambda x: x.max(dim=0), (jt.randn(3, 2),))
    ep.save(tmp_path / "n.jtx")
    out = jt.export.load(tmp_path / "n.jtx")(jt.tensor([[1.0, 5.0], [3.0, 2.0], [0.0, 0.0]]))
    assert out.values.tolist() == [3.0, 5.0] and out.indices.tolist() == [1, 0]


def _flatten_rows(x, y):
    return (x.view(x.shape[0], 2, 2).sum(dim=2) * y).mean(dim=1)


@pytest.fixture
def dynamic_program(tmp_path):
    batch = Dim("batch", min=2, max=16)
    ep = jt.export(_flatten_rows, (jt.randn(5, 4), jt.randn(5, 1)), dynamic_shapes={"x": {0: batch}, "y": (batch, None)})
    ep.save(tmp_path / "d.jtx")
    return jt.export.load(tmp_path / "d.jtx")


@pytest.mark.parametrize("n", [2, 5, 11, 16])
def test_dynamic_dim_within_range(dynamic_program, n):
    x, y = jt.randn(n, 4), jt.randn(n, 1)
    _assert_same(dynamic_program(x, y), _flatten_rows(x, y))
    assert dynamic_program.signature.inputs.leaves[0].shape == ("batch", 4)


def test_dynamic_dim_outside_range(dynamic_program):
    with pytest.raises(ValueError, match=r"dim 0 \(batch\) is 17, outside its range \[2, 16\]"):
        dynamic_program(jt.randn(17, 4), jt.randn(17, 1))


def test_dynamic_dim_shared_between_inputs(dynamic_program):
    with pytest.raises(ValueError, match=r"batch\) is 4, but batch is 3 in an earlier input"):
        dynamic_program(jt.randn(3, 4), jt.randn(4, 1))


def test_module_with_dynamic_dim_keeps_parameter_names():
    m = _Linear()
    ep = jt.export(m, (jt.randn(5, 4),), dynamic_shapes={"x": {0: Dim("batch", max=64)}})
    assert set(ep.constants) == {"lin.weight", "lin.bias", "steps"}
    x = jt.randn(9, 4)
    np.testing.assert_allclose(ep(x).numpy(), x.numpy() @ m.weight.numpy().T + m.bias.numpy(), rtol=1e-5)


def test_fixed_dim_checked(dynamic_program):
    with pytest.raises(ValueError, match=r"must have shape \[batch, 4\], got \[3, 5\]: dim 1 is fixed at 4"):
        dynamic_program(jt.randn(3, 5), jt.randn(3, 1))


def test_wrong_dtype_and_structure():
    _, args, ep = small_program()
    with pytest.raises(ValueError, match="input 'x' must have dtype jitorch.float32, got jitorch.float64"):
        ep(args[0].double(), args[1])
    with pytest.raises(TypeError, match="inputs structured as"):
        ep(args[0])
    with pytest.raises(TypeError, match="input 'y' must be a Tensor, got float"):
        ep(args[0], 1.0)


def test_dim_that_cannot_be_symbolic():
    def f(x):
        return x.sum() if x.shape[0] == 5 else x.sum(dim=0).sum()
    with pytest.raises(ExportError, match="gave a graph of 2 nodes instead of 1: the function's Python code depends on the size of 'n'"):
        jt.export(f, (jt.randn(5, 4),), dynamic_shapes={"x": {0: Dim("n")}})


def test_size_entering_non_linearly_is_refused():
    def f(x):
        return x * (1.0 / x.shape[0])
    with pytest.raises(ExportError, match="enters an argument of mul non-linearly"):
        jt.export(f, (jt.randn(5, 4),), dynamic_shapes={"x": {0: Dim("n")}})


def test_example_outside_dim_range():
    with pytest.raises(ExportError, match=r"size 5, outside the range \[6, 9\]"):
        jt.export(lambda x: x + 1, (jt.randn(5),), dynamic_shapes={"x": {0: Dim("n", min=6, max=9)}})


def _sgd_step(w, x, y):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    with jt.no_grad():
        w.sub_(0.1 * w.grad)
    return loss


def test_training_step_exports_with_dynamic_batch(tmp_path):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 2)).astype(np.float32)
    batch = Dim("batch", max=64)
    ep = jt.export(_sgd_step, (jt.tensor(w0).requires_grad_(), jt.randn(5, 4), jt.randn(5, 2)),
                   dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    ep.save(tmp_path / "step.jtx")
    back = jt.export.load(tmp_path / "step.jtx")
    for n in (5, 9):
        x = jt.tensor(rng.standard_normal((n, 4)).astype(np.float32))
        y = jt.tensor(rng.standard_normal((n, 2)).astype(np.float32))
        wa, wb = jt.tensor(w0).requires_grad_(), jt.tensor(w0).requires_grad_()
        la, lb = back(wa, x, y), _sgd_step(wb, x, y)
        np.testing.assert_allclose(la.numpy(), lb.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(wa.detach().numpy(), wb.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(wa.grad.numpy(), wb.grad.numpy(), rtol=1e-5)


def test_jitorch_load_gives_the_exported_program(saved):
    path, args, expected = saved
    program = jt.load(path)
    assert isinstance(program, ExportedProgram)
    for got, e in zip(program(*args), expected):
        np.testing.assert_allclose(got.numpy(), e, rtol=1e-6)


def _module_step(seed=0):
    jt.manual_seed(seed)
    model = jt.nn.Sequential(jt.nn.Linear(4, 8), jt.nn.Tanh(), jt.nn.Linear(8, 3))
    opt = jt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt, classifier_step(model, opt)


def test_a_module_training_step_exports_after_its_first_call(tmp_path):
    x, y = jt.randn(6, 4), jt.tensor([0, 1, 2, 0, 1, 2])
    model, _, step = _module_step()
    with pytest.raises(ExportError, match="call it once before exporting"):
        jt.export(step, (x, y))
    step(x, y)  # the optimizer makes its momentum buffers
    program = jt.export(step, (x, y))
    program.save(tmp_path / "step.jtx")
    loaded = jt.load(tmp_path / "step.jtx")
    ref_model, _, ref_step = _module_step()
    ref_step(x, y)
    for _ in range(3):
        np.testing.assert_allclose(loaded(x, y).item(), ref_step(x, y).item(), rtol=1e-5)
    # the exported program updates its own copies of the parameters (and momentum buffers)
    constants = [t.numpy() for t in loaded.constants.values()]
    for p in ref_model.parameters():
        assert any(c.shape == p.shape and np.allclose(c, p.detach().numpy(), rtol=1e-5, atol=1e-6)
                   for c in constants)


def test_a_zero_dim_constant_round_trips(tmp_path):
    scale = jt.tensor(0.5)
    program = jt.export(lambda x: x * scale, (jt.ones(3),))
    program.save(tmp_path / "scaled.jtx")
    loaded = jt.load(tmp_path / "scaled.jtx")
    assert next(iter(loaded.constants.values())).shape == ()
    np.testing.assert_array_equal(loaded(jt.ones(3)).numpy(), [0.5, 0.5, 0.5])


def _forge_cpu_record(m, cpu, features):
    for record in m["artifacts"]:
        if record["kind"] == "cpu":
            record.update(cpu=cpu, features=features)


def test_object_code_for_features_this_cpu_lacks_is_rebuilt_not_run(saved, tmp_path):
    """An export made on an AVX-512 machine, loaded on one without: its kernels are rebuilt from the graph
    (running them would die of SIGILL)."""
    path, args, expected = saved
    foreign = rewrite(path, tmp_path / "foreign.jtx",
                      manifest=lambda m: _forge_cpu_record(m, "x86-64-v4", "+avx512f,+jitorchfuturefeature"))
    np.save(tmp_path / "x.npy", args[0].numpy())
    np.save(tmp_path / "e.npy", expected[0])
    out = run_python(
        "import numpy as np, jitorch as jt\n"
        f"p = jt.export.load({str(foreign)!r}, trust_object_code=True)\n"
        "h, s = p(jt.from_numpy(np.load('x.npy')), jt.ones(3) * jt.tensor([0.5, -1.0, 2.0]))\n"
        "assert np.allclose(h.numpy(), np.load('e.npy'))\n"
        "print(p.artifact_stats)\n"
        "print(p.artifact_notes)\n", tmp_path)
    stats, notes = out.splitlines()
    assert stats == "{'used': 0, 'rebuilt': 2}"
    assert "features this CPU lacks (" in notes and "jitorchfuturefeature)" in notes


@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="the x86-64-v2 baseline")
def test_an_export_for_the_baseline_cpu_is_used_where_that_cpu_is_selected(tmp_path):
    """Object code records the CPU it was compiled for: a program exported with JITORCH_CPU=x86-64-v2 is
    used by a process that compiles for that CPU, and rebuilt by one compiling for another."""
    path = tmp_path / "baseline.jtx"
    run_python("import jitorch as jt\nfrom tests.export.helpers import small_program\n"
               f"small_program()[2].save({str(path)!r})\n", tmp_path, env={"JITORCH_CPU": "x86-64-v2"})
    load = f"import jitorch as jt\np = jt.export.load({str(path)!r}, trust_object_code=True)\n" \
           "p(jt.ones(5, 4), jt.ones(3))\n" \
           "print(p.artifact_stats)\n"
    assert run_python(load, tmp_path, env={"JITORCH_CPU": "x86-64-v2"}).strip() == "{'used': 2, 'rebuilt': 0}"
    assert run_python(load, tmp_path, env={"JITORCH_CPU": "native"}).strip() == \
        "{'used': 0, 'rebuilt': 2}"


@pytest.mark.parametrize("dtype", [jt.uint16, jt.uint32, jt.uint64], ids=str)
def test_unsigned_inputs_and_outputs_round_trip_through_a_saved_program(dtype):
    def f(x, y):
        return (x * 3 + y) >> 1, (x < y).sum(), x.to(jt.float32) / 2
    x = jt.tensor([1, 2, int(np.iinfo(dtype.np).max)], dtype=dtype)
    y = jt.tensor([5, 1, 2], dtype=dtype)
    buf = io.BytesIO()
    jt.export(f, (x, y)).save(buf)
    buf.seek(0)
    back = jt.export.load(buf)
    assert back.signature.inputs.leaves[0].dtype is dtype
    for got, expected in zip(back(x, y), f(x, y)):
        assert got.dtype is expected.dtype and got.tolist() == expected.tolist()
    with pytest.raises(ValueError, match=f"must have dtype {dtype}"):
        back(x.to(jt.int64), y)
