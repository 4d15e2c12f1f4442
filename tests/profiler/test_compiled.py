"""Profiles of compiled calls: one span per call, every kernel of the graph on its thread, the eager steps."""

import importlib.util
import json
import pathlib
import threading
import time

import pytest

import jitorch as jt
from jitorch import nn
from jitorch.profiler import profile
from jitorch.runtime import threads
from tests.support import classifier_step

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _train_cnn():
    spec = importlib.util.spec_from_file_location("train_cnn", ROOT / "examples" / "train_cnn.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cnn_step():
    """The CNN example's compiled training step, warmed up (SGD's momentum buffers made), and a batch."""
    example = _train_cnn()
    jt.manual_seed(0)
    model = example.BarNet()
    train_step = jt.compile(classifier_step(model, jt.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)))
    images, labels = example.bar_images(16, generator=jt.Generator().manual_seed(1))
    for _ in range(3):
        train_step(images, labels)
    return train_step, images, labels


def test_the_cnn_training_step_shows_every_kernel_of_its_graph_on_a_thread(cnn_step, tmp_path):
    train_step, images, labels = cnn_step
    explained = jt.explain(train_step, images, labels)
    kernels = [st.kernel.name for st in explained.steps if hasattr(st, "kernel")]
    assert len(kernels) > 5
    executable = train_step.lower(images, labels).executable
    with profile() as prof:
        train_step(images, labels)
    (call,) = [e for e in prof.events() if e.kind == "compiled_call"]
    assert call.name == "compiled: step" and call.thread == threading.get_native_id()
    inside = [e for e in prof.events() if e.cpu_parent is call and e.kind in ("kernel", "external", "eager_step")]
    # each step of the graph, in launch order, as `profiled_steps` documents it
    assert [(e.name, e.kind) for e in inside] == executable.profiled_steps()
    assert [e.name for e in inside if e.kind == "kernel"] == kernels
    assert {e.kind for e in inside} >= {"kernel", "external"}  # the convolutions' products are BLAS steps
    assert set(prof.kernel_times()) == set(kernels)
    assert all(t > 0 for t in prof.kernel_times().values())
    path = tmp_path / "cnn.json"
    prof.export_chrome_trace(str(path))
    trace = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
    assert sorted(e["name"] for e in trace) == sorted(kernels)
    assert all(e["tid"] == threading.get_native_id() and call.start_us <= e["ts"] for e in trace)


def test_each_call_of_a_compiled_function_is_one_span():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    @jt.compile
    def predict(x):
        return model(x).relu().sum()

    x = jt.ones(4, 8)
    with jt.no_grad():
        predict(x)
        with profile() as prof:
            for _ in range(5):
                predict(x)
    calls = {e.key: e for e in prof.key_averages() if e.kind == "compiled_call"}
    assert list(calls) == ["compiled: predict"] and calls["compiled: predict"].count == 5
    kernels = [e for e in prof.key_averages() if e.kind == "kernel"]
    assert kernels and all(e.count == 5 for e in kernels)
    # ops inside the call ran as the compiled graph's steps, not through eager dispatch
    assert not [e for e in prof.events() if e.kind == "cpu_op"]
    predict(x)  # with grad: a forward graph, whose backward runs at .backward()
    with profile() as prof:
        predict(x).backward()
    calls = [e.name for e in prof.events() if e.kind == "compiled_call"]
    assert calls == ["compiled: predict (forward)", "compiled: predict (backward)"]


def test_a_kernel_split_across_threads_shows_each_threads_chunk():
    # The forking thread takes back a chunk no worker has claimed by the time its own is done (a loaded
    # machine), and runs every chunk itself where the team is busy ("inline"): each run's chunks must name the
    # threads that ran them, and some run (of a bounded number) must show the worker's. On CI's two cores shared
    # with another test process, a worker woken for a 0.5 ms chunk was never placed in 50 runs (CI of stop 34):
    # chunks of several milliseconds leave the scheduler a timeslice to place it in, and runs are bounded by time.
    before = jt.get_num_threads()
    jt.set_num_threads(2)
    try:
        f = jt.compile(lambda a: (a * 2 + 1).exp())
        x = jt.ones(1 << 23)
        f(x)
        (kernel,) = f.lower(x).executable.kernels
        assert kernel.parallel
        seen_worker = False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            counted = threads.counters["taken back"] + threads.counters["inline"]
            with profile() as prof:
                f(x)
            taken = threads.counters["taken back"] + threads.counters["inline"] - counted
            (span,) = [e for e in prof.events() if e.kind == "kernel"]
            chunks = [e for e in prof.events() if e.kind == "kernel_chunk"]
            assert span.name == kernel.name and {c.name for c in chunks} == {kernel.name}
            assert len(chunks) == 2 and span.thread in {c.thread for c in chunks}
            assert len({c.thread for c in chunks}) == (1 if taken else 2)
            assert sorted(c.args["outer"] for c in chunks)[0][0] == 0
            assert all(span.start_us <= c.start_us and c.end_us <= span.end_us for c in chunks)
            # chunks are parts of the kernel's span, not calls of their own
            assert [e.count for e in prof.key_averages() if e.key == kernel.name] == [1]
            if not taken:
                seen_worker = True
                break
    finally:
        jt.set_num_threads(before)
    assert seen_worker


def test_ops_traced_inside_a_profile_are_apart_from_ops_that_ran():
    f = jt.compile(lambda a: (a * 2).exp())
    x = jt.ones(3)
    with profile() as prof:
        f(x)  # traced and compiled here, then run
        x * 2
    kinds = {(e.name, e.kind) for e in prof.events() if e.name in ("aten::mul", "aten::exp")}
    assert kinds == {("aten::mul", "traced_op"), ("aten::exp", "traced_op"), ("aten::mul", "cpu_op")}
    assert [e.count for e in prof.key_averages() if e.key == "aten::mul" and e.kind == "cpu_op"] == [1]


def test_a_profile_changes_no_result():
    def run(profiled):
        jt.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
        step = jt.compile(classifier_step(model, jt.optim.Adam(model.parameters(), lr=0.01)))
        x, y = jt.randn(5, 6), jt.randint(0, 3, (5,))
        losses = []
        for i in range(4):
            if profiled and i >= 2:
                with profile(record_shapes=True, profile_memory=True, with_stack=True):
                    losses.append(step(x, y).item())
                    model(x).sum().backward()  # eager, with autograd
            else:
                losses.append(step(x, y).item())
                model(x).sum().backward()
        return losses, [p.detach().numpy().copy() for p in model.parameters()]
    plain, profiled = run(False), run(True)
    assert plain[0] == profiled[0]
    for a, b in zip(plain[1], profiled[1]):
        assert (a == b).all()
