"""The op registry: every op is declared once here, through `defop`.

An `OpDef` holds one schema and everything that derives from it:

* ``meta(*args) -> TensorSpec | tuple[TensorSpec, ...]``: output shapes, dtypes,
  device and the errors for bad input. It reads only ``shape``, ``dtype``,
  ``device`` (and strides for views) of its tensor arguments, so eager calls,
  the tracer and the IR verifier all use it.
* ``kernels[device_type](spec, *args)``: the eager kernel. On CPU it receives
  NumPy views in place of tensors and returns NumPy arrays.
* ``view(*args)`` for view ops instead of a kernel: the stride transform
  ``-> (shape, strides, offset)`` that makes a view without copying.
* ``composite(*args)`` for ops defined by other ops (``reshape`` is a view or
  a copy then a view): the body runs on the public API, so tracing records its
  parts and autograd differentiates them; such an op needs no meta or kernel.
* ``attrs``: flags of the declaration (``cross_device``, ``layout``, ``overlap``, ...); ``own_derivative``:
  a composite differentiated by its derivative rule, not through its body.
* ``pieces``: what the layers above attach to the op by `attach`, each under one name of `PIECES`:
  its derivative rule (autograd), decomposition (ir), lowering (codegen) and CUDA kernel (backends).
  A piece names its op by a string that must be in the registry, so a misspelt name fails when its
  layer is imported; ``docs/ops.md`` (`jitorch.ops.table`) lists which pieces every op has.
* ``aliases``: the ops that are one op under several names (``abs``, ``absolute``), declared by
  `declare_aliases`; a piece attached to one is attached to all.

From the schema the registry generates the public functional form
(``jitorch.add``), the Tensor method (``x.add``), the in-place method
(``x.add_``) and the ``out=`` keyword. Each is generated at its first call (`_stub`), the argument
converter of an op at its first use. Overloads sharing one public name
(``max``, ``max.dim``, ``max.other``) are resolved by argument types.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import operator
import sys
import threading
import types
import warnings
from collections import namedtuple
from collections.abc import Mapping
from numbers import Number

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime import grad_mode as _grad_mode
from ..runtime import profiling as _profiling
from ..runtime.autocast_mode import STATE as _AUTOCAST_STATE
from ..runtime.autocast_mode import excluded as _autocast_excluded
from ..runtime.casts import convert
from ..runtime.device import DEVICE_BACKENDS, current_cuda_index, to_device
from ..runtime.storage import Storage  # noqa: F401  (used by fast paths)
from ..runtime.strided import (CONTIGUOUS_STRIDES, INT64_MAX, INT64_MIN, check_numel,  # noqa: F401 (hot paths')
                               contiguous_strides, contiguous_strides_cached, dense_strides, is_contiguous,
                               is_non_overlapping_and_dense, like_strides, memory_order_strides)
from .overlap import check_write_overlap
from .schema import parse_schema

OPS: dict = {}          # full name ("max.dim") -> OpDef
PUBLIC: dict = {}       # public name ("max") -> [OpDef, ...] in resolution order
FUNCTIONS: dict = {}    # public functional forms, exported by jitorch/__init__
METHODS: dict = {}      # Tensor methods, installed on Tensor

Tensor = None  # set by jitorch.tensor to break the import cycle


CUDA_ANY = to_device("cuda")


def _current_cuda_device():
    return to_device(f"cuda:{current_cuda_index()}")


class TensorSpec:
    """What the meta rule says about one output: shape, dtype, device."""

    __slots__ = ("shape", "dtype", "device", "compute")

    def __init__(self, shape, dtype, device, compute=None):
        if shape is not None:  # (None: a fast path's template, its shape set per call)
            check_numel(shape)  # a broadcast of huge expanded tensors, a repeat
        self.shape = shape
        self.dtype = dtype
        # a result is on a device, never on "cuda": the trace's tensors must carry an index as eager's do
        self.device = _current_cuda_device() if device is CUDA_ANY else device
        self.compute = compute  # dtype pointwise kernels compute in (float32 for halves)

    @property
    def ndim(self):
        return len(self.shape)

    def __eq__(self, other):
        return (isinstance(other, TensorSpec) and self.shape == other.shape
                and self.dtype is other.dtype and self.device == other.device)

    def __repr__(self):
        return f"TensorSpec({list(self.shape)}, {self.dtype}, {self.device})"


def _return_type(name, fields):
    """A namedtuple printed like torch's ``torch.return_types.max(values=..., indices=...)``."""
    base = namedtuple(name, fields)

    def __repr__(self):
        body = ",\n".join(f"{f}={v!r}" for f, v in zip(fields, self))
        return f"jitorch.return_types.{name}(\n{body})"

    cls = type(name, (base,), {"__slots__": (), "__repr__": __repr__})
    cls.__module__ = "jitorch.return_types"
    return cls


class OpDef:
    """One op: its schema, meta rule, kernels and variants."""

    def __init__(self, schema, *, meta, kind, kernels, view, composite, variants, doc, method_name, attrs):
        self.schema = schema
        self.name = schema.full_name
        self.public_name = schema.name
        self.kind = kind
        self.meta = meta
        self.kernels = kernels
        self.view = view
        self.composite = composite
        # optional fast(args, record=True) -> result | None for common eager calls; on tensors that require
        # grad in grad mode it records the backward node (`record_fast`), or gives None if not ``record``.
        # A pointwise op's takes its operands alone too, its other arguments then at their defaults.
        self.fast = None
        # how an in-place call writes through an expanded self, where torch lets it (`write_inplace`), or None
        self.expanded_write = attrs.get("expanded_write")
        self.fast_into = None  # optional fast_into(args) -> bool: an in-place call computed straight into self
        # optional flat_into(args) -> bool: the commonest in-place calls whole, before `call_inplace`'s checks
        self.flat_into = None
        # optional fast_out(args, out, checked=False) -> bool: an out= call computed straight into ``out``, before
        # `call`'s checks (the function variant's first try, for calls that need none) or after them (``checked``)
        self.fast_out = None
        self.fast_pair = None  # optional fast_pair(method, general) -> the method of the op's Python operator
        self.fast_one = None  # optional fast_one(x) -> result | None: ``fast((x,))`` of an op whose one argument is x
        # optional entry(general) -> the op's function and method variants (`_entry_variant`), each one frame
        # that serves the commonest calls itself and hands every other to ``general``, the generated variant
        self.entry = None
        self.variants = frozenset(variants)
        self.doc = doc
        self.method_name = method_name or schema.name
        self.attrs = dict(attrs)
        self.pieces = {}
        self.aliases = (self,)
        self.tensor_args = tuple(
            (i, a.list or a.varargs) for i, a in enumerate(schema.args) if a.type == "Tensor"
        )
        # the positions of the tensor arguments when none is a list (hot paths loop over these), else None
        self.tensor_positions = (None if any(is_list for _, is_list in self.tensor_args)
                                 else tuple(i for i, _ in self.tensor_args))
        # only ops with several tensor arguments need the same-device check
        self.multi_tensor = len(self.tensor_args) > 1 or any(is_list for _, is_list in self.tensor_args)
        self.cross_device = bool(attrs.get("cross_device"))  # moves data between devices (copy_, .to)
        # layout(spec, *args) -> strides of the new result, or None for contiguous: see `result_strides`
        self.layout = attrs.get("layout")
        names_in = [a.name for a in schema.args]
        self.arg_names = tuple(names_in)
        # "Tensor options" (torch's TensorOptions): a requires_grad argument applies to the result.
        self.requires_grad_index = names_in.index("requires_grad") if "requires_grad" in names_in else None
        # a result dtype the caller asks for (``cumsum(x, 0, dtype=...)``): in-place and out= results must have it
        self.dtype_index = next(
            (i for i, a in enumerate(schema.args) if a.name == "dtype" and a.type == "ScalarType"), None)
        self.returns_tensor = all(r.type == "Tensor" for r in schema.returns)

    def __repr__(self):
        return f"<op {self.schema}>"

    @functools.cached_property
    def out_from_out(self):
        """Whether an ``out=`` tensor's dtype changes what the op computes (``dtype_from_out``, ``input_from_out``,
        ``out_composite``): such a call takes the general path, not the op's fast path (`call`)."""
        return any(self.attrs.get(k) for k in ("dtype_from_out", "input_from_out", "out_composite"))

    @functools.cached_property
    def result_type(self):
        """The named tuple type of a result of several named values (``max.dim``'s ``values, indices``), else
        None. Made at first use: each costs ~60 µs, which ``import jitorch`` paid for 36 ops."""
        names = [r.name for r in self.schema.returns]
        return _return_type(self.schema.name, names) if len(names) > 1 and all(names) else None

    # Converters and the generated ``convert`` are made at an op's first use, not when it is declared,
    # which keeps ``import jitorch`` short (most programs use few of the ops).

    @functools.cached_property
    def converters(self):
        """(index, converter or None) per schema argument: `_converter`."""
        return tuple((i, _converter(self, a)) for i, a in enumerate(self.schema.args))

    def convert(self, args):
        """Check and normalise arguments in schema order (TypeError naming a bad one). The first call
        generates the converter (`_make_converter`), which then takes this method's place on the op
        unless a wrapper did already (``clamp``'s)."""
        generated = self.__dict__.get("_generated_convert")
        if generated is None:
            generated = self._generated_convert = _make_converter(self)
            self.__dict__.setdefault("convert", generated)
        return generated(args)

    def __call__(self, *args):
        """Run the op on arguments already in schema order (the interpreter's entry)."""
        return call(self, args)


# Argument conversion ------------------------------------------------------

def _bad_arg(op, arg, value, expected):
    pos = op.schema.args.index(arg) + 1
    raise TypeError(
        f"{op.public_name}(): argument '{arg.name}' (position {pos}) must be {expected}, "
        f"not {type(value).__name__}"
    )


def _to_int(op, arg, v):
    if builtins.type(v) is int:
        return v
    if isinstance(v, (builtins.bool, float)) or (Tensor is not None and isinstance(v, Tensor) and v.dtype.is_floating_point):
        _bad_arg(op, arg, v, "int")
    try:
        return operator.index(v)
    except TypeError:
        _bad_arg(op, arg, v, "int")


def _int64s(op, arg, values):
    """``values`` if each fits int64; else torch's TypeError for a list it cannot unpack."""
    for pos, x in enumerate(values, 1):
        if not INT64_MIN <= x <= INT64_MAX:
            raise TypeError(f"{op.public_name}(): argument '{arg.name}' failed to unpack the object at pos {pos} "
                            f"with error \"Overflow when unpacking long long\"")
    return values


# The dtype of torch's wrapped-number tensor for a Python number
_WRAPPED_DTYPES = {builtins.bool: np.bool_, int: np.int64, float: np.float64}


