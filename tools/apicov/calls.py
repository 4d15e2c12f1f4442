"""Smoke calls of torch's functions and Tensor methods: OpInfo samples where torch's test suite has them,
else a recipe written here, else a generated call (the first of a few simple argument lists that torch
accepts)."""

from __future__ import annotations

import dataclasses
import itertools
import re
import sys
import types
import unittest
from collections import defaultdict
from typing import Any, Callable

import numpy as np
import torch

from . import recipes
from .universe import resolve

MAX_SAMPLES = 3          # samples torch accepts, per OpInfo and dtype
MAX_TRIED = 8            # samples drawn from an OpInfo's generator before giving up on it

# Results that are random or uninitialised: compared by type, shape and dtype only.
RANDOM = re.compile(r"rand|bernoulli|normal|dropout|multinomial|poisson|uniform|exponential_|geometric_|cauchy_|"
                    r"random_|rrelu|gumbel|binomial|fractional_max_pool|empty|seed|rng_state|kaiming|xavier|"
                    r"orthogonal_|sparse_|lowrank|lobpcg|data_ptr|storage|__hash__")
# Results unique only up to the sign of each vector: compared by magnitude.
UP_TO_SIGN = re.compile(r"(^|\.)(svd|linalg\.svd|linalg\.eigh|qr|linalg\.qr|geqrf|linalg\.householder_product)$")

# Ops returning (values, indices) whose index among equal values torch leaves unspecified: their integer
# samples (which have ties) compare the indices by type only.
TIES = re.compile(r"(^|\.)(topk|kthvalue|mode|median|nanmedian|sort|max|min|cummax|cummin)$")

# Tensor operator methods and the op whose OpInfo samples they take.
DUNDERS = {
    "add": "add", "radd": "add", "iadd": "add", "sub": "sub", "rsub": "sub", "isub": "sub", "mul": "mul",
    "rmul": "mul", "imul": "mul", "truediv": "div", "rtruediv": "div", "itruediv": "div", "div": "div",
    "floordiv": "floor_divide", "rfloordiv": "floor_divide", "ifloordiv": "floor_divide", "mod": "remainder",
    "rmod": "remainder", "imod": "remainder", "pow": "pow", "rpow": "pow", "ipow": "pow", "matmul": "matmul",
    "rmatmul": "matmul", "and": "bitwise_and", "rand": "bitwise_and", "iand": "bitwise_and", "or": "bitwise_or",
    "ror": "bitwise_or", "ior": "bitwise_or", "xor": "bitwise_xor", "rxor": "bitwise_xor", "ixor": "bitwise_xor",
    "lshift": "bitwise_left_shift", "rlshift": "bitwise_left_shift", "ilshift": "bitwise_left_shift",
    "rshift": "bitwise_right_shift", "rrshift": "bitwise_right_shift", "irshift": "bitwise_right_shift",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "invert": "bitwise_not",
    "getitem": "__getitem__", "setitem": "__setitem__",
}
NAMESPACE_KEYS = {"torch.nn.functional.": "nn.functional.", "torch.linalg.": "linalg.",
                  "torch.special.": "special.", "torch.fft.": "fft.", "torch.": ""}


@dataclasses.dataclass
class Sample:
    """One smoke call: ``call(lib)`` runs it on torch or jitorch (a compare.Lib); ``mode`` says how the
    results are compared (see compare.difference)."""

    label: str
    call: Callable[[Any], Any]
    mode: str | None = None


def _install_expecttest_shim():
    """torch's OpInfo database imports ``expecttest`` (a test-runner dependency jitorch does not have) only
    for a TestCase base class; a stand-in module lets it load."""
    if "expecttest" not in sys.modules:
        try:
            import expecttest  # noqa: F401
        except ImportError:
            shim = types.ModuleType("expecttest")
            shim.TestCase = unittest.TestCase
            sys.modules["expecttest"] = shim


