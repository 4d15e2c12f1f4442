"""The recompute pass's copies on a warm compile (`jitorch.jit.plan_cache.fuse_cached`): they are stored with
the fusion plan of the graph, so a compile that finds the entry replays them without the pass's search
(`recompute.copies` never runs), and gives the graph, kernels and bits the search gives; an entry whose copies
do not check out is rejected (logged, counted), and the graph is recomputed and fused anew, which writes a
good entry in its place."""

from __future__ import annotations

import json

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.codegen.cache import _HEADER as HEADER, KernelCache
from jitorch.ir.lowerable import kind_of
from jitorch.ir.passes import optimize, recompute
from jitorch.ir.passes.fusion import fuse, merge_repeats
from jitorch.ir.printer import print_graph
from jitorch.jit import executor, plan_cache  # noqa: F401 (executor: loads the code generator)
from jitorch.jit.executor import KernelStep
from jitorch.jit.tracer import trace
from tests.jit.test_plan_cache import (  # noqa: F401 (fusion_logs: a fixture)
    _payload_replaced as payload_replaced, fusion_logs, printed_by_a_fresh_process)


def mlp_step(x, w1, b1, w2, b2, w3):
    """Two GELU and layer-norm layers, forward and backward: 83 nodes, 20 values recomputed by 106 copies (16 by 68
    across products only, before reductions were barriers too)."""
    h = F.layer_norm(F.gelu(x @ w1 + b1), (32,))
    h = F.layer_norm(F.gelu(h @ w2 + b2), (32,))
    y = (h @ w3).tanh()
    y.sum().backward()
    return y, w1.grad, b1.grad, w2.grad, b2.grad, w3.grad


def step_args(seed=0):
    g = jt.Generator().manual_seed(seed)
    return [jt.randn(24, 16, generator=g)] + [jt.randn(*shape, generator=g, requires_grad=True)
                                              for shape in [(16, 32), (32,), (32, 32), (32,), (32, 8)]]


def optimised():
    graph = optimize(trace(mlp_step, *step_args()))
    assert len(graph.nodes) >= plan_cache.MIN_NODES
    return graph


def described(groups):
    return [(g.kind, tuple(g.shape), [n.outputs[0].name for n in g.nodes], [v.name for v in g.outputs])
            for g in groups]


def uncached():
    """The graph with the pass's copies and its groups, made without any cache: (its text, its groups), the
    repeats of a group merged (`fusion.merge_repeats`, as `plan_cache.fuse_cached` does)."""
    graph = optimised()
    assert recompute.run(graph) == 20
    groups = fuse(graph)
    assert merge_repeats(graph, groups) > 0
    return print_graph(graph), described(groups)


@pytest.fixture
def searches(monkeypatch):
    """How many times the recompute pass searched a graph for its copies (`recompute.copies`)."""
    calls = []
    search = recompute.copies

    def counted(graph):
        calls.append(len(graph.nodes))
        return search(graph)
    monkeypatch.setattr(recompute, "copies", counted)
    return calls


def test_a_warm_compile_replays_the_stored_copies_without_searching(tmp_path, searches):
    text, groups = uncached()
    cold, warm = optimised(), optimised()
    nodes = len(warm.nodes)
    searches.clear()
    before = plan_cache.info()
    cold_groups = plan_cache.fuse_cached(cold, None, KernelCache(tmp_path))
    assert searches == [nodes]
    warm_groups = plan_cache.fuse_cached(warm, None, KernelCache(tmp_path))  # (a new cache: nothing in memory)
    after = plan_cache.info()
    assert searches == [nodes]  # the warm compile took the copies from the entry
    assert after["hits"] - before["hits"] == 1 and after["writes"] - before["writes"] == 1
    # the same graph, value names included, and the same groups as the pass and fusion give without a cache
    assert print_graph(warm) == print_graph(cold) == text
    assert described(warm_groups) == described(cold_groups) == groups
    (entry,) = tmp_path.rglob("*.jitk")
    payload = json.loads(entry.read_bytes()[HEADER.size + len(entry.stem):])
    # (83 nodes before simplify let pointwise ops read an expand's source: two expands fewer); the plan numbers
    # the nodes of the graph with its copies (the 48 originals no longer read dropped), before 34 copies that a
    # group held beside their originals were merged into them (28 before a layer norm's mean and variance shared
    # a group, session 50)
    assert len(payload["copies"]) == 106 and payload["nodes"] == 81
    assert len(payload["groups"]) == 81 + 106 - 48 == len(warm.nodes) + 34


