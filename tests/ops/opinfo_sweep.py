"""A deep sweep of jitorch against torch over torch's own OpInfo samples.

For each OpInfo of torch's ``op_db`` whose callable jitorch has: every sample of ``sample_inputs`` and of
``reference_inputs`` (where the OpInfo defines its own), in float32, float64, int64 and bool where torch
supports them (float16 and bfloat16 too unless ``dtypes`` says otherwise), each in four layouts of its tensor
arguments (contiguous; transposed; sliced with a step; the input expanded along its first dim), compared on
values (torch.testing.assert_close's default tolerances per dtype), dtypes, shapes and, where docs/
differences-from-torch.md says jitorch follows torch's layout rules (pointwise results, views), strides.
float64 samples of ops with autograd also compare gradients (jitorch's gradcheck where torch's backward
raises); pointwise and reduction ops also compare ``jitorch.compile`` of the call with eager. A sample torch
raises for (and each of the OpInfo's ``error_inputs``) must raise the same exception type in jitorch without
changing any tensor argument.

A low-precision result (float32 or a half type) outside the tolerances counts as ``closer`` (not a mismatch)
when jitorch's result is at least as close as torch's to torch's float64 result of the same inputs.

Run ``python -m tests.ops.opinfo_sweep --op add --op nn.functional.conv2d`` (or ``--all``); tests/ops/
test_opinfo47.py runs a fixed subset.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import pathlib
import signal
import sys
import time
import warnings

import numpy as np
import torch

import jitorch

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[2] / "tools")]
from apicov import calls  # noqa: E402
from apicov.compare import Lib, SkipSample, torch_to_numpy  # noqa: E402

DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.float16, torch.bfloat16)
LAYOUTS = ("contiguous", "transposed", "stepped", "expanded")
SAMPLE_SECONDS = 20
# The tolerance docs/differences-from-torch.md (Floating-point results) documents for jitorch's float results
# (compiled against eager, eager against torch): relative to the tensor's largest magnitude.
DOCUMENTED_RTOL = {"float64": 1e-7, "float32": 1e-4, "float16": 1e-2, "bfloat16": 6e-2}
# OpInfo classes whose results follow TensorIterator's layout rules (strides compared), and those run compiled.
POINTWISE = ("UnaryUfuncInfo", "BinaryUfuncInfo")
COMPILED = POINTWISE + ("ReductionOpInfo",)
# Factorizations whose factors of a singular matrix (the expanded layout's equal rows) are rounding residues, and
# results built on them (cond: inf or 1e65 by a zero or residual singular value; cholesky_ex: the part past the
# failed pivot, which LAPACK leaves unspecified; lstsq's gels: QR without pivoting, which raises LinAlgError on
# an exact zero pivot and divides by a residual one).
FACTORIZATIONS = frozenset({"lu", "linalg.lu", "linalg.lu_factor", "linalg.lu_factor_ex", "geqrf", "qr", "linalg.qr",
                            "linalg.householder_product", "ormqr", "linalg.ldl_factor", "linalg.ldl_factor_ex",
                            "linalg.eigh", "linalg.cond", "linalg.cholesky_ex", "linalg.lstsq"})
# Results random or uninitialised (compared by dtype and shape only).
RANDOM = calls.RANDOM


class SampleTimeout(Exception):
    """A sample ran longer than its wall-clock deadline (``Sweep.sample_seconds``)."""


@dataclasses.dataclass
class Outcome:
    """One compared sample: ``kind`` is pass, closer, documented, torch-layout, mismatch, skip, unsupported,
    unmapped, harness or capped (samples an op's CPU budget left unrun); ``why`` says what differed."""

    op: str
    label: str
    kind: str
    why: str = ""


def opinfos():
    """torch's op_db (its test-only import shimmed)."""
    return calls.op_db()


def _resolve(root, path):
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def callables(op):
    """(torch callable, jitorch callable) for an OpInfo, or None where jitorch lacks it or the OpInfo's
    callable is a wrapper of its own (a lambda binding options)."""
    for name in [op.name] + [a.name for a in op.aliases]:
        for holder, path in ((torch, name), (torch.Tensor, name)):
            try:
                theirs = _resolve(holder, path)
            except AttributeError:
                continue
            if theirs is not op.op and theirs is not op.method_variant:
                continue
            try:
                ours = _resolve(jitorch if holder is torch else jitorch.Tensor, path)
            except AttributeError:
                return None
            return theirs, ours
    return None


class LaidOut(Lib):
    """A library whose tensor arguments are built in one of LAYOUTS (the same values in every layout but
    ``expanded``, which repeats the input's first row along its first dim in both libraries)."""

    def __init__(self, root, layout, grads, dense=False):
        super().__init__(root)
        self.layout, self.grads, self.leaves, self.first, self.dense = layout, grads, [], True, dense

    def tensor(self, array, requires_grad=False):
        """A tensor owning its memory (torch's from_numpy storage cannot be resized by an ``out=``)."""
        t = super().tensor(array)
        t = t.clone() if self.is_torch else t
        return t.requires_grad_() if requires_grad else t

    def convert(self, obj):
        if isinstance(obj, torch.Tensor):
            first, self.first = self.first, False
            return self._laid_out(torch_to_numpy(obj), obj.requires_grad and self.grads, first)
        return super().convert(obj)

    def _laid_out(self, array, requires_grad, first):
        layout = self.layout
        if layout == "transposed" and array.ndim >= 2:
            t = self.tensor(np.ascontiguousarray(np.swapaxes(array, -1, -2))).transpose(-1, -2)
        elif layout == "stepped" and array.ndim >= 1 and array.shape[-1] > 0:
            t = self.tensor(np.repeat(array, 2, axis=-1))[..., ::2]
        elif layout == "expanded" and first and array.ndim >= 1 and array.shape[0] > 1:
            t = self.tensor(array[:1]).expand(*array.shape)
        else:
            t = self.tensor(array, requires_grad)
        if self.dense and not requires_grad:
            t = t.contiguous()
        if requires_grad:
            self.leaves.append(t)
        return t


def changes_layout(sample, layout):
    """Whether ``layout`` builds any tensor argument of ``sample`` otherwise than contiguously."""
    tensors = [t for t in _tensors((sample.input, sample.args, sample.kwargs))]
    if layout == "transposed":
        return any(t.ndim >= 2 for t in tensors)
    if layout == "stepped":
        return any(t.ndim >= 1 and t.shape[-1] > 0 for t in tensors)
    if layout == "expanded":
        return bool(tensors) and isinstance(sample.input, torch.Tensor) and sample.input.ndim >= 1 \
            and sample.input.shape[0] > 1
    return True


def _tensors(obj, ours=False):
    """The tensors in a sample's arguments: torch's, or jitorch's with ``ours``."""
    if _is_tensor(obj) and isinstance(obj, torch.Tensor) != ours:
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o, ours)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o, ours)