def _test_fn_of_the_stack():
    """torch's ``extract_test_fn`` (the test method of the unittest.TestCase ``self`` nearest on the stack, or
    None) walking the frames themselves: torch's walks ``inspect.stack()``, which also reads each frame's source
    lines and finds its module by scanning sys.modules, for every sample generator an OpInfo makes (two to
    three per op and dtype; 0.1-0.2 s each under pytest's deep stack and the suite's 3000 modules)."""
    frame = sys._getframe(1)
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            if isinstance(owner, unittest.TestCase):
                *_, cls_name, test_name = owner.id().rsplit(".", 2)
                if cls_name == type(owner).__name__ and test_name.startswith("test"):
                    return getattr(owner, test_name).__func__
            frame = frame.f_back
    except Exception:  # (as torch's: a TestCase whose id or method does not resolve tracks nothing)
        return None
    return None


def op_db():
    """torch's OpInfo database, imported with torch's global backend flags left settable: its test utilities
    freeze them at import (``torch.backends.disable_global_flags``), after which a later ``torch.backends.cudnn.
    benchmark = False`` in the same process raised (tests/backends/test_flags.py, examples/programs/gpt.py);
    its sample generators then look for the running test method by `_test_fn_of_the_stack`."""
    _install_expecttest_shim()
    # torch's own context that restores the flag's state on exit (torch.backends has no public undo)
    with getattr(torch.backends, "__allow_nonbracketed_mutation")():
        from torch.testing._internal.common_methods_invocations import op_db as db
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core
    common_utils.extract_test_fn = core.extract_test_fn = _test_fn_of_the_stack
    return db


def load_opinfos():
    """{OpInfo name or alias name: [OpInfo]} from torch's op_db."""
    by_name = defaultdict(list)
    for op in op_db():
        by_name[op.name].append(op)
        for alias in op.aliases:
            by_name[alias.name].append(op)
    return by_name


def _sample_dtypes(op):
    """The dtypes an OpInfo's samples are drawn in: float32 and int64 where it supports them (int64 checks
    type promotion and integer semantics), else the first real dtype it supports."""
    supported = op.supported_dtypes("cpu")
    chosen = [d for d in (torch.float32, torch.int64) if d in supported]
    fallback = [d for d in (torch.bool, torch.float64, torch.int32, torch.uint8) if d in supported]
    return chosen or fallback[:1]


def _opinfo_keys(entry):
    """The OpInfo names whose samples fit ``entry``, most specific first."""
    short = entry.short
    if entry.area == "Tensor" and short.startswith("__") and short.endswith("__"):
        op = DUNDERS.get(short[2:-2])
        return [op] if op else []
    if entry.area == "nn.init":
        return []
    prefix = "" if entry.area == "Tensor" else next(v for k, v in NAMESPACE_KEYS.items() if entry.path.startswith(k))
    bases = [short] + ([short[:-1]] if short.endswith("_") else [])
    keys = [prefix + b for b in bases]
    if prefix == "":
        keys += [f"{ns}{b}" for b in bases for ns in ("nn.functional.", "special.", "linalg.")]
    return keys


def _call_of(entry, args, kwargs, getter=False):
    """The call of ``entry`` (resolved in the library) on sample ``args``/``kwargs`` (torch objects, converted
    afresh for each library and call)."""
    path, short, method = entry.path, entry.short, entry.area == "Tensor"
    getter = getter or entry.kind == "property"

    def call(lib):
        a, k = lib.convert(args), lib.convert(kwargs)
        if method:
            target = getattr(lib.root.Tensor, short) if not getter else None
            return getattr(a[0], short) if getter else target(*a, **k)
        return resolve(lib.root, path)(*a, **k)
    return call


def _fits(op, entry):
    """Whether the OpInfo's samples are for this entry's own callable (not a wrapper with bound options)."""
    obj = resolve(torch, entry.path)
    variants = {id(op.op), id(op.method_variant), id(op.inplace_variant)}
    for alias in op.aliases:
        variants |= {id(alias.op), id(alias.method_variant), id(alias.inplace_variant)}
    if id(obj) in variants:
        return True
    fn = op.op
    return not op.variant_test_name and getattr(fn, "__name__", None) in (entry.short, entry.short.rstrip("_"))