def test_a_warm_compiled_step_has_the_cold_ones_kernels_and_bits(tmp_path, monkeypatch, searches):
    monkeypatch.setattr(plan_cache, "_store", lambda: KernelCache(tmp_path))

    def compiled():
        fn = jt.compile(mlp_step)
        args = step_args()
        return fn(*args), fn.lower(*step_args()).executable  # (the same guards: the graph called)

    (cold, cold_ex), (warm, warm_ex) = compiled(), compiled()
    assert len(searches) == 1  # the cold compile's search; the warm one (and `lower`'s) replayed its copies
    assert print_graph(warm_ex.graph) == print_graph(cold_ex.graph)
    kernels = [[step.kernel.source.llvm_ir for step in ex.steps if type(step) is KernelStep] for ex in (cold_ex, warm_ex)]
    assert kernels[0] == kernels[1] and len(kernels[0]) > 2
    eager = mlp_step(*step_args())
    for a, b, c in zip(cold, warm, eager, strict=True):
        assert jt.equal(a, b)  # bitwise
        np.testing.assert_allclose(b.detach().numpy(), c.detach().numpy(), rtol=1e-4, atol=1e-5)


def with_copies(raw, change):
    entry = json.loads(raw)
    entry["copies"] = change(entry["copies"], optimised())
    return json.dumps(entry).encode()


def first(graph, kind):
    return next(i for i, n in enumerate(graph.nodes) if kind(n))


COPY_DAMAGES = {
    "truncated": (lambda raw: raw[:len(raw) * 2 // 3], "not JSON"),
    "no copies": (lambda raw: raw.replace(b'"copies"', b'"copied"'), "no list of pairs"),
    "not pairs": (lambda raw: with_copies(raw, lambda c, g: [c[0][:1]] + c[1:]), "no list of pairs"),
    "node number out of range": (lambda raw: with_copies(raw, lambda c, g: [[len(g.nodes), c[0][1]]] + c[1:]),
                                 "no list of pairs"),
    "not integers": (lambda raw: with_copies(raw, lambda c, g: [[str(c[0][0]), c[0][1]]] + c[1:]),
                     "no list of pairs"),
    "a copy after its reader": (lambda raw: with_copies(raw, lambda c, g: [c[0][::-1]] + c[1:]), "comes before it"),
    "a pair listed twice": (lambda raw: with_copies(raw, lambda c, g: c + c[:1]), "copied twice"),
    "a copy of a product": (lambda raw: with_copies(raw, lambda c, g: c + [[len(g.nodes) - 1, first(
        g, lambda n: kind_of(n) == "external")]]), "is not a pointwise value"),
    "a copy of a value the call returns": (lambda raw: with_copies(raw, lambda c, g: c + [[len(g.nodes) - 1, first(
        g, lambda n: n.outputs and n.outputs[0] in set(g.output_values()) and kind_of(n) == "pointwise")]]),
        "is not a pointwise value"),
}


@pytest.mark.parametrize("damage", COPY_DAMAGES, ids=COPY_DAMAGES.keys())
def test_an_entry_whose_copies_do_not_check_out_is_rejected_and_rewritten(tmp_path, damage, fusion_logs, searches):
    text, groups = uncached()
    plan_cache.fuse_cached(optimised(), None, KernelCache(tmp_path))
    (entry,) = tmp_path.rglob("*.jitk")
    good = entry.read_bytes()
    change, reason = COPY_DAMAGES[damage]
    payload_replaced(entry, change(good[HEADER.size + len(entry.stem):]))
    searched = len(searches)
    before = plan_cache.info()
    graph = optimised()
    assert described(plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))) == groups
    after = plan_cache.info()
    assert after["rejected"] - before["rejected"] == 1 and after["hits"] == before["hits"]
    assert len(searches) == searched + 1  # the pass searched the graph again
    assert print_graph(graph) == text
    line = next(line for line in fusion_logs.text.splitlines() if "rejected, fusing anew" in line)
    assert reason in line
    assert entry.read_bytes() == good  # the fresh compile wrote its copies and plan back


