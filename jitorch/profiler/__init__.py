"""`jitorch.profiler`, following `torch.profiler`: what ran, for how long, on which thread.

    with jitorch.profiler.profile(record_shapes=True, profile_memory=True) as prof:
        step(x, y)
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")       # open in https://ui.perfetto.dev or chrome://tracing

A profile records eager ops (``aten::<op>``, with their input shapes under ``record_shapes``), the calls of
compiled graphs and, inside each, every kernel (named as `jitorch.explain` prints it, on the thread that
ran it: a CPU kernel that splits its loop also shows each thread's chunk), the eager steps (``external``
for the BLAS products written into the arena), autograd's backward nodes (``autograd::engine::
evaluate_function: MulBackward0``), `record_function` ranges and, under ``profile_memory``, every
allocation and free of tensor memory. Kernels of compiled CUDA graphs are timed with CUDA events on their
stream. Eager ops on CUDA show as ops (the kernels they launch are not separate spans).

How it hooks in: the profiler installs a recorder in `jitorch.runtime.profiling` while it records; the ops
registry, the autograd engine, storage allocation and the compiled graphs' generated calls check that slot
(one attribute load and a None test), so nothing is paid when no profile records. While one does, the eager
fast paths step aside so that every op is seen, and compiled graphs run a second generated call that
reports its steps. The ops a tracer records while `jitorch.compile` traces a function (which compute
nothing) are spans of kind "traced_op", apart from the "cpu_op" spans of ops that ran.

Per-kernel times: `profile.kernel_times` gives {kernel name: total microseconds} (``function=``: one compiled
function's, named as its HTML report names them); `profile.key_averages` entries with ``kind == "kernel"``
are the same, with counts.
"""

from __future__ import annotations

import enum
import functools
import os
import socket
import time
import warnings

from .. import cuda as _cuda
from .events import EventList, FunctionEvent, FunctionEventAvg, build_events, write_chrome_trace
from .recorder import Recorder
from ..runtime import profiling as _profiling

__all__ = ["ProfilerActivity", "ProfilerAction", "profile", "schedule", "record_function",
           "tensorboard_trace_handler", "EventList", "FunctionEvent", "FunctionEventAvg"]


class ProfilerActivity(enum.Enum):
    """What a profile records: CPU (ops, compiled calls, kernels on the host) and CUDA (kernels on a GPU)."""

    CPU = 0
    CUDA = 2


