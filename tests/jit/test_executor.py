"""The executor's memory plan: arena buffers for intermediates, in-place updates of inputs,
fresh memory for everything that leaves a call."""

import re
import threading

import numpy as np

import jitorch as jt
from jitorch.jit.executor import EagerStep, KernelStep
from jitorch.jit.kernel_runs import KernelRun


def executable(fn, *args):
    return jt.compile(fn).lower(*args).executable


def sgd_step(loss, *params):
    """``loss``'s backward and an SGD update of ``params`` in place; returns ``loss``."""
    loss.backward()
    with jt.no_grad():
        for w in params:
            w.sub_(0.1 * w.grad)
            w.grad = None
    return loss


def mlp_step(w1, w2, x):
    h = (x @ w1).tanh()
    return sgd_step((h @ w2).square().mean(), w1, w2)


def params():
    g = jt.Generator().manual_seed(0)
    return [jt.randn(6, 5, generator=g, requires_grad=True), jt.randn(5, 3, generator=g, requires_grad=True),
            jt.randn(4, 6, generator=g)]


def test_intermediates_share_arena_slots_and_matmuls_write_into_them():
    ex = executable(mlp_step, *params())
    plan = ex.plan
    assert plan.slots, "no intermediate was planned into the arena"
    assert len(plan.slot_bytes) < len(plan.slots), "values with disjoint lifetimes should share slots"
    matmul_outputs = [n.outputs[0] for s in ex.steps if isinstance(s, EagerStep) for n in s.nodes
                      if n.op.name == "matmul"]
    assert any(v in plan.slots for v in matmul_outputs)
    escaping = set(ex.graph.output_values()) | {v for _, v in ex.graph.mutations}
    assert not escaping & set(plan.slots)


def test_parameter_updates_are_computed_in_place_and_equal_eager():
    eager, compiled = params(), params()
    step = jt.compile(mlp_step)
    ex = step.lower(*compiled).executable
    assert len(ex.plan.inplace) == 2  # both parameter updates write straight into the parameters
    ptrs = [p.untyped_storage().data_ptr() for p in compiled[:2]]
    versions = [p._version for p in compiled[:2]]
    for _ in range(3):
        np.testing.assert_allclose(step(*compiled).item(), mlp_step(*eager).item(), rtol=1e-5)
    for a, b in zip(eager[:2], compiled[:2]):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert [p.untyped_storage().data_ptr() for p in compiled[:2]] == ptrs
    assert all(p._version > v for p, v in zip(compiled[:2], versions))


def test_update_stays_out_of_place_when_the_old_value_is_read_later():
    def f(w, g):
        w.sub_(g)
        return w * 0 + (w + 1)  # reads the new value only: may be in place

    def g_(w, g):
        old = w * 2
        w.sub_(g)
        return old + w  # `old` is computed before: still in place

    def h(w, g):
        new = w - g
        w.copy_(new)
        return w.sum() + (new * w).sum()

    for fn in (f, g_, h):
        a, b = jt.arange(6.0).reshape(2, 3), jt.ones(2, 3)
        a2 = a.clone()
        expected = fn(a2, b)
        got = jt.compile(fn)(a, b)
        np.testing.assert_allclose(got.numpy(), expected.numpy())
        np.testing.assert_allclose(a.numpy(), a2.numpy())


def test_transposed_update_is_not_in_place():
    def f(w):
        w.copy_(w.t() * 2)
        return w

    w, w2 = jt.arange(9.0).reshape(3, 3), jt.arange(9.0).reshape(3, 3)
    jt.compile(f)(w)
    f(w2)
    np.testing.assert_array_equal(w.numpy(), w2.numpy())


def test_aliased_inputs_of_a_mutating_function_run_eagerly():
    def f(w, v):
        w.mul_(2)
        return v + 0  # v is the same tensor as w: must see the update, as in eager

    w = jt.arange(4.0)
    w2 = jt.arange(4.0)
    got = jt.compile(f)(w, w)
    expected = f(w2, w2)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    np.testing.assert_array_equal(w.numpy(), w2.numpy())


