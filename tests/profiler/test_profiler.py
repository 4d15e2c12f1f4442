"""jitorch.profiler against torch.profiler: the trace, the averages, the schedule, and what each layer reports."""

import json
import os
import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch import nn
from jitorch.ops import registry
from jitorch.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule
from jitorch.runtime import profiling


def spans(prof, kind=None):
    return [e for e in prof.events() if kind is None or e.kind == kind]


def test_the_chrome_trace_is_valid_and_written_atomically(tmp_path):
    x = jt.ones(4, 3)
    with profile(record_shapes=True, profile_memory=True) as prof:
        (x * 2).sum()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    assert os.listdir(tmp_path) == ["trace.json"]  # no temporary file left beside it
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert {e["ph"] for e in events} == {"X", "i", "C", "M"}
    for e in events:
        assert isinstance(e["name"], str) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] in ("X", "i", "C"):
            assert isinstance(e["ts"], float)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["args"], dict)
    names = [e["name"] for e in events if e["ph"] == "X"]
    assert names == ["aten::mul", "aten::sum"]
    assert {e["args"]["name"] for e in events if e["name"] == "thread_name"} == {"MainThread"}


def test_eager_ops_appear_with_their_input_shapes():
    x, y = jt.ones(2, 3), jt.ones(3)
    with profile(record_shapes=True) as prof:
        x + y
        x.matmul(jt.ones(3, 5))
    ops = [(e.name, e.input_shapes) for e in spans(prof, "cpu_op")]
    assert ("aten::add", [[2, 3], [3], []]) in ops
    assert ("aten::matmul", [[2, 3], [3, 5]]) in ops
    with profile() as prof:
        x + y
    assert [e.input_shapes for e in spans(prof, "cpu_op")] == [[]]  # shapes only when asked for


def test_key_averages_count_the_calls_made():
    x = jt.ones(5)
    with profile() as prof:
        for _ in range(7):
            x + x
        for _ in range(3):
            x.exp()
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::add"].count == 7 and averages["aten::exp"].count == 3
    assert averages["aten::add"].kind == "cpu_op"
    add = averages["aten::add"]
    assert add.cpu_time == pytest.approx(add.cpu_time_total / 7)
    by_shape = prof.key_averages(group_by_input_shape=True)
    assert sum(e.count for e in by_shape if e.key == "aten::add") == 7


def test_nothing_is_recorded_outside_the_context():
    x = jt.ones(3)
    x + x
    hooks = list(registry.DISPATCH_HOOKS)
    with profile() as prof:
        x.exp()
    x * x
    assert [e.name for e in prof.events()] == ["aten::exp"]
    assert profiling.RECORDER is None and registry.DISPATCH_HOOKS == hooks
    with pytest.raises(ValueError):
        with profile():
            raise ValueError("inside")
    assert profiling.RECORDER is None and registry.DISPATCH_HOOKS == hooks


def test_one_profile_records_at_a_time():
    with profile():
        with pytest.raises(RuntimeError, match="already enabled"):
            with profile():
                pass
    assert profiling.RECORDER is None


def test_record_function_nests_as_a_context_manager_and_a_decorator():
    @record_function("decorated")
    def f(x):
        return x.exp()

    x = jt.ones(3)
    f(x)  # outside a profile: nothing to record, nothing fails
    with profile() as prof:
        with record_function("outer"):
            with record_function("inner"):
                f(x)
    by_name = {e.name: e for e in prof.events()}
    assert by_name["inner"].cpu_parent is by_name["outer"]
    assert by_name["decorated"].cpu_parent is by_name["inner"]
    assert by_name["aten::exp"].cpu_parent is by_name["decorated"]
    assert by_name["outer"].kind == "user_annotation"
    outer = by_name["outer"]
    assert outer.self_cpu_time_total == pytest.approx(outer.cpu_time_total - by_name["inner"].cpu_time_total)


