"""The text form of a graph, one node per line, which `parser.parse` reads back.

    graph(%x: f32[64, 128], %b: f32[128] requires_grad):
      %w : f32[128, 10] = constant['w']
      %0 : f32[64, 128] = add(%x, %b)
      %1 : f32[64] = sum(%0, dim=[1])
      %2 : f32[64], %3 : i64[64] = max.dim(%1, dim=0)
      %x <- %0
      return (%2, {'idx': %3})

Tensor arguments that lead the schema print positionally; every other
argument prints as ``name=value`` unless it equals the schema default. A line
``%x <- %0`` writes a value back into an input (an in-place op on it).
"""

from __future__ import annotations

import math
from collections import Counter

from ..ops.random_ops import Generator
from ..ops.views import memory_format
from ..runtime import dtypes as _dt
from ..runtime.device import device as _device_cls
from .values import DTYPE_CODES, Value


def op_counts(nodes) -> str:
    """The ops of ``nodes`` by count, most common first ("sin x2500, mul x2500, add"): short for any size."""
    counts = Counter(node.op.name for node in nodes)
    return ", ".join(f"{name} x{c}" if c > 1 else name for name, c in counts.most_common())


def format_literal(v, names):
    """A literal argument or output leaf as text (values by their names in ``names``)."""
    if isinstance(v, Value):
        return "%" + names[v]
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, _dt.dtype):
        return DTYPE_CODES[v.name]
    if isinstance(v, _device_cls):
        return f"device({str(v)!r})"
    if isinstance(v, memory_format):
        return v.name
    if isinstance(v, Generator):
        return "@" + names[v]
    if isinstance(v, (list, tuple)):
        inner = ", ".join(format_literal(x, names) for x in v)
        return f"[{inner}]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {format_literal(x, names)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot print {type(v).__name__} as an IR literal")


def format_args(node, names):
    parts = []
    positional = True
    for arg, v in zip(node.op.schema.args, node.args):
        if positional and arg.type == "Tensor" and not arg.kwarg_only:
            parts.append(format_literal(v, names))
            continue
        positional = False
        if arg.has_default and _same(v, arg.default):
            continue
        parts.append(f"{arg.name}={format_literal(v, names)}")
    return ", ".join(parts)


def _same(v, default):
    """Whether the argument ``v`` is its schema's ``default`` exactly, so that leaving it out of the text
    loses nothing: same types, element by element in lists, and for floats the same sign of zero (``nan=-0.0``
    left out read back as ``0.0``: an exported program, and its file loaded again, wrote 0.0 where eager writes
    -0.0)."""
    if isinstance(v, (list, tuple)) and isinstance(default, (list, tuple)):
        return len(v) == len(default) and all(_same(a, b) for a, b in zip(v, default))
    if type(v) is not type(default):
        return False
    if type(v) in (float, complex):  # (repr tells the signs of zero apart)
        return v == default and repr(v) == repr(default)
    return v == default


def format_output(tree, names):
    """The output pytree as text: tuples as ``(...)``, lists ``[...]``, dicts ``{...}``."""
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        tree = tuple(tree)
    if isinstance(tree, tuple):
        inner = ", ".join(format_output(x, names) for x in tree)
        return f"({inner}{',' if len(tree) == 1 else ''})"
    if isinstance(tree, list):
        return "[" + ", ".join(format_output(x, names) for x in tree) + "]"
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {format_output(x, names)}" for k, x in tree.items()) + "}"
    return format_literal(tree, names)


def print_graph(graph, canonical=False):
    """The graph's text. ``canonical=True`` renames values by definition order,
    so two graphs that differ only in names print the same."""
    if canonical:
        names = {v: f"v{i}" for i, v in enumerate(graph.values())}
    else:
        names = {v: v.name for v in graph.values()}
    names.update({obj: name for name, obj in graph.objects.items()})
    header = ", ".join(
        f"%{names[v]}: {v.type}" + (" requires_grad" if v.requires_grad else "") for v in graph.inputs
    )
    lines = [f"graph({header}):"]
    for name, v in graph.constants.items():
        lines.append(f"  %{names[v]} : {v.type} = constant[{name!r}]")
    for node in graph.nodes:
        outs = ", ".join(f"%{names[o]} : {o.type}" for o in node.outputs)
        lines.append(f"  {outs} = {node.op.name}({format_args(node, names)})")
    for target, value in graph.mutations:
        lines.append(f"  %{names[target]} <- %{names[value]}")
    lines.append(f"  return {format_output(graph.outputs, names)}")
    return "\n".join(lines)