def test_inputs_that_alias_after_calls_that_did_not_run_eagerly():
    """The fast path remembers the storages of its last call's arguments and captured tensors (`_inputs_alias`'s
    memo): a call whose arguments share memory after calls that did not still runs eagerly, and later calls
    without sharing run the graph again."""
    def f(w, v):
        w.mul_(2)
        return v + 0

    g = jt.compile(f)
    w, v = jt.arange(4.0), jt.ones(4)
    for _ in range(2):
        np.testing.assert_array_equal(g(w, v).numpy(), np.ones(4))
    (entry,) = g._fast.values()
    assert entry.alias_memo[0][1] is False
    w2 = jt.arange(4.0) * 4  # (w after two calls)
    got = g(w, w)  # (the same shapes and layouts: the same fast-path entry, which must not serve it)
    expected = f(w2, w2)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    np.testing.assert_array_equal(w.numpy(), expected.numpy())
    assert entry.alias_memo[0][1] is True  # (the fast path declined: the call ran eagerly)
    np.testing.assert_array_equal(g(w, v).numpy(), np.ones(4))
    assert entry.alias_memo[0][1] is False


def test_outputs_are_fresh_per_call_while_intermediates_reuse_the_arena():
    f = jt.compile(lambda x: ((x * 2).exp() @ x).relu())
    x = jt.randn(8, 8)
    r1, r2 = f(x), f(x)
    assert r1.untyped_storage() is not r2.untyped_storage()
    np.testing.assert_array_equal(r1.numpy(), r2.numpy())


def test_concurrent_calls_use_separate_arenas():
    f = jt.compile(lambda x: ((x * 3).tanh() @ x.t()).sum(1))
    xs = [jt.randn(64, 64) for _ in range(4)]
    # the compiled code alone, one call at a time, is the reference: concurrent calls must give
    # exactly the same bits (a shared buffer would mix two calls' values)
    expected = [f(x).numpy().copy() for x in xs]
    np.testing.assert_allclose(expected[0], ((xs[0] * 3).tanh() @ xs[0].t()).sum(1).numpy(), rtol=1e-4, atol=1e-3)
    failures = []

    def work(i):
        for _ in range(20):
            got = f(xs[i]).numpy()
            if not np.array_equal(got, expected[i]):
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert len(f.lower(xs[0]).executable._arenas) >= 1


def test_kernel_steps_patch_only_per_call_arguments():
    ex = executable(lambda x: (x.exp() + 1).sin() @ x, jt.randn(4, 4))
    kernels = [s for s in ex.steps if isinstance(s, KernelStep)]
    assert kernels
    for s in kernels:
        patched = {i for i, _ in s.dynamic_inputs} | {i for i, _, _ in s.fresh_outputs}
        fixed = [v for v in (*s.inputs, *s.outputs) if v in ex.plan.slots]
        assert len(patched) + len(fixed) + len(s.inplace_outputs) == len(s.inputs) + len(s.outputs)


def test_a_value_both_returned_and_written_into_an_input_keeps_its_own_memory():
    def f(buf, g):
        buf.copy_(g * 2)
        return g * 2  # the same value as the one written into buf (CSE merges them)

    buf, g = jt.zeros(5), jt.arange(5.0)
    out = jt.compile(f)(buf, g)
    assert out.untyped_storage() is not buf.untyped_storage()
    buf.add_(1)
    np.testing.assert_array_equal(out.numpy(), np.arange(5.0) * 2)


def test_kernels_reading_views_made_by_eager_steps_see_them_compacted():
    x = jt.arange(12.0).reshape(3, 4)
    f = lambda x: x.t() - x.t().sum(-1, keepdim=True)  # noqa: E731
    np.testing.assert_array_equal(jt.compile(f)(x).numpy(), f(x).numpy())


