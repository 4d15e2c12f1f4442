"""Runs a fuzz program in each mode and compares what the runs did.

Modes: ``torch`` (CPU, the independent oracle), ``eager`` (jitorch), ``compiled`` (``jitorch.compile``,
kernels from llvmlite), ``interpreter`` (``jitorch.compile(backend="interpreter")``, the reference
interpreter of the traced graph), ``cuda-eager`` and ``cuda-compiled`` (CUDA tensors on the emulated device
of `jitorch.backends.cuda.fake`). Each mode makes three calls: the first, the rebinding of the program's
closure variables, globals and module attributes, a second call on inputs of other strides and storage
offsets, and a third on the first layouts again. A gradient run calls once on inputs that require grad and
runs backward through a weighted sum of the float outputs.

A call's record holds, per output: its kind, dtype, shape, values, strides and storage offset, and which
input, captured tensor or earlier output it shares memory with; then the values of every input's whole
base buffer (writes outside a view show) and of the captured tensors and module attributes; the
warnings; or the error raised. Every jitorch mode is compared with jitorch eager, and jitorch eager with
torch (strides there only for outputs that share memory with an input or captured tensor, where torch's
view rules define them).

The differences from torch that are by design, and so allowed here, are listed in
docs/differences-from-torch.md. Floats are compared with tolerances by dtype, relative to the magnitude of
the tensor: compiled kernels reassociate sums and keep half-precision intermediates in float32 between
fused ops, and jitorch's math library is not torch's, so only results within a few ulps of each other are
the same result. Integers and bools are compared exactly (the generator applies ops that could turn a
last-bit difference into a different integer only to values that are exact in every mode).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

import jitorch
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from jitorch.backends.cuda.fake import FakeBackend
from jitorch.export import ExportError
from jitorch.ops import registry
from jitorch.ops.overlap import ERROR as OVERLAP_ERROR
from jitorch.runtime.cuda_backend import use_backend
from tests.support import geometry

from .bessel_oracle import float64_bessel
from .generator import SETITEM_0D, grad_loss
from .old_values import reads_old_values
from .program import Instance

MODES = ("torch", "eager", "compiled", "interpreter", "cuda-eager", "cuda-compiled")
CPU_MODES = MODES[:4]
# ``jitorch.export`` of the program, saved to a file and loaded back (`run_exported`), checked against eager calls
# without the rebinding (an exported program keeps the captured values and numbers it was exported with)
EXPORTED = "exported"
# rtol by dtype; atol is rtol times the tensor's largest magnitude (at least 1)
# Relative to a tensor's largest magnitude. Compiled float32 math functions (exp, log, tanh, erf, sigmoid...) are
# not eager's bits: they agree within 4 ulps (5e-7) of eager's and torch's (docs/differences-from-torch.md, "What
# jitorch guarantees for float32 math functions"); the rest of 1e-4 lets those ulps grow through a program's ops.
TOLERANCE = {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 6e-2}
TORCH_TOLERANCE = {"float64": 1e-6, "float32": 2e-4, "float16": 2e-2, "bfloat16": 8e-2}
# Warnings that say how jitorch ran a function (a fall back to eager), not what the program did.
COMPILE_NOTICE = "jitorch.compile:"


@dataclass
class Output:
    kind: str                  # "tensor", "int", "float", "bool", "none", or a type name
    dtype: str = ""
    shape: tuple = ()
    values: object = None      # NumPy array (float64 for floats) or the Python value
    strides: tuple = ()
    offset: int = 0
    alias: object = None       # ("input", i) | ("captured", name) | ("stored", name) | ("output", j) | None
    requires_grad: bool = False
    through: str = ""          # torch's run: the narrowest float dtype its values were computed through


@dataclass
class CallRecord:
    outputs: list = field(default_factory=list)
    inputs: list = field(default_factory=list)     # base buffers after the call, as Output records
    input_views: list = field(default_factory=list)  # the inputs' own shape and strides after the call
    state: dict = field(default_factory=dict)      # captured tensors and module attributes after the call
    warnings: list = field(default_factory=list)
    error: str = ""
    fallbacks: int = 0


@dataclass
class Mismatch:
    mode: str
    reference: str
    call: str
    what: str
    detail: str

    def key(self):
        """What the minimiser keeps failing: the modes, the call and the kind of difference."""
        return (self.mode, self.reference, self.call, self.what.split("[")[0])

    def __str__(self):
        return f"{self.mode} vs {self.reference}, {self.call}: {self.what}: {self.detail}"


def _name(dtype):
    return str(dtype).split(".")[-1]


def _storage_key(t):
    return t.untyped_storage().data_ptr() if t.numel() else None


class ComputedThrough(TorchDispatchMode):
    """In a torch run, the narrowest float dtype each storage's values were computed through, its backward's
    kernels included: a float32 gradient through a bfloat16 ``log_softmax`` carries bfloat16 roundings (fuzz
    seed 7954111: 1 bfloat16 ulp apart at float32 tolerance), so a result is compared at that dtype's tolerance
    (`compare_output`). A kernel's results take the narrowest of its tensor arguments' dtypes and their own, and
    of what those were computed through; a result in an argument's memory (a view, an in-place write) keeps
    what that memory held too."""

    ACTIVE = None

    def __init__(self):
        super().__init__()
        self.narrowest = {}  # storage address -> dtype name

    def of(self, t):
        return self.narrowest.get(_address(t), "")

    def __enter__(self):
        ComputedThrough.ACTIVE = self
        return super().__enter__()

    def __exit__(self, *exc):
        ComputedThrough.ACTIVE = None
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sources = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        names = {self.of(t) for t in sources} | {_name(t.dtype) for t in sources if t.is_floating_point()}
        addresses = {_address(t) for t in sources}
        for t in tree_leaves(out):
            key = _address(t) if isinstance(t, torch.Tensor) else None
            if key is not None:
                found = names | {_name(t.dtype), self.narrowest.get(key, "") if key in addresses else ""}
                self.narrowest[key] = max(found, key=lambda d: TOLERANCE.get(d, 0.0))
        return out


def _address(t):
    """`_storage_key`, None for a tensor without storage (torch's ZeroTensor gradients)."""
    try:
        return _storage_key(t)
    except (RuntimeError, NotImplementedError):
        return None


def _through(T):
    """A `ComputedThrough` for torch's runs, nothing for jitorch's."""
    return ComputedThrough() if T is torch else contextlib.nullcontext()


class SkippedChecks(TorchFunctionMode):
    """torch's checks of values that its CPU kernels skip while a Python dispatch mode is active (the oracle's torch
    runs hold `OldValues`, `Float64Bessel` and `ComputedThrough`), made before the call: ``quantile`` and
    ``nanquantile`` of a tensor ``q`` outside [0, 1] raise torch's error. Under a mode torch clamps a negative ``q``
    and gives a value (fuzz seed 5600577 of ``--edges 0.4 --out-views 0.4 --regions 0.2``: ``v1.nanquantile(v8, 0)``
    of a 0-d ``v8`` of -1.76, which jitorch refuses as torch does without a mode). Also one check torch's kernel
    skips in one form: ``max``/``min`` of every element of an empty tensor with ``out=`` raise the plain call's error,
    where torch 2.13's ``max.unary_out`` returns the reduction's identity, -inf for a float (fuzz seed 5702180 of the
    same flags: ``T.max(v3, out=v12)`` of an empty ``v3``; docs/differences-from-torch.md)."""

    QUANTILES = {torch.quantile, torch.nanquantile, torch.Tensor.quantile, torch.Tensor.nanquantile}
    EXTREMES = {torch.max: "max", torch.min: "min"}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.QUANTILES:
            q = args[1] if len(args) > 1 else kwargs.get("q")
            if isinstance(q, torch.Tensor) and q.device.type == "cpu" and not bool(((q >= 0) & (q <= 1)).all()):
                raise RuntimeError("quantile() q values must be in the range [0, 1]")
        if func in self.EXTREMES and len(args) == 1 and set(kwargs) == {"out"} and args[0].numel() == 0:
            raise RuntimeError(f"{self.EXTREMES[func]}(): Expected reduction dim to be specified for input.numel() "
                               "== 0. Specify the reduction dim with the 'dim' argument.")
        return func(*args, **kwargs)


def skipped_checks(T):
    """A context for running a program on library ``T``: `SkippedChecks` for torch, nothing for jitorch."""
    return SkippedChecks() if T is torch else contextlib.nullcontext()


def _values(T, t):
    t = t.detach()
    if t.dtype in (T.float16, T.bfloat16):
        t = t.to(T.float32)
    a = np.array(t.cpu().numpy(force=True), copy=True)  # (force: torch's gradients may be ZeroTensors)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def record_value(T, v, owners):
    """The Output record of one leaf of a result; ``owners``: [(storage key, owner)] to name aliases."""
    try:
        return _record(T, v, owners)
    except Exception as e:  # a result that cannot be read (a tensor left over from a trace) is a result too
        return Output(f"unreadable {type(e).__name__}", values=str(e).split("\n")[0])


def _requires_grad(t):
    """Whether ``t`` requires grad, as a differentiable dtype can: torch's in-place ops can leave an integer or
    bool tensor requiring grad (docs/differences-from-torch.md)."""
    return bool(t.requires_grad) and (t.dtype.is_floating_point or t.dtype.is_complex)


def _record(T, v, owners):
    if T is torch and isinstance(v, torch.Tensor) and v._is_zerotensor():
        v = torch.zeros(v.shape, dtype=v.dtype)  # torch's zeros without memory (a gradient), read as zeros
    if isinstance(v, T.Tensor):
        key = _storage_key(v)
        alias = next((owner for k, owner in owners if key is not None and k == key), None)
        through = ComputedThrough.ACTIVE.of(v) if T is torch and ComputedThrough.ACTIVE is not None else ""
        return Output("tensor", _name(v.dtype), tuple(v.shape), _values(T, v), tuple(v.stride()),
                      v.storage_offset(), alias, _requires_grad(v), through)
    if v is None:
        return Output("none")
    if isinstance(v, bool):
        return Output("bool", values=v)
    if isinstance(v, int):
        return Output("int", values=v)
    if isinstance(v, float):
        return Output("float", values=v)
    if isinstance(v, tuple):  # a shape
        return Output("tuple", values=tuple(v))
    return Output(type(v).__name__, values=repr(v))


def _flatten(out):
    if isinstance(out, (tuple, list)) and not isinstance(out, torch.Size):
        return [leaf for item in out for leaf in _flatten(item)]
    if isinstance(out, torch.Size):
        return [tuple(out)]
    return [out]


def record_call(T, inst, fn, inputs, bases):
    """Call ``fn`` and record what it gave and did (for torch, what its results were computed through)."""
    with _through(T):
        return _record_call(T, inst, fn, inputs, bases)


def _record_call(T, inst, fn, inputs, bases):
    rec = CallRecord()
    # memory the state held before; the tensors kept alive through the call, so that no new result takes the
    # memory of one the call drops (fuzz seed 7501628: the emulated device's allocator gave a result the address
    # of a stored tensor the call replaced, which then read as that state's memory)
    before = list(inst.state().values())
    held = {_storage_key(t) for t in before if t.numel()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with reads_old_values(T), float64_bessel(T), skipped_checks(T):
                result = fn(*inputs)
        except Exception as e:  # the record says which error; the comparison decides whether it is one
            rec.error = f"{type(e).__name__}: {e}"
            result = None
    for w in caught:
        text = str(w.message)
        if text.startswith(COMPILE_NOTICE):
            rec.fallbacks += 1
        elif text not in registry.WARNED_ONCE:  # (those show once per process, as torch's: not the program's)
            rec.warnings.append(f"{w.category.__name__}: {text}")
    if rec.error:
        return rec
    owners = [(_storage_key(t), ("input", i)) for i, t in enumerate(inputs) if t.numel()]
    # a tensor the call stored (``M.s = y``) on memory the state did not hold is a new result ("stored"),
    # whose layout, as any new result's, is compared among jitorch's modes only
    owners += [(key, ("captured" if key in held else "stored", name))
               for name, key in ((name, _storage_key(t)) for name, t in inst.state().items() if t.numel())]
    for j, leaf in enumerate(_flatten(result)):
        rec.outputs.append(record_value(T, leaf, owners))
        if isinstance(leaf, T.Tensor) and leaf.numel():
            owners.append((_storage_key(leaf), ("output", j)))
    rec.inputs = [record_value(T, b, []) for b in bases]
    rec.input_views = [(tuple(t.shape), tuple(t.stride()), t.storage_offset()) for t in inputs]
    rec.state = {name: record_value(T, t, []) for name, t in inst.state().items()}
    return rec


def _library(mode):
    return torch if mode == "torch" else jitorch


def run_mode(program, mode):
    """The three calls of ``program`` in ``mode``: a list of CallRecord."""
    if mode == EXPORTED:
        return run_exported(program)
    if mode.startswith("cuda"):
        with use_backend(FakeBackend()):
            return _run_calls(program, mode, "cuda")
    return _run_calls(program, mode, "cpu")


def _run_calls(program, mode, device, rebinding=True):
    T = _library(mode)
    inst = Instance(program, T, device)
    fn, rebind = inst.build()
    if not rebinding:
        rebind = _nothing
    if mode.endswith("compiled"):
        fn = jitorch.compile(fn)
    elif mode == "interpreter":
        fn = jitorch.compile(fn, backend="interpreter")
    records = []
    for call in range(3):
        inputs, bases, _ = inst.inputs(call, device)
        records.append(record_call(T, inst, fn, inputs, bases))
        if records[-1].error:
            break
        if call == 0:
            rebind()
    return records


def _nothing():
    return None


def _unbound_eager(program, mode):
    """Eager's three calls without the rebinding between them."""
    return _run_calls(program, mode, "cpu", rebinding=False)


class NotExported(Exception):
    """``jitorch.export`` refused the program (`jitorch.export.ExportError`): data-dependent ops, Python numbers
    read from tensors, tensors stored outside the function. Not a mismatch: no file was written."""


def run_exported(program):
    """The program exported on its first call's inputs, saved to a file and loaded back, called on the first
    layouts, the second's and the first's again: a list of CallRecord (`_unstated`). Raises `NotExported` where
    the export refuses."""
    inst = Instance(program, jitorch)
    fn, _ = inst.build()
    example, _, _ = inst.inputs(0)
    try:
        exported = jitorch.export(fn, tuple(example))
    except ExportError as e:
        raise NotExported(str(e)) from None
    with tempfile.TemporaryDirectory(prefix="jitorch-fuzz-export-") as folder:
        path = os.path.join(folder, "program.jitorch")
        exported.save(path)
        loaded = jitorch.load(path)
    constants = _Constants(program, loaded)
    records = []
    for call in range(3):
        inputs, bases, _ = inst.inputs(call)
        records.append(record_call(jitorch, constants, loaded, inputs, bases))
        if records[-1].error:
            break
    return [_unstated(r) for r in records]


class _Constants:
    """A loaded program's constants in the place of an `Instance`'s captured state (`record_call` names the
    outputs sharing their memory)."""

    def __init__(self, program, loaded):
        self.program = program
        self.loaded = loaded

    def state(self):
        return dict(self.loaded.constants)


def _unstated(record):
    """``record`` with what an exported program promises to keep: its outputs' sharing of the inputs' memory, not
    of the captured tensors' (it writes into copies of its own, ``.constants``, and may return a value where eager
    returned a view of a captured tensor it wrote: among such outputs, which share memory is not compared
    either), nor the captured state, nor warnings (raised by the trace, not by the calls)."""
    outputs = [o if o.alias is None or o.alias[0] == "input" else replace(o, alias=None) for o in record.outputs]
    return replace(record, outputs=outputs, state={}, warnings=[])


def run_grad(program, mode, modes=True):
    """The gradient run in ``mode``: (CallRecord of the forward, {leaf name: gradient Output}). ``modes=False``:
    torch's run without its dispatch modes (`plain_torch_grad`)."""
    T = _library(mode)
    inst = Instance(program, T, grad=True)
    fn, _ = inst.build()
    if mode == "compiled":
        fn = jitorch.compile(fn)
    elif mode == "interpreter":
        fn = jitorch.compile(fn, backend="interpreter")
    inputs, bases, leaves = inst.inputs(0, grad=True)
    rec = CallRecord()
    grads = {}
    with _through(T) if modes else contextlib.nullcontext():
        _grad_call(program, T, fn, inst, inputs, leaves, rec, grads, modes)
    return rec, grads


def _grad_call(program, T, fn, inst, inputs, leaves, rec, grads, modes=True):
    """`run_grad`'s call and backward, filling ``rec`` and ``grads``; torch's under `OldValues` and `Float64Bessel`
    where ``modes``."""
    ruled = T if modes else None  # (the library whose dispatch modes the run takes: None, no library's)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with reads_old_values(ruled), float64_bessel(ruled), skipped_checks(ruled):
                out = fn(*inputs)
            rec.outputs = [record_value(T, leaf, []) for leaf in _flatten(out)]
            loss = grad_loss(T, _flatten(out))
            if loss is None:
                rec.error = "no output requires grad"
                return
            with float64_bessel(ruled):  # (the gradient of i0 is i1)
                loss.backward()
    except Exception as e:
        rec.error = f"{type(e).__name__}: {e}"
        return
    float_inputs = [d for d in program.inputs if d.is_float]
    for decl, leaf in zip(float_inputs, leaves):
        grads[decl.name] = record_value(T, leaf.grad, []) if leaf.grad is not None else Output("none")
    for c in program.captured:
        t = inst.captured[c.name]
        if _requires_grad(t):
            grads[c.name] = record_value(T, t.grad, []) if t.grad is not None else Output("none")


# Comparison ------------------------------------------------------------------------------------------------

def _close(a, b, dtype, table):
    if a.shape != b.shape:
        return False
    if dtype not in table:
        return np.array_equal(a, b)
    rtol = table[dtype]
    finite = np.isfinite(b)
    scale = max(1.0, float(np.max(np.abs(b[finite]))) if finite.any() else 1.0)
    return bool(np.allclose(a, b, rtol=rtol, atol=rtol * scale, equal_nan=True))


def _worst(a, b):
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    if a.shape != b.shape or a.size == 0:
        return f"{a.shape} vs {b.shape}"
    with np.errstate(all="ignore"):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        diff[np.isnan(diff) & (np.isnan(a) == np.isnan(b))] = 0
    i = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))), a.shape)
    return f"at {tuple(int(k) for k in i)}: {a[i]!r} vs {b[i]!r}"