def _wrapped_number(v):
    """A Python number as the 0-d CPU tensor torch's argument parser makes of it where an op takes numbers
    as tensors (``x.copy_(0.5)``): bool, int64 or float64 (an int past int64 is an OverflowError);
    None for anything else."""
    if isinstance(v, np.generic):
        v = v.item()
    dtype = _WRAPPED_DTYPES.get(builtins.type(v))
    return None if dtype is None else Tensor._from_array(np.asarray(v, dtype))


def _converter(op, arg):
    """A function that checks and normalises one argument, or None."""
    typ = arg.type

    def optional(fn):
        if not arg.optional:
            return fn
        return lambda v: None if v is None else fn(v)

    if typ == "Tensor":
        wrapped_ok = op.kind == "pointwise"
        numbers_as_tensors = op.attrs.get("numbers_as_tensors")

        def check_tensor(v):
            if isinstance(v, Tensor) or (wrapped_ok and isinstance(v, Number) and not isinstance(v, complex)):
                return v
            if isinstance(v, np.generic) and wrapped_ok:
                return v.item()
            wrapped = _wrapped_number(v) if numbers_as_tensors else None
            if wrapped is not None:
                return wrapped
            _bad_arg(op, arg, v, "Tensor")

        if arg.list or arg.varargs:
            def check_list(v):
                if isinstance(v, Tensor) or not isinstance(v, (list, tuple)):
                    _bad_arg(op, arg, v, "tuple of Tensors")
                if arg.elem_optional:
                    return tuple(None if t is None else check_tensor(t) for t in v)
                return tuple(check_tensor(t) for t in v)
            return optional(check_list)
        return optional(check_tensor)
    if typ == "int" and (arg.list or arg.varargs):
        def int_list(v):
            if isinstance(v, (list, tuple)):
                for x in v:
                    if x.__class__ is not int or x > INT64_MAX or x < INT64_MIN:
                        return _int64s(op, arg, tuple(_to_int(op, arg, x) for x in v))
                return tuple(v)
            if Tensor is not None and isinstance(v, Tensor) and v.ndim == 1:
                return tuple(int(x) for x in v.tolist())
            return (_to_int(op, arg, v),)
        if arg.has_default and not arg.optional:  # torch takes None for such a list's default (``amax(x, None)``)
            return lambda v: arg.default if v is None else int_list(v)
        return optional(int_list)
    if typ == "int":
        return optional(lambda v: _to_int(op, arg, v))
    if typ == "float":
        def to_float(v):
            if isinstance(v, (builtins.bool, str)) or not isinstance(v, (Number, np.generic)) and not (
                    Tensor is not None and isinstance(v, Tensor)):
                _bad_arg(op, arg, v, "float")
            return float(v)
        return optional(to_float)
    if typ == "bool":
        def to_bool(v):
            if not isinstance(v, (builtins.bool, np.bool_)):
                _bad_arg(op, arg, v, "bool")
            return builtins.bool(v)
        return optional(to_bool)
    if typ == "Scalar":
        def to_scalar(v):
            if isinstance(v, (Number, np.generic)) and not isinstance(v, complex):
                return v.item() if isinstance(v, np.generic) else v
            if Tensor is not None and isinstance(v, Tensor) and v.numel() == 1:
                return v.item()
            _bad_arg(op, arg, v, "Number")
        return optional(to_scalar)
    if typ == "ScalarType":
        def to_dtype(v):
            try:
                return _dt.to_dtype(v)
            except TypeError:
                _bad_arg(op, arg, v, "jitorch.dtype")
        return optional(to_dtype)
    if typ == "Device":
        return optional(to_device)
    if typ == "str":
        def to_str(v):
            if not isinstance(v, str):
                _bad_arg(op, arg, v, "str")
            return v
        return optional(to_str)
    return None


# Classes an argument may already have, per schema type, so that its converter can be skipped.
_ALREADY = {"Tensor": ("_Tensor",), "int": ("int",), "bool": ("bool",), "float": ("float",),
            "Scalar": ("int", "float", "bool"), "ScalarType": ("_dtype",), "str": ("str",)}
_CONVERT_ENVS: list = []  # generated converters' globals, given the Tensor class by `install`


def _make_converter(op):
    """Generate ``convert(args) -> list``: each argument's converter, skipped when
    the value already has its normal form (the common case, checked inline)."""
    lines = ["def convert(args):", "    a = list(args)"]
    env = {"_Tensor": Tensor, "_dtype": _dt.dtype}
    for i, conv in op.converters:
        if conv is None:
            continue
        arg = op.schema.args[i]
        already = [] if arg.list or arg.varargs else list(_ALREADY.get(arg.type, ()))
        if arg.type == "Tensor" and op.kind == "pointwise" and not arg.list:
            already += ["int", "float"]
        skip = [f"v.__class__ is {c}" for c in already] + ["v is None"] * arg.optional
        env[f"_c{i}"] = conv
        lines.append(f"    v = a[{i}]")
        if skip:
            lines.append(f"    if not ({' or '.join(skip)}):")
            lines.append(f"        a[{i}] = _c{i}(v)")
        else:
            lines.append(f"    a[{i}] = _c{i}(v)")
    lines.append("    return a")
    convert = define("\n".join(lines) + "\n", "convert", "convert", f"<jitorch convert {op.name}>", env)
    _CONVERT_ENVS.append(env)
    return convert


# source text -> its code object, compiled once per process: ops whose generated functions have the same text
# (a converter of one Tensor-or-number argument, a unary op's variant) share it, each run in its own globals.
# (A trace's first call generated 97 functions, 71 texts, at ~0.15 ms of Python's compiler each.)
_CODES: dict = {}
# How a new text is compiled: Python's compiler, or, once the code generator is loaded, its cache of code objects
# kept between processes (`codegen.pycode`: a warm process's first trace skips the compiler).
COMPILE = [lambda src, filename: compile(src, filename, "exec")]
# The name a variant is compiled under, so that variants of several ops share one text (see `define`).
_GENERATED = "_jitorch_generated"


def define(src, defined, name, filename, env):
    """The function ``src`` (one ``def`` of the function ``defined``) makes when run in the globals ``env``, named
    ``name`` and reporting ``filename`` in tracebacks, left in ``env`` as ``name``. Python compiles each text once
    per process (`_CODES`): only its names differ between the ops that share it."""
    code = _CODES.get(src)
    if code is None:
        code = _CODES[src] = COMPILE[0](src, filename)
    exec(code, env)
    fn = env.pop(defined)
    if fn.__code__.co_filename != filename or fn.__name__ != name:
        fn.__code__ = fn.__code__.replace(co_name=name, co_qualname=name, co_filename=filename)
        fn.__name__ = name
    env[name] = fn
    return fn


def convert_args(op, args):
    """Check and normalise arguments in schema order (TypeError naming a bad one)."""
    return op.convert(args)


# Meta-rule warnings -------------------------------------------------------

# Lists that take meta rules' warnings instead of showing them, innermost last: a trace keeps them
# on its graph, whose every run shows them once (as every eager call does), and a graph's run drops
# the ones its nodes give again. With none, a warning is shown as the eager call's own.
_WARNING_SINKS: list = []


def meta_warn(message, category=UserWarning, stacklevel=2):
    """Warn from a meta rule, or from an op's Python code (``stacklevel`` counts from the caller): once per
    call of the op, as torch's eager ops do (its TORCH_WARN), and so once per run of a traced graph."""
    for old, new in reversed(_WARNING_RENAMES):
        if message.startswith(old):
            message = new + message[len(old):]
            break
    if _WARNING_SINKS:
        _WARNING_SINKS[-1].append((category, message))
    else:
        warnings.warn(message, category, stacklevel=stacklevel + 1)


# (prefix, the prefix that replaces it) of the meta warnings the calls in a `warnings_renamed` block give
_WARNING_RENAMES: list = []


@contextlib.contextmanager
def warnings_renamed(old, new):
    """While the block runs, a meta rule's warning that starts with ``old`` starts with ``new`` instead, eagerly
    and in a trace's graph: a composite's warning names the function called (var_mean's, where its var warns)."""
    _WARNING_RENAMES.append((old, new))
    try:
        yield
    finally:
        _WARNING_RENAMES.pop()


# The messages `warn_once` has shown in this process.
WARNED_ONCE: set = set()


def warn_once(message, category=UserWarning, stacklevel=2):
    """torch's TORCH_WARN_ONCE: the first call in the process that gives ``message`` shows it, eagerly or
    while tracing, and no later call (eager or compiled) does."""
    if message not in WARNED_ONCE:
        WARNED_ONCE.add(message)
        warnings.warn(message, category, stacklevel=stacklevel + 1)


@contextlib.contextmanager
def meta_warnings_into(sink):
    """While the block runs, meta rules' warnings go into the list ``sink`` as (category, message)."""
    _WARNING_SINKS.append(sink)
    try:
        yield sink
    finally:
        _WARNING_SINKS.pop()


def quiet_meta(op, args):
    """``op.meta(*args)`` without its warnings: for a caller that asks about shapes, not one that runs
    the op (a code generator, a verifier), or one whose call already warned."""
    with meta_warnings_into([]):
        return op.meta(*args)


# Execution ----------------------------------------------------------------

# Hooks that take over dispatch (the tracer installs one; autograd will too). Each is a `DispatchHook`,
# with ``call(op, args, out)``, ``call_inplace(op, args)`` and, for out= tensors,
# ``resize_out(out, shape, strides)`` and ``write_out(out, result)`` that return
# NotImplemented to pass the call on; and ``hook_registered(t, method)``, told of a tensor hook
# registered while it is installed. Composite ops run their bodies before the
# hooks see them, so hooks see only primitive ops. While any hook is installed,
# the eager fast paths are off (the profiler installs a hook that passes every call on, marked
# ``passes_on``, so that every op comes through `call`, to its recorder: see `hooks_take_calls`).
DISPATCH_HOOKS: list = []


class DispatchHook:
    """A dispatch hook that passes every call on: subclasses override what they take."""

    def call(self, op, args, out):
        return NotImplemented

    def call_inplace(self, op, args):
        return NotImplemented

    def resize_out(self, out, shape, strides):
        return NotImplemented

    def write_out(self, out, result):
        return NotImplemented

    def hook_registered(self, t, method):
        return None


class TransformHook(DispatchHook):
    """Base of the dispatch hooks of function transforms (a vmap level, a forward-AD level): installed for one
    thread and one level. Compiled functions run eagerly while one is installed (`transforms_active`): a graph
    would run on batched or dual tensors as on plain ones. Out= resizes and writes pass by default."""

    def __init__(self, level):
        self.level = level
        self.thread = threading.get_ident()


def transforms_active():
    """Whether a function transform's hook is installed (in any thread)."""
    return any(isinstance(hook, TransformHook) for hook in DISPATCH_HOOKS)