def test_reduction_epilogues_update_in_place_only_when_the_prologue_does_not_read_the_target():
    def epilogue_only(b, x):
        b.mul_(0.5).add_(x.sum(0))  # b is read after the reduction: in place
        return b.sum()

    def prologue_reads(b, x):
        b.sub_((x * b).sum(-1))  # every output reads all of b: not in place
        return b.sum()

    for fn, in_place in ((epilogue_only, True), (prologue_reads, False)):
        b, x = jt.arange(5.0), jt.randn(5, 5)
        b2 = b.clone()
        ex = executable(fn, b.clone(), x)
        assert bool(ex.plan.inplace) is in_place, fn.__name__
        np.testing.assert_allclose(jt.compile(fn)(b, x).item(), fn(b2, x).item(), rtol=1e-5)
        np.testing.assert_allclose(b.numpy(), b2.numpy(), rtol=1e-6)


def test_a_group_the_builder_refuses_is_split_and_still_compiles_its_reduction(recwarn):
    f = lambda x: x.transpose(0, 1).reshape(8, 8).sum(0)  # noqa: E731  (a reshape of a strided value)
    x = jt.randn(2, 4, 8)
    np.testing.assert_allclose(jt.compile(f)(x).numpy(), f(x).numpy(), rtol=1e-6, atol=1e-6)
    assert not [w for w in recwarn if "failed to compile" in str(w.message)]
    kernels = jt.compile(f).lower(x).kernels
    # the transpose is a tensor header; the reshape copies it, reading it through its strides
    assert [k.ops for k in kernels] == [["view"], ["sum"]]


def test_a_call_is_generated_straight_line_python_that_calls_the_machine_code():
    fn = jt.compile(lambda a: (a + 1).exp())
    x = jt.arange(6.0).reshape(2, 3)
    ex = fn.lower(x).executable
    src = ex.source
    (step,) = ex.steps
    assert isinstance(step, KernelStep) and not step.kernel.parallel
    # no walk over steps or outputs at call time: the kernel's entry point, then the one output
    assert ".run(" not in src and f"(a, 0, {step.kernel.outer})" in src
    assert src.rstrip().splitlines()[-1].strip().startswith("return env[")
    np.testing.assert_allclose(fn(x).numpy(), (x + 1).exp().numpy(), rtol=1e-6)
    assert "generated Python" in str(jt.explain(fn, x))


def test_inputs_that_are_views_into_more_memory_are_compacted_by_the_generated_call():
    fn = jt.compile(lambda a, b: a * 2 + b)
    base = jt.arange(12.0)
    a, b = base[2:8], base[:6]  # contiguous, with an offset, over a larger storage
    np.testing.assert_array_equal(fn(a, b).numpy(), (a * 2 + b).numpy())
    np.testing.assert_array_equal(fn(jt.ones(6), jt.zeros(6)).numpy(), np.full(6, 2.0))


def test_eager_steps_and_in_place_updates_appear_in_the_generated_call():
    ex = executable(mlp_step, *params())
    assert any(isinstance(s, EagerStep) for s in ex.steps)
    assert "with _no_grad():" in ex.source
    # the products are lines of the call, writing into their arena buffers
    assert re.search(r"writer\d+\(\[env\[v\d+\]\._array\(\), env\[v\d+\]\._array\(\)\], env\[v\d+\]\._array\(\)\)",
                     ex.source)
    # the parameter updates' kernels, in place or not by the call's inputs: the last kernels, run by one native call
    # whose program the call's inputs choose (see tests/jit/test_kernel_runs.py)
    assert isinstance(ex.runs[-1], KernelRun) and any(s.inplace_kernel for s in ex.runs[-1].steps)
    assert re.search(r"programs = arena\.programs\[run\d+\]\[inplace\]\n +_step_program\(programs\[0\], 0, 0\)",
                     ex.source)
    assert ex.source.rstrip().endswith("return _finish(inputs, env)")


