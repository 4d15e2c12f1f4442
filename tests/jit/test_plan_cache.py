"""Warm-cache entries of a compile: the fusion-plan cache (`jitorch.jit.plan_cache`: plans taken give
fusion's own groups, entries that do not check out are rejected (logged, fused anew), different graphs never
share an entry, and a fresh process with a warm cache computes bitwise what a cold one computes) and the
kernel sources entry (`codegen.kernel.build_many`)."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jitorch as jt
from jitorch.codegen.cache import _HEADER as HEADER, KernelCache, cache_key, toolchain
from jitorch.ir.passes import fusion, optimize
from jitorch.ir.passes.fusion import fuse, fuse_with_plan
from jitorch.ir.printer import print_graph
from jitorch.jit import executor, plan_cache  # noqa: F401 (executor: loads the code generator, whose rule says what fuses)
from jitorch.jit.tracer import trace
from jitorch.runtime import logs

ROOT = Path(__file__).resolve().parents[2]


def _layers(x, w, b):
    """Enough nodes for the plan cache (pointwise chains, products, reductions, broadcasts)."""
    for _ in range(6):
        h = jt.tanh(x @ w + b) * 0.5 + x
        x = h - h.mean(dim=-1, keepdim=True)
        x = x / (x * x).sum(dim=-1, keepdim=True).sqrt()
    return jt.softmax(x, dim=-1).sum()


def _graph(shape=(8, 16), dtype=jt.float32, scale=0.5):
    x = jt.randn(*shape, dtype=dtype)
    w = jt.randn(shape[-1], shape[-1], dtype=dtype)
    b = jt.randn(shape[-1], dtype=dtype)
    if scale == 0.5:
        fn = _layers
    else:
        def fn(x, w, b):
            return _layers(x * scale, w, b)
    return optimize(trace(fn, x, w, b))


def _described(groups):
    return [(g.kind, tuple(g.shape), [n.outputs[0].name for n in g.nodes], [v.name for v in g.outputs])
            for g in groups]


@pytest.fixture
def fusion_logs(caplog):
    logs.set_logs("fusion")
    try:
        with caplog.at_level(logging.INFO, logger="jitorch"):
            yield caplog
    finally:
        logs.set_logs("")


def test_a_plan_taken_gives_fusions_groups():
    graph = _graph()
    assert len(graph.nodes) >= plan_cache.MIN_NODES
    groups, plan, taken = fuse_with_plan(graph)
    assert not taken and len(groups) < len(graph.nodes)
    again, same_plan, taken = fuse_with_plan(graph, plan=plan)
    assert taken and same_plan is plan
    assert _described(again) == _described(groups) == _described(fuse(graph))


PLAN_DAMAGES = {
    "a number short": "it is not a group number below",
    "out of range": "it is not a group number below",
    "not integers": "it is not a group number below",
    "two externals": "holds an external call",
    "two reductions over other dims": "holds reductions that cannot share a loop",
    "a reduction reading another": "has no kernel form",
    "an epilogue over the reduction's input that another reduction reads": "has no kernel form",
    "cycle": "its groups depend on each other in a cycle",
}


@pytest.mark.parametrize("damage", PLAN_DAMAGES)
def test_a_plan_that_breaks_fusions_rules_is_dropped_and_the_graph_fused_anew(damage, fusion_logs, monkeypatch):
    if "reduction reading" in damage or "another reduction reads" in damage:
        # (a layer norm's mean and variance share a group with them: tests/codegen/test_gptln50.py)
        monkeypatch.setattr(fusion, "DEPENDENT_ROW_REDUCTIONS", False)
    graph = _graph()
    groups, plan, _ = fuse_with_plan(graph)
    assert len(plan) == len(graph.nodes) and len(set(plan)) == len(groups)
    ops = [n.op.name for n in graph.nodes]
    products = [i for i, op in enumerate(ops) if op == "matmul"]
    mean, total = ops.index("mean"), ops.index("sum")
    bad = list(plan)
    if damage == "a number short":
        bad = plan[:-1]
    elif damage == "out of range":
        bad[0] = len(graph.nodes)
    elif damage == "not integers":
        bad[0] = str(bad[0])
    elif damage == "two externals":
        bad[products[1]] = bad[products[0]]
    elif damage == "two reductions over other dims":
        bad[len(ops) - 1 - ops[::-1].index("sum")] = bad[mean]  # (the row mean and the last sum, a full one)
    elif damage == "a reduction reading another":
        # the mean and the sum of the squares of x - mean, with the nodes between (session 48: reductions over one
        # space share a group where neither depends on the other)
        assert ops[mean + 1:mean + 4] == ["sub", "mul", "sum"]
        bad[mean + 1] = bad[mean + 2] = bad[total] = bad[mean]
    elif damage == "an epilogue over the reduction's input that another reduction reads":
        # x - mean(x) and its square in the mean's group, as its row epilogue: the square, which the next sum reads,
        # is that sum's prologue (fusion's rule), not a value the mean's kernel writes for it
        assert ops[mean + 1:mean + 4] == ["sub", "mul", "sum"]
        bad[mean + 1] = bad[mean + 2] = bad[mean]
    else:
        # the add after the first product and the add after the second, alone in a group of their own: legal as
        # a kernel, but the second add reads the first's group through the second product
        assert ops[products[0] + 1] == ops[products[1] + 1] == "add"
        bad[products[0] + 1] = bad[products[1] + 1] = max(plan) + 1
    made, replanned, taken = fuse_with_plan(graph, plan=bad)
    assert not taken and replanned == plan
    assert _described(made) == _described(groups)
    line = next(line for line in fusion_logs.text.splitlines() if "the fusion plan given does not apply" in line)
    assert PLAN_DAMAGES[damage] in line and line.endswith("fusing anew")


def test_a_plan_with_a_view_of_a_value_computed_in_its_group_is_dropped(fusion_logs):
    def fn(x):
        return ((x * 2.0).t() + 1.0).sum()
    graph = optimize(trace(fn, jt.randn(4, 5)))
    groups, plan, _ = fuse_with_plan(graph)
    ops = [n.op.name for n in graph.nodes]
    view = next(i for i, n in enumerate(graph.nodes) if n.op.view is not None)
    bad = list(plan)
    bad[view] = bad[ops.index("mul")]
    assert plan[view] != plan[ops.index("mul")]  # fusion itself keeps them apart
    made, _, taken = fuse_with_plan(graph, plan=bad)
    assert not taken and _described(made) == _described(groups)
    assert "has a view of a value computed in it" in fusion_logs.text


def test_entries_are_stored_then_loaded_by_a_new_cache(tmp_path):
    graph = _graph()
    before = plan_cache.info()
    cold = plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))
    (entry,) = tmp_path.rglob("*.jitk")
    warm = plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))  # (a new cache: nothing in memory)
    after = plan_cache.info()
    assert _described(warm) == _described(cold) == _described(fuse(graph))
    assert after["misses"] - before["misses"] == 1 and after["writes"] - before["writes"] == 1
    assert after["hits"] - before["hits"] == 1
    payload = json.loads(entry.read_bytes()[HEADER.size + len(entry.stem):])
    assert payload["format"] == plan_cache.FORMAT and payload["nodes"] == len(payload["groups"]) == len(graph.nodes)


def _payload_replaced(path, payload):
    """The entry at ``path`` with ``payload``, its checksum and length made to match (as a writer of the
    folder could): only plan_cache's own checks stand between it and the fusion."""
    import hashlib
    raw = path.read_bytes()
    magic, version, _, _, source, key_length = HEADER.unpack_from(raw)
    header = HEADER.pack(magic, version, len(payload), hashlib.sha256(payload).digest(), source, key_length)
    path.write_bytes(header + raw[HEADER.size:HEADER.size + key_length] + payload)