def hooks_take_calls():
    """Whether a dispatch hook that may take calls (a tracer) is installed: the profiler's passes them all on."""
    return any(not getattr(hook, "passes_on", False) for hook in DISPATCH_HOOKS)

# The autograd engine (jitorch.autograd.engine), once imported: records a backward node for
# ops on tensors that require grad. The eager fast paths refuse such tensors while grad mode is on
# (`records_grad`), so they land here.
AUTOGRAD = None

# Autocast (jitorch.ops.autocast, set when imported): ``AUTOCAST(op, args)`` runs an op as autocast does,
# or gives NotImplemented; `call` asks it only while autocast is on in the thread. AUTOCAST_NAMES: the ops
# it may cast, whose eager fast paths step aside for it.
AUTOCAST = None
AUTOCAST_NAMES: set = set()


def record_fast(op, args, result):
    """The backward node of a fast path's ``result`` on tensors that require grad (in grad mode),
    as `call` records it: over the arguments in their normal form."""
    return AUTOGRAD.record(op, op.convert(args), result)


def entry_miss(general):
    """The fallback of an `OpDef.entry` made over ``general``: ``miss(args, **given)`` calls ``general(*args,
    **given)`` with the keywords given as None left out (an entry's ``out=``, which a method variant does not
    take, so that it raises the method's TypeError only when given); with ``general`` None (the entry as the op's
    ``fast``) it gives None."""
    if general is None:
        return lambda args, **given: None

    def miss(args, **given):
        return general(*args, **{k: v for k, v in given.items() if v is not None})
    return miss


def records_grad():
    """Whether an op on a tensor that requires grad records a backward node now (grad mode on).
    Fast paths ask only when such a tensor comes: under ``no_grad`` (a backward pass, an optimizer
    step) they serve it like any other."""
    return AUTOGRAD is not None and AUTOGRAD.is_grad_enabled()


def tensors_of(op, args):
    for i, is_list in op.tensor_args:
        v = args[i]
        if v is None:
            continue
        if is_list:
            yield from (t for t in v if isinstance(t, Tensor))
        elif isinstance(v, Tensor):
            yield v


def map_tensors(op, args, fn):
    """``args`` (a list) with ``fn(t)`` in place of each tensor argument ``t``, in tensor lists too (the
    function transforms substitute their stand-ins this way)."""
    out = list(args)
    for i, is_list in op.tensor_args:
        v = out[i]
        if is_list and v is not None:
            out[i] = [fn(x) if isinstance(x, Tensor) else x for x in v]
        elif isinstance(v, Tensor):
            out[i] = fn(v)
    return out


def check_same_device(op, args):
    """torch's rule: all tensor arguments on one device (0-dim CPU tensors excepted),
    unless the op moves data between devices (``cross_device=True``, as ``copy_``)."""
    if op.attrs.get("cross_device"):
        return None
    first = None
    for t in tensors_of(op, args):
        d = t.device
        if first is None:
            first = d
        elif d is not first and d != first:
            if d.type == "cpu" and t.ndim == 0 or first.type == "cpu" and not t.ndim:
                continue
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, "
                f"{first} and {d}! (when checking arguments for {op.public_name})"
            )
    return first


def call(op, args, out=None, recorded=False):
    """Run ``op`` on arguments in schema order; write into ``out`` if given. While a profiler records, it
    is handed the call first (``recorded``: it has it already)."""
    if _profiling.RECORDER is not None and not recorded:
        return _profiling.RECORDER.op(op, args, lambda: call(op, args, out, True))
    args = op.convert(args)
    if out is not None and len(op.schema.returns) > 1 and not isinstance(out, (tuple, list)):
        # (torch's argument parser's error, before any other: the autograd guard's came first, ``frexp(x, out=t)``)
        raise TypeError(f"{op.public_name}(): argument 'out' must be tuple of Tensors, not "
                        f"{'Tensor' if isinstance(out, Tensor) else type_name(out)}")
    if _AUTOCAST_STATE.key is not None and out is None:
        result = AUTOCAST(op, args)
        if result is not NotImplemented:
            return result
    if out is not None and op.composite is None and op.attrs.get("out_autograd_fallback") is not None:
        _fallback_out_guard(op, args, out)
    if out is not None and op.dtype_index is not None:
        check_out_dtype(args[op.dtype_index], out)
    if op.multi_tensor:
        check_same_device(op, args)
    if out is not None:
        out_check = op.attrs.get("out_check")  # an error only the out= form raises (float_power's out dtype)
        if out_check is not None:  # (before the overlap check, as the in-place form's `inplace_check`)
            out_check(out, *args)
        if not _out_copies(op, args):  # (a result copy_-ed into out is fresh memory: torch checks no overlap)
            check_write_overlap(op, out, args)
        if op.kind == "pointwise" and isinstance(out, Tensor):
            check_input_out_shape(op, out, args)
        if op.out_from_out:
            if op.attrs.get("dtype_from_out"):
                args = _dtype_from_out(op, args, out)
            elif op.attrs.get("input_from_out"):
                args = _input_from_out(op, args, out)
            elif op.attrs.get("out_composite") and isinstance(out, Tensor):  # torch computes into out's dtype
                result = op.attrs["out_composite"](*args, out.dtype)
                return write_out(op, out, out_grad(op, args, out, result), args)
    if op.composite is not None:
        functional = None if out is None else _out_functional(op, args)
        if op.attrs.get("own_derivative") and AUTOGRAD is not None and AUTOGRAD.needs_grad(op, args):
            # differentiated by its rule, not through its body (renorm: torch's backward selects ``g`` where the
            # body's would multiply it by a NaN norm's derivative): the body computes without history
            with _grad_mode.no_grad():
                result = op.composite(*args)
            result = AUTOGRAD.record(op, args, result)
        elif out is not None and _AUTOCAST_STATE.key is not None and functional is None:
            # torch's out= form of a composite runs the out= forms of its ops, which autocast leaves alone
            # (``hstack([bf16, f64], out=f64)`` under float16 autocast: cat_out, not cat's prioritize error)
            with _autocast_excluded():
                result = op.composite(*args)
        else:
            result = op.composite(*args)
        if functional is not None and out.dtype is not result.dtype:
            raise RuntimeError(f"{functional}: Expected the output tensor to have dtype "
                               f"{scalar_name(result.dtype)}, but got an output tensor with dtype "
                               f"{scalar_name(out.dtype)}")
        return result if out is None else write_out(op, out, out_grad(op, args, out, result), args)
    for hook in DISPATCH_HOOKS:
        r = hook.call(op, args, out)
        if r is not NotImplemented:
            return r
    # An out= call is computed straight into out where the result has its dtype and shape (`OpDef.fast_out`),
    # else as the plain call is: by the op's fast path (with ``record`` off, it serves no input that requires grad
    # in grad mode, which `out_grad` refuses), else the kernel; then written into out
    result = None
    try:
        if out is not None and not DISPATCH_HOOKS and not op.out_from_out:
            if op.fast_out is not None and op.fast_out(args, out, True):
                return out
            if op.fast is not None:
                result = op.fast(args, False)
        if result is None:
            result = execute(op, args)
    except NotImplementedError:  # (the op's check in a fast path too: ``hypot(ints, ints, out=bools)``)
        if out is not None:
            cast_before_kernel(op, out, args)
        raise
    if out is not None:
        return write_out(op, out, with_history(op, args, out_grad(op, args, out, result), False), args)
    return with_history(op, args, result)


def check_input_out_shape(op, out, args):
    """torch's TensorIterator resizes no out tensor that is also an input (``add(y, x, out=y)`` with ``y``
    smaller than the broadcast shape): it raises before it looks at dtypes or kernels (fuzz seed 1 of
    tests/ops/test_out_into.py's cases: ``atan2(x, y, out=y)`` of a bool ``y`` raised the cast error first)."""
    tensors = list(tensors_of(op, args))
    if any(t is out for t in tensors):
        try:  # (the op's own refusals come first, as torch's meta functions': ``sub`` of bools; its kernel's after)
            if op.meta is not None:  # (a composite, float_power: its parts check; ``float_power(x, e, out=x)``
                op.meta(*args)       # called None, fuzz seed 8661034 of ``--out-views 0.5``)
        except NotImplementedError:
            pass
        try:
            shape = np.broadcast_shapes(*(t._shape for t in tensors))
        except ValueError:  # (operands that do not broadcast: the meta rule raises torch's error)
            return
        if shape != tuple(out._shape):
            raise RuntimeError(_unbroadcast_message(out, shape))


def returned_as(op, spec, results):
    """``results`` (a list) as ``op`` returns them, by its meta rule's ``spec``: one tensor, a list, or a
    (named) tuple."""
    if isinstance(spec, TensorSpec):
        return results[0]
    if isinstance(spec, list):
        return results
    return op.result_type(*results) if op.result_type else tuple(results)


def with_history(op, args, result, record=True):
    """``result`` of ``op`` on ``args`` with its backward node (``record``) or, for a view, its view tracking,
    and requires_grad where the op's ``requires_grad`` argument asks: what dispatch adds to a computed result
    (a hook that computes results itself, as vmap's, adds it the same way)."""
    if record and AUTOGRAD is not None:
        if AUTOGRAD.needs_grad(op, args):
            result = AUTOGRAD.record(op, args, result)
        elif op.view is not None and not op.attrs.get("reinterprets"):
            AUTOGRAD.track_views(args[0], result)
    if op.requires_grad_index is not None and args[op.requires_grad_index]:
        result._require_grad(True, "factory")
    return result


def _dtype_from_out(op, args, out):
    """torch's ``infer_dtype_from_optional`` for ``sum``, ``cumsum`` and the like: given ``out=`` and no
    ``dtype=``, the op computes in ``out``'s dtype (the input cast to it first). (Given both, they agree:
    `check_out_dtype`.)"""
    i = op.dtype_index
    if not isinstance(out, Tensor) or args[i] is not None:
        return args
    args = list(args)
    args[i] = out.dtype
    return args


def _input_from_out(op, args, out):
    """torch's ``make_reduction`` for ``std``, ``var`` and the like: given ``out=`` of another floating dtype,
    a floating input is read cast to it (``var(halves, out=floats)`` computes in float32 and is not rounded
    to float16 first); an op with ``dtype=`` (mean) is given the out's dtype there instead, and its kernel
    reads the input as torch does for that dtype (mean into a half type reads it in float32)."""
    x = args[0]
    if (not isinstance(out, Tensor) or not isinstance(x, Tensor) or x.dtype is out.dtype
            or not (x.dtype.is_floating_point and out.dtype.is_floating_point)):
        return args
    if op.dtype_index is not None and args[op.dtype_index] is None:
        return _dtype_from_out(op, args, out)
    return (call(OPS["_to_copy"], (x, out.dtype, None)), *args[1:])


