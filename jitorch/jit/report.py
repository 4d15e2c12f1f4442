"""`jitorch.explain`'s HTML report: one self-contained file (inline CSS, SVG and a few lines of
script; nothing fetched) showing what compiling a function did.

It draws the traced graph before and after the passes (and, for calls that need grad, the forward
and backward graphs cut from the joint trace) as layered SVG dataflow graphs (`ir.layout`), each
kernel's nodes in its own colour; lists each kernel's ops, LLVM IR and assembly (PTX on CUDA) with
its share of the kernel time where the caller measured it (``kernel_times``); and prints the guards,
the cache entries, the IR texts and the generated call source.
"""

from __future__ import annotations

import html
import math

from ..ir.layout import layered_layout
from ..ir.printer import op_counts
from ..runtime.files import atomic_write
from .compile import LoweredKernel

BOX_HEIGHT = 26
CHAR_WIDTH = 6.9     # of the 11px monospace labels
MAX_LABEL = 18       # longer op names are cut (the tooltip has the whole line)
EXTERNAL = "external"  # an eager step's reason for ops run by a library (matmul: BLAS)


def _e(text):
    return html.escape(str(text), quote=True)


def _colour(k):
    """Fill and stroke of kernel ``k``: hues a golden angle apart, so neighbouring kernels differ."""
    hue = (k * 137.508 + 200) % 360
    return f"hsl({hue:.0f}, 75%, 82%)", f"hsl({hue:.0f}, 55%, 38%)"


class GraphView:
    """One graph as the report shows it: a title, its text, and per node the step that runs it
    (None before the passes, where nothing is scheduled yet)."""

    def __init__(self, key, title, graph, steps=None, unavailable=None):
        self.key = key
        self.title = title
        self.graph = graph
        self.steps = list(steps) if steps is not None else None
        self.unavailable = unavailable  # why the graph is not drawn
        self.text = str(graph) if graph is not None else ""

    def step_of(self):
        """id(node) -> (step index, step) for scheduled graphs."""
        if self.steps is None:
            return {}
        return {id(node): (i, step) for i, step in enumerate(self.steps) for node in step.nodes}

    def kernels(self):
        """(qualified name, step index, step) of each kernel step, in launch order."""
        return [(self.qualified(st.kernel.name), i, st) for i, st in enumerate(self.steps or ())
                if hasattr(st, "kernel")]

    def qualified(self, kernel_name):
        """The name ``kernel_times`` uses for a kernel of this graph: bare for the compiled graph,
        ``forward/...`` and ``backward/...`` for the graphs of a call with grad (their kernels'
        names repeat the compiled graph's)."""
        return kernel_name if self.key == "after" else f"{self.key}/{kernel_name}"


def node_key(node):
    """The id a drawn node carries (``data-id``): its output values' names."""
    return ",".join(o.name for o in node.outputs)