def test_the_generated_call_returns_python_values_as_eager_does():
    def f(x):
        return x + 1, float("nan"), float("inf"), -0.0, None, "a", [x * 2, 3], {"k": x.exp()}
    fn = jt.compile(f)
    x = jt.ones(2)
    for _ in range(2):
        got, want = fn(x), f(x)
        assert repr(got[1:6]) == repr(want[1:6]) and got[6][1] == 3
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
        np.testing.assert_array_equal(got[6][0].numpy(), want[6][0].numpy())
        np.testing.assert_allclose(got[7]["k"].numpy(), want[7]["k"].numpy(), rtol=1e-6)


def test_inputs_sharing_memory_that_a_step_only_reads_stay_compiled():
    # inputs and targets sliced from one sequence share a storage; the step writes only its parameter
    w = jt.ones(3, requires_grad=True)

    def step(x, y):  # .grad cleared first, as optimizer.zero_grad() does: a step returning a loss that still
        w.grad = None  # requires grad, with no .grad set, runs eagerly after writing what the loss read
        loss = ((x * w - y) ** 2).sum()
        loss.backward()
        with jt.no_grad():
            w.sub_(0.01 * w.grad)
        return loss

    signal = jt.arange(8.0)
    x, y = signal[:3], signal[1:4]
    compiled = jt.compile(step)
    w_eager = w.detach().clone().requires_grad_()
    losses = [compiled(x, y).item() for _ in range(3)]
    entries = list(compiled.cache.values())  # (the first call had no .grad yet: the second retraced)
    assert entries and all(e.executable is not None and e.graph is not None for e in entries)
    for expected_loss in losses:
        w_eager.grad = None
        loss = ((x * w_eager - y) ** 2).sum()
        loss.backward()
        with jt.no_grad():
            w_eager.sub_(0.01 * w_eager.grad)
        np.testing.assert_allclose(expected_loss, loss.item(), rtol=1e-6)
    np.testing.assert_allclose(w.detach().numpy(), w_eager.detach().numpy(), rtol=1e-6)


def heads(qkv, w):
    """Attention's head split (nanoGPT's): split, view, transpose; the products batched over heads."""
    q, k, v = qkv.split(8, dim=2)
    q, k, v = (t.view(2, 5, 2, 4).transpose(1, 2) for t in (q, k, v))
    y = (q @ k.transpose(-2, -1)).softmax(-1) @ v
    return y.transpose(1, 2).reshape(2, 5, 8) @ w


def test_views_of_split_outputs_are_headers_and_batched_products_write_into_the_arena():
    g = jt.Generator().manual_seed(0)
    qkv, w = jt.randn(2, 5, 24, generator=g), jt.randn(8, 3, generator=g)
    ex = executable(heads, qkv, w)
    views = [s for s in ex.steps if isinstance(s, EagerStep) and all(n.op.view is not None for n in s.nodes)]
    assert views and all(len(s.geometry) == len(s.nodes) for s in views), "views left to run eagerly"
    products = [n.outputs[0] for s in ex.steps if isinstance(s, EagerStep) for n in s.nodes if n.op.name == "matmul"]
    assert len(products) == 3 and all(v in ex.plan.slots for v in products[:2])  # the last one is returned
    np.testing.assert_allclose(jt.compile(heads)(qkv, w).numpy(), heads(qkv, w).numpy(), rtol=1e-5, atol=1e-6)