def compare_output(got, want, table, strides=True):
    """The differences of two Output records: a list of (what, detail). ``strides``: compare the strides that
    address elements (`tests.support.geometry`), or, ``"exact"``, every stride, size-1 dims' too (jitorch's modes
    agree on those as eager follows torch's: tests/ops/test_trust46.py)."""
    if got.kind != want.kind:
        if {got.kind, want.kind} <= {"int", "float"} and got.values == want.values:
            return []
        return [("kind", f"{got.kind} vs {want.kind}")]
    if got.kind != "tensor":
        if got.kind == "float" and want.kind == "float":
            ok = _close(np.array([got.values]), np.array([want.values]), "float64", table)
        else:
            ok = got.values == want.values
        return [] if ok else [("value", f"{got.values!r} vs {want.values!r}")]
    out = []
    if got.dtype != want.dtype:
        out.append(("dtype", f"{got.dtype} vs {want.dtype}"))
    if got.shape != want.shape:
        return out + [("shape", f"{list(got.shape)} vs {list(want.shape)}")]
    # (at the tolerance of the narrowest dtype torch computed the values through, where that is wider)
    wider = want.dtype in table and table.get(want.through, 0.0) > table[want.dtype]
    dtype = want.through if wider else want.dtype
    if not _close(got.values, want.values, dtype, table):
        out.append(("values", _worst(got.values, want.values)))
    if got.alias != want.alias:
        out.append(("alias", f"{got.alias} vs {want.alias}"))
    elif strides and (geometry(got.shape, got.strides, got.offset) != geometry(want.shape, want.strides, want.offset)
                      or strides == "exact" and got.strides != want.strides):
        out.append(("strides", f"{got.strides}+{got.offset} vs {want.strides}+{want.offset}"))
    return out