def as_torch(t):
    """A torch copy of a jitorch tensor's values (a torch tensor itself, detached)."""
    if isinstance(t, torch.Tensor):
        return t.detach()
    values = np.array(t.detach().numpy(), copy=True)
    if values.dtype.name == "bfloat16":
        return torch.from_numpy(values.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(values)


def _is_tensor(x):
    return isinstance(x, torch.Tensor) or type(x).__name__ in ("Tensor", "Parameter")


def _flat(result):
    if _is_tensor(result) or not isinstance(result, (list, tuple)):
        return [result]
    out = []
    for r in result:
        out.extend(_flat(r))
    return out


def compare(expected, got, *, strides=False, view=False, meta=False, mode="values"):
    """Why jitorch's ``got`` differs from torch's ``expected``, or None."""
    e, g = _flat(expected), _flat(got)
    if len(e) != len(g):
        return f"{len(g)} results, torch {len(e)}"
    for i, (a, b) in enumerate(zip(e, g)):
        where = f"result {i}: " if len(e) > 1 else ""
        if isinstance(a, torch.Tensor):
            if not _is_tensor(b):
                return f"{where}returns {type(b).__name__}, torch a Tensor"
            if tuple(a.shape) != tuple(b.shape):
                return f"{where}shape {list(b.shape)}, torch {list(a.shape)}"
            ours = str(b.dtype).rsplit(".", 1)[-1]  # (a jitorch dtype, or torch's when torch is compared to itself)
            if str(a.dtype)[6:] != ours:
                return f"{where}dtype {ours}, torch {str(a.dtype)[6:]}"
            if a.is_complex() or a.layout != torch.strided:
                continue
            if meta or (mode == "ties" and i == 1):
                continue
            why = _values(a, b, mode)
            if why:
                return where + why
            if (strides or view) and a.numel() > 1:
                why = _strides(a, b)
                if why:
                    return where + why
        elif isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
            if not meta and not (np.isclose(a, b, rtol=1.3e-6, atol=1e-5) or np.isnan(a) and np.isnan(b)):
                return f"{where}value {b!r}, torch {a!r}"
        elif _is_tensor(b):
            return f"{where}returns a Tensor, torch {type(a).__name__}"
        elif not meta and a != b and not (isinstance(a, torch.dtype) and str(a)[6:] == str(b).rsplit(".")[-1]):
            return f"{where}{b!r}, torch {a!r}"
    return None


def _values(a, b, mode):
    b = as_torch(b)
    a = a.detach().resolve_neg().resolve_conj()
    if mode == "abs":
        a, b = a.abs(), b.abs()
    try:
        torch.testing.assert_close(b, a, equal_nan=True, check_stride=False)
    except AssertionError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "Greatest" in ln or "Mismatched" in ln]
        return "values differ (" + "; ".join(lines)[:160] + ")"
    return None