def out_grad(op, args, out, result):
    """torch's autograd rule for an ``out=`` call, before anything is written (eagerly and in a trace): a
    differentiable result (`_differentiable`) is refused while grad mode is on and an input or an out tensor
    requires grad. Ops
    whose out= form torch's autograd fallback serves (``out_autograd_fallback(args)``: softmax, ...; or
    every form, ``autograd_fallback(args)``: scatter with reduce=)
    refuse only out tensors that are leaves requiring grad (`_leaf_out_requiring_grad`); where an input or a
    non-leaf out tensor requires grad, the result gets a node whose backward raises
    (`AUTOGRAD.record_unimplemented`), and the out tensor its history by the copy into it."""
    if AUTOGRAD is None or not AUTOGRAD.is_grad_enabled():
        return result
    inputs = AUTOGRAD.needs_grad(op, args)
    outs_grad = False
    for o in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(o, Tensor) and o._requires_grad:
            outs_grad = True
    # (asked first: without a tensor that requires grad every rule below gives the result, and that is the commonest
    # out= call's, where the rules cost as much as the op)
    if not inputs and not outs_grad or not _differentiable(op, result) or _out_copies(op, args):
        return result  # (an ``out_copies`` result: `write_out` copies it into out with copy_'s autograd)
    fallback = op.attrs.get("out_autograd_fallback") or op.attrs.get("autograd_fallback")
    fallback = fallback is not None and fallback(args)
    name = _out_guard_name(op, args)
    if not fallback or _leaf_out_requiring_grad(out):
        raise _out_guard_error(name, fallback)
    return AUTOGRAD.record_unimplemented(op, args, result, name)


def _leaf_out_requiring_grad(out):
    """Whether an out tensor is a leaf that requires grad: the only one torch's autograd fallback refuses (its
    check_inplace); a non-leaf one gets the node whose backward raises, as an input that requires grad gives it
    (fuzz seed 5591419: ``log_softmax(v, -1, out=v)`` of a view ``v`` of a tensor that requires grad)."""
    return any(isinstance(o, Tensor) and o._requires_grad and o.grad_fn is None
               for o in (out if isinstance(out, (tuple, list)) else (out,)))


def _out_guard_error(name, fallback):
    return RuntimeError(f"{'aten::' * fallback}{name}(): functions with out=... arguments don't support automatic "
                        "differentiation, but one of the arguments requires grad.")


def _fallback_out_guard(op, args, out):
    """torch's autograd fallback refuses an out tensor that requires grad before the kernel's checks run
    (``histogram(halves, 3, out=...)`` with a hist that requires grad: the guard's error, not the kernel's
    NotImplementedError); a composite's own checks come first (``diag`` of 3 dims)."""
    if (AUTOGRAD is not None and AUTOGRAD.is_grad_enabled() and op.attrs["out_autograd_fallback"](args)
            and _leaf_out_requiring_grad(out)):
        raise _out_guard_error(_out_guard_name(op, args), True)


# The op whose out= form torch runs for these (its composite's last op, or the ATen op of a Python name), which
# the autograd guard's error names; an alias names the op it is an alias of (``absolute``: abs).
_OUT_GUARD_NAMES = {
    **dict.fromkeys(("column_stack", "concat", "concatenate", "dstack", "hstack", "row_stack", "vstack"), "cat"),
    **dict.fromkeys(("divide", "true_divide"), "div"), **dict.fromkeys(("float_power", "square"), "pow"),
    **dict.fromkeys(("ger", "kron", "outer"), "mul"), "cross": "linalg_cross", "diff": "sub",
    "inverse": "linalg_inv_ex", "lu_solve": "linalg_lu_solve", "max.other": "maximum", "min.other": "minimum",
    "matrix_power": "matmul", "msort": "sort", "nanmean": "nansum", "norm": "linalg_vector_norm", "sgn": "sgn",
    "orgqr": "linalg_householder_product", "qr": "linalg_qr",
    "slogdet": "_linalg_slogdet", "svd": "_linalg_svd", "take_along_dim": "gather",
}


def _out_copies(op, args):
    """Whether torch's out= form of ``op`` on ``args`` computes the result and copy_-s it into out (a composite:
    quantile; ``out_copies(args)``), so that copy_'s autograd serves it rather than the out= guard."""
    copies = op.attrs.get("out_copies")
    return copies is not None and copies(args)


def _out_functional(op, args):
    """The name torch's out= form of a composite ``op`` gives in its error where it computes the plain call's result
    (autocast included) and copies it into an out of that dtype only, refusing another (tensordot's, and inner's of
    two tensors of one dim or more: ``out_functional(args)``); else None."""
    name = op.attrs.get("out_functional")
    return None if name is None else name(args)


def _out_guard_name(op, args):
    name = op.attrs.get("out_guard_name") or _OUT_GUARD_NAMES.get(op.name)
    if callable(name):
        return name(args)
    if name is not None:
        return name
    return op.aliases[0].public_name


def _differentiable(op, result):
    """Whether torch's autograd guards ``op``'s out= form on these results: a floating result, or an integer one
    of an op it differentiates on floating inputs (``add`` of integers into a float out that requires grad);
    comparisons (bool results) and the ops declared nondifferentiable (``argmax``, ``histc``'s float counts) have
    no guard, unless torch's autograd fallback serves their out= form (``histogram``: out tensors that require
    grad are refused)."""
    if "nondifferentiable" in op.pieces:
        return op.attrs.get("out_autograd_fallback") is not None
    results = (result,) if isinstance(result, Tensor) else [r for r in result if isinstance(r, Tensor)]
    return any(r.dtype is not _dt.bool for r in results)


def execute(op, args, spec=None):
    """Eager execution: the view transform, or meta rule (unless given) then device kernel."""
    if op.view is not None:
        return _make_views(op, args)
    if spec is None:
        spec = op.meta(*args)
    device = spec_device(spec)
    if device.type == "meta":
        return _wrap_meta(op, spec)
    # tensors in device memory: ops on them (or making them, or copying from them) run on their device's backend
    backend = DEVICE_BACKENDS.get(device.type)
    if backend is None and (op.cross_device or spec.__class__ is not TensorSpec):
        backend = next((DEVICE_BACKENDS[t.device.type] for t in tensors_of(op, args) if t._storage.on_device), None)
    if backend is not None:
        return _execute_on_device(backend, op, args, spec)
    kernel = op.kernels.get(device.type)
    if kernel is None:
        raise NotImplementedError(f"{op.name} has no kernel for device {device}")
    vals = list(args)
    for i, is_list in op.tensor_args:
        v = vals[i]
        if is_list:
            if v is not None:
                vals[i] = [t._array() if isinstance(t, Tensor) else t for t in v]
        elif isinstance(v, Tensor):  # subclasses too (nn.Parameter)
            vals[i] = v._array()
    token = fp_errors.enter()
    try:
        return _wrap(op, spec, kernel(spec, *vals), args)  # the cast to a half type may overflow, silently
    finally:
        fp_errors.leave(token)


def _execute_on_device(backend, op, args, spec):
    """``op`` on ``backend``'s device, where its tensors live, its new results laid out as on the CPU
    (`result_strides`; a kernel is asked to write a single result so), and a result a device implementation
    laid out otherwise is relaid."""
    single = spec.__class__ is TensorSpec
    strides = result_strides(op, spec, args) if single and None not in spec.shape else None
    result = backend.execute(op, args, spec, strides)
    if single:
        if None in spec.shape:  # a size the data decided: the rule reads the result's
            strides = result_strides(op, TensorSpec(result._shape, result.dtype, result.device), args)
        return backend.laid_out(result, strides)
    if isinstance(result, (tuple, list)):
        specs = spec if isinstance(spec, (tuple, list)) else [None] * len(result)
        relaid = [backend.laid_out(r, result_strides(op, s, args) if isinstance(s, TensorSpec) else None)
                  if isinstance(r, Tensor) else r for r, s in zip(result, specs)]
        if isinstance(result, list):
            return relaid
        return type(result)(*relaid) if hasattr(result, "_fields") else tuple(relaid)
    return result


def spec_device(spec):
    if spec.__class__ is TensorSpec:
        return spec.device
    if isinstance(spec, tuple):
        for s in spec:
            if isinstance(s, TensorSpec):
                return s.device
        if spec and isinstance(spec[0], tuple):
            return spec_device(spec[0])
    if isinstance(spec, list) and spec:
        return spec[0].device
    return to_device("cpu")


def _wrap_one(op, spec, raw, args=None):
    """A kernel's array as the result tensor, laid out as `result_strides` says (given the op's ``args``, for
    a single result), whatever memory order NumPy chose."""
    if raw.__class__ is not np.ndarray:
        raw = np.asarray(raw)
    npd = spec.dtype.np
    if raw.dtype != npd:
        raw = convert(raw, npd)
    if raw.shape != spec.shape and not _matches_unknown(raw.shape, spec.shape):
        raise AssertionError(
            f"internal error in {op.name}: kernel gave shape {raw.shape}, meta rule said {spec.shape}"
        )
    strides = None if args is None else result_strides(op, spec if None not in spec.shape else
                                                       TensorSpec(raw.shape, spec.dtype, spec.device), args)
    if strides is None:
        return contiguous_result(raw, spec.dtype)
    return laid_out(Tensor._from_array(raw, spec.dtype), strides)


def contiguous_result(arr, dtype):
    """A kernel's array as a new contiguous tensor (torch's layout for results of ops without a layout
    rule: reductions, scans, products, indexing), whatever memory order NumPy chose."""
    return Tensor._fresh(arr if arr.flags.c_contiguous else np.ascontiguousarray(arr), dtype)


def result_strides(op, spec, args):
    """The strides of ``op``'s new result ``spec`` (a tensor's; each of several results asks for its own) on
    ``args``, as eager lays it out: the op's ``layout`` rule (pointwise ops follow their operands' memory order,
    copies and ``_like`` factories their input's, sort's results its input's, ``argwhere`` is column-major as
    torch's), or None for contiguous. The tracer gives its results these strides too."""
    layout = op.layout
    if layout is None or spec.__class__ is not TensorSpec:
        return None
    return layout(spec, *args)


def preserved_strides(spec, x, *rest):
    """The layout rule of copies, casts and ``_like`` factories in torch's preserve_format (torch's empty_like:
    `runtime.strided.like_strides`); None (contiguous) for an exactly contiguous ``x``."""
    return like_strides(x._shape, x._stride)


def laid_out(t, strides):
    """``t``, or a copy of it in new memory laid out with ``strides`` (dense), unless ``t`` fills its own
    storage with those strides already."""
    if t._offset == 0 and t._storage.size == t.numel():
        if t._stride == strides:
            return t
        if all(a == b for n, a, b in zip(t._shape, t._stride, strides) if n > 1):
            # (only size-1 dims' strides differ: the same memory, restrided)
            return Tensor._make(t._storage, t._shape, strides, 0)
    out = Tensor._make(Storage.empty(t.numel(), t.dtype, t.device), t._shape, strides, 0)
    out._array()[...] = t._array()
    return out