# torch's errors for ops on an integer or bool tensor that an in-place op left requiring grad, and for a
# backward through one: its accident, not jitorch's (docs/differences-from-torch.md)
_INTEGER_GRAD_ERRORS = ("Autograd not support dtype", "isDifferentiableType(grad.scalar_type())")


def _integer_grad_accident(error):
    return bool(error) and any(m in error for m in _INTEGER_GRAD_ERRORS)


# Ops whose torch operands (kron's reshaped ones, ``_unsafe_view``) or results (unsafe_split's, unsafe_chunk's)
# get a version counter of their own: a later write into that memory raises jitorch's "modified by an inplace
# operation" error in a backward, where torch's silently reads the new values (docs/differences-from-torch.md;
# fuzz seed 7612269)
TORCH_UNVERSIONED = {"kron", "unsafe_split", "unsafe_chunk"}
_VERSION_ERROR = "has been modified by an inplace operation"


def _torch_read_new_values(got, want, program):
    """Whether jitorch's backward refused a write that torch's read unversioned (`TORCH_UNVERSIONED`)."""
    return program is not None and bool(got.error) and _VERSION_ERROR in got.error and not want.error and \
        any(s.tag in TORCH_UNVERSIONED for s in program.body)


def _setitem_copy_refused(got, want):
    """Whether a CUDA call raised torch's overlap error where the CPU's did not: ``x[i] = t`` with a 0-d tensor
    ``t`` fills from a CPU ``t`` but copies from a CUDA one (torch's ``copy_to``), and the copy refuses a ``t``
    that overlaps the elements written (tests/cuda/test_layouts.py)."""
    return bool(got.error) and OVERLAP_ERROR in got.error and not want.error


