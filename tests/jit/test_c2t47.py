"""jitorch.compile(model)'s backward graph: the products whose results leave it (the weights' gradients) are written
by the product writer into new memory (`executor.Plan._fresh_result`), so that a pair of independent products runs
at once even where one of its results leaves the call, rather than both falling back to eager products one after the
other; the gradients equal eager's, survive the next call, and keep their bits at one and two threads."""

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.jit import executor, interop
from jitorch.runtime import threads
from tests.support import load_script

MODELS = Path(__file__).parents[2] / "benchmarks" / "models.py"


def _mlp(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(64, 96, bias=False), lib.nn.ReLU(), lib.nn.Linear(96, 64, bias=False))


def _backward_graph(compiled_module):
    (function,) = compiled_module._by_mode.values()
    (entry,) = [e for e in function.cache.values() if e.split is not None]
    return entry.split.backward


def _step(model, x):
    for p in model.parameters():
        p.grad = None
    (model(x) * x.sum(1, keepdim=True)).square().mean().backward()
    return [p.grad for p in model.parameters()]


def _input(seed=1):
    return np.random.default_rng(seed).standard_normal((256, 64)).astype(np.float32)


def test_a_pair_with_a_weight_gradient_runs_at_once_into_new_memory(two_threads, monkeypatch):
    """Before: the pair (the last layer's input gradient, into the arena, and its weight gradient, which leaves the
    graph) fell back to two eager products; now both run in one `interop.run_products` call."""
    at_once = []
    run_products = interop.run_products
    monkeypatch.setattr(interop, "run_products", lambda products: (at_once.append(len(products)),
                                                                     run_products(products)))
    model = _mlp(jt)
    compiled = jt.compile(model)
    x = jt.tensor(_input())
    grads = _step(compiled, x)
    graph = _backward_graph(compiled)
    (pair,) = [s for s in graph.steps if isinstance(s, executor.ProductPair)]
    leaving = set(graph.graph.output_values())
    assert pair.into_fresh and pair.into_fresh <= leaving
    assert all(n.outputs[0] in pair.into_arena | pair.into_fresh for n in pair.nodes)
    assert at_once == [2]
    expected = _step(model, x)
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


def test_an_unpaired_weight_gradient_is_written_into_new_memory_without_an_eager_product(two_threads, monkeypatch):
    """The first layer's weight gradient (a product no other pairs with) leaves the graph: the writer computes it into
    `executor._fresh` memory; the generated call makes no eager matmul (`executor._compute` of a product node)."""
    computed = []
    compute = executor._compute
    monkeypatch.setattr(executor, "_compute", lambda node, env: (computed.append(node.op.name), compute(node, env)))
    model = _mlp(jt)
    compiled = jt.compile(model)
    x = jt.tensor(_input())
    _step(compiled, x)
    graph = _backward_graph(compiled)
    fresh = [v for s in graph.steps if isinstance(s, executor.EagerStep) and not isinstance(s, executor.ProductPair)
             for v in s.into_fresh]
    assert len(fresh) == 1
    computed.clear()
    _step(compiled, x)
    assert not {"matmul", "mm", "bmm"} & set(computed)


def test_gradients_in_new_memory_outlive_the_next_call(two_threads):
    """A gradient the backward graph returns is the caller's: the next call must not write into it (an arena buffer
    would be reused by it)."""
    model = _mlp(jt)
    compiled = jt.compile(model)
    first = [g.numpy().copy() for g in _step(compiled, jt.tensor(_input(1)))]
    kept = _step(compiled, jt.tensor(_input(1)))
    _step(compiled, jt.tensor(_input(2)))
    for g, f in zip(kept, first):
        assert g.numpy().tobytes() == f.tobytes()


def test_weight_gradients_equal_torch():
    x = _input()
    grads = _step(jt.compile(_mlp(jt)), jt.tensor(x))
    model = _mlp(torch)
    with torch.no_grad():
        for p, q in zip(model.parameters(), _mlp(jt).parameters()):
            p.copy_(torch.from_numpy(q.detach().numpy()))
    expected = _step(model, torch.from_numpy(x))
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)


def _parameters_after_compiled_model_steps(bench, name, n_threads):
    """(a digest of model ``name``'s parameters after three jitorch.compile(model) steps at ``n_threads``, how many
    products its graphs write into new memory)."""
    jt.set_num_threads(n_threads)
    try:
        call = bench.system_call("jitorch.compile(model)", name, True)
        for _ in range(3):
            call()
        (nets,) = [c.cell_contents for c in call.__closure__ if isinstance(c.cell_contents, tuple)]
    finally:
        jt.set_num_threads(1)
    digest = hashlib.sha1()
    fresh = 0
    for net in nets:
        for p in net.parameters():
            digest.update(p.detach().numpy().tobytes())
        for function in net._by_mode.values():
            for entry in function.cache.values():
                if entry.split is not None:
                    fresh += sum(len(s.into_fresh) for s in entry.split.backward.steps
                                 if isinstance(s, executor.EagerStep))
    return digest.hexdigest(), fresh


@pytest.mark.parametrize("name", ["gpt-4x128", "lstm", "cnn"])
def test_compiled_model_steps_at_two_threads_equal_one_thread_bit_for_bit(name, monkeypatch):
    monkeypatch.setattr(interop, "PAIR_MIN_WORK", 0)  # (the quick sizes' products are small: pair them all the same)
    monkeypatch.setattr(threads, "INTEROP", True)
    bench = load_script(MODELS, "models_benchmark")
    one, fresh = _parameters_after_compiled_model_steps(bench, name, 1)
    two, _ = _parameters_after_compiled_model_steps(bench, name, 2)
    assert fresh > 0
    assert one == two