def test_weight_gradients_are_computed_transposed_and_copied_nowhere():
    """A Linear weight's gradient is the transpose of a product: computed as the product of the transposed
    operands, it is compact, so clipping reads it in place and .grad is laid out as the weight (as torch's)."""
    def step(lin, x):
        lin(x).square().sum().backward()
        grads = [p.grad * 0.5 for p in lin.parameters()]
        return grads
    jt.manual_seed(0)
    lin, x = jt.nn.Linear(6, 4), jt.randn(5, 6)
    ex = jt.compile(step).lower(lin, x).executable
    read = [v for s in ex.steps if isinstance(s, KernelStep) for v in s.eager_made]
    assert read and all(v.node.op.view is None for v in read)  # kernels read products, no view to copy first
    weight_grad = ex.graph.outputs[1][0]
    assert weight_grad.node.op.name == "matmul" and weight_grad.type.shape == (4, 6)
    compiled = jt.compile(step)(lin, x)
    lin.zero_grad()
    expected = step(lin, x)
    assert lin.weight.grad.stride() == (6, 1)
    for a, b in zip(compiled, expected):
        assert a.stride() == b.stride()
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)



def test_the_generated_call_binds_many_constants_in_a_loop_and_equals_eager(monkeypatch):
    """A graph of `CONSTANTS_LOOP_FROM` constants or more binds them in a loop over a table; a view of a
    planned geometry and the choice of a kernel computing in place are one line each. The call computes
    what the straight lines compute, which equals eager. (Runs of kernels off: a kernel alone has that line.)"""
    from jitorch.jit import executor, kernel_runs
    monkeypatch.setattr(kernel_runs, "MIN_RUN", 10**9)
    g = jt.Generator().manual_seed(1)
    w1, w2 = jt.randn(6, 5, generator=g, requires_grad=True), jt.randn(5, 3, generator=g, requires_grad=True)
    b = jt.randn(3, generator=g)

    def step(x):  # captured parameters (constants), views (.t(), reshape), in-place updates
        h = (x @ w1).tanh()
        return sgd_step(((h @ w2 + b).reshape(-1).square().mean() + (w1.t() * 0.5).sum() + (w2 * b).sum()) * 1.5,
                        w1, w2)

    x = jt.randn(4, 6, generator=g)
    start = (w1.detach().clone(), w2.detach().clone())
    runs = {}
    for loop_from in (10_000, 0):
        monkeypatch.setattr(executor, "CONSTANTS_LOOP_FROM", loop_from)
        w1.data, w2.data = start[0].clone(), start[1].clone()
        compiled = jt.compile(step)
        losses = [compiled(x).item() for _ in range(3)]
        runs[loop_from] = (losses, w1.detach().numpy().copy(), w2.detach().numpy().copy(),
                           compiled.lower(x).executable.source)
    straight, looped = runs[10_000], runs[0]
    assert "for name, v, n, st in" in looped[3] and "for name, v, n, st in" not in straight[3]
    assert re.search(r"= _view_of\(b, g\d+, g\d+, \d+\) if \(b := env\[v\d+\]\)", looped[3])
    assert re.search(r"fn\d+\(a, 0, \d+\) if inplace else fn\d+\(a, 0, \d+\)", looped[3])
    assert looped[0] == straight[0]
    np.testing.assert_array_equal(looped[1], straight[1])
    np.testing.assert_array_equal(looped[2], straight[2])
    w1.data, w2.data = start[0].clone(), start[1].clone()
    np.testing.assert_allclose(looped[0], [step(x).item() for _ in range(3)], rtol=1e-5)


