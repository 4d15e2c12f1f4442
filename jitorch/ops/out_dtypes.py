"""The reductions, sorts, scans, softmaxes and unary ops whose ``out=`` tensors must have the result's own dtype,
and mean's, nanmean's and nansum's errors for an integer out tensor, all's and any's for one not bool or uint8, isposinf's,
isneginf's and signbit's for one not bool.

Most ops write a result into an ``out=`` tensor of any dtype it can be cast to. These do not: torch
refuses an out tensor of another dtype than the result's (values: the input's or the norm's dtype;
indices: int64), each family with its own message, before anything is written. Each op here gets an
``out_check`` (`registry.call` runs it before the overlap check and the kernel) comparing every out
tensor with the dtypes of the results the op's meta rule gives, which also raises the input's own errors
first, as torch checks the input first.
"""

from __future__ import annotations

from ..runtime import dtypes as _dt
from . import registry
from .registry import OPS, cpp_name, scalar_name

# torch's legacy type names of the dtypes that have no ``torch.XTensor`` class
_TYPE_ONLY = (_dt.bool, _dt.bfloat16, _dt.uint16, _dt.uint32, _dt.uint64)


def _legacy(d):
    return f"CPU{scalar_name(d)}Type" if d in _TYPE_ONLY else f"jitorch.{scalar_name(d)}Tensor"


def _exact(name, i, want, got):
    return f"Expected out tensor to have dtype {cpp_name(want)}, but got {cpp_name(got)} instead"


def _as_input(name, i, want, got):
    return (f"Expected the dtype for input and out to match, but got {scalar_name(want)} for input's dtype and "
            f"{scalar_name(got)} for out's dtype.")


def _scan(name, i, want, got):
    return f"expected scalar_type {scalar_name(want)} but found {scalar_name(got)}"


def _mode(name, i, want, got):
    return f"expected scalar type '{scalar_name(want)}' but got '{scalar_name(got)}' for {('values', 'indices')[i]} output"


def _kthvalue(name, i, want, got):
    return ("output values must be of same type as input", "output indices must be of scalar type Long")[i]


def _quantile(name, i, want, got):
    return "quantile() out tensor must be same dtype as the input tensor"


def _median(name, i, want, got):  # (torch names median for nanmedian too)
    if i == 0:
        return (f"Expected tensor for 'values' to have the same type as tensor for argument #2 'self'; but type "
                f"{_legacy(got)} does not equal {_legacy(want)} (while checking arguments for median)")
    return (f"Expected tensor for argument #1 'indices' to have scalar type Long; but got {_legacy(got)} instead "
            "(while checking arguments for median)")


def linalg_message(name):
    """torch.linalg's message for an out tensor of another dtype (``name``: "linalg.norm", ...)."""
    def message(_, i, want, got):
        return f"{name} expected out tensor dtype {scalar_name(want)} but got: {scalar_name(got)}"
    return message


def check_out_dtypes(name, message, out, wanted):
    """Raise torch's RuntimeError (text from ``message(name, i, want, got)``) for the first out tensor whose
    dtype is not the one wanted for it."""
    for i, (o, want) in enumerate(zip(out if isinstance(out, (tuple, list)) else (out,), wanted)):
        if isinstance(o, registry.Tensor) and o.dtype is not want:
            raise RuntimeError(message(name, i, want, o.dtype))


def _same_dtypes(op, name, message):
    def out_check(out, *args):
        if name == "quantile" or name == "nanquantile":  # (the input's dtype is checked first)
            if args[0].dtype not in (_dt.float32, _dt.float64):
                return
            wanted = [args[0].dtype]
        elif name == "aminmax":
            wanted = [args[0].dtype] * 2
        elif message is _scan:  # (torch compares the out tensors with the input before its dim and dtype checks)
            wanted = [args[0].dtype, _dt.int64]
        elif name in ("softmax", "log_softmax"):  # (the result's dtype, before the kernel refuses an integer input)
            wanted = [args[2] if len(args) > 2 and args[2] is not None else args[0].dtype]
        elif op.meta is None:  # a composite (msort): the input's values, and int64 indices
            wanted = [args[0].dtype, _dt.int64]
        else:
            spec = op.meta(*args)
            wanted = [s.dtype for s in spec] if isinstance(spec, tuple) else [spec.dtype]
        check_out_dtypes(name, message, out, wanted)
    return out_check


def _truth_out(name):
    """all/any: torch writes into a bool or uint8 out tensor only."""
    def out_check(out, *args):
        if isinstance(out, registry.Tensor) and out.dtype not in (_dt.bool, _dt.uint8):
            raise RuntimeError(f"{name} only supports bool tensor for result, got: {scalar_name(out.dtype)}")
    return out_check


def _bool_out(name):
    """isposinf/isneginf/signbit: torch writes into a bool out tensor only (a float one took the cast result:
    session 44's out= sweep, tests/ops/test_fuzz44_out_forms.py)."""
    def out_check(out, *args):
        if isinstance(out, registry.Tensor) and out.dtype is not _dt.bool:
            raise RuntimeError(f"{name} does not support non-boolean outputs.")
    return out_check