class ProfilerAction(enum.Enum):
    """What a `schedule` asks of a profile at a step."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """torch's schedule: skip ``skip_first`` steps, then cycles of ``wait`` idle steps, ``warmup`` steps and
    ``active`` recorded steps (the last of a cycle RECORD_AND_SAVE: the trace is ready then), ``repeat``
    cycles (0: until the profile ends); ``skip_first_wait`` skips the first cycle's wait. Returns
    ``fn(step) -> ProfilerAction``."""
    def schedule_fn(step):
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait != 0:
            step += wait
        num_steps = wait + warmup + active
        if repeat > 0 and step / num_steps >= repeat:
            return ProfilerAction.NONE
        mod_step = step % num_steps
        if mod_step < wait:
            return ProfilerAction.NONE
        if mod_step < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if mod_step < num_steps - 1 else ProfilerAction.RECORD_AND_SAVE

    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), warmup={warmup} (need >= 0), "
            f"active={active} (need > 0), repeat={repeat} (need >= 0), skip_first={skip_first} (need >= 0).")
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results", stacklevel=2)
    return schedule_fn


def _record_always(_step):
    return ProfilerAction.RECORD


class record_function:
    """A named range in the profile (kind "user_annotation"), as a context manager or a decorator; outside a
    recording profile it records nothing. ``args``: a string shown with it in the trace."""

    def __init__(self, name, args=None):
        self.name = name
        self.args = args
        self._start = None

    def __enter__(self):
        self._start = time.perf_counter_ns() if _profiling.RECORDER is not None else None
        return self

    def __exit__(self, *exc):
        recorder = _profiling.RECORDER
        if self._start is not None and recorder is not None:
            recorder.span(self.name, "user_annotation", self._start, {} if self.args is None else {"args": self.args})
        self._start = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with record_function(self.name, self.args):
                return fn(*args, **kwargs)
        return wrapped


class profile:
    """torch.profiler.profile: record while the context is open (or between `start` and `stop`).

    ``activities``: ProfilerActivity.CPU and/or CUDA (default: both where CUDA is available);
    ``schedule``: a function of the step number (`schedule`) saying which steps to record, advanced by
    `step`; ``on_trace_ready(prof)``: called when a scheduled recording ends; ``record_shapes``: ops'
    input shapes; ``profile_memory``: allocations and frees of tensor memory; ``with_stack``: each op's
    Python stack outside jitorch. The latest recording's events are `events`, `key_averages`,
    `kernel_times` and `export_chrome_trace`."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False):
        if activities is None:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if _cuda.is_available() else [])
        activities = set(activities)
        unknown = [a for a in activities if not isinstance(a, ProfilerActivity)]
        if unknown:
            raise ValueError(f"activities must be ProfilerActivity values, got {unknown!r}")
        if ProfilerActivity.CUDA in activities and not _cuda.is_available():
            warnings.warn("CUDA is not available, disabling CUDA profiling", stacklevel=2)
            activities.discard(ProfilerActivity.CUDA)
        self.activities = activities
        self.schedule = schedule if schedule is not None else _record_always
        self.record_steps = schedule is not None  # each step a "ProfilerStep#N" range, as torch's
        self.on_trace_ready = on_trace_ready
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.step_num = 0
        self.current_action = self.schedule(0)
        self.step_rec_fn = None
        self._recorder = None
        self._events = None  # (events, memory, thread names) of the latest recording
        self._actions = {
            (ProfilerAction.NONE, ProfilerAction.WARMUP): [],
            (ProfilerAction.NONE, ProfilerAction.RECORD): [self._start_trace],
            (ProfilerAction.NONE, ProfilerAction.RECORD_AND_SAVE): [self._start_trace],
            (ProfilerAction.WARMUP, ProfilerAction.NONE): [
                functools.partial(warnings.warn, "Incorrect schedule: WARMUP followed by NONE")],
            (ProfilerAction.WARMUP, ProfilerAction.RECORD): [self._start_trace],
            (ProfilerAction.WARMUP, ProfilerAction.RECORD_AND_SAVE): [self._start_trace],
            (ProfilerAction.RECORD, ProfilerAction.NONE): [
                functools.partial(warnings.warn, "Incorrect schedule: RECORD followed by NONE"), self._stop_trace],
            (ProfilerAction.RECORD, ProfilerAction.WARMUP): [
                functools.partial(warnings.warn, "Incorrect schedule: RECORD followed by WARMUP"), self._stop_trace],
            (ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE): [self._stop_trace, self._trace_ready],
            (ProfilerAction.RECORD_AND_SAVE, ProfilerAction.WARMUP): [self._stop_trace, self._trace_ready],
            (ProfilerAction.RECORD_AND_SAVE, ProfilerAction.RECORD): [self._stop_trace, self._trace_ready,
                                                                      self._start_trace],
            (ProfilerAction.RECORD_AND_SAVE, ProfilerAction.RECORD_AND_SAVE): [self._stop_trace, self._trace_ready,
                                                                               self._start_trace],
            (ProfilerAction.RECORD, None): [self._stop_trace, self._trace_ready],
            (ProfilerAction.RECORD_AND_SAVE, None): [self._stop_trace, self._trace_ready],
        }

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        """Begin: record now if the schedule's step 0 says so."""
        self._transit(ProfilerAction.NONE, self.current_action)
        self._enter_step()

    def stop(self):
        """End: a recording in progress stops, and its trace is ready (``on_trace_ready``)."""
        self._exit_step()
        self._transit(self.current_action, None)

    def step(self):
        """The next step begins: the schedule decides whether it is recorded."""
        self._exit_step()
        previous = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        self._transit(previous, self.current_action)
        self._enter_step()

    def _enter_step(self):
        if self.record_steps:
            self.step_rec_fn = record_function(f"ProfilerStep#{self.step_num}")
            self.step_rec_fn.__enter__()

    def _exit_step(self):
        if self.step_rec_fn is not None:
            self.step_rec_fn.__exit__(None, None, None)
            self.step_rec_fn = None

    def _transit(self, previous, current):
        for action in self._actions.get((previous, current), ()):
            action()

    def _start_trace(self):
        self._recorder = Recorder(self.record_shapes, self.profile_memory, self.with_stack,
                                  ProfilerActivity.CUDA in self.activities)
        self._recorder.install()

    def _stop_trace(self):
        recorder, self._recorder = self._recorder, None
        recorder.uninstall()
        events, memory = build_events(recorder)
        self._events = (events, memory, recorder.thread_names)

    def _trace_ready(self):
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def _recorded(self):
        if self._events is None:
            raise RuntimeError("Profiler must be initialized before exporting chrome trace: no recording has "
                               "finished yet")
        return self._events

    def events(self):
        """The latest recording's spans (`FunctionEvent`), in start order."""
        return EventList(self._recorded()[0], self.profile_memory)

    def key_averages(self, group_by_input_shape=False):
        """The latest recording's spans summed per name (and input shapes with ``group_by_input_shape``):
        `FunctionEventAvg` entries, each with ``key``, ``kind``, ``count``, ``cpu_time_total``,
        ``self_cpu_time_total`` and memory; ``.table(sort_by=..., row_limit=...)`` prints them."""
        return self.events().key_averages(group_by_input_shape)

    def kernel_times(self, function=None):
        """{kernel name (as `jitorch.explain` prints it): total microseconds over the recording} for the
        kernels of compiled graphs: host time on the CPU, device time (CUDA events) on a GPU.

        ``function`` (a compiled function's name) keeps only the kernels of that function's graphs, named
        as its HTML report names them (`jitorch.explain`'s ``profile=``): bare for the graph of a call
        without grad, ``forward/<name>`` and ``backward/<name>`` for the two graphs of a call with grad,
        whose kernel names repeat each other's."""
        if function is None:
            return {e.key: e.cpu_time_total for e in self.key_averages() if e.kind == "kernel"}
        prefixes = {function: "", f"{function} (forward)": "forward/", f"{function} (backward)": "backward/"}
        times = {}
        for e in self.events():
            graph = e.args.get("graph")
            if e.kind == "kernel" and graph in prefixes:
                key = prefixes[graph] + e.name
                times[key] = times.get(key, 0.0) + e.cpu_time_total
        return times

    def export_chrome_trace(self, path):
        """Write the latest recording as a Chrome trace (JSON) to ``path``, atomically; it opens in
        Perfetto (ui.perfetto.dev) and chrome://tracing."""
        events, memory, threads = self._recorded()
        write_chrome_trace(path, events, memory, threads)


def tensorboard_trace_handler(dir_name, worker_name=None):
    """An ``on_trace_ready`` that writes each trace into ``dir_name`` as
    ``{worker_name}.{time_ns}.pt.trace.json`` (worker_name: host_pid by default), as torch's does."""
    def handler_fn(prof):
        nonlocal worker_name
        try:
            os.makedirs(dir_name, exist_ok=True)
        except OSError as e:
            raise RuntimeError("Can't create directory: " + str(dir_name)) from e
        if not worker_name:
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
        prof.export_chrome_trace(os.path.join(dir_name, f"{worker_name}.{time.time_ns()}.pt.trace.json"))
    return handler_fn