def tolerances(program, against_torch):
    """The tolerance table for ``program``'s results: a float64 result is only as precise as the narrowest
    float data the program holds (a float32 input's ``cosh_`` stacked into a float64 ``out=`` carries float32
    roundings: fuzz seed 7811197), so float64 takes that dtype's tolerance."""
    table = TORCH_TOLERANCE if against_torch else TOLERANCE
    if program is None:
        return table
    narrow = [table[d.dtype] for d in (*program.inputs, *program.captured) if d.dtype in table]
    return {**table, "float64": max([table["float64"], *narrow])}


def compare_calls(got, want, mode, reference, against_torch=False, setitem_copies=False, program=None,
                  layouts="exact"):
    """Mismatches between two lists of CallRecord. ``setitem_copies``: ``got`` is a CUDA run of a program with
    a `SETITEM_0D` statement, whose copies may refuse what the CPU's fills do not (`_setitem_copy_refused`);
    ``program``'s float data sets the float64 tolerance (`tolerances`). ``layouts``: "exact", every output's
    strides are compared exactly (among jitorch's modes); "aliased", only those of outputs sharing memory with
    an input or captured tensor (against torch, and for an exported program, whose new results' layouts are
    its graph's)."""
    table = tolerances(program, against_torch)
    found = []
    for k, (g, w) in enumerate(zip(got, want)):
        call = f"call {k + 1}"

        def add(what, detail):
            found.append(Mismatch(mode, reference, call, what, detail))
        if against_torch and _integer_grad_accident(w.error) or setitem_copies and _setitem_copy_refused(g, w):
            return found
        if g.error or w.error:
            if bool(g.error) != bool(w.error) or not against_torch and g.error != w.error:
                add("error", f"{g.error or 'no error'} vs {w.error or 'no error'}")
            break
        if len(g.outputs) != len(w.outputs):
            add("outputs", f"{len(g.outputs)} vs {len(w.outputs)}")
            continue
        for i, (a, b) in enumerate(zip(g.outputs, w.outputs)):
            view = b.alias is not None and b.alias[0] in ("input", "captured")
            # the layouts of new results are torch's CPU rules, which torch does not promise
            # (docs/differences-from-torch.md): compared among jitorch's modes and devices only, exactly
            exact = layouts == "exact" and not against_torch
            for what, detail in compare_output(a, b, table, strides="exact" if exact else view):
                add(f"output {i} {what}", detail)
        for i, (a, b) in enumerate(zip(g.inputs, w.inputs)):
            for what, detail in compare_output(a, b, table, strides=False):
                add(f"input {i} after the call: {what}", detail)
        for i, (a, b) in enumerate(zip(g.input_views, w.input_views)):
            if geometry(*a) != geometry(*b):
                add(f"input {i} geometry after the call", f"{a} vs {b}")
        if set(g.state) != set(w.state):
            add("captured state", f"{sorted(g.state)} vs {sorted(w.state)}")
        for name in sorted(set(g.state) & set(w.state)):
            for what, detail in compare_output(g.state[name], w.state[name], table, strides=False):
                add(f"captured {name} after the call: {what}", detail)
        if not against_torch and g.warnings != w.warnings:  # (torch's warnings are its own: deprecations)
            add("warnings", f"{g.warnings} vs {w.warnings}")
    if len(got) != len(want) and not found:
        found.append(Mismatch(mode, reference, f"call {min(len(got), len(want)) + 1}", "error",
                              f"{got[-1].error or 'no error'} vs {want[-1].error or 'no error'}"))
    return found