_FAMILIES = {
    _exact: ("max.dim", "min.dim", "argmax", "argmin", "norm", "aminmax", "topk", "sort", "msort", "softmax",
             "log_softmax"),
    _as_input: ("amax", "amin"),
    _scan: ("logcumsumexp", "cummax", "cummin"),
    _mode: ("mode",),
    _kthvalue: ("kthvalue",),
    _quantile: ("quantile", "quantile.scalar", "nanquantile", "nanquantile.scalar"),
    _median: ("median.dim", "nanmedian.dim"),
}

def _mean_out(out, x, dim=None, keepdim=False, dtype=None):
    """torch's mean into an integer or bool out tensor: it sums into it, then divides it in place, which
    raises for the division's Float result whatever the input's floating dtype (a half one too)."""
    OPS["mean"].meta(x, dim, keepdim, dtype)
    if dtype is None and isinstance(out, registry.Tensor) and not out.dtype.is_floating_point:
        raise RuntimeError(f"result type Float can't be cast to the desired output type {scalar_name(out.dtype)}")


def _nanmean_out(out, x, dim=None, keepdim=False, dtype=None):
    """torch's nanmean with out= refuses integers with its own message, then sums into the out tensor, whose
    dtype picks the sum's kernel: none for integers and bools."""
    if not x.dtype.is_floating_point:
        raise RuntimeError("nanmean(): integral types and 'Bool' are not supported for nanmean, even for empty "
                           "tensors.")
    OPS["nanmean"].meta(x, dim, keepdim, dtype)
    if dtype is None and isinstance(out, registry.Tensor) and not out.dtype.is_floating_point:
        raise NotImplementedError(f"\"nansum_cpu\" not implemented for '{scalar_name(out.dtype)}'")


def _nansum_out(out, x, dim=None, keepdim=False, dtype=None):
    """torch's nansum of a floating input into an out tensor (without ``dtype=``) runs its floating kernel in the
    out tensor's dtype: none for integers and bools (an integer input sums into them)."""
    OPS["nansum"].meta(x, dim, keepdim, dtype)
    if (dtype is None and x.dtype.is_floating_point and isinstance(out, registry.Tensor)
            and not out.dtype.is_floating_point):
        raise NotImplementedError(f"\"nansum_cpu\" not implemented for '{scalar_name(out.dtype)}'")


def _found(name, i, want, got):
    return f"Found dtype {scalar_name(got)} but expected {scalar_name(want)}"


def _unary_same(name):
    """The unary ops torch builds as TensorIterator's "borrowing unary op" (every operand of one dtype): an out
    tensor of another dtype than the input's is refused, before its shape is looked at (``neg(int32, out=int64)``
    wrote the cast result: tests/ops/test_out_into.py)."""
    def out_check(out, x, *rest):
        if isinstance(x, registry.Tensor):
            if name in ("neg", "negative"):  # (torch's meta function refuses a bool input first)
                OPS[name].meta(x, *rest)
            check_out_dtypes(name, _found, out, [x.dtype])
    return out_check


OPS["mean"].attrs["out_check"] = _mean_out
OPS["nanmean"].attrs["out_check"] = _nanmean_out
OPS["nansum"].attrs["out_check"] = _nansum_out
for _message, _names in _FAMILIES.items():
    for _name in _names:
        OPS[_name].attrs["out_check"] = _same_dtypes(OPS[_name], _name.split(".")[0], _message)
for _name in ("all", "any"):
    OPS[_name].attrs["out_check"] = _truth_out(_name)
for _name in ("isposinf", "isneginf", "signbit"):
    OPS[_name].attrs["out_check"] = _bool_out(_name)
for _name in ("neg", "negative", "abs", "absolute", "bitwise_not", "ceil", "floor", "frac", "round", "sgn", "sign",
              "trunc", "fix"):
    OPS[_name].attrs["out_check"] = _unary_same(_name)


def _diag_out(out, x, diagonal=0):
    """torch's diag(out=) checks the input's dims, in words without the ``diag(): `` its plain call's error starts
    with; then, of a vector, that its dtype can be cast to out's; then that out has the input's dtype (a float32
    matrix's diagonal into a float64 or int64 out raised nothing and wrote the cast values). (torch resizes out to
    the result's shape before its last check; jitorch leaves it as it was.)"""
    if x.ndim not in (1, 2):
        raise RuntimeError(f"Supports 1D or 2D tensors. Got {x.ndim}D")
    if x.ndim == 1 and isinstance(out, registry.Tensor) and not _dt.can_cast(x.dtype, out.dtype):
        raise RuntimeError(f"diag: result type {scalar_name(x.dtype)} can't be cast to the desired out= type "
                           f"{scalar_name(out.dtype)}")
    check_out_dtypes("diag", _exact, out, [x.dtype])


OPS["diag"].attrs["out_check"] = _diag_out
