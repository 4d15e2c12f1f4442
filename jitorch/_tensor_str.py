"""Tensor printing with torch's rules, and ``set_printoptions``.

The layout follows torch's ``_tensor_str``: one formatter per tensor picks a
common width and a mode from the (summarised) values: integers, floats that are
all integral (``1.``), fixed point with ``precision`` decimals, or scientific
notation when the magnitudes span more than 1000x, exceed 1e8 or go below 1e-4.
Tensors with more than ``threshold`` elements show ``edgeitems`` items at each
end of every dim around ``...``. Rows wrap at ``linewidth`` columns; nested
brackets indent under the opening one. Values are read from the tensor's NumPy
view; the half types are widened to float32 first, as torch does.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from .runtime import dtypes as _dt


class _PrintOptions:
    precision = 4
    threshold = 1000
    edgeitems = 3
    linewidth = 80
    sci_mode = None


PRINT_OPTS = _PrintOptions()

_PROFILES = {
    "default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
    "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
    "full": dict(precision=4, threshold=math.inf, edgeitems=3, linewidth=80),
}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """Set how tensors print, as ``torch.set_printoptions``.

    ``precision``: digits after the decimal point (4); ``threshold``: element
    count above which tensors are summarised (1000); ``edgeitems``: items shown
    at each end of a summarised dim (3); ``linewidth``: columns per line (80);
    ``profile``: "default", "short" or "full" presets; ``sci_mode``: True or
    False forces scientific notation on or off, None (default) chooses.
    """
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions(): profile must be one of {sorted(_PROFILES)}, got {profile!r}")
        for name, value in _PROFILES[profile].items():
            setattr(PRINT_OPTS, name, value)
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None:
            setattr(PRINT_OPTS, name, value)
    PRINT_OPTS.sci_mode = sci_mode


def get_printoptions():
    """The current print options as a dict (the arguments of `set_printoptions`)."""
    return {name: getattr(PRINT_OPTS, name)
            for name in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")}


@contextlib.contextmanager
def printoptions(**kwargs):
    """Set print options for the duration of a ``with`` block."""
    saved = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**saved)


class _Formatter:
    """The common width and number style of every element of one tensor."""

    def __init__(self, values):
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        if not self.floating:
            self.max_width = max((len(str(v)) for v in values.ravel().tolist()), default=1)
            return
        finite = values[np.isfinite(values) & (values != 0)].astype(np.float64)
        if finite.size == 0:
            return
        magnitudes = np.abs(finite)
        lo, hi = magnitudes.min(), magnitudes.max()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if PRINT_OPTS.sci_mode is None:
            self.sci_mode = bool(hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4)
        else:
            self.sci_mode = PRINT_OPTS.sci_mode
        p = PRINT_OPTS.precision
        if self.sci_mode:
            widths = (len(f"{v:.{p}e}") for v in finite.tolist())
        elif self.int_mode:
            widths = (len(f"{v:.0f}") + 1 for v in finite.tolist())  # + 1 for the trailing "."
        else:
            widths = (len(f"{v:.{p}f}") for v in finite.tolist())
        self.max_width = max(widths)

    def format(self, value):
        if not self.floating:
            text = f"{value}"
        elif self.sci_mode:
            text = f"{value:{self.max_width}.{PRINT_OPTS.precision}e}"
        elif self.int_mode:
            text = f"{value:.0f}" + ("" if math.isinf(value) or math.isnan(value) else ".")
        else:
            text = f"{value:.{PRINT_OPTS.precision}f}"
        return " " * (self.max_width - len(text)) + text


def _summarized(arr):
    """The elements a summarised print shows (what the formatter measures)."""
    edge = PRINT_OPTS.edgeitems
    if arr.ndim == 0:
        return arr
    if arr.ndim == 1:
        return np.concatenate((arr[:edge], arr[-edge:])) if len(arr) > 2 * edge else arr
    if not edge:
        return np.empty((0,) * arr.ndim, arr.dtype)
    rows = list(arr[:edge]) + list(arr[-edge:]) if len(arr) > 2 * edge else list(arr)
    return np.stack([_summarized(r) for r in rows])


def _vector_str(arr, indent, summarize, formatter):
    edge = PRINT_OPTS.edgeitems
    per_line = max(1, int(math.floor((PRINT_OPTS.linewidth - indent) / (formatter.max_width + 2))))
    if summarize and not edge:
        data = ["..."]
    elif summarize and len(arr) > 2 * edge:
        data = ([formatter.format(v) for v in arr[:edge].tolist()] + [" ..."]
                + [formatter.format(v) for v in arr[-edge:].tolist()])
    else:
        data = [formatter.format(v) for v in arr.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _nested_str(arr, indent, summarize, formatter):
    if arr.ndim == 0:
        return formatter.format(arr.item())
    if arr.ndim == 1:
        return _vector_str(arr, indent, summarize, formatter)
    edge = PRINT_OPTS.edgeitems
    n = len(arr)
    if summarize and n > 2 * edge:
        rows = list(range(edge)) + [None] + list(range(n - edge, n))
    else:
        rows = range(n)
    slices = ["..." if i is None else _nested_str(arr[i], indent + 1, summarize, formatter) for i in rows]
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _values(t):
    """The elements as NumPy will format them: half types widened to float32."""
    arr = np.asarray(t._host_array())
    if t.dtype in (_dt.float16, _dt.bfloat16):
        arr = arr.astype(np.float32)
    return arr


def _tensor_str(t, indent):
    arr = _values(t)
    summarize = arr.size > PRINT_OPTS.threshold
    formatter = _Formatter(_summarized(arr) if summarize else arr)
    return _nested_str(arr, indent, summarize, formatter)


def _add_suffixes(text, suffixes, indent):
    """Append ``, suffix`` items, each on a new line once the line would pass linewidth."""
    parts = [text]
    last_line_len = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > PRINT_OPTS.linewidth:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line_len += len(suffix) + 2
    parts.append(")")
    return "".join(parts)


def _grad_fn_name(grad_fn):
    name = getattr(grad_fn, "name", None)
    return name() if callable(name) else type(grad_fn).__name__


def tensor_repr(t):
    """``repr(t)`` as torch prints it, with ``jitorch.`` dtype names."""
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(f"device='{t.device}'")
    default = _dt.get_default_dtype()
    size = f"size={tuple(t.shape)}"
    if t._storage.data is None and not t._storage.on_device:  # meta, or a tensor being traced: no values
        suffixes.append(size)
        if t.dtype is not default:
            suffixes.append(f"dtype={t.dtype}")
        body = "..."
    elif t.numel() == 0:
        if t.ndim != 1:  # shapes other than (0,) are spelled out, as NumPy does
            suffixes.append(size)
        if t.dtype is not default:  # no elements show the kind, so any other dtype is named
            suffixes.append(f"dtype={t.dtype}")
        body = "[]"
    else:
        if not PRINT_OPTS.edgeitems:
            suffixes.append(size)
        if t.dtype not in (default, _dt.int64, _dt.bool):
            suffixes.append(f"dtype={t.dtype}")
        body = _tensor_str(t, indent)
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{_grad_fn_name(t.grad_fn)}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffixes, indent)