def _matches_unknown(shape, spec_shape):
    """Data-dependent ops (``nonzero``) give None for dims only their data decides."""
    return len(shape) == len(spec_shape) and all(s is None or s == n for n, s in zip(shape, spec_shape))


def _wrap(op, spec, raw, args):
    if spec.__class__ is TensorSpec:
        return _wrap_one(op, spec, raw, args)
    if spec is None:
        return raw
    if isinstance(spec, list):
        return [_wrap_one(op, s, r) for s, r in zip(spec, raw)]
    out = tuple(_wrap_one(op, s, r, args) if isinstance(s, TensorSpec) else r for s, r in zip(spec, raw))
    return op.result_type(*out) if op.result_type else out


def _wrap_meta(op, spec):
    def one(s):
        if None in s.shape:
            raise NotImplementedError(
                f"{op.name}: the output shape depends on the data, which tensors on device 'meta' do not have"
            )
        return Tensor._empty(s.shape, s.dtype, s.device)
    if spec.__class__ is TensorSpec:
        return one(spec)
    if isinstance(spec, list):
        return [one(s) for s in spec]
    out = tuple(one(s) for s in spec)
    return op.result_type(*out) if op.result_type else out


def _make_views(op, args):
    geo = op.view(*args)
    base = args[0]
    if isinstance(geo, list):
        return tuple(Tensor._view_of(base, *g) for g in geo)
    if len(geo) == 4:  # (shape, strides, offset, dtype): the memory read as another dtype
        return Tensor._reinterpreted(base, *geo)
    return Tensor._view_of(base, *geo)


def check_no_internal_overlap(t):
    """torch's refusal to write into a tensor whose elements share memory (an expanded one); an empty tensor has
    no elements to share it (fuzz seed 7100708: ``nonzero``'s (0, 2) result, of strides (1, 0))."""
    shape = t._shape
    if 0 in shape or 0 not in t._stride:  # (no stride 0: no dim broadcast, the commonest)
        return
    for n, st in zip(shape, t._stride):
        if st == 0 and n > 1:
            raise RuntimeError(
                "unsupported operation: more than one element of the written-to tensor refers to a single memory "
                "location. Please clone() the tensor before performing the operation."
            )


def _expanded(t):
    """Whether ``t``'s elements share memory through a stride-0 dim (an expanded tensor's)."""
    return 0 not in t._shape and any(st == 0 and n > 1 for n, st in zip(t._shape, t._stride))


def expanded_write(op, self):
    """How ``op`` writes in place into ``self`` where self is expanded (`_expanded`): None where torch refuses
    (every op but the few below), else the op's ``expanded_write`` declaration. torch lets ``fill_`` and
    ``zero_`` write through an expanded tensor, and lets index_put_ (so ``x[indices] = v``), masked_fill_ and
    index_fill_ do so with a deprecation warning (fuzz seed 7202545: a write through an expanded meshgrid output);
    an op's ``expanded_write_if(self)`` narrows its declaration to some targets (nan_to_num_'s integers)."""
    declared = op.expanded_write
    if declared is None or not _expanded(self):
        return None
    narrowed = op.attrs.get("expanded_write_if")
    return declared if narrowed is None or narrowed(self) else None


def write_inplace(op, self, args, result):
    """Write an in-place op's ``result`` into ``self``. An expanded self takes torch's element by element write
    into the shared memory: the op's ``expanded_write(b, new, *args)`` writes ``new``'s written elements into
    ``b`` (self's values as a writeable NumPy view over a copy of its distinct memory) in order, so that the
    last element written to a memory location holds it, as torch's serial CPU loop leaves it; each element of
    self is then written with the value its memory location ends with, all alike."""
    write = expanded_write(op, self)
    if write is None:
        self._write(result)
        return
    warned = op.attrs.get("expanded_warning")
    if warned is not None:  # torch's own words (its index_put_'s, masked_fill_'s, index_fill_'s)
        warnings.warn(f"Use of {op.name.split('.')[0]}_ on expanded tensors is deprecated. Please clone() the "
                      f"tensor before performing this operation. This also applies to advanced indexing e.g. "
                      f"{warned}", UserWarning, stacklevel=4)
    old = self._host_array()
    distinct = np.array(old[tuple(slice(0, 1) if st == 0 else slice(None) for st in self._stride)])
    strides = tuple(0 if st == 0 else d for st, d in zip(self._stride, distinct.strides))
    b = np.lib.stride_tricks.as_strided(distinct, old.shape, strides, writeable=True)
    new = result._host_array() if isinstance(result, Tensor) else np.asarray(result)
    write(b, new, *[_host_arrays(a) for a in args[1:]])
    self._write(np.broadcast_to(distinct, old.shape))


def _host_arrays(a):
    """An argument as a kernel takes it: a tensor (or each of a list's) as its host array."""
    if isinstance(a, Tensor):
        return a._host_array()
    if isinstance(a, (list, tuple)):
        return [_host_arrays(x) for x in a]
    return a


def write_all(b, new, *args):
    """`write_inplace`'s write of every element (fill_, zero_: all alike)."""
    b[...] = new


def write_where(mask_of):
    """`write_inplace`'s write of the elements where ``mask_of(shape, *args)`` is True, in order."""
    def write(b, new, *args):
        mask = mask_of(b.shape, *args)
        b[mask] = new[mask]
    return write


def _unbroadcast_message(target, shape):
    return f"output with shape {list(target.shape)} doesn't match the broadcast shape {list(shape)}"


def check_inplace(op, self, spec):
    """An in-place or out= result must keep the target's shape and castable dtype; an expanded target only
    for the few ops torch writes through one (`expanded_write`)."""
    if expanded_write(op, self) is None:
        check_no_internal_overlap(self)
    if spec.shape != self.shape:
        raise RuntimeError(_unbroadcast_message(self, spec.shape))
    check_cast(spec.dtype, self)


def check_cast(dtype, target):
    """torch's error for a result of ``dtype`` that the in-place or out= tensor ``target`` cannot hold."""
    if not _dt.can_cast(dtype, target.dtype):
        raise RuntimeError(f"result type {scalar_name(dtype)} can't be cast to the desired output type "
                           f"{scalar_name(target.dtype)}")


def check_out_dtype(dtype, out):
    """torch's error for an ``out=`` tensor of another dtype than the ``dtype=`` asked for (no cast then)."""
    for o in out if isinstance(out, (tuple, list)) else (out,):
        if dtype is not None and isinstance(o, Tensor) and o.dtype is not dtype:
            raise RuntimeError(f"Expected out tensor to have dtype {cpp_name(dtype)}, but got {cpp_name(o.dtype)} "
                               "instead")


def check_inplace_dtype(op, args):
    """torch's error for ``x.op_(..., dtype=d)`` where ``d`` is not ``x``'s dtype."""
    dtype = args[op.dtype_index]
    if dtype is not None and isinstance(args[0], Tensor) and dtype is not args[0].dtype:
        raise RuntimeError(f"Bad in-place call: input tensor dtype {cpp_name(args[0].dtype)} and output tensor "
                           f"dtype {cpp_name(dtype)} should match")


def call_inplace(op, args, recorded=False):
    """``x.op_(...)``: compute, check, then write into ``x`` (or retarget a view). While a profiler
    records, it is handed the call first (``recorded``: it has it already)."""
    if _profiling.RECORDER is not None and not recorded:
        return _profiling.RECORDER.op(op, args, lambda: call_inplace(op, args, True), inplace=True)
    if op.dtype_index is not None:
        check_inplace_dtype(op, args)
        if op.attrs.get("dtype_from_out"):  # torch's cumsum_ is cumsum(self, out=self): in self's dtype (a
            args = _dtype_from_out(op, args, args[0])  # bool self then has no kernel; fuzz seeds 7103413, 7200013)
    inplace_check = op.attrs.get("inplace_check")  # an error only the in-place form raises (float_power_)
    if inplace_check is not None:
        inplace_check(*args)
    check_write_overlap(op, args[0], args, skip=0)
    if op.fast_into is not None and not DISPATCH_HOOKS and op.fast_into(args):
        return args[0]
    if op.fast is not None and not DISPATCH_HOOKS:
        result = op.fast(args, False)
        if result is not None:
            check_inplace(op, args[0], result)
            write_inplace(op, args[0], args, result)
            return args[0]
    args = op.convert(args)
    if op.multi_tensor:
        check_same_device(op, args)
    self = args[0]
    for hook in DISPATCH_HOOKS:
        r = hook.call_inplace(op, args)
        if r is not NotImplemented:
            return r
    before = None
    if AUTOGRAD is not None and AUTOGRAD.needs_grad_inplace(op, args):
        if op.composite is not None and "derivative" not in op.pieces:
            # a composite differentiated through its body (index_reduce_): the body on a copy of self,
            # whose history autograd then has, written back by copy_ (which the body's saved tensors outlive)
            result = op.composite(self.clone(), *args[1:])
            check_inplace(op, self, result)
            return call_inplace(OPS["copy"], (self, result, False))
        before = AUTOGRAD.prepare_inplace(op, args)
    if op.view is not None:
        shape, strides, offset = op.view(*args)
        self._set_geometry(shape, strides, offset)
    else:
        if op.composite is not None:
            result = op.composite(*args)
            check_inplace(op, self, result)
        else:
            spec = _inplace_meta(op, self, args)
            check_inplace(op, self, spec)
            result = execute(op, args, spec)
        write_inplace(op, self, args, result)
    if before is not None:
        AUTOGRAD.finish_inplace(op, before, args, self)
    return self


def _inplace_meta(op, self, args):
    """``op.meta(*args)``, with torch's order of errors for writing into ``self`` (`cast_before_kernel`)."""
    try:
        return op.meta(*args)
    except NotImplementedError:
        cast_before_kernel(op, self, args)
        raise


def cast_before_kernel(op, target, args):
    """Called where ``op`` found no kernel for its result's dtype (a NotImplementedError on its way out): torch's
    error for a result that the in-place or out= tensor ``target`` cannot hold comes first
    (``int_tensor.bitwise_and_(2.5)``: RuntimeError, not NotImplementedError), as its TensorIterator checks the
    cast before it dispatches (`pointwise_base.defpointwise`'s ``promoted_meta``). A plain call in the handler,
    not a context manager around the call: entering one cost 0.8 µs on every in-place and out= call."""
    promoted = op.attrs.get("promoted_meta")
    if promoted is not None and isinstance(target, Tensor):
        check_cast(promoted(*args).dtype, target)


