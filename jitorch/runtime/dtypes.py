"""Data types and PyTorch's type promotion rules.

A `dtype` names an element type and knows its NumPy storage type. bfloat16 has
no NumPy type of its own; ml_dtypes (kept by the JAX team) supplies one, so
storage, casts and `.numpy()` treat it like every other dtype. Importing
ml_dtypes costs most of a second, so it is imported the first time bfloat16's
NumPy type is asked for (`_load_np`), not when jitorch is.

Promotion follows torch: `promote_types` is the lattice of two dtypes (torch 2.x
refuses to promote uint16, uint32 and uint64 with any other bool or integer
dtype: RuntimeError), and
`result_type` weighs its operands in three priority classes (tensors with
dimensions, zero-dim tensors, Python scalars), where a lower class only changes
the result when it belongs to a higher category (bool < integer < floating).
"""

from __future__ import annotations

import builtins

import numpy as np

__all__ = [
    "dtype", "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16",
    "bfloat16", "float32", "float64", "promote_types", "result_type",
    "get_default_dtype", "set_default_dtype", "can_cast", "from_numpy_dtype",
]


class dtype:
    """An element type, printed as ``jitorch.float32``."""

    __slots__ = ("name", "itemsize", "is_floating_point", "is_signed", "np", "kind", "_rank")

    def __init__(self, name, np_type, kind, rank, itemsize=None):
        self.name = name
        if np_type is not None:
            self.np = np.dtype(np_type)
        self.itemsize = self.np.itemsize if itemsize is None else itemsize
        self.kind = kind  # "b" bool, "u"/"i" integers, "f" floating
        self.is_floating_point = kind == "f"
        self.is_signed = kind in "if"
        self._rank = rank

    @property
    def is_complex(self):
        return False

    def to_real(self):
        return self

    def __repr__(self):
        return "jitorch." + self.name

    def __reduce__(self):
        return (_by_name, (self.name,))

    def __getattr__(self, attr):
        # Only reached while a slot is unset: bfloat16's `np` before its first use. Filling
        # the slot here leaves every later `.np` a plain slot read, so hot paths pay nothing.
        if attr != "np":
            raise AttributeError(f"'dtype' object has no attribute '{attr}'")
        return _load_np(self)


def _ml_dtypes():
    import ml_dtypes  # here, not at the top: see the module docstring

    return ml_dtypes


def _load_np(d):
    """Fill in ``d.np`` from ml_dtypes (the only dtypes created without a NumPy type are its)."""
    d.np = np.dtype(getattr(_ml_dtypes(), d.name))
    _FROM_NP[d.np] = d
    HALF_NP.add(d.np)
    return d.np


def _by_name(name):
    return _NAMES[name]


bool = dtype("bool", np.bool_, "b", 0)
uint8 = dtype("uint8", np.uint8, "u", 1)
int8 = dtype("int8", np.int8, "i", 2)
int16 = dtype("int16", np.int16, "i", 3)
int32 = dtype("int32", np.int32, "i", 4)
int64 = dtype("int64", np.int64, "i", 5)
float16 = dtype("float16", np.float16, "f", 6)
bfloat16 = dtype("bfloat16", None, "f", 7, itemsize=2)
float32 = dtype("float32", np.float32, "f", 8)
float64 = dtype("float64", np.float64, "f", 9)
uint16 = dtype("uint16", np.uint16, "u", 10)
uint32 = dtype("uint32", np.uint32, "u", 11)
uint64 = dtype("uint64", np.uint64, "u", 12)

ALL = (bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, uint16, uint32, uint64)
INTEGRAL = (uint8, int8, int16, int32, int64, uint16, uint32, uint64)
# The "barebones" unsigned types: torch promotes them only with themselves and with floats
_BAREBONES = frozenset((uint16, uint32, uint64))