STEP = """
import hashlib
import jitorch as torch
from jitorch.ir.passes import recompute
from jitorch.ir.printer import print_graph
from jitorch.jit import plan_cache
from jitorch.jit.executor import KernelStep
from tests.support import classifier_step
searched = []
search = recompute.copies
recompute.copies = lambda graph: searched.append(1) or search(graph)
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(*[m for _ in range(2) for m in (torch.nn.Linear(16, 32), torch.nn.GELU(),
                                                              torch.nn.LayerNorm(32), torch.nn.Linear(32, 16))],
                            torch.nn.Linear(16, 3))
step = torch.compile(classifier_step(model, torch.optim.Adam(model.parameters(), lr=0.01)))
x, y = torch.randn(64, 16), torch.randint(0, 3, (64,))
losses = [step(x, y).numpy().tobytes().hex() for _ in range(3)]
params = b"".join(p.detach().numpy().tobytes() for p in model.parameters()).hex()
built = hashlib.sha256()
for entry in step.cache.values():
    ex = entry.executable
    built.update(print_graph(ex.graph).encode())
    for s in ex.steps:
        if type(s) is KernelStep:
            built.update(s.kernel.source.llvm_ir.encode())
print(losses, params, built.hexdigest(), len(searched), plan_cache.info()["hits"], plan_cache.info()["writes"])
"""


def test_a_warm_process_replays_the_copies_and_computes_bitwise_what_a_cold_one_did(tmp_path):
    def run():
        *values, searched, hits, writes = printed_by_a_fresh_process(STEP, tmp_path).rsplit(" ", 3)
        return values, int(searched), int(hits), int(writes)

    cold, cold_searched, cold_hits, cold_writes = run()
    warm, warm_searched, warm_hits, warm_writes = run()
    assert cold_searched == cold_writes >= 1  # every graph the cold process fused anew was searched once
    assert warm_searched == warm_writes == 0 and warm_hits == cold_hits + cold_writes
    # the same losses and parameters bitwise, and the same graphs (value names included) and kernels' IR
    assert warm == cold


def test_an_entry_whose_copies_check_out_but_plan_does_not_keeps_the_copies_and_fuses_anew(tmp_path, fusion_logs,
                                                                                           searches):
    """Its copies are made without a search; fusion then refuses its groups (two products in one) and fuses
    the graph anew, which gives the entry it would have written."""
    text, groups = uncached()
    plan_cache.fuse_cached(optimised(), None, KernelCache(tmp_path))
    (entry,) = tmp_path.rglob("*.jitk")
    good = entry.read_bytes()
    payload = json.loads(good[HEADER.size + len(entry.stem):])
    copied = optimised()
    recompute.run(copied)  # (the graph the plan numbers: with the copies)
    products = [i for i, n in enumerate(copied.nodes) if n.op.name == "matmul"]
    payload["groups"][products[1]] = payload["groups"][products[0]]
    payload_replaced(entry, json.dumps(payload, separators=(",", ":")).encode())
    searched, before = len(searches), plan_cache.info()
    graph = optimised()
    assert described(plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))) == groups
    after = plan_cache.info()
    assert len(searches) == searched  # the copies came from the entry
    assert after["rejected"] - before["rejected"] == 1 and after["hits"] == before["hits"]
    assert print_graph(graph) == text
    assert "the fusion plan given does not apply" in fusion_logs.text and "holds an external call" in fusion_logs.text
    assert entry.read_bytes() == good