def write_out(op, out, result, args):
    """Write a result of ``op`` on ``args`` into the ``out=`` tensor(s), resizing them as torch does."""
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise TypeError(f"{op.public_name}(): out must be a tuple of {len(result)} tensors")
        for o, r in zip(out, result):
            write_out(op, o, r, args)
        return op.result_type(*out) if op.result_type else tuple(out)
    if not isinstance(out, Tensor):
        raise TypeError(f"{op.public_name}(): argument 'out' must be Tensor, not {type_name(out)}")
    if out.device is not result.device and out.device != result.device:
        raise RuntimeError(
            f"Expected out tensor to have device {result.device}, but got {out.device} instead"
        )
    if result.dtype is not out.dtype:
        check_cast(result.dtype, out)
    check_no_internal_overlap(out)
    copies = out._requires_grad and AUTOGRAD is not None and AUTOGRAD.is_grad_enabled() and _out_copies(op, args)
    if out._shape != result._shape:
        if op.kind == "pointwise" and any(t is out for t in tensors_of(op, args)):
            # TensorIterator resizes no output that is also an input (``add(x, y, out=x)``): as ``x.add_(y)``
            raise RuntimeError(_unbroadcast_message(out, result.shape))
        if copies and op.attrs.get("out_resize_error"):  # (tensordot's own refusal)
            raise RuntimeError(op.attrs["out_resize_error"])
        resize_out(out, result.shape, out_strides(op, args, result.shape))
    # with history (`out_grad`'s fallback, an ``out_copies`` op's result): the out tensor's history is the copy of
    # it; an ``out_copies`` op copies even a result without, as torch's copy_ (which refuses a leaf out that
    # requires grad)
    if result._requires_grad or copies:
        check_inplace(op, out, result)
        return call_inplace(OPS["copy"], (out, result, False))
    for hook in DISPATCH_HOOKS:  # a trace records the write (a stand-in has no memory), outside autograd as here
        if hook.write_out(out, result) is not NotImplemented:
            return out
    out._write(result)
    return out


def type_name(value):
    """The name torch's argument errors give ``value``'s type: a builtin's alone, others with their module
    (``numpy.ndarray``)."""
    t = type(value)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def out_strides(op, args, shape):
    """The strides of an ``out=`` tensor resized to ``shape``: torch's TensorIterator lays a resized output out
    in its inputs' memory order (pointwise ops and sort: the first input of that shape decides, as
    ``infer_dense_strides``), on every device; other ops' are contiguous."""
    shape = tuple(shape)
    if op.kind in ("pointwise", "sort"):
        for t in tensors_of(op, args):
            if tuple(t._shape) == shape:
                return dense_strides(shape, t._stride)
    return contiguous_strides(shape)


def resize_out(out, shape, strides):
    """Resize an ``out=`` tensor to its result's ``shape`` and ``strides`` (`out_strides`) as torch does,
    warning when it had elements (a dispatch hook, the tracer, resizes its stand-ins itself)."""
    for hook in DISPATCH_HOOKS:
        if hook.resize_out(out, shape, strides) is not NotImplemented:
            return
    message = out_resize_warning(out, shape)
    if message is not None:
        warnings.warn(message, UserWarning, stacklevel=5)
    out._resize(shape, strides)


def out_resize_warning(out, shape):
    """torch's warning for resizing the ``out=`` tensor ``out`` to ``shape``, or None (it had no elements)."""
    if out.numel() == 0:
        return None
    return (f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
            f"which does not match the required output shape {list(shape)}. This behavior is deprecated, and in "
            "a future PyTorch release outputs will not be resized unless they have zero elements. You can "
            "explicitly reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).")


def scalar_name(d):
    """torch's C++ name of a dtype, as its error messages use it ("Float", "Long")."""
    return _dt.SCALAR_NAMES[d.name]


def cpp_name(d):
    """The C++ element type of a dtype as torch's type metadata prints it ("float", "long int")."""
    return _dt.CPP_NAMES[d.name]


# Declaration --------------------------------------------------------------

def defop(schema, *, meta=None, kind="other", cpu=None, view=None, composite=None,
          variants=("function", "method"), method_name=None, kernels=None, doc=None, **attrs):
    """Declare an op. Returns the OpDef; `install` later generates its variants.

    A meta rule may give ``None`` for an output dim that only the data decides
    (``nonzero``); the tracer refuses such ops, eager runs them.
    """
    s = parse_schema(schema)
    if s.full_name in OPS:
        raise ValueError(f"op {s.full_name} declared twice")
    ks = dict(kernels or {})
    if cpu is not None:
        ks["cpu"] = cpu
    if view is not None and meta is None:
        meta = _view_meta(view)
    if meta is None and composite is None:
        raise ValueError(f"op {s.full_name} needs a meta rule")
    op = OpDef(s, meta=meta, kind=kind, kernels=ks, view=view, composite=composite, variants=variants, doc=doc,
               method_name=method_name, attrs=attrs)
    OPS[op.name] = op
    PUBLIC.setdefault(s.name, []).append(op)
    return op


def declare_aliases(names):
    """Declare the ops ``names`` ("abs absolute": full names separated by spaces) one op under several
    names, so that `attach` gives each the pieces attached to any."""
    group = tuple(_named(name, "alias") for name in names.split())
    for op in group:
        op.aliases = group


# The pieces layers above the ops attach (`attach`): piece name -> the layer that attaches it
PIECES = {"derivative": "autograd", "nondifferentiable": "autograd", "decomposition": "ir",
          "simplification": "ir", "lowering": "codegen", "cuda": "backends"}


def attach(piece, names, value):
    """Attach ``value`` as piece ``piece`` (one of `PIECES`) of the ops ``names`` (full names separated
    by spaces, ``"max.dim min.dim"``) and of their aliases; returns ``value``. A name the registry does
    not hold raises LookupError, and a piece attached twice to one op ValueError: both at the import of the
    layer that attaches."""
    if piece not in PIECES:
        raise ValueError(f"unknown op piece {piece!r}: one of {sorted(PIECES)}")
    ops = {}
    for name in names.split():
        for op in _named(name, piece).aliases:
            ops[op.name] = op
    for op in ops.values():
        if piece in op.pieces:
            raise ValueError(f"the {piece} of op {op.name} declared twice")
        op.pieces[piece] = value
    return value


def _named(name, what):
    op = OPS.get(name)
    if op is None:
        raise LookupError(f"a {what} names op {name!r}, which the registry does not hold")
    return op


class Pieces(Mapping):
    """The ops that have piece ``piece``, as a read-only mapping from full name to the piece: a view of the
    registry that stays current as layers attach (for tests and tables; hot paths read ``op.pieces``)."""

    def __init__(self, piece):
        self.piece = piece

    def __getitem__(self, name):
        op = OPS.get(name)
        if op is None or self.piece not in op.pieces:
            raise KeyError(name)
        return op.pieces[self.piece]

    def __iter__(self):
        return (name for name, op in OPS.items() if self.piece in op.pieces)

    def __len__(self):
        return sum(1 for _ in self)


def _view_meta(view):
    def meta(*args):
        geo = view(*args)
        base = args[0]
        if isinstance(geo, list):
            return [TensorSpec(g[0], base.dtype, base.device) for g in geo]
        return TensorSpec(geo[0], geo[3] if len(geo) == 4 else base.dtype, base.device)
    return meta


# Generation of the public variants ------------------------------------------