def _products_joined(raw, graph):
    entry = json.loads(raw)
    first, second = [i for i, n in enumerate(graph.nodes) if n.op.name == "matmul"][:2]
    entry["groups"][second] = entry["groups"][first]
    return json.dumps(entry).encode()


DAMAGES = {
    "truncated": lambda raw, graph: raw[: len(raw) // 2],
    "not JSON": lambda raw, graph: b"\x80\x04 a pickle? " + raw,
    "another format": lambda raw, graph: raw.replace(f'"format":{plan_cache.FORMAT}'.encode(), b'"format":99'),
    "another graph's size": lambda raw, graph: raw.replace(f'"nodes":{len(graph.nodes)}'.encode(), b'"nodes":5'),
    "no group numbers": lambda raw, graph: raw.replace(b'"groups"', b'"merges"'),
    "numbers not integers": lambda raw, graph: raw.replace(b'"groups":[', b'"groups":["0",', 1),
    "a number missing": lambda raw, graph: raw.replace(b'"groups":[0,', b'"groups":[', 1),
    "two products in one group": lambda raw, graph: _products_joined(raw, graph),
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_damaged_entry_is_rejected_logged_and_rewritten(tmp_path, damage, fusion_logs):
    graph = _graph()
    expected = _described(fuse(graph))
    plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))
    (entry,) = tmp_path.rglob("*.jitk")
    good = entry.read_bytes()
    payload = good[HEADER.size + len(entry.stem):]
    _payload_replaced(entry, damage(payload, graph))
    before = plan_cache.info()
    assert _described(plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))) == expected
    after = plan_cache.info()
    assert after["rejected"] - before["rejected"] == 1 and after["hits"] == before["hits"]
    assert "fusing anew" in fusion_logs.text
    assert entry.read_bytes() == good  # the fresh fusion wrote its plan back