def test_the_pass_bounds_are_in_the_key(tmp_path, monkeypatch, searches):
    """A compile with other bounds (`MAX_CONE` 0: no copies, as `benchmarks/kernel_audit.py --recompute` builds
    the step without the pass) finds no entry of the copies made under the defaults, and searches."""
    plan_cache.fuse_cached(optimised(), None, KernelCache(tmp_path))
    monkeypatch.setattr(recompute, "MAX_CONE", 0)
    searched, before = len(searches), plan_cache.info()
    graph = optimised()
    nodes = len(graph.nodes)
    plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))
    assert len(searches) == searched + 1 and plan_cache.info()["misses"] - before["misses"] == 1
    assert len(graph.nodes) == nodes  # no copies


def conv_bn_step(x, w1, gamma, beta, w2):
    """Convolution, batch norm, leaky ReLU, convolution, forward and backward: the batch norm's statistics and
    its backward's sums read permutations of pointwise values (`recompute.into_reductions`)."""
    h = F.leaky_relu(F.batch_norm(F.conv2d(x, w1, padding=1), None, None, gamma, beta, training=True), 0.2)
    y = F.conv2d(h, w2, padding=1)
    (y * y).mean().backward()
    return y, w1.grad, gamma.grad, beta.grad, w2.grad


def conv_bn_args(seed=0):
    g = jt.Generator().manual_seed(seed)
    return [jt.randn(4, 3, 8, 8, generator=g)] + [
        jt.randn(*shape, generator=g, requires_grad=True) for shape in [(8, 3, 3, 3), (8,), (8,), (4, 8, 3, 3)]]


def test_a_warm_compile_makes_the_copies_into_reductions_anew_and_equals_the_cold_one(tmp_path, monkeypatch,
                                                                                         searches):
    """The copies into reductions are not stored: a warm compile replays the stored copies across external
    nodes, makes those into reductions again and takes the stored plan, giving the cold compile's graph and
    kernels bit for bit (the plan names groups of the graph both made)."""
    monkeypatch.setattr(plan_cache, "_store", lambda: KernelCache(tmp_path))
    into = recompute.into_reductions
    made = []
    monkeypatch.setattr(recompute, "into_reductions", lambda graph: made.append(into(graph)) or made[-1])

    def compiled():
        fn = jt.compile(conv_bn_step)
        return fn(*conv_bn_args()), fn.lower(*conv_bn_args()).executable

    before = plan_cache.info()
    (cold, cold_ex), (warm, warm_ex) = compiled(), compiled()
    assert made and made[0] > 0 and len(set(made)) == 1  # the same copies into reductions at every compile
    assert plan_cache.info()["hits"] > before["hits"]
    assert print_graph(warm_ex.graph) == print_graph(cold_ex.graph)
    kernels = [[step.kernel.source.llvm_ir for step in ex.steps if type(step) is KernelStep] for ex in (cold_ex, warm_ex)]
    assert kernels[0] == kernels[1]
    for a, b in zip(cold, warm, strict=True):
        assert jt.equal(a, b)


def test_the_copies_into_reductions_settings_are_in_the_key(tmp_path, monkeypatch):
    """A compile without the copies into reductions (`benchmarks/kernel_audit.py --reductions` builds one) finds
    no entry of the plan made with them."""
    graph = optimize(trace(conv_bn_step, *conv_bn_args()))
    assert len(graph.nodes) >= plan_cache.MIN_NODES
    plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))
    monkeypatch.setattr(recompute, "REDUCTIONS", False)
    before = plan_cache.info()
    plan_cache.fuse_cached(optimize(trace(conv_bn_step, *conv_bn_args())), None, KernelCache(tmp_path))
    assert plan_cache.info()["misses"] - before["misses"] == 1