class _Sentinel:
    """A default that no caller passes: tells a generated variant what it was not given."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<{self.name}>"


NO_MATCH = _Sentinel("no match")           # an overload's variant, given arguments of other types
ABSENT = _Sentinel("not given")            # an alias (or a spread int list) the call did not use
MISSING = _Sentinel("required, not given")  # a required argument an alias may give instead


class _Signature:
    """The Python signature of one generated variant, worked out once per op and form: its parameter list,
    the names that carry the arguments in schema order, and the prologue that gathers varargs and NumPy
    aliases. A variant without aliases reads its arguments straight from its parameters; one with aliases
    (keyword-only parameters) pays one ``is`` test per alias on each call, and `resolve_aliases` runs only
    when one is used."""

    def __init__(self, op, kind, with_out):
        s = op.schema
        method = kind != "function"
        self.name = op.public_name + ("_" if kind == "inplace" else "")
        self.names = s.python_names(method)
        self.aliases = s.aliases(method)
        # torch's overloads of one name split an optional dim list from the others (``squeeze.dims``); a
        # jitorch op that is one overload stands for them all
        self.spread = s.spread_list(method, optional=len(PUBLIC[op.public_name]) == 1)
        order = list(range(len(s.args)))
        if method:  # methods bind the schema argument named ``self`` first (``x.where(condition, other)``)
            order.sort(key=lambda i: s.args[i].name != "self")
        aliased = {i for i, _ in self.aliases}
        first = next((p for p, i in enumerate(order) if i in aliased), len(order))
        spread_at = next((p for p, i in enumerate(order) if s.args[i].varargs or i == self.spread), len(order))
        # a required argument that an alias may give, and every positional one after it, defaults to MISSING
        # (a spread int list given nothing is MISSING too)
        self.missing = [i for p, i in enumerate(order) if not s.args[i].has_default and not s.args[i].varargs and (
            i in aliased or i == self.spread or p > first and p < spread_at and not s.args[i].kwarg_only)]
        self.prologue = []
        positional, keyword, varargs = [], [], None
        for p, i in enumerate(order):
            a, n = s.args[i], self.names[i]
            if p == spread_at:
                # ``zeros(2, 3)``, ``zeros((2, 3))`` or ``zeros(size=(2, 3))``; ``x.flip(0, 1)`` or ``x.flip((0, 1))``
                varargs = f"*_{n}, {n}={'None' if a.varargs else '_A'}"
                self.prologue.append(self._gather(a, i, n))
                continue
            default = "=_M" if i in self.missing else f"=_D[{i}]" if a.has_default else ""
            (keyword if a.kwarg_only or p > spread_at else positional).append(n + default)
        # aliases are keyword-only: a positional argument never lands on one
        keyword += [f"{alias}=_A" for _, alias in self.aliases]
        if with_out:
            keyword.append("out=None")
        self.parts = positional + ([varargs] if varargs else ["*"] if keyword else []) + keyword
        self._alias_check()

    def _gather(self, a, i, n):
        """Code that turns ``*_n`` into the argument, accepting one sequence too."""
        one_seq = f"isinstance({n}[0], _seq)" if a.type == "Tensor" else f"not isinstance({n}[0], _int)"
        given = f"{n} is None" if a.varargs else f"{n} is _A"
        code = (f"    if {given}:\n"
                f"        {n} = _{n}\n"
                f"        if len({n}) == 1 and {one_seq}:\n"
                f"            {n} = {n}[0]\n")
        if not a.varargs:  # a spread int list given nothing takes its default
            code += f"        elif not {n}:\n            {n} = {f'_D[{i}]' if a.has_default else '_M'}\n"
        elif a.type == "int":  # a size given nothing at all is missing (``x.view()``), as in torch; ``x.view(())`` is 0-d
            code += (f"        elif not {n}:\n"
                     f"            raise _BindError('{self.name}() missing 1 required positional arguments: \"{n}\"')\n")
        return code + (f"    elif _{n}:\n"
                       f"        raise _BindError(\"{self.name}() got multiple values for argument '{n}'\")")

    def _alias_check(self):
        tests = [f"{self.names[i]} is _M" for i in self.missing] + [f"{alias} is not _A" for _, alias in self.aliases]
        if not tests:
            return
        given = ", ".join(alias for _, alias in self.aliases) + "," * (len(self.aliases) == 1)
        self.prologue.append(f"    if {' or '.join(tests)}:\n"
                             f"        {self.argnames()} = _resolve(({self.argnames()}), ({given}))")

    def argnames(self):
        return ", ".join(self.names) + "," * (len(self.names) == 1)

    def public(self, fn):
        """``fn``'s signature as the schema gives it (what ``inspect`` and ``help`` show): without the guard
        and alias parameters, and with the required arguments required. Worked out when first asked for
        (`_DeferredSignature`): inspect's reading of a variant cost more than generating it, and a program's
        first call generates the dozens of variants it runs."""
        hidden = {alias for _, alias in self.aliases}

        def make():
            # (read off a twin without ``__signature__``, which inspect would otherwise return)
            twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__)
            twin.__kwdefaults__ = fn.__kwdefaults__
            params = [p.replace(default=inspect.Parameter.empty) if p.default is MISSING else p
                      for name, p in inspect.signature(twin).parameters.items() if name not in hidden]
            return inspect.Signature(params)
        return _DeferredSignature(make)

    def resolver(self, op):
        """``resolve(values, extra, alias_values) -> values``: `resolve_aliases` for this variant."""
        args, names, aliases, name = op.schema.args, self.names, self.aliases, self.name
        return lambda values, given: resolve_aliases(name, args, names, aliases, values, given)


class BindError(TypeError):
    """Arguments that do not bind to a variant's parameters (a required one missing, a name given twice):
    for an overload, the sign to try the next one."""


def resolve_aliases(name, args, names, aliases, values, given):
    """The arguments in schema order of a call that used NumPy's names (``axis=``) or left a required
    argument to them; torch's TypeErrors when a name and its alias are both given (the alias is then an
    "unexpected keyword argument", as torch's parser calls it) or a required argument is missing. An
    argument equal to its default counts as not given."""
    values = list(values)
    for (i, alias), value in zip(aliases, given):
        if value is ABSENT:
            continue
        current = values[i]
        if current is not MISSING and not (args[i].has_default and current is args[i].default):
            raise BindError(f"{name}() got an unexpected keyword argument '{alias}'")
        values[i] = value
    missing = [f"'{names[i]}'" for i, v in enumerate(values) if v is MISSING]
    if missing:
        listed = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
        raise BindError(f"{name}() missing {len(missing)} required positional argument{'s' * (len(missing) > 1)}: "
                        f"{listed}")
    return values


def _view_shortcut(op, names):
    """The eager shortcut of a view op with one tensor argument, as source lines for a variant whose arguments (in
    schema order) are named ``names``: they return the view made without the general path's steps (a view has no
    kernel, and its backward node only when grad mode records it), or fall through to the lines after them, the
    general path (which raises the errors). Also of a composite op declared with ``view_when(*args) -> (shape,
    strides, offset) | None``, the geometry of the one view of its first argument its body makes on these
    arguments (``reshape`` when the strides allow), or None: that view is made so on a tensor without history;
    else the body runs, which autograd differentiates. A view op may declare ``view_when`` too: a geometry that
    gives None where the op's own raises (``view``'s incompatible strides), for the general path to raise it,
    which spares the shortcut the op's frame around it. ``(lines, env)``, or None for other ops.

    Every view op's variants (`_generate`) and the overloads' resolver (`_overloaded`) run these lines in their
    own frame, the one eager construction path of views: a view's cost is its Python calls, and a shortcut called
    as a function cost a frame and an argument tuple more, a sixth of ``x.view(1)``."""
    composite = op.composite is not None
    geometry = op.attrs.get("view_when") or (None if composite else op.view)
    if geometry is None or op.multi_tensor or op.attrs.get("reinterprets"):
        return None
    x = names[0]
    given = ", ".join(names)
    # Arguments the converter leaves as they are when they have their normal form already, tested here: ints
    # (``transpose(0, 1)``), bools (``expand``'s ``implicit``) and tuples of ints (``reshape(2, 3)``), after the
    # tensor. Ops with arguments of other types convert them.
    tests = []  # lines that set ``_v_normal`` False unless `op.convert` would give the arguments back
    for name, a in zip(names[1:], op.schema.args[1:]):
        if a.type == "int" and not a.list and not a.varargs:
            tests += [f"if {name}.__class__ is not int:", "    _v_normal = False"]
        elif a.type == "bool" and not a.list and not a.optional:  # (``expand``'s ``implicit``)
            tests += [f"if {name}.__class__ is not bool:", "    _v_normal = False"]
        elif a.type == "int" and (a.list or a.varargs):
            tests += [f"if {name}.__class__ is not tuple:", "    _v_normal = False", "else:",
                      f"    for _v_n in {name}:",
                      f"        if _v_n.__class__ is not int or _v_n > {INT64_MAX} or _v_n < {INT64_MIN}:",
                      "            _v_normal = False  # (past int64: no plain int)"]
        else:
            tests = None
            break
    if op.schema.args[0].type == "Tensor" and not op.schema.args[0].list and tests is not None:
        body = ["_v_normal = True", *tests,
                "if _v_normal:",
                f"    _v_args = ({given},)",
                f"    _v_geo = _v_geometry({given})",
                "else:",
                f"    _v_args = _v_convert(({given},))",
                "    _v_geo = _v_geometry(*_v_args)"]
    else:
        body = [f"_v_args = _v_convert(({given},))",
                "_v_geo = _v_geometry(*_v_args)"]
    body += ["if _v_geo is not None:",
             "    _v_autograd = _v_R.AUTOGRAD",
             "    if _v_geo.__class__ is list:",
             f"        _v_result = tuple([_v_view_of({x}, *_v_g) for _v_g in _v_geo])",
             f"    elif {x}._requires_grad or _v_autograd is None:",
             f"        _v_result = _v_view_of({x}, _v_geo[0], _v_geo[1], _v_geo[2])  # (spread arguments cost more)",
             "    else:  # (the commonest: made and remembered by its root base at once)",
             f"        return _v_view_of({x}, _v_geo[0], _v_geo[1], _v_geo[2], True)",
             "    if _v_autograd is not None:",
             f"        if {x}._requires_grad and _v_autograd.is_grad_enabled():",
             "            return _v_autograd.record(_op, list(_v_args), _v_result)  # (as `convert` lists them)",
             f"        _v_autograd.track_views({x}, _v_result)",
             "    return _v_result"]
    lines = [f"if isinstance({x}, _Tensor){f' and not {x}._requires_grad' * composite}:",
             *("    " + line for line in body)]
    env = {"_Tensor": Tensor, "_v_convert": op.convert, "_v_geometry": geometry, "_v_view_of": Tensor._view_of,
           "_v_R": sys.modules[__name__], "_op": op}
    return lines, env


def _generate(op, kind, attempt=False, env=None):
    """Generate one variant: 'function' (with out=), 'method' or 'inplace'; its globals go into ``env``
    (a new dict if None).

    With ``attempt=True``, the variant of one overload among several: before it runs the op, it returns
    `NO_MATCH` unless each argument has exactly its type (`_strict_checks`).
    """
    s = op.schema
    with_out = kind == "function" and "out" in op.variants
    sig = _Signature(op, kind, with_out)
    argnames = sig.argnames()
    checks = _strict_checks(op) if attempt else ()
    fast_path = None
    guard = ""
    if checks:
        # a check with an inline form (an isinstance test) is written into the variant: a call costs more
        tests = " and ".join(getattr(pred, "inline", f"_p{i}({{}})").replace("{}", sig.names[i])
                             for i, pred in checks)
        guard = f"    if not ({tests}):\n        return _NO\n"
    if kind == "inplace":
        body = f"    return _call_inplace(_op, ({argnames}))"
        # (an op with a dtype argument or an in-place check of its own runs them first: `call_inplace`)
        if op.flat_into is not None and op.dtype_index is None and "inplace_check" not in op.attrs:
            # (its commonest call written out here, where the op gives it as source: `pointwise_base`'s ``inline``)
            inline = getattr(op.flat_into, "inline", None)
            inline = inline(sig.names) if inline is not None else None
            head = ""
            if inline is not None:
                head = "".join(f"        {line}\n" for line in inline[0])
                env = {} if env is None else env
                env.update(inline[1])
            body = f"    if not _hooks and _profiling.RECORDER is None:\n{head}" \
                   f"        if _flat_into(({argnames})):\n" \
                   f"            return {sig.names[0]}\n" + body
    else:
        # The fast path is tried here rather than in `call` to spare small ops a frame (an op with an entry
        # has tried it before its variant runs: `_entry_variant`; an overload's variant has no entry before it).
        fast_path = None if op.entry is not None and not attempt else op.fast
        view = None if op.entry is not None and not attempt or op.fast is not None else \
            _view_shortcut(op, sig.names)
        autocast = " and _autocast.key is None" if op.public_name in AUTOCAST_NAMES else ""
        # (an op of one argument calls its shortcut with it alone: no tuple to build and unpack)
        shortcut = f"_fast1({sig.names[0]})" if op.fast_one is not None and len(sig.names) == 1 else \
            f"_fast(({argnames}))"
        fast = f"    if not _hooks{' and out is None' * with_out}{autocast}:\n" \
               f"        r = {shortcut}\n" \
               f"        if r is not None:\n" \
               f"            return r\n" if fast_path is not None else ""
        if view is not None:  # (a view op's shortcut: lines of the variant itself)
            fast = f"    if not _hooks{' and out is None' * with_out}{autocast}:\n" + \
                "".join(f"        {line}\n" for line in view[0])
            env = {} if env is None else env
            env.update(view[1])
        if with_out and op.fast_out is not None and (getattr(op.fast_out, "own_out_rules", False) or (
                op.dtype_index is None and "out_check" not in op.attrs and not op.out_from_out)):
            # (an out= call that needs none of `call`'s checks, or one whose fast_out serves only calls that pass
            # the op's out check and dtype rules for out (a reduction's): `OpDef.fast_out`)
            # (its commonest call written out here, where the op gives it as source: `pointwise_base`'s ``inline``)
            inline = getattr(op.fast_out, "inline", None)
            inline = inline(sig.names, "out") if inline is not None else None
            head = ""
            if inline is not None:
                head = "".join(f"        {line}\n" for line in inline[0])
                env = {} if env is None else env
                env.update(inline[1])
            fast += f"    if out is not None and not _hooks and _profiling.RECORDER is None:\n{head}" \
                    f"        if _fast_out(({argnames}), out):\n" \
                    f"            return out\n"
        body = fast + f"    return _call(_op, ({argnames}){', out' * with_out})"
    body = guard + body
    name = sig.name
    src = f"def {_GENERATED}({', '.join(sig.parts)}):\n" + "".join(line + "\n" for line in sig.prologue) + body + "\n"
    env = {} if env is None else env
    env.update({"_call": call, "_call_inplace": call_inplace, "_op": op, "_int": (int, np.integer), "_seq": (list, tuple),
           "_fast": fast_path, "_fast1": op.fast_one, "_flat_into": op.flat_into, "_fast_out": op.fast_out, "_profiling": _profiling, "_hooks": DISPATCH_HOOKS, "_autocast": _AUTOCAST_STATE, "_A": ABSENT, "_M": MISSING,
           "_resolve": sig.resolver(op), "_D": [a.default if a.has_default else None for a in s.args], "_NO": NO_MATCH,
           "_BindError": BindError, "_Tensor": Tensor, "_sizes": (list, tuple, Tensor),
           **{f"_p{i}": pred for i, pred in checks}})
    fn = define(src, _GENERATED, name, f"<jitorch op {op.name}>", env)
    fn.__signature__ = sig.public(fn)
    _describe(fn, op, name)
    return fn


def _describe(fn, op, name):
    """A variant's attributes besides its code: its doc, names and op."""
    fn.__doc__ = (op.doc or "") + f"\n\nSchema: ``{op.schema}``"
    fn.__qualname__ = name
    fn.__module__ = "jitorch"
    fn._op = op