def opinfo_samples(entry, opinfos):
    """Samples for ``entry`` from torch's OpInfos: up to MAX_SAMPLES per fitting OpInfo."""
    found = []
    for key in _opinfo_keys(entry):
        for op in opinfos.get(key, ()):
            if not (entry.area == "Tensor" or _fits(op, entry)):
                continue
            for dtype in _sample_dtypes(op):
                for i, s in enumerate(itertools.islice(op.sample_inputs("cpu", dtype), MAX_TRIED)):
                    if s.kwargs and entry.short.startswith("__"):
                        continue  # operators take no options (div's rounding_mode samples are for div itself)
                    tied = "ties" if dtype != torch.float32 and TIES.search(entry.path) else None
                    found.append(Sample(f"OpInfo {op.full_name} ({str(dtype)[6:]}) #{i}",
                                        _call_of(entry, (s.input,) + tuple(s.args), dict(s.kwargs)), tied))
        if found:
            return found
    return found


def _probe_inputs():
    """Tensors a generated call is tried on: float 3x4, a one-element float, int 3x4, square float, bool."""
    rng = np.random.default_rng(0)
    return [torch.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)),
            torch.tensor([1.5]), torch.from_numpy(rng.integers(-5, 6, (3, 4))),
            torch.from_numpy(rng.standard_normal((4, 4)).astype(np.float32) + 4 * np.eye(4, dtype=np.float32)),
            torch.tensor([[True, False], [False, True]])]


STATEFUL = re.compile(r"^(set_|use_|init_|manual_seed|seed|compile|save|load|vmap)|_$")


def generated_sample(entry):
    """The first simple call torch accepts for ``entry``, or None. Setters and in-place forms of torch.*
    are never probed (they would change torch's state): they need a recipe."""
    if entry.area != "Tensor" and STATEFUL.search(entry.short):
        return None
    for x in _probe_inputs():
        if entry.kind == "property":
            candidates = [None]
        elif entry.area == "Tensor":
            candidates = [(x,), (x, x), (x, 0), (x, 1), (x, 2)]
        else:
            candidates = [(x,), (x, x), (x, 0), (), (3,), (2, 3)]
        for args in candidates:
            call = _call_of(entry, (x,) if args is None else args, {}, getter=args is None)
            try:
                with torch.no_grad():
                    call(_TORCH)
            except Exception:
                continue
            return Sample(f"generated {'getter' if args is None else _describe(args)}", call)
    return None


def _describe(args):
    return "(" + ", ".join(f"{a.dtype}{list(a.shape)}".replace("torch.", "") if isinstance(a, torch.Tensor)
                           else repr(a) for a in args) + ")"


def _mode(entry):
    key = entry.path.removeprefix("torch.").removeprefix("Tensor.")
    if RANDOM.search(key):
        return "meta"
    return "abs" if UP_TO_SIGN.search(key) else "values"


def samples(entry, opinfos):
    """Every smoke call of a function or Tensor-method entry: its recipe, else its OpInfo samples, else a
    generated call; empty when none fits."""
    found = recipes.RECIPES.get(entry.path)
    if found is not None:
        found = [Sample(f"recipe #{i}", fn, mode) for i, (fn, mode) in enumerate(found)]
    else:
        found = opinfo_samples(entry, opinfos) if opinfos else []
        if not found:
            sample = generated_sample(entry)
            found = [sample] if sample else []
        for s in found:
            s.mode = s.mode or _mode(entry)
    forms = recipes.FORMS.get(entry.path, ())
    return found + [Sample(f"form {i}", fn, mode) for i, (fn, mode) in enumerate(forms)]


class _TorchLib:
    """The torch side of a probe (no conversion: the probe's own tensors)."""

    root = torch
    is_torch = True

    @staticmethod
    def convert(obj):
        return obj.clone() if isinstance(obj, torch.Tensor) else (
            type(obj)(_TorchLib.convert(o) for o in obj) if isinstance(obj, (list, tuple)) else obj)


_TORCH = _TorchLib()