def test_a_torn_or_foreign_file_is_a_miss(tmp_path):
    graph, other = _graph(), _graph(dtype=jt.float64)
    plan_cache.fuse_cached(graph, None, KernelCache(tmp_path / "a"))
    plan_cache.fuse_cached(other, None, KernelCache(tmp_path / "b"))
    (mine,) = (tmp_path / "a").rglob("*.jitk")
    (foreign,) = (tmp_path / "b").rglob("*.jitk")
    good = mine.read_bytes()
    for bad in (good[:HEADER.size - 3], foreign.read_bytes()):  # torn header; another graph's entry at this path
        mine.write_bytes(bad)
        before = plan_cache.info()
        assert _described(plan_cache.fuse_cached(graph, None, KernelCache(tmp_path / "a"))) == _described(fuse(graph))
        after = plan_cache.info()
        assert after["misses"] - before["misses"] == 1 and after["hits"] == before["hits"]
        assert mine.read_bytes() == good


def test_a_huge_entry_is_refused_before_it_is_read(tmp_path, monkeypatch):
    graph = _graph()
    plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))
    (entry,) = tmp_path.rglob("*.jitk")
    monkeypatch.setattr(plan_cache, "MAX_ENTRY_BYTES", 10)
    before = plan_cache.info()
    plan_cache.fuse_cached(graph, None, KernelCache(tmp_path))
    assert plan_cache.info()["misses"] - before["misses"] == 1


def _key(graph, target="cpu x86_64"):
    return cache_key("fusion plan", plan_cache._graph_text(graph, target))


def test_different_graphs_never_share_an_entry():
    base = _graph()
    keys = {
        "base": _key(base),
        "dtype": _key(_graph(dtype=jt.float64)),
        "shape": _key(_graph(shape=(4, 16))),
        "constant": _key(_graph(scale=0.25)),
        "target": _key(base, "cpu x86_64 +avx512f"),
    }
    assert len(set(keys.values())) == len(keys), keys
    assert _key(_graph()) == keys["base"]  # the same graph, traced again, finds its entry
    # op attributes: the same graph with one reduction over another dim
    attr = _graph()
    node = next(n for n in attr.nodes if n.op.name == "sum")
    assert node.args[1] in ([-1], (-1,), -1, [1], (1,), 1)
    text = plan_cache._graph_text(attr, "cpu x86_64")
    node.args = (node.args[0], [0]) + tuple(node.args[2:])
    assert plan_cache._graph_text(attr, "cpu x86_64") != text
    # strides: a value laid out another way
    laid = _graph()
    value = laid.nodes[-1].outputs[0] if not laid.layouts else next(iter(laid.layouts))
    text = plan_cache._graph_text(laid, "cpu x86_64")
    laid.layouts[value] = (7,) * len(value.type.shape)
    assert plan_cache._graph_text(laid, "cpu x86_64") != text
    # the versions of jitorch and llvmlite are in every key
    assert toolchain()[:2] == ("jitorch", jt.__version__)