# Ops whose torch backward takes another formula under a dispatch mode (the oracle's torch runs hold three):
# with a mode active torch's autograd treats every tensor as a subclass's, and the gradient of a full ``median``,
# ``nanmedian``, ``max`` or ``min`` becomes ``mask * (g / count)``, NaN in every element where ``g`` is not finite;
# torch's plain CPU formula, and jitorch's, fill the selected elements alone (``T.acos(T.median(x))`` at
# ``median(x) = -1.5``: fuzz seed 8601569, docs/differences-from-torch.md). Where a program holding one has
# another gradient than torch's run under the modes, `plain_torch_grad` is the oracle.
TORCH_MODE_FORMULAS = {"median", "nanmedian", "max", "min"}
# torch's autograd of tensors made in inference mode under a dispatch mode differs too: a view made there of a
# tensor requiring grad (``T.hsplit(v10, [1])[-1]``) does not require grad (fuzz seed 5601341 of ``--edges 0.4
# --out-views 0.4 --regions 0.2``), and backward through a leaf made there with ``requires_grad=True``
# (``T.hamming_window(1, device=D, requires_grad=True)``) finds nothing requiring grad (seed 5601338); without
# modes both are as jitorch's. Such programs too are compared with torch's run without modes.
INFERENCE_REGION = "with T.inference_mode():"