def graph_svg(view):
    """The SVG of ``view``'s graph: a ``<g class="node ...">`` per input, constant, node and the output,
    edges as paths, kernels' nodes in their colours."""
    g = view.graph
    lines = str(g).splitlines()
    first_node_line = 1 + len(g.constants)
    step_of = view.step_of()
    index = {id(node): i for i, node in enumerate(g.nodes)}
    vertices, labels, titles, kinds = [], {}, {}, {}
    for v in g.inputs:
        key = ("input", v.name)
        vertices.append(key)
        labels[key], titles[key], kinds[key] = v.name, f"input %{v.name} : {v.type}", "input"
    for name, v in g.constants.items():
        key = ("constant", v.name)
        vertices.append(key)
        labels[key], titles[key], kinds[key] = name, f"constant %{v.name} : {v.type} = {name!r}", "constant"
    for i, node in enumerate(g.nodes):
        vertices.append(i)
        labels[i], titles[i], kinds[i] = node.op.name, lines[first_node_line + i].strip(), "op"

    def source(value):
        if value.node is not None:
            return index[id(value.node)]
        return ("input", value.name) if value in g.inputs else ("constant", value.name)

    edges = set()
    for i, node in enumerate(g.nodes):
        edges.update((source(v), i) for v in node.input_values())
    returned = g.output_values() + [v for _, v in g.mutations]
    if returned:
        vertices.append("output")
        labels["output"], titles["output"], kinds["output"] = "output", lines[-1].strip(), "output"
        edges.update((source(v), "output") for v in returned)
    edges = sorted(edges, key=lambda e: (_order_key(e[0]), _order_key(e[1])))
    for key in vertices:
        if len(labels[key]) > MAX_LABEL:
            labels[key] = labels[key][:MAX_LABEL - 1] + "…"
    widths = {key: max(40.0, CHAR_WIDTH * len(labels[key]) + 14) for key in vertices}
    layout = layered_layout(vertices, edges, widths, height=BOX_HEIGHT)

    kernel_number = {i: k for k, (_, i, _) in enumerate(view.kernels())}
    top = min(vertices, key=lambda v: layout.positions[v][1])  # where the box first scrolls to
    out = [f'<svg class="graph" data-graph="{_e(view.key)}" data-focus="{layout.positions[top][0]:.0f}" '
           f'width="{layout.width:.0f}" height="{layout.height:.0f}" '
           f'viewBox="0 0 {layout.width:.0f} {layout.height:.0f}">']
    out.append(f'<defs><marker id="arrow-{_e(view.key)}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" '
               'markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#7b8794"/></marker></defs>')
    for a, b in edges:
        sa = step_of.get(id(g.nodes[a])) if isinstance(a, int) else None
        sb = step_of.get(id(g.nodes[b])) if isinstance(b, int) else None
        inside = sa is not None and sb is not None and sa[0] == sb[0] and sa[0] in kernel_number
        colour = f' style="stroke:{_colour(kernel_number[sa[0]])[1]}"' if inside else ""
        out.append(f'<path class="edge" d="{_curve(layout.routes[(a, b)])}" '
                   f'marker-end="url(#arrow-{_e(view.key)})"{colour}/>')
    for key in vertices:
        x, y = layout.positions[key]
        w = widths[key]
        kind = kinds[key]
        attrs, style, title = [f'data-kind="{kind}"'], "", titles[key]
        css = f"node {kind}"
        if kind == "op":
            node = g.nodes[key]
            attrs.append(f'data-id="{_e(node_key(node))}" data-op="{_e(node.op.name)}"')
            scheduled = step_of.get(id(node))
            if scheduled is not None:
                i, step = scheduled
                attrs.append(f'data-step="{i}"')
                if i in kernel_number:
                    fill, stroke = _colour(kernel_number[i])
                    css += " kernel"
                    style = f' style="fill:{fill};stroke:{stroke}"'
                    title += f"\nkernel {step.kernel.name} ({step.kernel.source.kind})"
                else:
                    css += " external" if step.reason == EXTERNAL else " eager"
                    title += f"\n{'external call' if step.reason == EXTERNAL else 'eager'}: {step.reason}"
        rx = 13 if kind in ("input", "output") else 4
        out.append(f'<g class="{css}" {" ".join(attrs)}><title>{_e(title)}</title>'
                   f'<rect x="{x - w / 2:.1f}" y="{y - BOX_HEIGHT / 2:.1f}" width="{w:.1f}" height="{BOX_HEIGHT}" '
                   f'rx="{rx}"{style}/><text x="{x:.1f}" y="{y + 4:.1f}">{_e(labels[key])}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def _order_key(vertex):
    return (0, vertex[0], vertex[1]) if isinstance(vertex, tuple) else (1 if isinstance(vertex, int) else 2,
                                                                          vertex, "")


def _curve(points):
    """An SVG path through ``points``: a vertical S-curve between each pair."""
    (x, y), rest = points[0], points[1:]
    d = [f"M{x:.1f},{y:.1f}"]
    for nx, ny in rest:
        mid = (y + ny) / 2
        d.append(f"C{x:.1f},{mid:.1f} {nx:.1f},{mid:.1f} {nx:.1f},{ny:.1f}")
        x, y = nx, ny
    return " ".join(d)


def check_kernel_times(kernel_times, views):
    """``kernel_times`` (qualified kernel name -> seconds) as floats, after checking that each names a
    kernel of the report and is a finite number of seconds, not negative."""
    if kernel_times is None:
        return None
    known = {name for view in views for name, _, _ in view.kernels()}
    times = {}
    for name, seconds in dict(kernel_times).items():
        if name not in known:
            raise ValueError(f"kernel_times names {name!r}, which is not a kernel of this report "
                             f"(its kernels: {', '.join(sorted(known)) or 'none'})")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0:
            raise ValueError(f"kernel_times[{name!r}] must be a finite number of seconds >= 0, got {seconds!r}")
        times[name] = float(seconds)
    return times


def render(explanation, views, kernel_times=None):
    """The report's HTML text (see the module docstring)."""
    ex = explanation
    times = check_kernel_times(kernel_times, [v for v in views if v.steps is not None])
    body = [f"<header><h1>jitorch.explain(<code>{_e(ex.name)}</code>)</h1>", _summary(ex, views), "</header>"]
    body.append('<nav>' + " ".join(f'<a href="#{k}">{t}</a>' for k, t in (
        ("graphs", "graphs"), ("kernels", "kernels"), ("guards", "guards"), ("cache", "cache"), ("ir", "IR text"),
        ("source", "call source"))) + "</nav>")
    if ex.graph is None:
        body.append(f'<section><p class="eager">Runs eagerly: {_e(ex.eager_reason)}</p></section>')
    body.append('<section id="graphs"><h2>Graphs</h2>')
    for n, view in enumerate(views):
        body.append(_graph_section(view, opened=n == len(views) - 1 if ex.split is None else view.key == "forward"))
    body.append("</section>")
    body.append('<section id="kernels"><h2>Kernels</h2>')
    scheduled = [v for v in views if v.steps is not None]
    if not scheduled:
        body.append("<p>No compiled graph: nothing was lowered.</p>")
    memo = {}
    for view in scheduled:
        body.append(_kernels_section(view, times, memo))
    body.append("</section>")
    body.append(_guards_section(ex))
    body.append(_cache_section(ex))
    body.append('<section id="ir"><h2>IR text</h2>')
    for view in views:
        if view.graph is not None:
            body.append(f'<details class="ir" data-graph="{_e(view.key)}"><summary>{_e(view.title)} '
                        f'({len(view.graph.nodes)} nodes)</summary><pre class="code">{_e(view.text)}</pre></details>')
    body.append("</section>")
    body.append('<section id="source"><h2>Generated call source</h2>')
    if ex.call_source:
        body.append(f'<details><summary>the Python a call runs ({ex.call_source.count(chr(10))} lines)</summary>'
                    f'<pre class="code">{_e(ex.call_source)}</pre></details>')
    else:
        body.append("<p>No generated source (the function runs eagerly or on the interpreter).</p>")
    body.append("</section>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>jitorch.explain({_e(ex.name)})</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + f"\n<script>{SCRIPT}</script>\n</body></html>\n")


def _summary(ex, views):
    rows = []
    after = next((v for v in views if v.key == "after" and v.graph is not None), None)
    before = next((v for v in views if v.key == "before" and v.graph is not None), None)
    if ex.graph is not None:
        g = ex.graph
        rows.append(("traced", f"{len(g.inputs)} inputs, {len(g.constants)} constants"
                     + (f", {len(before.graph.nodes)} nodes" if before is not None else "")))
    if after is not None:
        kernels = after.kernels()
        eager = len(after.steps) - len(kernels)
        rows.append(("after the passes", f"{len(after.graph.nodes)} nodes: {len(kernels)} kernels, "
                                         f"{eager} eager steps"))
    if ex.split is not None:
        rows.append(("with grad", f"forward {len(ex.split.forward.graph.nodes)} nodes, saving {ex.split.saved} "
                                  f"values; backward {len(ex.split.backward.graph.nodes)} nodes"))
    rows.append(("cache", f"{ex.cache_entries} entr{'y' if ex.cache_entries == 1 else 'ies'}; "
                          + ("these arguments reuse one" if ex.reused else "these arguments were traced now")))
    if ex.retrace_reason is not None:
        rows.append(("retraced", ex.retrace_reason))
    return '<dl class="summary">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows) + "</dl>"


def _graph_section(view, opened):
    head = f"{view.title}" + (f" — {len(view.graph.nodes)} nodes" if view.graph is not None else "")
    parts = [f'<details class="graph-view" id="graph-{_e(view.key)}"{" open" if opened else ""}>'
             f"<summary>{_e(head)}</summary>"]
    if view.graph is None:
        parts.append(f"<p>Not drawn: {_e(view.unavailable)}</p></details>")
        return "".join(parts)
    parts.append('<div class="toolbar">zoom <input type="range" class="zoom" min="0.2" max="1.5" step="0.05" '
                 'value="1"> <span class="hint">hover a node for its IR line; click a legend entry to '
                 'highlight its nodes</span></div>')
    parts.append(f'<div class="graph-row"><div class="graph-box">{graph_svg(view)}</div>{_legend(view)}</div>')
    parts.append("</details>")
    return "".join(parts)


def _legend(view):
    items = [f'<li class="fixed"><b>{len(view.kernels())} kernels</b></li>'] if view.steps is not None else []
    for k, (name, i, step) in enumerate(view.kernels()):
        fill, stroke = _colour(k)
        items.append(f'<li data-step="{i}"><span class="swatch" style="background:{fill};border-color:{stroke}">'
                     f'</span>{_e(step.kernel.name)} <small>{_e(op_counts(step.nodes))}</small></li>')
    kinds = [("input", "input"), ("constant", "constant (captured tensor)"), ("output", "output")]
    if view.steps is not None:
        kinds = [("external", "external call (matmul: BLAS on CPU)"), ("eager", "eager step")] + kinds
    else:
        kinds = [("plain", "op (not yet scheduled: before fusion)")] + kinds
    items += [f'<li class="fixed"><span class="swatch {cls}"></span>{_e(text)}</li>' for cls, text in kinds]
    return '<ul class="legend">' + "".join(items) + "</ul>"


def _kernels_section(view, times, memo):
    kernels = view.kernels()
    total = sum(times.get(name, 0.0) for name, _, _ in kernels) if times else 0.0
    timed = bool(times) and any(name in times for name, _, _ in kernels)
    rows = []
    kernel_number = {i: k for k, (_, i, _) in enumerate(kernels)}
    for i, step in enumerate(view.steps):
        if hasattr(step, "kernel"):
            k = kernel_number[i]
            fill, stroke = _colour(k)
            name = view.qualified(step.kernel.name)
            share = ""
            if timed:
                seconds = times.get(name)
                if seconds is None:
                    share = '<td class="share">not measured</td>'
                else:
                    pct = 100 * seconds / total if total > 0 else 0.0
                    share = (f'<td class="share" data-share="{pct:.6f}"><span class="bar" style="width:{pct:.1f}%">'
                             f'</span>{pct:.1f}% <small>{seconds * 1e6:.1f} µs</small></td>')
            rows.append(f'<tr class="kernel-row" data-step="{i}"><td>{i}</td><td><span class="swatch" '
                        f'style="background:{fill};border-color:{stroke}"></span><a href="#k-{_e(view.key)}-{i}">'
                        f'{_e(step.kernel.name)}</a></td><td>kernel ({_e(step.kernel.source.kind)})</td>'
                        f'<td>{_e(", ".join(step.kernel.ops))}</td>{share}</tr>')
        else:
            kind = "external" if step.reason == EXTERNAL else "eager"
            rows.append(f'<tr class="{kind}-row" data-step="{i}"><td>{i}</td><td><span class="swatch {kind}"></span>'
                        f'{kind}</td><td>{_e(step.reason)}</td><td>{_e(", ".join(n.op.name for n in step.nodes))}'
                        f'</td>{"<td></td>" if timed else ""}</tr>')
    head = "<th>#</th><th>step</th><th>kind</th><th>ops</th>" + ("<th>time share</th>" if timed else "")
    note = "" if timed else ('<p class="hint">No kernel times given: pass <code>kernel_times</code> (qualified '
                             'kernel name → seconds) for the time share column.</p>')
    parts = [f'<details class="kernels" data-graph="{_e(view.key)}" open><summary>{_e(view.title)}: '
             f'{len(kernels)} kernels, {len(view.steps) - len(kernels)} eager steps, in launch order</summary>{note}'
             f'<table class="steps"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>']
    for name, i, step in kernels:
        parts.append(_kernel_details(view, name, i, step, memo))
    parts.append("</details>")
    return "".join(parts)


def _kernel_details(view, name, i, step, memo):
    lines = view.text.splitlines()
    first = 1 + len(view.graph.constants)
    position = {id(node): j for j, node in enumerate(view.graph.nodes)}
    ir_lines = "\n".join(lines[first + position[id(node)]].strip() for node in step.nodes)
    llvm_ir, asm = kernel_code(step.kernel, memo)
    asm_name = "PTX" if step.kernel.asm is not None else "assembly"
    return (f'<details class="kernel" id="k-{_e(view.key)}-{i}" data-kernel="{_e(name)}" data-step="{i}">'
            f'<summary>{_e(step.kernel.name)} — {_e(step.kernel.source.kind)}: {_e(op_counts(step.nodes))}</summary>'
            f'<h4>ops</h4><ul class="ops">{"".join(f"<li>{_e(op)}</li>" for op in step.kernel.ops)}</ul>'
            f'<pre class="code nodes">{_e(ir_lines)}</pre>'
            f'<details class="llvm-ir"><summary>LLVM IR ({llvm_ir.count(chr(10))} lines)</summary>'
            f'<pre class="code">{_e(llvm_ir)}</pre></details>'
            f'<details class="asm" data-asm="{asm_name}"><summary>{asm_name} ({asm.count(chr(10))} lines)</summary>'
            f'<pre class="code">{_e(asm)}</pre></details></details>')


# a kernel's name in its text while the report makes its code: kernels equal but for their names (the
# compiled graph's and the forward's, mostly) are optimised and assembled once
_PLACEHOLDER = "jitorch_report_kernel"


def kernel_code(kernel, memo):
    """(optimised LLVM IR, assembly or PTX) of a kernel; a CPU kernel's module is optimised once for both,
    and once for all the kernels of ``memo`` (a dict the caller keeps) whose text differs only in name."""
    if kernel.asm is not None:  # targets that keep their assembly (PTX) keep their IR too
        lowered = LoweredKernel(kernel)
        return lowered.llvm_ir, lowered.asm
    from ..codegen.cpu import assembly, optimise  # (llvmlite loads when something compiles, not on import)
    source = kernel.source
    text = source.llvm_ir.replace(source.name, _PLACEHOLDER)
    if text not in memo:
        module = optimise(text)
        memo[text] = (str(module), assembly(source, module))
    return tuple(code.replace(_PLACEHOLDER, source.name) for code in memo[text])


def _guards_section(ex):
    items = "".join(f"<li><code>{_e(g)}</code></li>" for g in ex.guards)
    return (f'<section id="guards"><h2>Guards</h2><p>A call reuses this entry while all of these hold.</p>'
            f'<ul class="guards">{items or "<li>none</li>"}</ul></section>')


def _cache_section(ex):
    parts = ['<section id="cache"><h2>Cache</h2>']
    c = ex.kernel_cache
    if c is not None:
        parts.append('<h3>Kernel cache</h3><table class="info"><tbody>' + "".join(
            f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in (
                ("directory", c.directory), ("entries on disk", c.entries), ("bytes on disk", c.size_bytes),
                ("entries in memory", c.memory_entries), ("memory hits", c.memory_hits), ("disk hits", c.disk_hits),
                ("compiled (misses)", c.misses))) + "</tbody></table>")
    p = ex.plan_cache
    if p is not None:
        parts.append('<h3>Fusion plan cache (this process)</h3><table class="plan-cache"><tbody>' + "".join(
            f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in (
                ("hits", p["hits"]), ("misses", p["misses"]), ("rejected", p["rejected"]),
                ("written", p["writes"]))) + "</tbody></table>")
    parts.append(f"<h3>Entries of {_e(ex.name)}</h3>")
    rows = []
    for n, entry in enumerate(ex.entries):
        what = (f"{entry['nodes']} nodes" if entry["nodes"] is not None else f"eager: {entry['eager_reason']}")
        rows.append(f'<tr class="{"this" if entry["this"] else ""}"><td>{n}</td><td>{entry["calls"]}</td>'
                    f'<td>{_e(what)}{" (this call)" if entry["this"] else ""}</td><td><details><summary>'
                    f'{len(entry["guards"])} guards</summary><ul>'
                    + "".join(f"<li><code>{_e(g)}</code></li>" for g in entry["guards"]) + "</ul></details></td></tr>")
    parts.append('<table class="entries"><thead><tr><th>#</th><th>calls</th><th>graph</th><th>guards</th></tr>'
                 f'</thead><tbody>{"".join(rows)}</tbody></table></section>')
    return "".join(parts)


def write_html(explanation, views, path, kernel_times=None):
    """Write the report to ``path`` atomically (a reader sees the old file or the whole new one)."""
    text = render(explanation, views, kernel_times)
    with atomic_write(path, "w") as f:
        f.write(text)


CSS = """
:root { --ink:#1f2933; --muted:#616e7c; --line:#d9e2ec; --bg:#f5f7fa; --accent:#2563eb; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--ink); background:var(--bg); }
header { background:#102a43; color:#f0f4f8; padding:14px 24px 10px; }
header h1 { margin:0 0 6px; font-size:20px; font-weight:600; }
header code { color:#9fb3c8; }
dl.summary { display:grid; grid-template-columns:max-content 1fr; gap:2px 14px; margin:0; font-size:13px; }
dl.summary dt { color:#9fb3c8; } dl.summary dd { margin:0; }
nav { position:sticky; top:0; z-index:2; background:#243b53; padding:6px 24px; }
nav a { color:#d9e2ec; margin-right:16px; text-decoration:none; font-size:13px; }
nav a:hover { color:#fff; }
section { margin:14px 24px; background:#fff; border:1px solid var(--line); border-radius:6px; padding:6px 16px 12px; }
h2 { font-size:16px; margin:8px 0; } h3 { font-size:14px; margin:10px 0 4px; } h4 { margin:8px 0 4px; font-size:13px; }
summary { cursor:pointer; font-weight:600; padding:4px 0; }
details details summary { font-weight:500; }
.graph-view { border-top:1px solid var(--line); }
.graph-row { display:flex; gap:10px; align-items:flex-start; }
.graph-box { flex:1; min-width:0; overflow:auto; height:72vh; border:1px solid var(--line); border-radius:4px; background:#fcfdfe; }
svg.graph text { font:11px ui-monospace, "DejaVu Sans Mono", monospace; text-anchor:middle; fill:#102a43; pointer-events:none; }
svg.graph .edge { fill:none; stroke:#9aa5b1; stroke-width:1.1; opacity:.8; }
svg.graph .node rect { fill:#e4e7eb; stroke:#7b8794; stroke-width:1.2; }
svg.graph .node.input rect { fill:#d1fae5; stroke:#047857; }
svg.graph .node.constant rect { fill:#fefce8; stroke:#a16207; stroke-dasharray:3 2; }
svg.graph .node.output rect { fill:#ede9fe; stroke:#6d28d9; }
svg.graph .node.external rect { fill:#334e68; stroke:#102a43; stroke-width:2.5; }
svg.graph .node.external text { fill:#fff; font-weight:bold; }
svg.graph .node.eager rect { fill:#f0f4f8; stroke:#52606d; stroke-dasharray:4 2; }
svg.graph .node:hover rect { stroke-width:3; }
svg.graph.dim .node:not(.lit) { opacity:.18; } svg.graph.dim .edge { opacity:.12; }
.toolbar { font-size:12px; color:var(--muted); margin:4px 0; } .toolbar input { vertical-align:middle; }
.hint { color:var(--muted); font-size:12px; }
ul.legend { list-style:none; padding:4px 8px; margin:0; width:270px; flex:none; max-height:72vh; overflow:auto; font-size:12px; border:1px solid var(--line); border-radius:4px; }
ul.legend li { padding:1px 0; white-space:nowrap; overflow:hidden; text-overflow:ellipsis; } ul.legend li.on { font-weight:700; }
ul.legend li[data-step] { cursor:pointer; } ul.legend li.fixed { cursor:default; } ul.legend small { color:var(--muted); }
.swatch { display:inline-block; width:12px; height:12px; border:1.5px solid #7b8794; border-radius:2px; margin-right:5px; vertical-align:-1px; background:#e4e7eb; }
.swatch.input { background:#d1fae5; border-color:#047857; border-radius:6px; }
.swatch.constant { background:#fefce8; border:1.5px dashed #a16207; }
.swatch.output { background:#ede9fe; border-color:#6d28d9; border-radius:6px; }
.swatch.external { background:#334e68; border:2.5px solid #102a43; }
.swatch.eager { background:#f0f4f8; border:1.5px dashed #52606d; }
table { border-collapse:collapse; font-size:12.5px; width:100%; margin:6px 0; }
th, td { text-align:left; padding:3px 8px; border-bottom:1px solid #eef2f6; vertical-align:top; }
thead th { background:#f0f4f8; position:sticky; top:30px; }
td.share { position:relative; min-width:140px; } td.share .bar { position:absolute; left:0; top:3px; bottom:3px; background:#bfdbfe; z-index:0; }
td.share { z-index:1; } td.share small { color:var(--muted); }
tr.external-row td, tr.eager-row td { color:var(--muted); }
tr.this td { background:#eff6ff; }
pre.code { background:#0b1727; color:#d9e2ec; padding:8px 10px; border-radius:4px; overflow:auto; max-height:480px; font:12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
details.kernel { border-left:3px solid var(--line); padding-left:10px; margin:4px 0; }
ul.ops { margin:2px 0; padding-left:20px; columns:4; font:12px ui-monospace, monospace; }
ul.guards code, table.entries code { font-size:12px; }
p.eager { color:#b91c1c; font-weight:600; }
"""

# the page's only behaviour: a zoom slider per graph, and a legend entry or kernel row lighting its nodes
SCRIPT = """
document.querySelectorAll('.graph-view').forEach(function (view) {
  var svg = view.querySelector('svg.graph'); if (!svg) return;
  var w = +svg.getAttribute('width'), h = +svg.getAttribute('height'), zoom = view.querySelector('.zoom');
  function scale(s) { svg.setAttribute('width', w * s); svg.setAttribute('height', h * s); }
  zoom.addEventListener('input', function (e) { scale(e.target.value); });
  // a wide graph starts zoomed out to fit the box's width (down to half size), opened or not
  var fit = Math.max(0.5, Math.min(1, (view.parentNode.clientWidth - 300) / w));
  zoom.value = fit; scale(fit);
  var box = svg.parentNode;  // scrolled to centre the first row's first vertex
  box.scrollLeft = Math.max(0, svg.dataset.focus * fit - (view.parentNode.clientWidth - 300) / 2);
  view.querySelectorAll('.legend li[data-step]').forEach(function (li) {
    li.addEventListener('click', function () {
      var on = !li.classList.contains('on');
      view.querySelectorAll('.legend li.on').forEach(function (x) { x.classList.remove('on'); });
      svg.querySelectorAll('.node.lit').forEach(function (n) { n.classList.remove('lit'); });
      svg.classList.toggle('dim', on);
      if (on) {
        li.classList.add('on');
        svg.querySelectorAll('.node[data-step="' + li.dataset.step + '"]').forEach(function (n) { n.classList.add('lit'); });
      }
    });
  });
});
"""