def test_a_kernel_patches_many_inputs_and_in_place_outputs_in_a_loop_with_the_bits_of_straight_lines(monkeypatch):
    """A kernel step with `PATCH_LOOP_FROM` plain inputs or in-place outputs or more patches their addresses in a
    loop over a table (an optimizer's merged update of one-element tensors: a line each made most of a GPT step's
    generated call); the call computes the bits the straight lines compute, which equal eager's."""
    from jitorch.jit import executor

    def step(*xs):  # one kernel reading ten inputs; ten one-element updates in place, merged into one kernel
        total = xs[0] * 1.5
        for x in xs[1:10]:
            total = total + x * 0.5
        for c in xs[10:]:
            c.mul_(1.25).add_(1)
        return total

    g = jt.Generator().manual_seed(3)
    xs = [jt.randn(64, generator=g) for _ in range(10)]
    counters = [jt.randn(1, generator=g) for _ in range(10)]
    expected = step(*xs, *[c.clone() for c in counters])
    runs = {}
    for loop_from in (10_000, executor.PATCH_LOOP_FROM):
        monkeypatch.setattr(executor, "PATCH_LOOP_FROM", loop_from)
        cs = [c.clone() for c in counters]
        compiled = jt.compile(step)
        out = compiled(*xs, *cs)
        runs[loop_from] = (out.numpy().copy(), [c.numpy().copy() for c in cs], compiled.lower(*xs, *cs).executable)
    straight, looped = runs[10_000], runs[executor.PATCH_LOOP_FROM]
    assert "for i, v in patch" in looped[2].source and "for i, v in patch" not in straight[2].source
    assert "for i, v, target in patch" in looped[2].source and "for i, v, target in" not in straight[2].source
    assert max(len(s.inplace_outputs) for s in looped[2].steps if isinstance(s, KernelStep)) == 10
    np.testing.assert_array_equal(looped[0], straight[0])
    np.testing.assert_array_equal(looped[0], expected.numpy())
    for a, b, c in zip(looped[1], straight[1], counters):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, (c * 1.25 + 1).numpy())


def test_a_large_graph_calls_its_steps_as_functions_shared_by_equal_steps(monkeypatch):
    """From `SHARED_STEPS_FROM` steps, each step's lines are a function of the objects they name, one for
    the steps whose lines differ only in those (equal layers), which the call runs from a table, a row per
    step: fewer functions than steps, and the call computes what the straight lines compute."""
    from jitorch.jit import executor
    g = jt.Generator().manual_seed(2)
    layers = [(jt.randn(8, 8, generator=g, requires_grad=True), jt.randn(8, generator=g)) for _ in range(4)]
    start = [w.detach().clone() for w, _ in layers]

    def step(x):  # four equal layers: products, views, pointwise kernels, in-place updates
        for w, b in layers:
            x = (x @ w.t() + b).tanh().reshape(2, 2, 8).reshape(4, 8)
        return sgd_step(x.square().mean(), *[w for w, _ in layers])

    x = jt.randn(4, 8, generator=g)
    runs = {}
    for shared_from in (10_000, 0):
        monkeypatch.setattr(executor, "SHARED_STEPS_FROM", shared_from)
        for (w, _), w0 in zip(layers, start):
            w.data = w0.clone()
        compiled = jt.compile(step)
        losses = [compiled(x).item() for _ in range(3)]
        ex = compiled.lower(x).executable
        runs[shared_from] = (losses, [w.detach().numpy().copy() for w, _ in layers], ex)
    straight, shared = runs[10_000], runs[0]
    ex = shared[2]
    functions = re.findall(r"^def (_step\d+)\(env, arena, inplace", ex.source, re.M)
    (table,) = re.findall(r"for _f, _a in (calls\d+):\n +_f\(env, arena, inplace, \*_a\)", ex.source)
    rows = ex._body.namespace[table]
    # (a row per step or run; a run's row passes the table of its kernels' patching functions, session 48)
    patching = {f.__name__ for _, args in rows for a in args if type(a) is list for f, _ in a}
    assert len(rows) == len(ex.runs) and {f.__name__ for f, _ in rows} | patching == set(functions)
    assert len(functions) < len(rows) / 2  # the layers' steps share their functions
    assert "def _step" not in straight[2].source and "calls" not in straight[2].source
    assert shared[0] == straight[0]
    for a, b in zip(shared[1], straight[1]):
        np.testing.assert_array_equal(a, b)


def _strided_reads(ex):
    """(kernel step, value) for each input a kernel reads that an eager step made: read in place or compacted."""
    return [(s, v) for s in ex.steps if isinstance(s, KernelStep) for v in s.eager_made]