def _torch_moded_differs(program):
    """Whether torch's gradient run of ``program`` under the oracle's dispatch modes may differ from its plain one
    (`TORCH_MODE_FORMULAS`, `INFERENCE_REGION`)."""
    return any(s.tag in TORCH_MODE_FORMULAS or s.lines and s.lines[0] == INFERENCE_REGION for s in program.body)


def plain_torch_grad(program, moded):
    """torch's gradient run of ``program`` without dispatch modes, each gradient at the tolerance of what the
    run under them (``moded``) computed it through."""
    rec, grads = _guarded_grad(program, "torch", modes=False)
    through = {name: out.through for name, out in moded[1].items()}
    return rec, {name: replace(out, through=through.get(name, "")) for name, out in grads.items()}


def compare_grads(got, want, mode, reference, against_torch=False, program=None):
    """Mismatches between two gradient runs; ``program``'s ops decide which torch accidents are no mismatch,
    its float data the float64 tolerance (`tolerances`)."""
    table = tolerances(program, against_torch)
    (grec, ggrads), (wrec, wgrads) = got, want
    if against_torch and (_integer_grad_accident(wrec.error) or _torch_read_new_values(grec, wrec, program)):
        return []
    if grec.error or wrec.error:
        if grec.error != wrec.error:
            return [Mismatch(mode, reference, "grad", "error", f"{grec.error or 'no error'} vs "
                             f"{wrec.error or 'no error'}")]
        return []
    found = []
    for i, (a, b) in enumerate(zip(grec.outputs, wrec.outputs)):
        for what, detail in compare_output(a, b, table, strides=False):
            found.append(Mismatch(mode, reference, "grad", f"forward output {i} {what}", detail))
        if a.kind == "tensor" and b.kind == "tensor" and a.requires_grad != b.requires_grad:
            found.append(Mismatch(mode, reference, "grad", f"forward output {i} requires_grad",
                                  f"{a.requires_grad} vs {b.requires_grad}"))
    for name in wgrads:
        if name not in ggrads:
            found.append(Mismatch(mode, reference, "grad", f"grad of {name}", "missing"))
            continue
        for what, detail in compare_output(ggrads[name], wgrads[name], table, strides=False):
            found.append(Mismatch(mode, reference, "grad", f"grad of {name} {what}", detail))
    return found