# torch's names of each dtype in its messages: the ScalarType name ("Float"), the C type of its
# checked scalar conversions ("int64_t") and the C++ type its type metadata prints ("long int")
SCALAR_NAMES = {
    "bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
    "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
    "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
}
C_NAMES = {
    "bool": "bool", "uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int",
    "int64": "int64_t", "float16": "c10::Half", "bfloat16": "c10::BFloat16", "float32": "float",
    "float64": "double", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
}
CPP_NAMES = {
    "bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short int", "int32": "int",
    "int64": "long int", "float16": "c10::Half", "bfloat16": "c10::BFloat16", "float32": "float", "float64": "double",
    "uint16": "short unsigned int", "uint32": "unsigned int", "uint64": "long unsigned int",
}
_NAMES = {d.name: d for d in ALL}
_FROM_NP = {d.np: d for d in ALL if d is not bfloat16}  # bfloat16's joins in _load_np
# The NumPy types of the half dtypes, for `x.dtype in HALF_NP`; bfloat16's joins in _load_np
# (no array can have it before then: ml_dtypes makes it)
HALF_NP = {float16.np}



def _promote_pair(a, b):
    """The promotion of ``a`` and ``b``, or None where torch refuses it."""
    if a is b:
        return a
    if (a in _BAREBONES or b in _BAREBONES) and a.kind != "f" and b.kind != "f":
        return None
    if a is bool:
        return b
    if b is bool:
        return a
    if a.kind == "f" and b.kind == "f":
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    if a.kind == "f":
        return a
    if b.kind == "f":
        return b
    if a.kind == b.kind:
        return a if a.itemsize > b.itemsize else b
    u, s = (a, b) if a.kind == "u" else (b, a)
    return s if s.itemsize > u.itemsize else int16


# Refused pairs are left out: a lookup's KeyError becomes torch's RuntimeError (`_refused`), and
# the hot lookups in `result_type` pay nothing for the check
_PROMOTE = {(a, b): p for a in ALL for b in ALL if (p := _promote_pair(a, b)) is not None}


def _refused(a, b):
    return RuntimeError("Promotion for uint16, uint32, uint64 types is not supported, attempted to promote "
                        f"{SCALAR_NAMES[a.name]} and {SCALAR_NAMES[b.name]}")


def promote_types(type1: dtype, type2: dtype) -> dtype:
    """The smallest dtype both arguments convert to without losing category."""
    try:
        return _PROMOTE[type1, type2]
    except KeyError:
        for i, t in enumerate((type1, type2), 1):
            if not isinstance(t, dtype):
                raise TypeError(f"promote_types(): argument 'type{i}' must be jitorch.dtype, not "
                                f"{type(t).__name__}") from None
        raise _refused(type1, type2) from None


_default_dtype = float32


def get_default_dtype() -> dtype:
    """The floating dtype given to Python floats and new float tensors."""
    return _default_dtype


def set_default_dtype(d: dtype) -> None:
    """Set the default floating dtype (float16, bfloat16, float32 or float64)."""
    global _default_dtype
    if not isinstance(d, dtype) or not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default_dtype = d
    _scalar_cache.clear()