def test_kernels_read_permuted_and_cropped_eager_views_in_place_through_their_strides():
    """A convolution's product ``[C, N*H*W]`` seen as ``[N, C, H, W]`` (a permute) and a transposed convolution's
    output cropped by its padding (an ``as_strided`` at an offset) are tensor headers made by eager steps: the
    batch norm kernels that read them are built for their strides and offset and read them where they lie, with
    no compact copy per reader (DCGAN's step made one per batch norm). Values equal torch's."""
    import torch

    def step(conv, up, bn1, bn2, x, z):
        return bn1(conv(x)).relu().square().mean() + bn2(up(z)).tanh().mean()

    def modules(lib):
        lib.manual_seed(0)
        nn = lib.nn
        return nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.ConvTranspose2d(4, 8, 4, 2, 1, bias=False), \
            nn.BatchNorm2d(8), nn.BatchNorm2d(8)

    ours, theirs = modules(jt), modules(torch)
    for a, b in zip(ours, theirs):
        for p, q in zip(a.parameters(), b.parameters()):
            p.data.copy_(jt.from_numpy(q.detach().numpy().copy()))
    g = np.random.default_rng(0)
    x, z = g.standard_normal((4, 3, 10, 10), np.float32), g.standard_normal((4, 4, 5, 5), np.float32)
    compiled = jt.compile(step)
    ex = compiled.lower(*ours, jt.from_numpy(x), jt.from_numpy(z)).executable
    reads = _strided_reads(ex)
    viewed = {v: s.views[v] for s, v in reads if v in s.views}
    # the transposed conv's output cropped (its padding: an offset), read in place as an eager step's view, or
    # folded as index maths by each batch norm kernel over the uncropped output (the recompute pass gives each
    # statistics reduction its own copy of the crop); the conv's product is read batch-last as it lies, the
    # batch norm kernels running batch-last (`ir.passes.sink`): no permuted view is left to read
    assert {v.node.op.name for v in viewed} <= {"as_strided"}
    assert [offset > 0 for _, offset, _ in viewed.values()] in ([True], [])
    statistics = [[n.op.name for n in s.nodes] for s in ex.steps if isinstance(s, KernelStep)
                  and s.kernel.source.kind == "reduction" and not {"relu", "tanh"} & {n.op.name for n in s.nodes}]
    assert viewed or len([ops for ops in statistics if "as_strided" in ops]) == 2  # the second batch norm's
    for s, v in reads:  # every other view a kernel reads lies compactly over all of its root: nothing is copied
        if v not in s.views and v.node.op.view is not None:
            root, shape, strides, offset = ex.view_geometry[v]
            # (the conv's product read as (C, H, W, N): all of its root, compact)
            assert offset == 0 and strides == jt.empty(shape).stride() and root.type.shape in (shape, (1, 8, 100))
    assert ("_strided(" in ex.source) == bool(viewed)  # (the guard on a view read in place)
    loss = compiled(*ours, jt.from_numpy(x), jt.from_numpy(z))
    expected = step(*theirs, torch.from_numpy(x), torch.from_numpy(z))
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5)
    for a, b in zip(ours[2:], theirs[2:]):  # the running statistics, from the views' means and variances
        np.testing.assert_allclose(a.running_mean.numpy(), b.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a.running_var.numpy(), b.running_var.numpy(), rtol=1e-5, atol=1e-6)


def test_an_eager_view_laid_out_otherwise_at_run_time_is_copied_into_the_layout_the_kernel_reads():
    """`_strided`, the generated call's guard on a view read in place: a tensor already at the strides and offset
    the kernel was built for is passed as it is; any other is copied into new memory laid out so."""
    from jitorch.jit.executor import _strided
    base = jt.arange(24.0)
    view = base.as_strided((2, 3), (1, 4), 5)
    assert _strided(view, (1, 4), 5, 24) is view
    copy = _strided(view.contiguous(), (1, 4), 5, 24)
    assert copy.stride() == (1, 4) and copy.storage_offset() == 5 and copy._storage.size == 24
    np.testing.assert_array_equal(copy.numpy(), view.numpy())


