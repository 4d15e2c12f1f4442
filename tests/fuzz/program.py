"""A fuzz program: its inputs, captured state, body and the source that runs it on ``T``.

One program text runs on jitorch and on torch alike: the source refers to the tensor library only as the
global ``T`` (``import jitorch as torch`` is the promise being checked), to the device as the global ``D``
and to a Python module object as ``M``. Rendered, a program is::

    g0 = 1.5                      # globals the function reads, rebound between calls
    def build(C):                 # C: the captured tensors, made by the harness
        c0 = C['c0']              # closure tensors and scalars
        s0 = 2
        def fn(x0, x1):
            v0 = x0.transpose(0, 1)[::2]
            ...
            return (v0, v3)
        def rebind():             # run between the first and second call
            nonlocal s0
            global g0
            s0 = -0.5
            g0 = 3
            M.a0 = 0.25
            M.t0 = C['t0:next']
        return fn, rebind

Input values are multiples of 1/8 in [-3, 3] (exact in every float type, bfloat16 included) or, for a
program's ``smooth`` floats, uniform floats of the input's dtype. Inputs are laid out in memory in one of
`LAYOUTS` (the same values, other strides and storage offsets), inside a larger base buffer whose other
elements hold a sentinel, so writes outside a view show.
"""

from __future__ import annotations

import textwrap
import types
from dataclasses import dataclass, replace

import numpy as np

# Element layouts of an input: contiguous; a permutation of its dims in memory; every other element of a
# buffer twice its size; contiguous at storage offset 3.
LAYOUTS = ("contiguous", "permuted", "strided", "offset")
# Layouts drawn too with ``--edges`` (`generator.Generator.edge_pattern`): a 4-d input channels-last (else permuted);
# an input expanded from its first slice along its first dim of two or more elements (stride 0: its values repeat
# that slice's; else offset), which no op may write into.
EDGE_LAYOUTS = ("channels_last", "expanded")
SENTINEL = 7
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)


@dataclass(frozen=True)
class TensorDecl:
    """An input or captured tensor: name, shape, dtype and the seed of its values.

    ``where`` of a captured tensor: "closure" (a variable of ``build``) or "module" (an attribute of ``M``,
    rebound between calls to a tensor of other values when ``rebound``). ``role`` "param": read only, and
    requires grad in the gradient run; "buffer": the program may write into it."""

    name: str
    shape: tuple
    dtype: str
    seed: int
    where: str = "input"
    role: str = "buffer"
    rebound: bool = False
    smooth: bool = False

    @property
    def is_float(self):
        return self.dtype in FLOAT_DTYPES

    def values(self, seed_offset=0):
        """The NumPy values (float32 for bfloat16, which NumPy lacks)."""
        rng = np.random.default_rng(self.seed + seed_offset)
        if self.dtype == "bool":
            return rng.random(self.shape) < 0.5
        if self.dtype in INT_DTYPES:
            low = 0 if self.dtype == "uint8" else -5
            return rng.integers(low, 6, size=self.shape).astype(self.dtype)
        np_dtype = "float32" if self.dtype == "bfloat16" else self.dtype
        if self.smooth and self.dtype in ("float32", "float64"):
            return rng.uniform(-3, 3, size=self.shape).astype(np_dtype)
        return (rng.integers(-24, 25, size=self.shape) / 8).astype(np_dtype)


@dataclass(frozen=True)
class ScalarDecl:
    """A Python number the function reads: a closure variable of ``build`` ("closure"), a global ("global")
    or an attribute of ``M`` ("module"); ``first`` before the rebinding, ``second`` after."""

    name: str
    where: str
    first: object
    second: object

    @property
    def ref(self):
        return f"M.{self.name}" if self.where == "module" else self.name


@dataclass(frozen=True)
class Stmt:
    """One statement of the body (``lines``, which may nest), the names it defines, and its tag (an op
    name or a structural feature), counted in the statistics."""

    lines: tuple
    defines: tuple = ()
    tag: str = ""


@dataclass(frozen=True)
class Program:
    """A generated program; `source` renders it."""

    seed: int
    inputs: tuple
    captured: tuple = ()
    scalars: tuple = ()
    body: tuple = ()
    outputs: tuple = ()
    layouts: tuple = (("contiguous",), ("contiguous",))  # per call (first, second), per input
    grad: bool = False
    attrs_stored: tuple = ()  # attributes of M the body sets (recorded after each call)

    def with_body(self, body, outputs=None):
        return replace(self, body=tuple(body), outputs=self.outputs if outputs is None else tuple(outputs))

    def defined(self):
        """Names the body defines."""
        return [n for s in self.body for n in s.defines]

    def live_outputs(self):
        """The outputs that still exist (the minimiser drops statements)."""
        known = set(self.defined()) | {t.name for t in self.inputs} | {
            _captured_ref(c) for c in self.captured}
        return tuple(o for o in self.outputs if o in known)

    @property
    def n_ops(self):
        return len(self.body)


def _captured_ref(c):
    return f"M.{c.name}" if c.where == "module" else c.name


def captured_ref(c):
    """How the body refers to a captured tensor."""
    return _captured_ref(c)