@dataclass
class Outcome:
    """What checking a program found: its mismatches, and how much ran."""

    mismatches: list
    fallbacks: int = 0
    modes: tuple = ()
    exported: bool = False  # the program exported (`EXPORTED` among the modes, and no `NotExported`)


def check(program, modes=CPU_MODES, grad_modes=("torch", "eager", "compiled")):
    """Run ``program`` in ``modes`` (and its gradient run in ``grad_modes`` if it has one); the mismatches
    of every jitorch mode against jitorch eager, and of jitorch eager against torch."""
    runs = {}
    for mode in modes:
        if mode != EXPORTED:
            runs[mode] = _guarded(run_mode, program, mode)
    found = []
    exported = False
    if EXPORTED in modes:
        found, exported = _check_exported(program)
    fallbacks = sum(r.fallbacks for r in runs.get("compiled", []))
    if "torch" in runs and "eager" in runs:
        found += compare_calls(runs["eager"], runs["torch"], "eager", "torch", against_torch=True, program=program)
    reference = "eager" if "eager" in runs else "torch"
    for mode in modes:
        if mode in ("torch", reference, EXPORTED):
            continue
        copies = mode.startswith("cuda") and any(s.tag == SETITEM_0D for s in program.body)
        found += compare_calls(runs[mode], runs[reference], mode, reference, against_torch=reference == "torch",
                               setitem_copies=copies, program=program)
    if program.grad and grad_modes:
        grads = {mode: _guarded_grad(program, mode) for mode in grad_modes}
        if "torch" in grads and "eager" in grads:
            against = compare_grads(grads["eager"], grads["torch"], "eager", "torch", against_torch=True,
                                    program=program)
            if against and _torch_moded_differs(program):
                against = compare_grads(grads["eager"], plain_torch_grad(program, grads["torch"]), "eager",
                                        "torch without modes", against_torch=True, program=program)
            found += against
        for mode in grad_modes:
            if mode not in ("torch", "eager") and "eager" in grads:
                found += compare_grads(grads[mode], grads["eager"], mode, "eager", program=program)
    return Outcome(found, fallbacks, tuple(modes), exported)