def test_cat_writes_into_its_arena_buffer_and_equals_eager():
    """An intermediate ``cat`` (attention's q, k, v gradients joined) is NumPy's concatenate straight into its
    arena buffer: no fresh result per call, whose megabytes the copy would fault in page by page."""
    f = lambda a, b: jt.cat([a.t() * 2, b.t() + 1], 1).relu().sum(0)  # noqa: E731
    g = jt.Generator().manual_seed(0)
    a, b = jt.randn(5, 4, generator=g), jt.randn(3, 4, generator=g)
    ex = executable(f, a, b)
    (step,) = [s for s in ex.steps if isinstance(s, EagerStep)]
    (cat,) = step.nodes
    assert cat.op.name == "cat" and step.into_arena == {cat.outputs[0]} and cat.outputs[0] in ex.plan.slots
    compiled = jt.compile(f)
    for _ in range(2):  # the second call reuses the arena
        np.testing.assert_allclose(compiled(a, b).numpy(), f(a, b).numpy(), rtol=1e-6)
    # a cat the plan cannot write as it is (mixed dtypes: eager promotes) runs eagerly, into fresh memory
    h = lambda a, i: jt.cat([a, i], 0).relu().sum(0)  # noqa: E731
    i = jt.arange(8).reshape(2, 4)
    ex = executable(h, a, i)
    assert not [s for s in ex.steps if isinstance(s, EagerStep) and s.into_arena]
    np.testing.assert_allclose(jt.compile(h)(a, i).numpy(), h(a, i).numpy(), rtol=1e-6)


def test_col2im_results_take_their_zeros_buffer_and_skip_copying_it():
    """A transposed convolution's col2im (``_as_strided_add`` of the columns into zeros; so is a convolution's
    input gradient) copies its first operand, then adds into part of it: where nothing reads the zeros later, its
    result takes their arena buffer and the copy is skipped (as for a padded input, ``as_strided_scatter``, whose
    zeros are not a graph constant). Values and gradients equal torch's."""
    import torch

    def step(conv, up, x):
        loss = up(conv(x).relu()).tanh().sum()
        loss.backward()
        return loss

    def modules(lib):
        lib.manual_seed(0)
        return lib.nn.Conv2d(3, 4, 3, 1, 1), lib.nn.ConvTranspose2d(4, 2, 4, 2, 1)

    ours, theirs = modules(jt), modules(torch)
    for a, b in zip(ours, theirs):
        for p, q in zip(a.parameters(), b.parameters()):
            p.data.copy_(jt.from_numpy(q.detach().numpy().copy()))
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6), np.float32)
    ex = executable(step, *ours, jt.from_numpy(x))
    updates = [n for s in ex.steps if isinstance(s, EagerStep) for n in s.nodes
               if n.op.name in ("as_strided_scatter", "_as_strided_add") and n.args[0].node is not None]
    assert "_as_strided_add" in {n.op.name for n in updates}
    for n in updates:
        assert n.args[0].node.op.name in ("zeros", "new_zeros")
        assert ex.plan.slots[n.outputs[0]] == ex.plan.slots[n.args[0]], f"{n.op.name} copies its operand"
    compiled = jt.compile(step)
    for _ in range(2):  # the second call finds the buffers as the first left them: the zeros are written anew
        for m in ours + theirs:
            m.zero_grad()
        loss = compiled(*ours, jt.from_numpy(x))
        expected = step(*theirs, torch.from_numpy(x))
        np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5)
        for a, b in zip(ours, theirs):
            for p, q in zip(a.parameters(), b.parameters()):
                np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5)