STEP = """
import jitorch as torch
from jitorch.codegen import cpu
from jitorch.jit import plan_cache
from jitorch.runtime import threads
from tests.support import classifier_step
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(*[m for _ in range(2) for m in (torch.nn.Linear(16, 16), torch.nn.LayerNorm(16),
                                                              torch.nn.GELU())], torch.nn.Linear(16, 3))
step = torch.compile(classifier_step(model, torch.optim.SGD(model.parameters(), lr=0.1)))
x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
losses = [step(x, y).numpy().tobytes().hex() for _ in range(3)]
params = b"".join(p.detach().numpy().tobytes() for p in model.parameters()).hex()
program = cpu.program_cache().info()
print(losses, params, threads._native.cache_info().currsize, program.disk_hits, program.writes,
      plan_cache.info()["hits"], plan_cache.info()["writes"])
"""


def printed_by_a_fresh_process(script, cache_dir):
    """What ``script`` prints, run by a new Python process on this checkout with the kernel cache in
    ``cache_dir``."""
    env = {**os.environ, "JITORCH_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout.strip()


def test_a_warm_fresh_process_computes_bitwise_what_a_cold_one_did(tmp_path):
    def run():
        losses, params, *counts = printed_by_a_fresh_process(STEP, tmp_path).rsplit(" ", 6)
        return losses + params, [int(n) for n in counts]

    cold, (cold_team, cold_program_hits, cold_program_writes, cold_hits, cold_writes) = run()
    warm, (warm_team, warm_program_hits, warm_program_writes, warm_hits, warm_writes) = run()
    # (the cold process may hit its own entries: a retrace of the same graph once .grad exists)
    assert cold_writes >= 1
    assert warm_writes == 0 and warm_hits == cold_hits + cold_writes  # every graph's plan came from the cache
    # the step program that runs the runs of kernels: made by the cold process, read by the warm one; at one
    # thread neither compiled the thread team's native module
    # (one or more: the retrace once .grad exists may run other runs of kernels, and so other programs, as it
    # does since session 50's products and layer norm changed the step's runs)
    assert cold_program_hits == warm_program_writes == 0 and warm_program_hits == cold_program_writes >= 1
    assert cold_team == warm_team == 0
    assert warm == cold


def test_explain_shows_the_plan_caches_counts(tmp_path):
    @jt.compile
    def deep(x):
        for _ in range(30):
            x = jt.tanh(x) * 0.5 + x
        return x.sum()

    x = jt.randn(64)
    before = plan_cache.info()
    deep(x)
    counts = plan_cache.info()
    assert counts["hits"] + counts["misses"] - before["hits"] - before["misses"] == 1
    line = next(line for line in str(jt.explain(deep, x)).splitlines() if "fusion plan cache" in line)
    assert line == (f"  fusion plan cache: {counts['hits']} hits, {counts['misses']} misses, {counts['rejected']} "
                    f"rejected, {counts['writes']} written (graphs of 64 nodes or more)")
    jt.explain(deep, x, html=str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text()
    assert "<h3>Fusion plan cache (this process)</h3>" in html
    assert f"<tr><th>hits</th><td>{counts['hits']}</td></tr>" in html


def _sources(graph, cache, monkeypatch):
    """`build_many`'s sources of the graph's groups, in a process that has built none of them."""
    import collections
    from jitorch.codegen import kernel
    monkeypatch.setattr(kernel, "_built", collections.OrderedDict())
    requests = [(g, f"jitorch_k{i}_{g.kind}", None, {}) for i, g in enumerate(fuse(graph))
                if g.kind in ("pointwise", "reduction")]
    return kernel.build_many(requests, cache)


def _source_fields(sources):
    return [None if s is None else (s.name, s.kind, s.llvm_ir, [v.name for v in s.inputs],
                                    [v.name for v in s.outputs], s.outer, s.work) for s in sources]


def test_the_kernel_sources_entry_holds_each_text_once_and_a_foreign_one_is_rebuilt(tmp_path, monkeypatch):
    graph = _graph()
    built = _sources(graph, KernelCache(tmp_path), monkeypatch)
    (entry,) = tmp_path.rglob("*.jitk")
    stored = json.loads(entry.read_bytes()[HEADER.size + len(entry.stem):])
    kernels = [k for k in stored["kernels"] if k is not None]
    # the six layers' kernels are equal but for their names: their text is stored once
    assert len(stored["texts"]) == len({k["llvm_ir"] for k in kernels}) <= len(kernels) // 3
    loaded_from = KernelCache(tmp_path)
    loaded = _sources(graph, loaded_from, monkeypatch)
    assert _source_fields(loaded) == _source_fields(built)
    assert (loaded_from.info().disk_hits, loaded_from.info().writes) == (1, 0)
    # an entry of the earlier format (a list of kernels, each with its text), or with a text position out of
    # range: built again, and rewritten
    for payload in (json.dumps([None]).encode(),
                    json.dumps({"texts": [], "kernels": kernels}).encode()):
        _payload_replaced(entry, payload)
        again = KernelCache(tmp_path)
        assert _source_fields(_sources(graph, again, monkeypatch)) == _source_fields(built)
        assert (again.info().disk_hits, again.info().writes) == (1, 1)


def test_a_kernel_sources_entry_of_another_code_generator_is_not_read(tmp_path, monkeypatch):
    """The entry's key holds the code generator's fingerprint: sources built by another build of the same
    version (an edited lowering) are built again, not handed over."""
    from jitorch.codegen import kernel
    graph = _graph()
    built = _sources(graph, KernelCache(tmp_path), monkeypatch)
    monkeypatch.setattr(kernel, "generator_fingerprint", lambda: "another code generator")
    other = KernelCache(tmp_path)
    assert _source_fields(_sources(graph, other, monkeypatch)) == _source_fields(built)
    assert (other.info().disk_hits, other.info().writes) == (0, 1)
    assert len(list(tmp_path.rglob("*.jitk"))) == 2


def _traced(scale=0.5):
    """A graph whose first round of passes rewrites something (common subexpressions)."""
    x, w, b = jt.randn(8, 16), jt.randn(16, 16), jt.randn(16)
    return trace(lambda x, w, b: _layers(x * scale, w, b) + _layers(x * scale, w, b), x, w, b)


def test_the_passes_second_round_is_skipped_where_the_cache_saw_it_rewrite_nothing(tmp_path, monkeypatch, caplog):
    rounds = []
    run_passes = optimize.__globals__["_run_passes"]
    monkeypatch.setitem(optimize.__globals__, "_run_passes", lambda g, passes, verify, settled=None: run_passes(
        g, [lambda g, p=p: rounds.append(p.__module__) or p(g) for p in passes], verify, settled))
    expected = print_graph(optimize(_traced()), canonical=True)
    full = len(rounds)
    assert full >= 12  # two rounds at least: the first rewrites, the second confirms
    before = plan_cache.info()
    rounds.clear()
    cold, text = plan_cache.optimize_cached(_traced(), KernelCache(tmp_path))
    assert len(rounds) == full and text == expected == print_graph(cold, canonical=True)
    assert plan_cache.info()["fixed_point_writes"] == before["fixed_point_writes"] + 1
    rounds.clear()
    logs.set_logs("passes")
    try:
        with caplog.at_level(logging.INFO, logger="jitorch"):
            warm, text = plan_cache.optimize_cached(_traced(), KernelCache(tmp_path))  # (nothing in memory)
    finally:
        logs.set_logs("")
    assert len(rounds) == full // 2 and text == expected == print_graph(warm, canonical=True)
    assert plan_cache.info()["fixed_point_hits"] == before["fixed_point_hits"] + 1
    assert "second round of passes skipped" in caplog.text
    # another graph has no entry; a damaged entry is a miss: every round runs and the result is the same
    rounds.clear()
    other, _ = plan_cache.optimize_cached(_traced(scale=2.0), KernelCache(tmp_path / "other"))
    assert len(rounds) == full and print_graph(other, canonical=True) != expected
    damaged = [path for path in tmp_path.glob("*/*") if path.is_file() and plan_cache.FIXED_POINT in path.read_bytes()]
    assert damaged
    for path in damaged:
        path.write_bytes(path.read_bytes().replace(plan_cache.FIXED_POINT, b" " * len(plan_cache.FIXED_POINT)))
    rounds.clear()
    again, text = plan_cache.optimize_cached(_traced(), KernelCache(tmp_path))
    assert len(rounds) == full and text == expected == print_graph(again, canonical=True)
