"""A recording's events as torch.autograd.profiler's: `FunctionEvent`, their averages, the table, the trace.

Times are microseconds (floats) from the start of the process's clock, as torch's are. A span's self
time is its total less its children's (spans nested inside it on its thread); a memory event counts
toward the innermost span open on its thread when it happened.
"""

from __future__ import annotations

import json
import os

from ..runtime.files import atomic_write

# Kinds that are not calls of their own in the averages, nor children of a span: a kernel's chunks are
# parts of its span (whose self time covers them).
_NOT_AVERAGED = ("kernel_chunk",)


class FunctionEvent:
    """One span: ``name``, ``kind`` (see `jitorch.profiler.recorder`), ``thread``, ``start_us``,
    ``end_us``, ``input_shapes`` (with ``record_shapes``), ``stack`` (with ``with_stack``), ``args``
    (what the trace shows), ``cpu_parent``/``cpu_children`` (nesting on its thread) and the memory it
    allocated (``cpu_memory_usage`` with its children's, ``self_cpu_memory_usage`` without)."""

    def __init__(self, id, name, kind, thread, start_us, end_us, args):
        self.id = id
        self.name = name
        self.kind = kind
        self.thread = thread
        self.start_us = start_us
        self.end_us = end_us
        self.args = args
        self.input_shapes = args.get("Input Dims", [])
        self.stack = args.get("Call stack", [])
        self.cpu_parent = None
        self.cpu_children = []
        self.self_cpu_memory_usage = 0
        self.cpu_memory_usage = 0
        self.count = 1

    @property
    def key(self):
        return self.name

    @property
    def device_type(self):
        """"cuda" for a kernel timed on a GPU (or emulated for one), else "cpu"."""
        return "cuda" if str(self.args.get("device", "")).startswith("cuda") else "cpu"

    @property
    def cpu_time_total(self):
        return self.end_us - self.start_us

    @property
    def self_cpu_time_total(self):
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} kind={self.kind} thread={self.thread} "
                f"cpu_time_total={self.cpu_time_total:.3f}us>")


class FunctionEventAvg:
    """The calls of one key (a name, or a name and input shapes) summed: ``count``, ``cpu_time_total``,
    ``self_cpu_time_total``, ``cpu_time`` (the mean), memory, and ``kind`` ("kernel" for a compiled kernel,
    "cpu_op" for an op, ...: see `jitorch.profiler.recorder`)."""

    def __init__(self, key, kind, input_shapes=None):
        self.key = key
        self.kind = kind
        self.input_shapes = input_shapes
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = 0
        self.self_cpu_memory_usage = 0

    def add(self, event):
        self.count += 1
        self.cpu_time_total += event.cpu_time_total
        self.self_cpu_time_total += event.self_cpu_time_total
        self.cpu_memory_usage += event.cpu_memory_usage
        self.self_cpu_memory_usage += event.self_cpu_memory_usage

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} kind={self.kind} count={self.count} "
                f"cpu_time_total={self.cpu_time_total:.3f}us self_cpu_time_total={self.self_cpu_time_total:.3f}us>")


class EventList(list):
    """A list of events (`FunctionEvent`, or `FunctionEventAvg` from `key_averages`) with torch's `table`."""

    def __init__(self, events=(), profile_memory=False):
        super().__init__(events)
        self.profile_memory = profile_memory

    def table(self, sort_by=None, row_limit=100, header=None, top_level_events_only=False):
        """The events as torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg,
        (CPU Mem, Self CPU Mem with ``profile_memory``), # of Calls (and Input Shapes when averaged by
        them), sorted by the attribute ``sort_by`` (descending), at most ``row_limit`` rows (-1: all)."""
        return _table(self, sort_by, row_limit, header, top_level_events_only, self.profile_memory)

    def key_averages(self, group_by_input_shape=False):
        """Per key (name, or name and input shapes): the calls' totals (`FunctionEventAvg`), in first-seen order."""
        groups = {}
        for e in self:
            if e.kind in _NOT_AVERAGED:
                continue
            shapes = str(e.input_shapes) if group_by_input_shape else None
            avg = groups.get((e.name, e.kind, shapes))
            if avg is None:
                avg = groups[(e.name, e.kind, shapes)] = FunctionEventAvg(
                    e.name, e.kind, e.input_shapes if group_by_input_shape else None)
            avg.add(e)
        averages = EventList(groups.values(), self.profile_memory)
        averages.grouped_by_input_shape = group_by_input_shape
        return averages


def build_events(recorder):
    """The recorder's spans as `FunctionEvent`s, nested per thread, with its memory events attributed;
    the memory events themselves are returned too, as (time_us, thread, bytes, address, device)."""
    events = [FunctionEvent(i, name, kind, thread, start / 1e3, end / 1e3, args)
              for i, (name, kind, thread, start, end, args) in enumerate(recorder.spans)]
    memory = [(t / 1e3, thread, nbytes, address, device) for t, thread, nbytes, address, device in recorder.memory]
    by_thread = {}
    for e in events:
        by_thread.setdefault(e.thread, []).append(e)
    mem_by_thread = {}
    for m in memory:
        mem_by_thread.setdefault(m[1], []).append(m)
    for thread, spans in by_thread.items():
        # a parent starts no later and ends no earlier than its children: at equal starts, the longer first
        spans.sort(key=lambda e: (e.start_us, -e.end_us))
        allocations = sorted(mem_by_thread.get(thread, ()))
        _nest([e for e in spans if e.kind not in _NOT_AVERAGED], allocations)
    events.sort(key=lambda e: (e.start_us, -e.end_us))
    return events, memory