def _combine(higher, lower):
    """torch's combine_categories: a lower-priority dtype only counts if it
    belongs to a higher category (or the higher one is bool)."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.kind == "f":
        return higher
    if higher is bool or lower.kind == "f":
        return _PROMOTE[higher, lower]
    return higher


def scalar_dtype(value) -> dtype:
    """The dtype a Python scalar takes as a wrapped number."""
    t = type(value)
    if t is builtins.bool or t is np.bool_:
        return bool
    if t is builtins.int or isinstance(value, (np.integer,)):
        return int64
    if t is builtins.float or isinstance(value, np.floating):
        return _default_dtype
    raise TypeError(f"expected a Python number, got {t.__name__}")


_scalar_cache: dict = {}


def result_type(*operands) -> dtype:
    """The dtype torch gives an op over ``operands`` (tensors and Python numbers)."""
    try:
        return _result_type(operands)
    except KeyError as e:  # a pair `promote_types` refuses
        raise _refused(*e.args[0]) from None


def _result_type(operands):
    dim = zero = wrapped = None
    for x in operands:
        d = getattr(x, "dtype", None)
        if isinstance(d, dtype):
            if x.ndim == 0:
                zero = d if zero is None else _PROMOTE[zero, d]
            else:
                dim = d if dim is None else _PROMOTE[dim, d]
        elif isinstance(x, dtype):
            dim = x if dim is None else _PROMOTE[dim, x]
        else:
            d = scalar_dtype(x)
            wrapped = d if wrapped is None else _PROMOTE[wrapped, d]
    out = _combine(dim, _combine(zero, wrapped))
    if out is None:
        raise TypeError("result_type() needs at least one tensor or number")
    return out


def can_cast(from_: dtype, to: dtype) -> builtins.bool:
    """torch.can_cast: whether an in-place or ``out=`` result of ``from_`` may be
    written into ``to`` (no float to integral, no non-bool to bool)."""
    if from_.kind == "f" and to.kind != "f":
        return False
    if from_ is not bool and to is bool:
        return False
    return True


def from_numpy_dtype(npd) -> dtype:
    """The jitorch dtype of a NumPy dtype, or TypeError if there is none."""
    try:
        npd = np.dtype(npd)
        if npd not in _FROM_NP and npd.name == "bfloat16":
            _load_np(bfloat16)  # an ml_dtypes array made before jitorch needed bfloat16 itself
        return _FROM_NP[npd]
    except (KeyError, TypeError):
        raise TypeError(
            f"can't convert np.ndarray of type {np.dtype(npd)}. The only supported types are: "
            "float64, float32, float16, bfloat16, int64, int32, int16, int8, uint64, uint32, uint16, uint8, "
            "and bool."
        ) from None


def to_dtype(d) -> dtype:
    """Accept a jitorch dtype, a NumPy dtype or a Python type (``float``, ``int``, ``bool``)."""
    if isinstance(d, dtype):
        return d
    if d is builtins.float:
        return float64
    if d is builtins.int:
        return int64
    if d is builtins.bool:
        return bool
    if isinstance(d, str) and d in _NAMES:
        return _NAMES[d]
    return from_numpy_dtype(d)


_IINFO_RANGES: dict = {}  # dtype name -> (min, max): np.iinfo costs more than the small op that asks


def iinfo_range(d: dtype):
    """(min, max) of an integer (or bool) dtype, as Python ints."""
    found = _IINFO_RANGES.get(d.name)
    if found is None:
        info = np.iinfo(d.np)
        found = _IINFO_RANGES[d.name] = (int(info.min), int(info.max))
    return found


class finfo:
    """torch.finfo: limits of a floating dtype."""

    def __init__(self, type=None):
        type = _default_dtype if type is None else type
        if not type.is_floating_point:
            raise TypeError(f"torch.finfo() requires a floating point input type, got {type}")
        # NumPy's finfo knows no bfloat16; ml_dtypes' is only imported when bfloat16 is asked about
        info = _ml_dtypes().finfo(type.np) if type is bfloat16 else np.finfo(type.np)
        self.dtype = type.name
        self.bits = type.itemsize * 8
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = self.smallest_normal = float(info.tiny)
        self.resolution = float(info.resolution)

    def __repr__(self):
        return f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}, tiny={self.tiny}, dtype={self.dtype})"


class iinfo:
    """torch.iinfo: limits of an integer dtype."""

    def __init__(self, type):
        if type.is_floating_point:
            raise TypeError(f"torch.iinfo() requires an integer input type, got {type}")
        info = np.iinfo(type.np) if type is not bool else None
        self.dtype = type.name
        self.bits = type.itemsize * 8
        self.min = int(info.min) if info else 0
        self.max = int(info.max) if info else 1

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