def source(program, probe=False):
    """The program's Python text. ``probe``: ``fn`` returns its local variables instead (the generator
    reads what a statement made)."""
    head = [f"{s.name} = {s.first!r}" for s in program.scalars if s.where == "global"]
    lines = ["def build(C):"]
    for c in program.captured:
        if c.where == "closure":
            lines.append(f"    {c.name} = C[{c.name!r}]")
    for s in program.scalars:
        if s.where == "closure":
            lines.append(f"    {s.name} = {s.first!r}")
    args = ", ".join(t.name for t in program.inputs)
    lines.append(f"    def fn({args}):")
    for stmt in program.body:
        lines.extend(textwrap.indent("\n".join(stmt.lines), " " * 8).split("\n"))
    if probe:
        lines.append("        return dict(locals())")
    else:
        outs = program.live_outputs()
        lines.append(f"        return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    lines.append("    def rebind():")
    closures = [s.name for s in program.scalars if s.where == "closure"]
    globs = [s.name for s in program.scalars if s.where == "global"]
    if closures:
        lines.append(f"        nonlocal {', '.join(closures)}")
    if globs:
        lines.append(f"        global {', '.join(globs)}")
    for s in program.scalars:
        lines.append(f"        {s.ref} = {s.second!r}")
    for c in program.captured:
        if c.rebound:
            lines.append(f"        M.{c.name} = C[{c.name + ':next'!r}]")
    lines.append("        return None")
    lines.append("    return fn, rebind")
    return "\n".join(head + lines) + "\n"


def dtype_of(T, name):
    return getattr(T, name)


def make_tensor(T, decl, device, layout="contiguous", requires_grad=False, seed_offset=0):
    """(tensor, base): ``decl``'s values on ``device`` laid out as ``layout``; ``base`` is the buffer the
    tensor views (itself when contiguous)."""
    values = decl.values(seed_offset)
    dt = dtype_of(T, decl.dtype)
    shape = tuple(decl.shape)
    if requires_grad:
        t = T.tensor(values, dtype=dt, device=device, requires_grad=True)
        return t, t
    if layout == "channels_last" and len(shape) != 4:
        layout = "permuted"
    if layout == "expanded" and not any(n > 1 for n in shape):
        layout = "offset"
    if layout == "permuted" and len(shape) < 2:
        layout = "strided"
    if layout == "strided" and len(shape) == 0:
        layout = "offset"
    if layout == "contiguous":
        t = T.tensor(values, dtype=dt, device=device)
        return t, t
    if layout == "channels_last":
        t = T.tensor(values, dtype=dt, device=device).contiguous(memory_format=T.channels_last)
        return t, t
    if layout == "expanded":
        d = next(d for d, n in enumerate(shape) if n > 1)
        base = T.tensor(np.ascontiguousarray(values.take([0], axis=d)), dtype=dt, device=device)
        return base.expand(*shape), base
    if layout == "permuted":
        perm = list(range(len(shape)))[::-1]
        inverse = list(np.argsort(perm))
        base = T.tensor(np.ascontiguousarray(values.transpose(perm)), dtype=dt, device=device)
        return base.permute(*[int(i) for i in inverse]), base
    if layout == "strided":
        base = T.full(tuple(2 * n for n in shape), SENTINEL, dtype=dt, device=device)
        view = base[tuple(slice(None, None, 2) for _ in shape)]
        view.copy_(T.tensor(values, dtype=dt, device=device))
        return view, base
    n = int(np.prod(shape, dtype=np.int64))
    base = T.full((n + 3,), SENTINEL, dtype=dt, device=device)
    base[3:].copy_(T.tensor(values.reshape(-1), dtype=dt, device=device))
    return base[3:].view(*shape) if shape else base[3:].view(()), base


class Instance:
    """A program made runnable on ``T``: ``fn``, ``rebind``, the module ``M``, the captured tensors."""

    def __init__(self, program, T, device="cpu", grad=False):
        self.program = program
        self.T = T
        self.namespace = {"T": T, "D": device, "M": types.ModuleType("fuzzmod"), "__name__": "fuzzprog"}
        self.module = self.namespace["M"]
        self.captured = {}
        for c in program.captured:
            requires_grad = grad and c.role == "param" and c.is_float
            self.captured[c.name] = make_tensor(T, c, device, requires_grad=requires_grad)[0]
            if c.rebound:
                self.captured[c.name + ":next"] = make_tensor(T, c, device, requires_grad=requires_grad,
                                                              seed_offset=1)[0]
            if c.where == "module":
                setattr(self.module, c.name, self.captured[c.name])
        for s in program.scalars:
            if s.where == "module":
                setattr(self.module, s.name, s.first)
        self.code = compile(source(program, probe=False), f"<fuzz program {program.seed}>", "exec")

    def build(self, probe=False):
        """``(fn, rebind)`` of a fresh run of the program text."""
        code = self.code if not probe else compile(source(self.program, probe=True),
                                                   f"<fuzz probe {self.program.seed}>", "exec")
        exec(code, self.namespace)
        return self.namespace["build"](self.captured)

    def inputs(self, call, device="cpu", grad=False):
        """(inputs, bases, leaves) for call number ``call`` (0, 1, 2: the layouts of the first, second,
        first again). In the gradient run, float inputs are clones of leaves that require grad."""
        layouts = self.program.layouts[1 if call == 1 else 0]
        made, bases, leaves = [], [], []
        for decl, layout in zip(self.program.inputs, layouts):
            if grad and decl.is_float:
                leaf, _ = make_tensor(self.T, decl, device, requires_grad=True)
                t = leaf.clone()
                made.append(t)
                bases.append(t)
                leaves.append(leaf)
            else:
                t, base = make_tensor(self.T, decl, device, layout)
                made.append(t)
                bases.append(base)
        return made, bases, leaves

    def state(self):
        """The captured tensors and the module's tensor attributes now: ``{name: tensor}``."""
        out = {c.name: self.captured[c.name] for c in self.program.captured if c.where == "closure"}
        for name in list(vars(self.module)):
            v = getattr(self.module, name)
            if isinstance(v, self.T.Tensor):
                out[f"M.{name}"] = v
        return out