# Variants are generated at their first call, not at `install`, which keeps ``import jitorch`` short (a
# program calls few of the ~900 variants). Until then a variant is a stub: a function with this code, whose
# globals say which variant it stands for. Its first call generates the variant into the stub's globals and
# gives the stub the variant's code and defaults, so every reference to the stub (``jitorch.add``,
# ``Tensor.add``, `FUNCTIONS`) is the variant from then on.
def _stub(*args, **kwargs):
    return _materialize(_self)(*args, **kwargs)  # noqa: F821  (_self: in each stub's own globals)


def _lazy_variant(op, kind):
    """The stub of one variant of ``op`` (see `_stub`), with the variant's name, doc and signature."""
    name = op.public_name + ("_" if kind == "inplace" else "")
    env = {"__builtins__": builtins, "_materialize": _materialize, "_variant": (op, kind)}
    fn = env["_self"] = types.FunctionType(_stub.__code__, env, name)
    _describe(fn, op, name)
    # (what inspect.signature and help show is the variant's from the start: asked for, it generates it)
    fn.__signature__ = _DeferredSignature(lambda: _materialize(fn).__signature__)
    return fn


def _entry_variant(op, kind):
    """The function or method variant of ``op`` as its `OpDef.entry` makes it: one frame from the caller to
    NumPy for the calls it serves (a generated variant that calls ``op.fast`` costs a frame and a tuple more,
    a fifth of a small op), the rest handed to the generated variant, made at its first such call."""
    general = _lazy_variant(op, kind)
    fn = op.entry(general)
    fn.__name__ = general.__name__
    _describe(fn, op, general.__name__)
    fn.__signature__ = general.__signature__
    return fn


def _materialize(fn):
    """The stub ``fn`` made its variant (if not yet): returns ``fn``. Threads that race here generate the same
    code; the variant's key is dropped only once the stub has the variant's code, so none sees a stub
    half made."""
    env = fn.__globals__
    variant = env.get("_variant")
    if variant is not None:
        made = _generate(*variant, env=env)
        fn.__defaults__, fn.__kwdefaults__ = made.__defaults__, made.__kwdefaults__
        fn.__code__ = made.__code__
        fn.__signature__ = made.__signature__
        env.pop("_variant", None)
    return fn


class _DeferredSignature(inspect.Signature):
    """A signature ``make()`` works out when its parameters are first asked for (`_Signature.public`)."""

    __slots__ = ("_make", "_made")

    def __init__(self, make):  # noqa: no super().__init__: the parameters are make()'s, read lazily
        self._make = make
        self._made = None
        self._return_annotation = inspect.Signature.empty

    def _signature(self):
        if self._made is None:
            self._made = self._make()
        return self._made

    @property
    def parameters(self):
        return self._signature().parameters

    def replace(self, **changes):
        return self._signature().replace(**changes)

    def __repr__(self):
        return repr(self._signature())

    def __reduce__(self):
        return self._signature().__reduce__()


def operator_fast_path(fn):
    """The eager fast path for a Python operator (``x + y``) over the variant ``fn`` of one op whose first two
    arguments are its operands, called as ``fast((x, y))`` while no dispatch hook and no autocast are on (as
    the variant calls it): the op has no other arguments, or is pointwise, whose fast path takes the
    other arguments left out as their defaults. None for variants of overloads or ops without a fast path."""
    op = getattr(fn, "_op", None)
    if op is None or op.fast is None or (op.tensor_positions or ())[:2] != (0, 1):
        return None
    rest = op.schema.args[2:]
    if rest and (op.kind != "pointwise" or not all(a.has_default for a in rest)):
        return None
    return op.fast


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, builtins.bool)


def _strict_checks(op):
    """(index, predicate) pairs: an overload matches only values of exactly its types
    (a Tensor is a Tensor, an int an int), so ``max(x, 1)`` and ``max(x, y)`` differ. A predicate's
    ``inline``, where set, is its test as a source expression (``{}``: the value) for `_generate`."""
    checks = []
    for i, a in enumerate(op.schema.args):
        if a.varargs and a.type == "int":  # a size: ints, or one sequence of them (``x.view(2, 3)``, ``x.view(s)``)
            pred = lambda v: isinstance(v, (list, tuple, Tensor)) or _is_int(v)  # noqa: E731
            pred.inline = f"isinstance({{}}, _sizes) or _p{i}({{}})"
            checks.append((i, pred))
            continue
        if a.varargs:
            continue
        if a.type == "Tensor" and not a.list and op.kind == "pointwise":  # a wrapped number is a tensor there
            pred = lambda v: isinstance(v, (Tensor, Number, np.generic)) and not isinstance(v, complex)  # noqa: E731
        elif a.type == "Tensor" and not a.list:
            pred = lambda v: isinstance(v, Tensor)  # noqa: E731
            pred.inline = "isinstance({}, _Tensor)"
        elif a.type == "int":
            pred = (lambda v: _is_int(v) or isinstance(v, (list, tuple))) if a.list else _is_int
        elif a.type in ("Scalar", "float"):
            pred = lambda v: isinstance(v, (Number, np.generic))  # noqa: E731
        elif a.type == "bool":
            pred = lambda v: isinstance(v, (builtins.bool, np.bool_))  # noqa: E731
        elif a.type == "ScalarType":
            pred = lambda v: isinstance(v, _dt.dtype)  # noqa: E731
        else:
            continue
        if a.optional:
            pred = (lambda p: lambda v: v is None or p(v))(pred)  # (no inline form)
        checks.append((i, pred))
    return tuple(checks)


def _overloaded(name, ops, kind):
    """One callable over several overloads: the first whose arguments bind and have exactly its types runs,
    as its own variant (with its fast path)."""
    attempts = []  # generated at the first call (see `_stub`)

    def resolve(*args, **kwargs):
        if not attempts:
            attempts.extend(_generate(op, kind, attempt=True) for op in ops)
        for attempt in attempts:
            try:
                result = attempt(*args, **kwargs) if kwargs else attempt(*args)  # (no dict to unpack: ``x.view(2, 3)``)
            except BindError:
                continue
            except TypeError as e:
                if e.__traceback__.tb_next is None:  # raised binding the arguments, before the variant ran
                    continue
                raise
            if result is not NO_MATCH:
                return result
        got = ", ".join(type(a).__name__ for a in args)
        expected = "\n".join(f" * {op.schema}" for op in ops)
        raise TypeError(f"{name}() received an invalid combination of arguments - got ({got}), "
                        f"but expected one of:\n{expected}")

    # A call of the first overload, ``(Tensor self, int... sizes)`` with a view shortcut, given plain ints
    # (``x.view(2, 3)``) runs its shortcut's lines at once (`_view_shortcut`): the overload its variant would pick,
    # without its frame; any other goes on to the overloads in turn.
    first = ops[0]
    sized = kind != "inplace" and len(first.schema.args) == 2 and first.schema.args[1].varargs and \
        first.schema.args[1].type == "int" and first.schema.args[0].type == "Tensor" and first.fast is None and \
        first.public_name not in AUTOCAST_NAMES and _view_shortcut(first, ("_v_x", "_v_sizes"))
    if sized:
        src = ["def resolve(_v_x=_M, *_v_sizes, **kwargs):",  # (the sizes are the tuple the shortcut takes)
               "    if not kwargs and _v_sizes and _v_sizes[0].__class__ is int and not _hooks:",
               *("        " + line for line in sized[0]),
               "    return _overloads(*(() if _v_x is _M else (_v_x,)), *_v_sizes, **kwargs)"]
        env = {**sized[1], "_hooks": DISPATCH_HOOKS, "_overloads": resolve, "_M": MISSING, "__name__": __name__}
        exec(compile("\n".join(src) + "\n", f"<jitorch overloads {name}>", "exec"), env)
        resolve = env["resolve"]
    resolve.__name__ = resolve.__qualname__ = name
    resolve.__doc__ = "\n\n".join((op.doc or "") + f"\n\nSchema: ``{op.schema}``" for op in ops)
    resolve._ops = ops
    return resolve


def install(tensor_cls):
    """Generate every op's variants; install methods on ``tensor_cls``."""
    global Tensor
    Tensor = tensor_cls
    for env in _CONVERT_ENVS:
        env["_Tensor"] = tensor_cls
    FUNCTIONS.clear()
    METHODS.clear()
    for name, ops in PUBLIC.items():
        for kind, table in (("function", FUNCTIONS), ("method", METHODS), ("inplace", METHODS)):
            chosen = [op for op in ops if kind in op.variants]
            if not chosen:
                continue
            key = (chosen[0].method_name if kind != "function" else name) + ("_" if kind == "inplace" else "")
            if len(chosen) > 1:
                table[key] = _overloaded(key, chosen, kind)
            elif chosen[0].entry is not None and kind != "inplace":
                table[key] = _entry_variant(chosen[0], kind)
            else:
                table[key] = _lazy_variant(chosen[0], kind)
    for key, fn in METHODS.items():
        if key not in tensor_cls.__dict__:
            setattr(tensor_cls, key, fn)