def _nest(spans, allocations):
    """Set parents, children and memory of one thread's spans (sorted by start, longer first)."""
    stack = []
    k = 0

    def attribute_until(t):
        nonlocal k
        while k < len(allocations) and allocations[k][0] < t:
            when, _, nbytes = allocations[k][:3]
            while stack and stack[-1].end_us < when:
                stack.pop()
            if stack:
                stack[-1].self_cpu_memory_usage += nbytes
                for open_span in stack:
                    open_span.cpu_memory_usage += nbytes
            k += 1

    for e in spans:
        attribute_until(e.start_us)
        while stack and stack[-1].end_us <= e.start_us:
            stack.pop()
        if stack and e.end_us <= stack[-1].end_us:
            e.cpu_parent = stack[-1]
            stack[-1].cpu_children.append(e)
        stack.append(e)
    attribute_until(float("inf"))


def _format_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _format_memory(nbytes):
    """torch's memory format: b, Kb, Mb, Gb (signed)."""
    for unit, size in (("Gb", 1024 ** 3), ("Mb", 1024 ** 2), ("Kb", 1024)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} b"


def _table(events, sort_by, row_limit, header, top_level_only, profile_memory):
    if top_level_only:
        events = [e for e in events if getattr(e, "cpu_parent", None) is None]
    rows = list(events)
    if sort_by is not None:
        if not rows or not hasattr(rows[0], sort_by):
            if rows:
                raise AttributeError(f"table: events have no attribute {sort_by!r} to sort by")
        rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
    if row_limit is not None and row_limit >= 0:
        rows = rows[:row_limit]
    self_total = sum(e.self_cpu_time_total for e in events)
    shapes = getattr(events, "grouped_by_input_shape", False)
    name_width = max([len("Name")] + [len(str(e.key)) for e in rows])
    name_width = min(name_width, 55)
    columns = [("Name", name_width)] + [(c, 12) for c in ("Self CPU %", "Self CPU", "CPU total %", "CPU total",
                                                          "CPU time avg")]
    if profile_memory:
        columns += [("CPU Mem", 12), ("Self CPU Mem", 12)]
    columns.append(("# of Calls", 12))
    if shapes:
        columns.append(("Input Shapes", 40))
    line = "  ".join("-" * w for _, w in columns) + "  "
    out = []
    if header is not None:
        out += ["=" * len(line), header]
    out += [line, "  ".join(title.rjust(w) for title, w in columns) + "  ", line]

    def percent(x):
        return f"{100 * x / self_total:.2f}%" if self_total else "0.00%"

    for e in rows:
        key = str(e.key)
        if len(key) > name_width:
            key = key[:name_width - 3] + "..."
        cells = [key.rjust(name_width), percent(e.self_cpu_time_total), _format_time(e.self_cpu_time_total),
                 percent(e.cpu_time_total), _format_time(e.cpu_time_total),
                 _format_time(e.cpu_time_total / max(e.count, 1))]
        if profile_memory:
            cells += [_format_memory(e.cpu_memory_usage), _format_memory(e.self_cpu_memory_usage)]
        cells.append(str(e.count))
        widths = [w for _, w in columns]
        text = "  ".join(c.rjust(w) for c, w in zip(cells, widths))
        if shapes:
            text += "  " + str(e.input_shapes)
        out.append(text + ("" if shapes else "  "))
    out += [line, f"Self CPU time total: {_format_time(self_total)}", ""]
    return "\n".join(out)


def chrome_trace(events, memory, thread_names):
    """The Chrome trace format's object (what Perfetto and chrome://tracing open): a complete event ("X")
    per span, an instant event ("i", named "[memory]", as torch's) per allocation and free with a counter
    ("C") of the bytes allocated per device, and the names of processes and threads ("M")."""
    pid = os.getpid()
    trace = []
    threads = set()
    for e in events:
        if isinstance(e.thread, tuple):  # a GPU's stream: its process is the device, as in torch's traces
            _, device, stream = e.thread
            where = {"pid": device, "tid": stream}
        else:
            where = {"pid": pid, "tid": e.thread}
        threads.add((where["pid"], where["tid"], e.thread))
        trace.append({"ph": "X", "cat": e.kind, "name": e.name, **where, "ts": e.start_us,
                      "dur": e.end_us - e.start_us, "args": e.args})
    totals = {}
    for when, thread, nbytes, address, device in sorted(memory, key=lambda m: m[0]):
        totals[device] = totals.get(device, 0) + nbytes
        threads.add((pid, thread, thread))
        trace.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": pid, "tid": thread,
                      "ts": when, "args": {"Device Type": device, "Addr": address, "Bytes": nbytes,
                                           "Total Allocated": totals[device]}})
        trace.append({"ph": "C", "name": f"Memory allocated ({device})", "pid": pid, "tid": thread, "ts": when,
                      "args": {"bytes": totals[device]}})
    trace.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"jitorch {pid}"}})
    for p, tid, thread in sorted(threads, key=str):
        if isinstance(thread, tuple):
            name = f"stream {thread[2]:#x}"
            trace.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": f"GPU {p}"}})
        else:
            name = thread_names.get(thread, f"thread {thread}")
        trace.append({"ph": "M", "name": "thread_name", "pid": p, "tid": tid, "args": {"name": name}})
    return {"traceEvents": trace, "displayTimeUnit": "ms", "traceName": "jitorch.profiler"}


def write_chrome_trace(path, events, memory, thread_names):
    """Write the trace as JSON to ``path``, atomically (a reader never sees half a file)."""
    with atomic_write(path, "w") as f:
        json.dump(chrome_trace(events, memory, thread_names), f)