def _torch_backward_names():
    a = torch.ones(3, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (a * 2).sum().backward()
    return {e.name for e in prof.events() if e.name.startswith("autograd::engine::evaluate_function: ")}


def test_backward_nodes_appear_under_torch_names():
    a = jt.ones(3, requires_grad=True)
    with profile() as prof:
        (a * 2).sum().backward()
    names = {e.name for e in spans(prof, "backward")}
    # MulBackward0, SumBackward0 and the leaf's torch::autograd::AccumulateGrad, as torch's trace names them
    assert names == _torch_backward_names() and len(names) == 3
    # the leaf takes the gradient as its .grad without a copy, as it does without a profile
    (accumulate,) = [e for e in spans(prof, "backward") if e.name.endswith("AccumulateGrad")]
    assert accumulate.cpu_children == []


def test_memory_events_only_with_profile_memory(tmp_path):
    x = jt.ones(1000)
    with profile(profile_memory=True) as prof:
        y = x * 2
        del y
    trace = tmp_path / "t.json"
    prof.export_chrome_trace(str(trace))
    memory = [e for e in json.loads(trace.read_text())["traceEvents"] if e["name"] == "[memory]"]
    assert [e["args"]["Bytes"] for e in memory] == [4000, -4000]
    assert memory[-1]["args"]["Total Allocated"] == 0
    (mul,) = [e for e in prof.key_averages() if e.key == "aten::mul"]
    assert mul.self_cpu_memory_usage == 4000
    assert "CPU Mem" in prof.key_averages().table()
    with profile() as prof:
        x * 2
    prof.export_chrome_trace(str(trace))
    assert not [e for e in json.loads(trace.read_text())["traceEvents"] if e["name"] == "[memory]"]
    assert "CPU Mem" not in prof.key_averages().table()


def test_the_table_reads_as_torchs():
    x = jt.ones(3)
    with profile() as prof:
        for _ in range(4):
            x + x
        x.exp()
    table = prof.key_averages().table(sort_by="count", row_limit=1)
    lines = table.splitlines()
    assert lines[1].split() == ["Name", "Self", "CPU", "%", "Self", "CPU", "CPU", "total", "%", "CPU", "total", "CPU",
                                "time", "avg", "#", "of", "Calls"]
    assert lines[3].split()[0] == "aten::add" and lines[3].split()[-1] == "4" and len(lines) == 6
    assert lines[-1].startswith("Self CPU time total: ") and table.endswith("\n")
    with pytest.raises(AttributeError):
        prof.key_averages().table(sort_by="no_such_column")


def test_with_stack_records_the_callers_line():
    x = jt.ones(3)
    with profile(with_stack=True) as prof:
        x.exp()
    (exp,) = spans(prof, "cpu_op")
    assert __file__ in exp.stack[0] and "test_with_stack_records_the_callers_line" in exp.stack[0]


SCHEDULES = [dict(wait=1, warmup=1, active=2), dict(wait=0, warmup=2, active=1, repeat=2),
             dict(wait=2, warmup=1, active=3, repeat=1, skip_first=3), dict(wait=3, warmup=1, active=1, skip_first=2,
                                                                             skip_first_wait=1)]


@pytest.mark.parametrize("args", SCHEDULES)
def test_schedule_is_torchs_function_of_the_step(args):
    ours, theirs = schedule(**args), torch.profiler.schedule(**args)
    assert [ours(s).name for s in range(40)] == [theirs(s).name for s in range(40)]


def test_schedule_rejects_what_torch_rejects():
    for bad in (dict(wait=-1, warmup=1, active=1), dict(wait=0, warmup=1, active=0)):
        with pytest.raises(AssertionError):
            schedule(**bad)
        with pytest.raises(AssertionError):
            torch.profiler.schedule(**bad)
    with pytest.warns(UserWarning, match="warmup"):
        schedule(wait=1, warmup=0, active=1)


def test_a_scheduled_profile_records_the_steps_torch_records():
    def run(lib, make):
        ready = []

        def on_ready(p):
            ready.append((p.step_num, sum(e.name == "aten::add" for e in p.events())))
        x = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with lib.profiler.profile(activities=[lib.profiler.ProfilerActivity.CPU], on_trace_ready=on_ready,
                                      schedule=lib.profiler.schedule(wait=1, warmup=1, active=2, repeat=2)) as p:
                for _ in range(9):
                    x + x
                    p.step()
        return ready
    ours = run(jt, lambda: jt.ones(2))
    assert ours == run(torch, lambda: torch.ones(2))
    assert ours == [(4, 2), (8, 2)]  # the trace is ready as step 4 begins, with steps 2 and 3 recorded


def test_a_scheduled_profile_marks_its_recorded_steps():
    x = jt.ones(2)
    with profile(schedule=schedule(wait=1, warmup=1, active=2)) as p:
        for _ in range(4):
            x + x
            p.step()
    steps = [e for e in p.events() if e.name.startswith("ProfilerStep#")]
    assert [e.name for e in steps] == ["ProfilerStep#2", "ProfilerStep#3"]
    assert all(e.kind == "user_annotation" and [c.name for c in e.cpu_children] == ["aten::add"] for e in steps)


def test_tensorboard_trace_handler_writes_a_trace_per_cycle(tmp_path):
    x = jt.ones(2)
    with profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=2),
                 on_trace_ready=jt.profiler.tensorboard_trace_handler(str(tmp_path), "w")) as p:
        for _ in range(5):
            x + x
            p.step()
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 2 and all(f.startswith("w.") and f.endswith(".pt.trace.json") for f in files)
    for f in files:
        assert "aten::add" in {e["name"] for e in json.loads((tmp_path / f).read_text())["traceEvents"]}


def test_activities_are_checked():
    with pytest.raises(ValueError):
        profile(activities=["cpu"])
    if not jt.cuda.is_available():
        with pytest.warns(UserWarning, match="CUDA is not available"):
            p = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        assert p.activities == {ProfilerActivity.CPU}
    assert ProfilerAction.RECORD_AND_SAVE.name == "RECORD_AND_SAVE"