def _strides(a, b):
    sized = [d for d in range(a.ndim) if a.shape[d] > 1]
    theirs, ours = [a.stride(d) for d in sized], [b.stride(d) for d in sized]
    if theirs != ours:
        return f"strides {tuple(b.stride())}, torch {tuple(a.stride())}"
    return None


def _timeout_in(exc):
    """The SampleTimeout ``exc`` is or was raised from, or None: torch.testing.assert_close wraps an exception
    raised inside its comparison (the deadline's alarm) in a RuntimeError ("Comparing ... resulted in the
    unexpected exception above")."""
    while exc is not None:
        if isinstance(exc, SampleTimeout):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


@contextlib.contextmanager
def _deadline(seconds):
    def alarm(signum, frame):
        raise SampleTimeout(f"over {seconds} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _float64_oracle(theirs, sample, dtype, layout):
    """torch's result of ``sample`` (built in ``layout``) with its ``dtype`` tensors (and dtype arguments) in
    float64."""
    lib = LaidOut(torch, layout, False)
    args = (lib.convert(sample.input),) + tuple(lib.convert(tuple(sample.args)))
    kwargs = lib.convert(dict(sample.kwargs))

    def up(obj):
        if isinstance(obj, torch.Tensor):
            return obj.to(torch.float64) if obj.dtype == dtype else obj
        if obj is dtype:
            return torch.float64
        if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
            return type(obj)(up(o) for o in obj)
        if isinstance(obj, dict):
            return {k: up(v) for k, v in obj.items()}
        return obj
    return _quiet(theirs, *up(args), **up(kwargs))


def closer(expected, got, oracle):
    """Whether each low-precision result of jitorch is at least as close as torch's to the float64 oracle's.
    jitorch's NaN and inf must be where torch has them or where the oracle rounded to the result's dtype has
    them; torch's NaN or inf where the rounded oracle is finite counts as torch's error (matrix_exp of float16,
    which torch computes in float16 and overflows)."""
    for a, b, c in zip(_flat(expected), _flat(got), _flat(oracle)):
        if not isinstance(a, torch.Tensor) or not a.is_floating_point() or a.dtype == torch.float64:
            continue
        rounded = c.detach().to(a.dtype).double()
        b = as_torch(b).double()
        a, c = a.detach().double(), c.detach().double()
        if c.shape != a.shape:
            return False
        if not (_same_non_finite(b, a) or _same_non_finite(b, rounded)):
            return False
        known = c.isfinite()
        theirs = torch.where(a.isfinite(), (a - c).abs(), torch.inf)[known]
        ours = (b - c).abs()[known & b.isfinite()]
        if ours.numel() and ours.max() > theirs.max() * (1 + 1e-6):
            return False
    return True


def _same_non_finite(x, y):
    """Whether ``x`` has its NaNs where ``y`` has and its infinities where ``y`` has the same."""
    return torch.equal(x.isnan(), y.isnan()) and torch.equal(x.isinf(), y.isinf() & (x == y))


def torch_gradient_wrong(name):
    """Whether docs/differences-from-torch.md (Autograd) says torch's gradient of op ``name`` is wrong: the
    fuzzer's list of them, whose gradients are checked by finite differences instead."""
    from tests.fuzz.generator import torch_derivative_wrong
    return torch_derivative_wrong(name)


def torch_unset_at_nan(name):
    """Whether docs/differences-from-torch.md (Special functions) says torch's op ``name`` returns an unset
    variable at a NaN x (orthogonal polynomials whose recurrence stops on the NaN before its first step): the
    fuzzer's list of them, compared outside the NaN x instead."""
    from tests.fuzz.generator import TORCH_UNDEFINED_AT_NAN
    return name.replace(".", "_") in TORCH_UNDEFINED_AT_NAN


def _outside_nan_x(expected, got, x, mode):
    """Whether torch's ``expected`` and jitorch's ``got`` agree where the polynomial's ``x`` is not NaN, and
    jitorch's is NaN or torch's where it is (a negative or NaN degree gives both 0)."""
    if not isinstance(x, torch.Tensor) or not isinstance(expected, torch.Tensor) or not x.isnan().any():
        return False
    nan, ours = x.isnan().broadcast_to(expected.shape), as_torch(got)
    return bool((ours[nan].isnan() | (ours[nan] == expected[nan])).all()) and \
        compare(expected.masked_fill(nan, 0), ours.masked_fill(nan, 0), mode=mode) is None


def _outside_nan_inputs(theirs, mine, leaf):
    """The gradients ``theirs`` and ``mine`` of ``leaf`` with the elements at the leaf's NaNs set to 0: torch's
    gradient at a NaN input depends on the length of the tensor (its vectorised loop and its scalar one
    disagree: hardtanh's and the shrinks' are 1 for 9 float32 elements and 0 for 100; elu's 1 and NaN), so
    neither is an oracle there."""
    nan = leaf.detach().isnan()
    if not nan.any() or theirs.shape != leaf.shape:
        return theirs, mine
    return theirs.masked_fill(nan, 0), as_torch(mine).masked_fill(nan, 0)


def _float64_gradients(theirs, sample, cotangents):
    """torch's gradients of ``sample``'s results (with ``cotangents``) with every float input in float64."""
    def up(obj):
        if isinstance(obj, torch.Tensor) and obj.is_floating_point():
            return obj.detach().double().requires_grad_(obj.requires_grad)
        if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
            return type(obj)(up(o) for o in obj)
        if isinstance(obj, dict):
            return {k: up(v) for k, v in obj.items()}
        return obj
    lib = LaidOut(torch, "contiguous", True)
    args = (lib.convert(up(sample.input)),) + tuple(lib.convert(up(tuple(sample.args))))
    result = _quiet(theirs, *args, **lib.convert(up(dict(sample.kwargs))))
    outs = [t for t in _flat(result) if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(outs, lib.leaves, [c.double() for c in cotangents], allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, lib.leaves)]


def within_documented(expected, got):
    """Whether every float result is within the tolerance docs/differences-from-torch.md documents for
    jitorch's float results (Floating-point results: relative to the tensor's largest magnitude)."""
    for a, b in zip(_flat(expected), _flat(got)):
        if not isinstance(a, torch.Tensor) or not a.is_floating_point():
            continue
        x, y = a.detach().double(), as_torch(b).double()
        if not torch.equal(x.isnan(), y.isnan()) or not torch.equal(x.isinf(), y.isinf() & (x == y)):
            return False
        finite = x.isfinite()
        if finite.any() and ((x - y)[finite].abs().max() > DOCUMENTED_RTOL[str(a.dtype)[6:]] * x[finite].abs().max()):
            return False
    return True


def same_exception_type(mine, theirs):
    """Whether jitorch's exception ``mine`` is of the type of torch's ``theirs``: an instance of a builtin
    type, or of jitorch's class of the same name for torch's own (``torch.linalg.LinAlgError``)."""
    kind = type(theirs)
    if kind.__module__ == "builtins":
        return isinstance(mine, kind)
    names = {c.__name__.lstrip("_") for c in type(mine).__mro__}
    return kind.__name__.lstrip("_") in names


def _cast_into_out(theirs, sample, layout):
    """torch's result of ``sample`` without its ``out=`` tensor, cast to that tensor's dtype, where the two
    dtypes differ and the cast is one torch allows; else None."""
    out = sample.kwargs.get("out")
    if not isinstance(out, torch.Tensor):
        return None
    lib = LaidOut(torch, layout, False)
    try:
        result = _quiet(theirs, lib.convert(sample.input), *lib.convert(tuple(sample.args)),
                        **lib.convert({k: v for k, v in sample.kwargs.items() if k != "out"}))
    except Exception:
        return None
    if not isinstance(result, torch.Tensor) or result.dtype == out.dtype or \
            not torch.can_cast(result.dtype, out.dtype) or result.shape != out.shape:
        return None
    return result.to(out.dtype)


def _aliases(result, args):
    """Whether a tensor result of torch shares memory with a tensor argument (a view: strides compared)."""
    pointers = {t.untyped_storage().data_ptr() for t in _tensors(args)}
    return any(isinstance(r, torch.Tensor) and r.layout == torch.strided and r.numel() > 0
               and r.untyped_storage().data_ptr() in pointers for r in _flat(result))


def _within_rank(name, expected, got):
    """torch's and jitorch's SVDs ``(U, S, V)`` (``svd``) or ``(U, S, Vh)`` (``linalg.svd``) with only the
    singular vectors of torch's nonzero singular values (relative to the largest): the others, and the further
    columns of a full U or V (``some=False``, ``full_matrices=True``), are any orthonormal basis of the null
    space, which rounding chooses (in torch's LAPACK as in jitorch's)."""
    values = expected[1].detach()
    if values.numel() == 0 or expected[0].numel() == 0:
        return expected, got
    largest = values.abs().amax(-1, keepdim=True)
    tol = 1e-4 if values.dtype != torch.float64 else 1e-10
    k = int((values > largest * tol).sum(-1).min())

    def cut(result):
        u, s, v = result
        return u[..., :k], s, v[..., :k] if name == "svd" else v[..., :k, :]
    return cut(expected), cut(got)


def _snapshot(tensors):
    return [np.array(t.detach().numpy(), copy=True) for t in tensors]


def _same(before, tensors):
    return all(np.array_equal(b, np.asarray(t.detach().numpy()), equal_nan=True) for b, t in zip(before, tensors))


def _mode(op):
    if RANDOM.search(op.name):
        return "meta"
    if calls.UP_TO_SIGN.search(op.name):
        return "abs"
    return "values"


class Sweep:
    """Runs the samples of OpInfos and collects Outcomes."""

    def __init__(self, dtypes=DTYPES, layouts=LAYOUTS, grads=True, compiled=True, errors=True,
                 reference=True, limit=None, op_seconds=None, sample_seconds=SAMPLE_SECONDS, compiled_rotates=False):
        """``compiled_rotates`` compares compiled with eager in each sample's first layout and in one of its
        other layouts, taken in turn from sample to sample, rather than in all (the suite's subset, where
        compiling was most of the time): every sample and every layout is still compiled."""
        self.dtypes, self.layouts, self.grads, self.compiled = dtypes, layouts, grads, compiled
        self.compiled_rotates = compiled_rotates
        self.errors, self.reference, self.limit, self.op_seconds = errors, reference, limit, op_seconds
        self.sample_seconds = sample_seconds
        self.outcomes: list[Outcome] = []

    def record(self, op, label, kind, why=""):
        self.outcomes.append(Outcome(op.full_name, label, kind, why))

    def run_op(self, op, ours=None):
        """Every sample of ``op``; ``ours`` replaces jitorch's callable (the sweep's own tests)."""
        pair = callables(op)
        if pair is None:
            self.record(op, "", "unmapped")
            return
        theirs, ours = pair[0], ours or pair[1]
        # (torch's reflected operators, ``Tensor.__rsub__``, are methods even where the OpInfo's op is one)
        method = theirs is op.method_variant and theirs is not op.op or op.name.startswith("__")
        supported = op.supported_dtypes("cpu")
        began = time.process_time()
        for dtype in self.dtypes:
            if dtype not in supported:
                continue
            for source, samples in self._sources(op, dtype):
                for i, sample in enumerate(samples):
                    if self.limit is not None and i >= self.limit:
                        break
                    if self.op_seconds is not None and time.process_time() - began > self.op_seconds:
                        # (one outcome per generator and dtype cut short: the samples it did not run)
                        self.record(op, f"{source} {str(dtype)[6:]}", "capped",
                                    f"samples #{i}-#{len(samples) - 1} not run (over {self.op_seconds} s CPU)")
                        break
                    self._sample(op, theirs, ours, method, sample, f"{source}#{i} {str(dtype)[6:]}", dtype, i)
        if self.errors and op.error_inputs_func is not None:
            self._errors(op, theirs, ours, method)

    def _sources(self, op, dtype):
        grads = self.grads and dtype == torch.float64 and op.supports_autograd
        sources = [("sample", op.sample_inputs)]
        if self.reference and op.reference_inputs_func is not None:
            sources.append(("reference", op.reference_inputs))
        for name, make in sources:
            try:
                samples = _quiet(lambda: list(make("cpu", dtype, requires_grad=grads)))
            except Exception:
                # some generators make integer tensors that cannot require grad: their samples without it
                try:
                    samples = _quiet(lambda: list(make("cpu", dtype, requires_grad=False)))
                except Exception as exc:
                    self.record(op, f"{name} {str(dtype)[6:]}", "harness", f"generator: {type(exc).__name__}: {exc}")
                    continue
            yield name, samples

    def _call(self, fn, lib, sample):
        args = (lib.convert(sample.input),) + tuple(lib.convert(tuple(sample.args)))
        kwargs = lib.convert(dict(sample.kwargs))
        return args, kwargs, _quiet(fn, *args, **kwargs)

    def _sample(self, op, theirs, ours, method, sample, label, dtype, index=0):
        if method and not isinstance(sample.input, torch.Tensor):
            return  # (a method's self is a tensor: torch's descriptor refuses a number, jitorch's need not)
        layouts = [layout for layout in self.layouts if layout == "contiguous" or changes_layout(sample, layout)]
        for turn, layout in enumerate(layouts):
            tag = f"{label} {layout}"
            try:
                with _deadline(self.sample_seconds):
                    self._compare(op, theirs, ours, sample, tag, layout, dtype,
                                  compiled=self.compiled and (not self.compiled_rotates or turn == 0
                                                              or turn == 1 + index % (len(layouts) - 1)))
            except SkipSample:
                continue
            except Exception as exc:
                timeout = _timeout_in(exc)
                if timeout is not None:
                    self.record(op, tag, "mismatch", f"timed out ({timeout})")
                else:  # the harness's own failure, reported as such
                    self.record(op, tag, "harness", f"{type(exc).__name__}: {str(exc)[:120]}")

    def _compare(self, op, theirs, ours, sample, tag, layout, dtype, compiled=True):
        grads = self.grads and layout == "contiguous" and dtype == torch.float64 and op.supports_autograd
        tlib, jlib = LaidOut(torch, layout, grads), LaidOut(jitorch, layout, grads)
        torch.manual_seed(0)
        try:
            targs, tkwargs, expected = self._call(theirs, tlib, sample)
        except SkipSample:
            raise
        except Exception as exc:
            if layout == "expanded" and op.name in FACTORIZATIONS and type(exc).__name__.lstrip("_") == "LinAlgError":
                # the singular matrix's exact zero pivot in torch's rounding, a residue in jitorch's (below); a
                # jitorch that raises too is compared as such
                try:
                    got = self._call(ours, LaidOut(jitorch, layout, False), sample)[2]
                    unlike = self._unlike_own_on_copies(ours, layout, sample, got, "values")
                except (SkipSample, SampleTimeout):
                    raise
                except Exception:
                    unlike = "raises"
                if not unlike:
                    return self.record(op, tag, "documented", f"singular (equal rows): torch raises {exc}"[:160])
            if layout == "contiguous" or "view size is not compatible" not in str(exc) or \
                    self._raises_too(ours, layout, sample):
                return self._raises(op, ours, jlib, sample, tag, exc, theirs)
            # torch's kernel views a stride it cannot (take_along_dim): its result on contiguous copies
            tlib = LaidOut(torch, layout, grads, dense=True)
            targs, tkwargs, expected = self._call(theirs, tlib, sample)
            tag += " (torch raises on this layout)"
        jitorch.manual_seed(0)
        try:
            args = (jlib.convert(sample.input),) + tuple(jlib.convert(tuple(sample.args)))
            kwargs = jlib.convert(dict(sample.kwargs))
        except AttributeError as exc:
            return self.record(op, tag, "unsupported", f"argument: {exc}")
        try:
            got = _quiet(ours, *args, **kwargs)
        except Exception as exc:
            return self.record(op, tag, "mismatch", f"raises {type(exc).__name__}: {str(exc)[:100]}")
        if op.name in ("svd", "linalg.svd"):
            expected, got = _within_rank(op.name, expected, got)
        mode = _mode(op)
        if mode == "values" and dtype != torch.float32 and calls.TIES.search(op.name):
            mode = "ties"
        why = compare(expected, got, strides=type(op).__name__ in POINTWISE and mode == "values",
                      view=mode == "values" and _aliases(expected, (targs, tkwargs)), meta=mode == "meta", mode=mode)
        kind = "pass"
        if why and why.startswith(("values", "result")) and "values differ" in why and \
                dtype in (torch.float32, torch.float16, torch.bfloat16):
            try:
                if closer(expected, got, _float64_oracle(theirs, sample, dtype, layout)):
                    kind = "closer"
            except Exception:
                pass
        if why and kind == "pass" and "values differ" in why and torch_unset_at_nan(op.name) and \
                _outside_nan_x(expected, got, targs[0], mode):
            kind, why = "documented", f"torch's unset result at a NaN x: {why}"
        if why and kind == "pass" and "values differ" in why and within_documented(expected, got):
            kind = "documented"
        if why and kind == "pass" and "values differ" in why and layout != "contiguous":
            # torch's result that depends on the memory layout of equal values (median of an expanded
            # input) is torch's defect: jitorch's must equal torch's on contiguous copies instead
            dense = self._call(theirs, LaidOut(torch, layout, False, dense=True), sample)[2]
            if compare(dense, expected, mode=mode) and not compare(dense, got, mode=mode):
                kind = "torch-layout"
        if why and kind == "pass" and "values differ" in why and layout == "expanded" and op.name in FACTORIZATIONS:
            # an expanded input's rows are equal: a singular matrix, whose factors below the first pivot or
            # reflector are rounding residues (docs/differences-from-torch.md, Linear algebra): jitorch's must
            # not depend on the layout instead
            if not self._unlike_own_on_copies(ours, layout, sample, got, mode):
                kind, why = "documented", f"singular (equal rows): {why}"
        if why and kind == "pass":
            return self.record(op, tag, "mismatch", why)
        if grads and mode == "values":
            why = self._gradients(expected, got, tlib.leaves, jlib.leaves, ours, args, kwargs, (theirs, sample, op.name))
            if why:
                return self.record(op, tag, "mismatch", f"gradient: {why}")
        if compiled and type(op).__name__ in COMPILED and mode == "values" and \
                dtype in (torch.float32, torch.float64):
            why = self._compiled(ours, jlib, sample, layout, got)
            if why:
                return self.record(op, tag, "mismatch", f"compiled: {why}")
        self.record(op, tag, kind, why or "")

    def _unlike_own_on_copies(self, ours, layout, sample, got, mode):
        """Why jitorch's result ``got`` of ``sample`` in ``layout`` differs from its result on contiguous copies."""
        dense = self._call(ours, LaidOut(jitorch, layout, False, dense=True), sample)[2]
        return compare([as_torch(t) if _is_tensor(t) else t for t in _flat(dense)], got, mode=mode)

    def _raises_too(self, ours, layout, sample):
        """Whether jitorch raises a RuntimeError for ``sample`` in ``layout`` (``view`` of a transposed input,
        as torch), rather than computing where torch's kernel views a stride it cannot (take_along_dim)."""
        try:
            self._call(ours, LaidOut(jitorch, layout, False), sample)
        except RuntimeError:
            return True
        return False

    def _raises(self, op, ours, jlib, sample, tag, exc, theirs=None):
        """torch raised for the sample: jitorch must raise the same type, leaving its tensors unchanged; where
        torch refuses an ``out=`` of another dtype than the result's, jitorch must cast the result into it
        (docs/differences-from-torch.md, Op calls torch refuses: out= of another dtype)."""
        cast = _cast_into_out(theirs, sample, jlib.layout) if theirs is not None else None
        try:
            args = (jlib.convert(sample.input),) + tuple(jlib.convert(tuple(sample.args)))
            kwargs = jlib.convert(dict(sample.kwargs))
        except SkipSample:
            raise
        except AttributeError as exc:
            return self.record(op, tag, "unsupported", f"argument: {exc}")
        except ValueError as exc:  # (NumPy, which jitorch's tensors are made from, holds up to 64 dims)
            return self.record(op, tag, "skip", f"argument not made: {exc}")
        tensors = list(_tensors((args, kwargs), ours=True))
        before = _snapshot(tensors)
        try:
            _quiet(ours, *args, **kwargs)
            if cast is not None:
                why = compare(cast, kwargs["out"])
                return self.record(op, tag, "mismatch" if why else "documented", why or "out= of another dtype")
        except Exception as mine:
            if not same_exception_type(mine, exc):
                return self.record(op, tag, "mismatch", f"raises {type(mine).__name__}, torch {type(exc).__name__}"
                                   f" ({str(exc)[:60]})")
            if not _same(before, tensors):
                return self.record(op, tag, "mismatch", "raised after writing a tensor argument")
            return self.record(op, tag, "pass", "raises")
        return self.record(op, tag, "mismatch", f"no error (torch raises {type(exc).__name__}: {str(exc)[:80]})")

    def _gradients(self, expected, got, tleaves, jleaves, ours, args, kwargs, call):
        """Why jitorch's gradients of the sample's results (times a random cotangent) differ from torch's;
        a gradient of a low-precision input outside the tolerances passes where it is at least as close as
        torch's to the gradient torch computes with every float input in float64."""
        touts = [t for t in _flat(expected) if isinstance(t, torch.Tensor) and t.requires_grad]
        jouts = [t for t in _flat(got) if _is_tensor(t) and t.requires_grad]
        if not tleaves or not touts:
            return None
        if len(jouts) != len(touts):
            return f"{len(jouts)} differentiable results, torch {len(touts)}"
        gen = torch.Generator().manual_seed(1)
        cot = [torch.randn(t.shape, dtype=t.dtype, generator=gen) for t in touts]
        try:
            theirs = _quiet(torch.autograd.grad, touts, tleaves, cot, allow_unused=True)
        except Exception:
            theirs = None
        try:
            mine = _quiet(jitorch.autograd.grad, jouts, jleaves, [Lib(jitorch).convert(c) for c in cot],
                          allow_unused=True)
        except Exception as exc:
            return None if theirs is None else f"raises {type(exc).__name__}: {str(exc)[:80]}"
        if theirs is None:
            return self._gradcheck(ours, args, kwargs, jleaves)
        theirs = [torch.zeros_like(t) if a is None else a for a, t in zip(theirs, tleaves)]
        mine = [jitorch.zeros_like(t) if b is None else b for b, t in zip(mine, jleaves)]
        for i, (a, b) in enumerate(zip(theirs, mine)):
            a, b = _outside_nan_inputs(a, b, tleaves[i])
            why = compare(a, b)
            if why and not (a.dtype != torch.float64 and "values differ" in why
                            and closer([a], [b], [_float64_gradients(*call[:2], cot)[i]])):
                if torch_gradient_wrong(call[2]):
                    return self._gradcheck(ours, args, kwargs, jleaves)
                return f"input {i}: {why}"
        return None

    def _gradcheck(self, ours, args, kwargs, leaves):
        positions = [i for i, a in enumerate(args) if any(a is leaf for leaf in leaves)]
        if not positions:
            return None

        def fn(*xs):
            full = list(args)
            for p, x in zip(positions, xs):
                full[p] = x
            return _quiet(ours, *full, **kwargs)
        ok = _quiet(jitorch.autograd.gradcheck, fn, tuple(args[p] for p in positions), raise_exception=False)
        return None if ok else "gradcheck fails (torch has no gradient)"

    def _compiled(self, ours, jlib, sample, layout, eager):
        fresh = LaidOut(jitorch, layout, False)
        args = (fresh.convert(sample.input),) + tuple(fresh.convert(tuple(sample.args)))
        kwargs = fresh.convert(dict(sample.kwargs))
        positions = [i for i, a in enumerate(args) if _is_tensor(a)]

        def fn(*xs):
            full = list(args)
            for p, x in zip(positions, xs):
                full[p] = x
            return ours(*full, **kwargs)
        try:
            got = _quiet(jitorch.compile(fn), *[args[p] for p in positions])
        except Exception as exc:
            return f"raises {type(exc).__name__}: {str(exc)[:100]}"
        for a, b in zip(_flat(eager), _flat(got)):
            if not _is_tensor(a):
                continue
            if not _is_tensor(b) or tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
                return f"{b!r} for eager's {a.dtype.name}{list(a.shape)}"
            x, y = np.asarray(a.detach().numpy(), np.float64), np.asarray(b.detach().numpy(), np.float64)
            scale = np.nanmax(np.abs(x[np.isfinite(x)])) if np.isfinite(x).any() else 0.0
            if not np.allclose(y, x, rtol=0, atol=DOCUMENTED_RTOL.get(a.dtype.name, 0) * scale, equal_nan=True):
                return f"differs from eager (max abs err {np.nanmax(np.abs(x - y)):.3g})"
            if _strides(a, b):  # (the strides of dims of size 1 address nothing)
                return f"strides {b.stride()}, eager {a.stride()}"
        return None

    def _errors(self, op, theirs, ours, method=False):
        try:
            errors = _quiet(lambda: list(op.error_inputs("cpu")))
        except Exception:
            return
        for i, error in enumerate(errors):
            sample, tag = error.sample_input, f"error#{i}"
            if method and not isinstance(sample.input, torch.Tensor):
                # (torch's descriptor refuses a number as self: a method call never passes one)
                self.record(op, tag, "skip", "a method's self that is not a tensor")
                continue
            lib = LaidOut(torch, "contiguous", False)
            try:
                with _deadline(self.sample_seconds):
                    _quiet(theirs, lib.convert(sample.input), *lib.convert(tuple(sample.args)),
                           **lib.convert(dict(sample.kwargs)))
            except SkipSample:
                continue
            except Exception as exc:
                try:
                    with _deadline(self.sample_seconds):
                        self._raises(op, ours, LaidOut(jitorch, "contiguous", False), sample, tag, exc, theirs)
                except SkipSample:
                    pass
                except Exception as failure:  # the harness's own failure, reported as such
                    self.record(op, tag, "harness", f"{type(failure).__name__}: {str(failure)[:120]}")
                continue
            self.record(op, tag, "skip", "torch does not raise on CPU")

    def summary(self):
        """{kind: count} and the mismatches."""
        counts = collections.Counter(o.kind for o in self.outcomes)
        return counts, [o for o in self.outcomes if o.kind in ("mismatch", "harness")]


def ops_named(names):
    """The OpInfos named (by full name ``name.variant`` or name: every variant)."""
    db = opinfos()
    found = [op for op in db if op.full_name in names or op.name in names]
    missing = set(names) - {op.full_name for op in found} - {op.name for op in found}
    if missing:
        raise SystemExit(f"no OpInfo named {sorted(missing)}")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", action="append", default=[], help="OpInfo name (repeatable)")
    parser.add_argument("--all", action="store_true", help="every OpInfo")
    parser.add_argument("--start", type=int, default=0, help="with --all: first op_db index")
    parser.add_argument("--stop", type=int, default=None, help="with --all: op_db index to stop before")
    parser.add_argument("--dtype", action="append", default=[], help="dtype name (repeatable; default all)")
    parser.add_argument("--json", help="write every outcome to this file")
    parser.add_argument("--jsonl", help="append each op's outcomes to this file as it finishes (one JSON object"
                        " a line: a piece cut short by a time cap keeps the ops it finished)")
    parser.add_argument("--quiet", action="store_true", help="print mismatches only")
    parser.add_argument("--op-seconds", type=float, help="CPU seconds per op after which its remaining samples"
                        " are recorded as capped, not run")
    parser.add_argument("--sample-seconds", type=int, default=SAMPLE_SECONDS, help="wall-clock seconds a sample"
                        " may run (in one layout) before it is recorded as timed out: more on a loaded machine")
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    ops = opinfos()[options.start:options.stop] if options.all else ops_named(options.op)
    dtypes = tuple(getattr(torch, d) for d in options.dtype) or DTYPES
    sweep = Sweep(dtypes=dtypes, op_seconds=options.op_seconds, sample_seconds=options.sample_seconds)
    for op in ops:
        began, count = time.process_time(), len(sweep.outcomes)
        try:
            sweep.run_op(op)
        except Exception as exc:
            sweep.record(op, "", "harness", f"{type(exc).__name__}: {str(exc)[:120]}")
        mine = sweep.outcomes[count:]
        bad = [o for o in mine if o.kind in ("mismatch", "harness")]
        kinds = collections.Counter(o.kind for o in mine)
        print(f"{op.full_name}: {dict(kinds)} ({time.process_time() - began:.1f} s CPU)", flush=True)
        for o in bad[:8] if not options.quiet else bad:
            print(f"   {o.kind} [{o.label}] {o.why}", flush=True)
        if options.jsonl:
            with open(options.jsonl, "a") as f:
                f.writelines(json.dumps(dataclasses.asdict(o)) + "\n" for o in mine)
    counts, bad = sweep.summary()
    print(f"ops {len(ops)}; outcomes {dict(counts)}")
    if options.json:
        pathlib.Path(options.json).write_text(json.dumps([dataclasses.asdict(o) for o in sweep.outcomes]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