def _check_exported(program):
    """(mismatches of the exported program against eager calls without the rebinding, whether it exported)."""
    try:
        got = run_exported(program)
    except NotExported:
        return [], False
    except Exception as e:
        got = [CallRecord(error=f"{type(e).__name__}: {e}")]
    want = [_unstated(r) for r in _guarded(_unbound_eager, program, "eager")]
    # a loaded program refuses to write into an input expanded in a call (its write-back is the whole value: fuzz seed
    # 5580745 of --export --edges 0.4); the calls before are compared
    refused = next((k for k, r in enumerate(got) if r.error and "which is expanded (strides" in r.error), None)
    if refused is not None:
        got, want = got[:refused], want[:refused]
    if any("as_strided" in line for s in program.body for line in s.lines):
        # ``as_strided`` addresses memory, which an exported program's is the example's layout: only the calls on
        # that layout, the first and third, are compared (docs/differences-from-torch.md; fuzz seed 3000490)
        got, want = got[:1] + got[2:], want[:1] + want[2:]
    elif len(got) > 1 and len(want) > 1 and len(want[0].outputs) == len(want[1].outputs) == len(got[1].outputs):
        # an output that eager makes a view of an input or new memory by the input's layout (``x.contiguous()``,
        # ``reshape``) is what it was on the example's layout, the first call's: in the second call neither its
        # sharing nor, where the function then writes the input, its values are compared
        # (docs/differences-from-torch.md; fuzz seeds 3000293, 5200912)
        by_layout = [j for j, (a, b) in enumerate(zip(want[0].outputs, want[1].outputs)) if a.alias != b.alias]
        if by_layout:
            # nor the inputs' values after the call and the outputs viewing them: a write into an input reads the
            # view or copy, or writes through it (fuzz seed 5730032 of --export --edges 0.4: ``v0 = x0.contiguous()``
            # then ``T.mul(v0, x0, out=x0)``, x0 * x0 on the example's layout, the old v0 times x0 on another)
            by_layout += [j for j, o in enumerate(want[1].outputs) if o.alias and o.alias[0] == "input"]
            got[1], want[1] = (replace(r, inputs=[Output("by layout") for _ in r.inputs]) for r in (got[1], want[1]))
        got[1], want[1] = (replace(r, outputs=[Output("by layout") if j in by_layout else o
                                               for j, o in enumerate(r.outputs)]) for r in (got[1], want[1]))
        # a view of an input exported on an expanded example is one in the example's layout only: its memory steps
        # say no index steps (``x.expand(2, 3)`` of an ``x`` of stride 0 has strides (0, 0)), so in another layout it
        # is new memory of the view's values (docs/differences-from-torch.md; fuzz seed 5580146 of --edges 0.4)
        expanded = {("input", i) for i, (t, layout) in enumerate(zip(program.inputs, program.layouts[0]))
                    if layout == "expanded" and any(n > 1 for n in t.shape)}
        got[1], want[1] = (replace(r, outputs=[replace(o, alias=None) if o.alias in expanded else o
                                               for o in r.outputs]) for r in (got[1], want[1]))
    return compare_calls(got, want, EXPORTED, "eager", program=program, layouts="aliased"), True


def _guarded(run, program, mode):
    """A mode's records; an error outside the calls (building the program) is a record too."""
    try:
        return run(program, mode)
    except Exception as e:
        return [CallRecord(error=f"{type(e).__name__}: {e}")]


def _guarded_grad(program, mode, modes=True):
    try:
        return run_grad(program, mode, modes)
    except Exception as e:
        return CallRecord(error=f"{type(e).__name__}: {e}"), {}


def signature(mismatch):
    """A failure's kind, for grouping: the modes, what differed and, for errors, the message with its
    numbers and shapes blanked."""
    detail = ""
    if mismatch.what == "error":
        detail = re.sub(r"\[[^\]]*\]|\d+|\(in \w+\)|\w+\(\)", "#", mismatch.detail)[:120]
    return (mismatch.mode, mismatch.reference, re.sub(r"\d+", "#", mismatch.what.split(":")[0]), detail)
