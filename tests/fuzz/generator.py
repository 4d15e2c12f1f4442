"""A seeded generator of random programs over jitorch's op registry, checked statement by statement on torch.

Ops, their arities, argument types and call forms (function, method, in-place, ``out=``) come from the
registry (`jitorch.ops.registry.OPS`): an op added there is fuzzed without touching this file, as long as
torch has an op of that name. `ARG_HINTS` gives well-formed arguments where a schema's types alone rarely
make a valid call (a permutation, a matmul partner, a gather index). The structural features are a hand
list: slicing with steps, index assignment, advanced indexing, casts, Python control flow on shapes,
data-dependent ops that a compiled function must run eagerly (``item``, ``nonzero``, boolean masks,
``if tensor:``), closures, globals and module attributes read, written and rebound between calls, and chains
of views over a gather's result (a pad, whose modes but ``constant`` are index_selects, then a pool's or an
unfold's windows; an index_select, gather or embedding, then views, then a pointwise op), which a compiler
fusing gathers with their consumers must keep apart where their index maths does not compose. Where asked, loss
patterns (`Generator.loss_pattern`) and network patterns (`Generator.net_pattern`: GELU MLPs, attention, wide losses,
normalisations, odd-length maps, reductions' ``out=``) over a variable's values.

A program is grown one statement at a time: a candidate statement is kept when torch runs the whole
program with it in every call the oracle makes (so torch decides what a valid program is), and is dropped
otherwise. What the statements made (shapes, dtypes, values) is read from torch's run.

Results that a last-bit difference in a float could change (comparisons, ``floor``, casts to integers,
argmax, branches on values) would make the differential test flaky, so the generator tracks which float
values are exact (the same bits in every mode: inputs, and what selecting, moving or casting them gives)
and applies such discontinuous ops only to exact values.
"""

from __future__ import annotations

import random
from math import prod
import warnings
from dataclasses import dataclass, replace

import numpy as np
import torch

import jitorch
from jitorch.ops.registry import OPS
from tests.support import torch_forms

from .program import (DTYPES, EDGE_LAYOUTS, FLOAT_DTYPES, INT_DTYPES, LAYOUTS, Instance, Program, ScalarDecl,
                      Stmt, TensorDecl, captured_ref)

# Ops a fuzz program does not call: random numbers (no common stream with torch), uninitialised memory,
# ops whose use here is hand-written (the cast op behind .to()), in-place fills tested through others.
SKIPPED = {"empty", "empty_like", "new_empty", "unique_consecutive", "einsum"}
# Ops whose torch result is no oracle where an operand is NaN, which a program's later calls may hold: torch's
# orthogonal polynomials U, V, W, the shifted forms, Laguerre and Legendre return their recurrence's uninitialised
# variable for a NaN ``x`` (``laguerre_polynomial_l``: 0.0 or a denormal, by the kernel's path; jitorch's is NaN, as
# the polynomial's: fuzz seed 8660159 of ``--namespaced --out-views 0.5``, docs/differences-from-torch.md). Never
# called.
TORCH_UNDEFINED_AT_NAN = {f"special_{name}_polynomial_{kind}" for name, kind in (
    ("chebyshev", "u"), ("chebyshev", "v"), ("chebyshev", "w"), ("shifted_chebyshev", "t"), ("shifted_chebyshev", "u"),
    ("shifted_chebyshev", "v"), ("shifted_chebyshev", "w"), ("laguerre", "l"), ("legendre", "p"))}
# Ops whose torch result over a dim changes with the memory layout of equal values: ``median``/``nanmedian`` of an
# expanded input return values no element holds (docs/differences-from-torch.md; fuzz seed 5560417 of ``--edges 0.5``,
# ``T.median(x2, 0)`` of an int16 input expanded in the second layout: 5 for the column's -1). Never called in a
# program with an input laid out expanded (`program.EDGE_LAYOUTS`).
TORCH_WRONG_ON_EXPANDED = {"median", "nanmedian"}
# Ops whose torch ``out=`` form writes wrong elements into an out of two or more batch dims that do not flatten to one
# stride: torch 2.13's CPU ``triu``/``tril`` step the batches by ``out.stride(-3)`` alone (fuzz seed 5603034 of
# ``--edges 0.4 --out-views 0.4 --regions 0.2``: ``T.triu(v0, 1, out=v0)``, ``v0`` a gather of a channels-last input,
# strides (18, 1, 6, 3): torch left 3.0 where the triangle holds 0; docs/differences-from-torch.md). Their ``out=``
# calls of four or more dims write only a new compact buffer (whichever layout a variable has in a call).
TORCH_WRONG_INTO_BATCHES = {"triu", "tril"}
# Ops whose torch in-place and ``out=`` forms write through a result tensor whose elements share memory (an expanded
# input) on some of their kernel's paths, the values then depending on the order of the writes: torch 2.13's
# ``baddbmm_``, ``bmm``/``matmul``'s ``out=`` of three dims in its naive kernel (under 400 multiply-adds, and bfloat16
# at any size), ``addmv_``/``mv``'s ``out=`` at any size; its BLAS paths and ``addmm_``/``mm`` refuse the overlap.
# jitorch refuses it on every path (fuzz seed 5642397 of ``--edges 0.4 --out-views 0.4 --regions 0.2``:
# ``x2.baddbmm_(...)`` of an expanded input, torch wrote it; docs/differences-from-torch.md). They write no input laid
# out expanded in a call, nor a view of one.
TORCH_WRITES_THROUGH_OVERLAP = {"baddbmm", "bmm", "matmul", "addmv", "mv"}
# torch's warning of a variance or standard deviation without degrees of freedom (a correction of the reduced count
# or more): the squared deviations' sum divided by 0, inf or NaN, where torch's answer for equal values depends on its
# kernel: its Welford update over a dim sums exact zeros (NaN), its two passes over every element, as jitorch's,
# subtract a rounded mean (inf; fuzz seed 5592326 of ``--edges 0.4 --out-views 0.4 --regions 0.2``,
# ``v5.std([2], correction=3)`` of three copies of -1.73168194; docs/differences-from-torch.md). Statements torch
# warns so for are not drawn.
NO_DEGREES_OF_FREEDOM = "degrees of freedom is <= 0"
# Float results that are bit for bit the same in every mode when their operands are: selections, moves,
# sign changes, casts. Everything else (arithmetic, transcendental functions, sums) may round differently
# in a fused or reassociated kernel and is "inexact".
EXACT_OPS = {
    "neg", "negative", "abs", "absolute", "relu", "maximum", "minimum", "clamp", "clip", "clamp_min", "clamp_max",
    "where", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "row_stack", "dstack", "column_stack",
    "flip", "fliplr", "flipud", "roll", "repeat", "tile", "repeat_interleave", "tril", "triu", "sort", "topk",
    "kthvalue", "amax", "amin", "max", "min", "median", "gather", "scatter", "index_select", "index_fill",
    "index_copy", "masked_fill", "masked_select", "take", "put", "index_put", "clone", "contiguous", "reshape",
    "reshape_as", "flatten", "fill", "zero", "copy", "zeros", "ones", "full", "eye", "zeros_like", "ones_like",
    "full_like", "new_zeros", "new_ones", "new_full", "unique", "nonzero", "argwhere", "square", "arange",
    "to", "sign", "sgn", "floor", "ceil", "trunc", "fix", "round", "frac",
}
# Ops whose float result jumps where the operand crosses a point: only for exact operands. acosh is NaN below 1,
# the minimum of i0 and cosh, where a result an ulp off crosses (torch's float32 i0(0) is 1 - 2**-24, jitorch's
# 1: fuzz seed 7610939, docs/differences-from-torch.md). signbit also reads a NaN's sign, which no library
# defines: x86's default NaN (NumPy's, eager float16 log of a negative) is negative, torch's float32 SLEEF log
# and jitorch's kernels give a positive one (fuzz seed 7802741). atanh is infinite at 1 and NaN past it: eager's
# float32 erf(4) is 1 - 2**-24 (within the documented 4 ulps), torch's and the kernels' 1, so atanh of it is 8.7
# against inf, and a variance of that NaN against 0 (fuzz seed 8400595 of 40 statements).
DISCONTINUOUS = {"floor", "ceil", "round", "trunc", "fix", "frac", "sign", "sgn", "remainder", "fmod",
                 "floor_divide", "div", "divide", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                 "bitwise_left_shift", "bitwise_right_shift", "unique", "acosh", "arccosh", "signbit", "atanh",
                 "arctanh"}
# Ops that read a NaN's sign bit, by the place of the operand they read it from. The sign of a NaN an operation
# makes is no library's contract (x86's default NaN is negative, NumPy's and LLVM's constant NaN positive; torch's
# float32 SLEEF log gives a positive one, eager float16 log a negative one), and a program's later call may read a
# NaN its earlier call wrote (a captured buffer: fuzz seed 8401518 of 40 statements, ``M.t0.signbit()`` before
# ``M.t0.log2_()``), so such an operand, when float, is always read with its NaNs' sign bits cleared
# (`nan_sign_cleared`), whatever its values at generation time.
NAN_SIGN_READERS = {"signbit": 0, "copysign": 1}
# Results that share memory with their first argument (so writes through them reach it).
VIEW_OPS = {"contiguous", "reshape", "reshape_as", "flatten", "to", "type_as"}
# Views that are not writable: several elements in one memory location.
OVERLAPPING_VIEWS = {"expand", "expand_as", "broadcast_to", "broadcast_tensors"}
# The tag of ``x[basic index] = t`` with a 0-d tensor ``t``: torch fills from a CPU ``t`` and copies from a CUDA
# one, and the copy refuses a ``t`` that overlaps the elements written (`oracle.compare_calls`).
SETITEM_0D = "setitem 0-d"
# Ops whose float16/bfloat16 results differ from torch's by design (docs/differences-from-torch.md: torch's
# CPU kernels compute them in the half type, matrix_exp overflowing to NaN; jitorch in float32): not called on
# half-type operands (fuzz seed 7600518). torch's bfloat16 rsqrt rounds once in its vector loop and twice (the
# square root to bfloat16 first) in its scalar tail, so an element's result depends on its place in the tensor;
# jitorch's rounds once, and its gradient, which reads the result cubed, is then an ulp off (fuzz seed 7805075).
# torch's half-type xlogy rounds the log to the half type before the product, jitorch's rounds once; a half
# ``other`` makes the result half even beside a float32 ``self`` of 0 dims, so no operand may be half there
# (fuzz seed 7920026 of ``--chains 0.3``: ``T.xlogy(c1, x1, out=v2)`` of a 0-d float32 and a bfloat16 x1).
HALF_DIFFERS = {"matrix_exp", "addr", "rsqrt", "xlogy"}
# Ops whose torch gradient is wrong where an operand is an integer or bool tensor: torch's atan2_backward
# squares (and, for ``other``'s, negates) that operand in its own dtype, which wraps (uint8 3 negated is 253,
# 200 squared 64: fuzz seed 7805681; docs/differences-from-torch.md); addcmul's and addcdiv's multiply an
# integer tensor by ``value`` in its dtype (uint8 3 times -1 is 253: fuzz seed 7901612), and addcdiv's for an
# integer ``tensor2`` raises. Such a statement's tag ends in INTEGER_OPERAND, and its program has no gradient
# run against torch.
# (atan2's alias arctan2 too: transform-fuzz seed 8442441 of ``--out-views 0.5``, ``v2.arctan2(x1)`` of a uint8 ``v2``)
TORCH_WRONG_BY_AN_INTEGER = {"atan2", "arctan2", "addcmul", "addcdiv"}
INTEGER_OPERAND = " of an integer"
# The tag's ending of a ``topk`` or ``kthvalue`` whose gradient lands on one of several tied elements: which one is
# each library's choice for topk (torch's follows libstdc++'s partial sort; fuzz seed 7805437,
# docs/differences-from-torch.md), and one rounding may swap near ties of computed values; so its program has no
# gradient run against torch. Its values are compared, and so are the indices and gradients of max/min/median/
# sort/cummax/kthvalue among exact ties, where jitorch picks the element torch does.
AMONG_TIES = " among ties"
MARKERS = {"integer operand": INTEGER_OPERAND, "ties": AMONG_TIES}
# Of ops returning several tensors, which results are the same in every library (sort's indices only when
# stable; topk, kthvalue and median only their values: ties make their indices unspecified).
# The sign normalisation of svd's U: each column times the sign of its projection on the weights
# sqrt(i + 2), irrational and distinct, which no singular vector of the fuzzer's values is orthogonal to.
SVD_SIGN = ("(lambda u: u * T.where((u.double() * (T.arange(u.shape[-2], dtype=T.float64, device=u.device) + 2)"
            ".sqrt()[:, None]).sum(-2, keepdim=True) < 0, -1, 1).to(u.dtype))")
RESULT_CHOICES = {"sort": (0,), "topk": (0,), "kthvalue": (0,), "median": (0,)}
# The kinds of `Generator.edge_pattern` (``--edges``).
EDGE_KINDS = ("int divmod", "mixed dtypes", "where scalars", "index accumulate", "broadcast inplace",
              "keepdim reduce", "size edges", "expanded", "channels last")
# What `Generator.edge_pattern` applies to an expanded or flipped value and to a channels-last one (``{x}``); those
# that may share its memory, those whose float values are exact where its are, those only for floats.
EDGE_TAILS = {
    "expanded": ("{x} * {x}", "{x}.sum(0)", "{x}.contiguous()", "{x}.cumsum(0)", "{x} + {x}.flip(0)", "{x}.clone()",
                 "T.cat([{x}, {x}])", "{x}.reshape(-1)[1:]", "({x} + 1).abs()", "{x}.mT if {x}.ndim >= 2 else {x}"),
    "channels last": ("{x} + 1", "{x} * {x}", "T.relu({x})", "{x}.sum((2, 3), keepdim=True)",
                      "{x} + {x}.sum(1, keepdim=True)", "{x}.to(T.float64)", "{x}.to(T.int16)", "{x}.clone()",
                      "{x}.permute(0, 2, 3, 1)", "{x}.mean(1)", "{x}.sum(1)", "{x}.contiguous()",
                      "{x} + {x}.contiguous()", "T.where({x} > 0, {x}, 0)", "{x}.flatten(1)", "{x}.softmax(1)",
                      "-{x}"),
}
EDGE_ALIASING_TAILS = {"{x}.contiguous()", "{x}.reshape(-1)[1:]", "{x}.mT if {x}.ndim >= 2 else {x}",
                       "{x}.to(T.float64)", "{x}.to(T.int16)", "{x}.permute(0, 2, 3, 1)", "{x}.flatten(1)"}
EDGE_EXACT_TAILS = {"{x}.contiguous()", "{x}.clone()", "T.cat([{x}, {x}])", "{x}.reshape(-1)[1:]",
                    "{x}.mT if {x}.ndim >= 2 else {x}", "{x}.to(T.float64)", "{x}.permute(0, 2, 3, 1)",
                    "{x}.flatten(1)", "T.relu({x})", "T.where({x} > 0, {x}, 0)", "-{x}"}
EDGE_FLOAT_TAILS = {"{x}.mean(1)", "{x}.softmax(1)"}


@dataclass
class Facts:
    """What the generator knows of a variable beyond its value: whether its floats are exact, whether it
    may be written, and its alias group (the variables that may share its memory)."""

    exact: bool = True
    writable: bool = True
    group: str = ""
    role: str = "body"  # "input", "param", "buffer", "body"


@dataclass
class Var:
    ref: str
    value: object
    facts: Facts

    @property
    def is_tensor(self):
        return isinstance(self.value, torch.Tensor)

    @property
    def shape(self):
        return tuple(self.value.shape)

    @property
    def ndim(self):
        return self.value.ndim

    @property
    def dtype(self):
        return str(self.value.dtype).split(".")[-1]

    @property
    def is_float(self):
        return self.is_tensor and self.value.is_floating_point()


# Namespaces of functions whose registry name is the namespace's and the function's joined by "_" (``special_i0e``
# is ``T.special.i0e``): their function and ``out=`` forms.
NAMESPACES = ("special",)


class OpEntry:
    """A registry op the fuzzer calls, with the call forms torch has too; ``call``, the name a program calls
    it by (``special.i0e`` for ``special_i0e``)."""

    def __init__(self, op, namespace=""):
        self.op = op
        self.name = op.public_name
        self.schema = op.schema
        if namespace:
            self.call = f"{namespace}.{op.public_name[len(namespace) + 1:]}"
            self.forms = [f for f in ("function", "out") if f in op.variants]
        else:
            self.call = op.public_name
            self.forms = torch_forms(op)

    def __repr__(self):
        return f"<fuzz op {self.op.name} {self.forms}>"


def _namespace(op):
    """The namespace of `NAMESPACES` that both libraries call ``op`` in, or ""."""
    for namespace in NAMESPACES:
        short = op.public_name[len(namespace) + 1:]
        if op.public_name.startswith(namespace + "_") and all(
                hasattr(getattr(lib, namespace), short) for lib in (torch, jitorch)):
            return namespace
    return ""


def op_table(namespaced=False):
    """Every registry op the fuzzer calls: public, deterministic, and known to torch by the same name; with
    ``namespaced``, also those torch and jitorch call in one of `NAMESPACES` (a seed draws another program with
    them than without: the fixed seeds' programs are drawn without)."""
    table = []
    for op in OPS.values():
        if op.public_name.startswith("_") or op.kind == "random" or op.public_name in SKIPPED:
            continue
        entry = OpEntry(op)
        if not entry.forms and namespaced and _namespace(op):
            entry = OpEntry(op, _namespace(op))
        if entry.forms:
            table.append(entry)
    return table


def dtype_ref(name):
    return f"T.{name}"


def literal(values, dtype):
    """Source of a tensor literal on the program's device."""
    body = np.asarray(values).tolist()
    return f"T.tensor({body!r}, dtype=T.{dtype}, device=D)"


# The regions `Generator.in_region` draws a statement into: grad modes, and autocast to each lower precision.
REGIONS = ("T.no_grad()", "T.enable_grad()", "T.set_grad_enabled(False)", "T.inference_mode()",
           "T.autocast(D, dtype=T.bfloat16)", "T.autocast(D, dtype=T.float16)")


class Generator:
    """``Generator(seed).program()``: one random program, valid on torch."""

    def __init__(self, seed, max_statements=14, table=None, chains=0.0, out_views=0.0, losses=0.0, nets=0.0,
                 convs=0.0, regions=0.0, edges=0.0):
        self.seed = seed
        self.edges = edges  # the share of statements at the dtype and layout rules' edges (`edge_pattern`)
        self.regions = regions  # the share of statements inside a grad-mode or autocast region (`in_region`)
        self.nets = nets  # the share of statements that are network patterns (`net_pattern`)
        self.convs = convs  # the share of statements that are convolution patterns (`conv_pattern`)
        self.chains = chains  # the share of statements that are view-of-gather chains
        self.losses = losses  # the share of statements that are loss patterns (`loss_pattern`)
        self.out_views = out_views  # the share of ``out=`` statements writing other memory (`out_view`)
        self.rng = random.Random(seed)
        self.max_statements = max_statements
        self.table = table if table is not None else op_table()
        self.facts: dict = {}
        self.counter = 0
        self.attempts: dict = {}
        self.accepted: dict = {}
        # Captured tensors' alias groups that an accepted discontinuous statement read as exact, and those the
        # candidate statement reads so: a later call reads what an earlier one wrote into a captured tensor, so
        # an inexact write into one of these is refused (`_breaks_exact_reads`).
        self.exact_read: set = set()
        self.reading_exact: set = set()
        self.expanded_inputs: set = set()  # the inputs laid out expanded in a call (`declarations`)

    # Declarations ------------------------------------------------------------------------------

    def _shape(self, base):
        r = self.rng
        kind = r.random()
        if kind < 0.1:
            return ()
        if kind < 0.55:
            return base
        shape = list(base[r.randrange(len(base) + 1):]) if base else []
        return tuple(1 if r.random() < 0.25 else n for n in shape)

    def _dtype(self):
        r = self.rng.random()
        if r < 0.55:
            return "float32"
        if r < 0.65:
            return "float64"
        if r < 0.75:
            return self.rng.choice(("float16", "bfloat16"))
        if r < 0.93:
            return self.rng.choice(INT_DTYPES)
        return "bool"

    def declarations(self):
        r = self.rng
        # (4-d inputs with ``--edges``, which lays them out channels-last at times: `EDGE_LAYOUTS`)
        base = tuple(r.randint(1, 5) for _ in range(r.randint(1, 4 if self.edges else 3)))
        smooth = r.random() < 0.4
        inputs = tuple(TensorDecl(f"x{i}", self._shape(base), self._dtype(), self.seed * 101 + i, smooth=smooth)
                       for i in range(r.randint(1, 3)))
        captured = []
        for i in range(r.choice((0, 0, 1, 2))):
            where = r.choice(("closure", "module"))
            role = r.choice(("param", "buffer"))
            captured.append(TensorDecl(f"c{i}" if where == "closure" else f"t{i}", self._shape(base),
                                       r.choice(("float32", "float32", "float64", "int64")),
                                       self.seed * 101 + 50 + i, where=where, role=role,
                                       rebound=where == "module" and r.random() < 0.5, smooth=smooth))
        scalars = []
        for i in range(r.choice((0, 1, 1, 2))):
            where = r.choice(("closure", "global", "module"))
            kind = r.choice((int, float))
            first, second = (r.randint(-3, 3), r.randint(-3, 3)) if kind is int else (
                r.randint(-12, 12) / 4, r.randint(-12, 12) / 4)
            name = {"closure": "s", "global": "g", "module": "a"}[where] + str(i)
            scalars.append(ScalarDecl(name, where, first, second))
        choices = LAYOUTS + EDGE_LAYOUTS if self.edges else LAYOUTS
        layouts = tuple(tuple(r.choice(choices) for _ in inputs) for _ in range(2))
        self.expanded_inputs = {t.name for i, t in enumerate(inputs) if any(call[i] == "expanded" for call in layouts)}
        return inputs, tuple(captured), tuple(scalars), layouts

    # The program -----------------------------------------------------------------------------------

    def program(self):
        """A program of up to ``max_statements`` statements that torch runs in every call."""
        inputs, captured, scalars, layouts = self.declarations()
        prog = Program(self.seed, inputs, captured, scalars, (), (), layouts)
        for t in inputs:
            self.facts[t.name] = Facts(group=t.name, role="input")
        for c in captured:
            self.facts[captured_ref(c)] = Facts(group=c.name, role=c.role, writable=c.role == "buffer")
        env = probe(prog, self.facts)
        target = self.rng.randint(3, self.max_statements)
        tries = 0
        persistent = {c.name for c in captured}
        while len(prog.body) < target and tries < 6 * target:
            tries += 1
            self.reading_exact = set()
            made = self.statement(env)
            if made is None or self._breaks_exact_reads(made[1]):
                continue
            stmt, updates = made
            self.attempts[stmt.tag] = self.attempts.get(stmt.tag, 0) + 1
            candidate = prog.with_body(prog.body + (stmt,))
            new_env = probe(candidate, self.facts)
            if new_env is None:
                continue
            self.accepted[stmt.tag] = self.accepted.get(stmt.tag, 0) + 1
            self.exact_read |= self.reading_exact & persistent
            prog, env = candidate, new_env
            for name, f in updates.items():
                self.facts[name] = f
                if name in env:  # (the probe read the facts before this statement's: an in-place op's taint)
                    env[name] = replace(env[name], facts=f)
        prog = prog.with_body(prog.body, self.outputs(env))
        if not valid(prog):  # (outputs are plain references; this guards the rendering)
            prog = prog.with_body(prog.body, ())
        return _with_grad(prog)

    def _breaks_exact_reads(self, updates):
        """Whether a statement makes inexact a captured tensor that an earlier discontinuous statement read as exact:
        the next call would apply that statement to inexact values (fuzz seed 8401518 of 40 statements: ``signbit``
        of a buffer before its ``log2_``)."""
        return any(not f.exact and f.group in self.exact_read for f in updates.values())

    def outputs(self, env):
        r = self.rng
        body = [v for v in env.values() if v.ref.startswith("v") and not isinstance(v.value, (list, tuple))]
        picked = r.sample(body, min(len(body), r.randint(1, 4)))
        refs = [v.ref for v in picked]
        others = [v.ref for v in env.values() if v.ref.startswith(("x", "c", "M.t")) and v.is_tensor]
        # (none with network patterns: a call returning an input's or captured tensor's memory is not cut into a
        # forward and a backward graph, which those patterns are for)
        if others and r.random() < 0.3 and not self.nets:
            refs.append(r.choice(others))
        return tuple(dict.fromkeys(refs))

    def fresh(self):
        name = f"v{self.counter}"
        self.counter += 1
        return name

    def statement(self, env):
        """(statement, facts of what it defines or taints), or None when nothing fits."""
        tensors = [v for v in env.values() if v.is_tensor]
        if not tensors:
            return None
        # data-dependent statements are rare: one makes the whole compiled function run eagerly
        kinds = [(0.47, self.registry_op), (0.57, self.slicing), (0.65, self.setitem), (0.70, self.index_read),
                 (0.77, self.cast), (0.84, self.shape_control), (0.87, self.data_dependent),
                 (0.89, self.attr_store), (1.0, self.registry_inplace)]
        # (the chains only where asked: without, a seed's program is what it was before they were added)
        if self.chains and self.rng.random() < self.chains:
            make = self.rng.choice((self.pad_windows, self.gather_views))
        elif self.losses and self.rng.random() < self.losses:
            make = self.loss_pattern
        elif self.nets and self.rng.random() < self.nets:
            make = self.net_pattern
        elif self.convs and self.rng.random() < self.convs:
            make = self.conv_pattern
        elif self.edges and self.rng.random() < self.edges:
            make = self.edge_pattern
        else:
            r = self.rng.random()
            make = next(make for bound, make in kinds if r < bound)
        try:
            made = make(env, tensors)
        except (ValueError, IndexError):  # a statement that cannot be built on these shapes (a dim of size 0)
            return None
        # (drawn only where asked, after the statement: without, a seed's program is what it was before)
        if made is not None and self.regions and self.rng.random() < self.regions:
            return self.in_region(*made)
        return made

    def in_region(self, stmt, updates):
        """``stmt`` inside one of `REGIONS` (``with T.no_grad():``, ``with T.autocast(D, ...):``...): its results
        and writes made without autograd, as inference tensors, or in a lower float precision. Under autocast the
        values it makes or writes are not exact (a float product rounded to bfloat16)."""
        region = self.rng.choice(REGIONS)
        if region.startswith("T.autocast"):
            updates = {name: replace(f, exact=False) for name, f in updates.items()}
        lines = (f"with {region}:", *("    " + line for line in "\n".join(stmt.lines).split("\n")))
        return replace(stmt, lines=lines), updates

    # Operands -------------------------------------------------------------------------------------------

    def pick(self, tensors, pred=lambda v: True):
        ok = [v for v in tensors if pred(v)]
        if not ok:
            return None
        # recent variables more often, so statements build on one another
        weights = [1 + 2 * (v.ref.startswith("v") and int(v.ref[1:]) >= self.counter - 4) for v in ok]
        return self.rng.choices(ok, weights)[0]

    def number(self, integral=None):
        r = self.rng
        if integral is None:
            integral = r.random() < 0.5
        if integral:
            return str(r.choice((0, 1, 2, -1, 3, -2)))
        return repr(r.choice((0.5, -1.5, 2.0, 0.25, -0.75, 1.0)))

    def scalar_operand(self, env, integral=None):
        """A Python number: a literal, a closure variable, a global, a module attribute or an ``item()``."""
        scalars = [v for v in env.values() if isinstance(v.value, (int, float)) and not isinstance(v.value, bool)
                   and (integral is None or isinstance(v.value, int) == integral)]
        if scalars and self.rng.random() < 0.4:
            return self.rng.choice(scalars).ref
        return self.number(integral)

    def partner(self, env, tensors, primary, same_shape=False):
        """A second operand that broadcasts with ``primary`` (to its shape, if ``same_shape``)."""
        def fits(v):
            try:
                shape = torch.broadcast_shapes(v.shape, primary.shape)
            except RuntimeError:
                return False
            return shape == primary.shape if same_shape else True
        r = self.rng.random()
        if r < 0.25:
            return self.scalar_operand(env), True
        if r < 0.35:
            shape = primary.shape[self.rng.randrange(primary.ndim + 1):]
            return literal(self.values(shape, primary.dtype), primary.dtype), True
        v = self.pick(tensors, fits)
        if v is None:
            return self.scalar_operand(env), True
        return v.ref, v.facts.exact

    def values(self, shape, dtype):
        rng = np.random.default_rng(self.rng.randrange(1 << 30))
        if dtype == "bool":
            return rng.random(shape) < 0.5
        if dtype in INT_DTYPES:
            return rng.integers(0 if dtype == "uint8" else -4, 5, size=shape)
        return rng.integers(-16, 17, size=shape) / 8

    def dim(self, v):
        n = max(v.ndim, 1)
        return self.rng.randrange(-n, n)

    def dims(self, v):
        if v.ndim == 0:
            return []
        return sorted(self.rng.sample(range(v.ndim), self.rng.randint(1, v.ndim)))

    # Registry ops ---------------------------------------------------------------------------------------------

    def registry_op(self, env, tensors):
        entry = self.rng.choice(self.table)
        forms = [f for f in entry.forms if f != "inplace"]
        if not forms:
            return None
        return self.call(env, tensors, entry, self.rng.choice(forms))

    def registry_inplace(self, env, tensors):
        entries = [e for e in self.table if "inplace" in e.forms]
        return self.call(env, tensors, self.rng.choice(entries), "inplace")

    def call(self, env, tensors, entry, form):
        if entry.name in TORCH_UNDEFINED_AT_NAN:  # (drawn, then dropped: the other statements are drawn as before)
            return None
        if entry.name in TORCH_WRONG_ON_EXPANDED and self.expanded_inputs:
            return None
        schema = entry.schema
        first = schema.args[0] if schema.args else None
        needs_self = first is not None and first.type == "Tensor" and not (first.list or first.varargs)
        if form in ("method", "inplace") and not needs_self:
            return None
        primary = None
        if needs_self:
            writable = (lambda v: self.writable_by(entry, v)) if form == "inplace" else (lambda v: True)
            primary = self.pick(tensors, writable)
            if primary is None:
                return None
        elif tensors:
            primary = self.pick(tensors)
        if entry.name in HALF_DIFFERS and primary is not None and primary.dtype in ("float16", "bfloat16"):
            return None
        hint = ARG_HINTS.get(entry.name)
        made = hint(self, env, tensors, primary, entry) if hint else self.generic_args(env, tensors, primary, schema)
        if made is None:
            return None
        args, kwargs, operands_exact = made
        if entry.name in HALF_DIFFERS and any(
                a in env and env[a].is_tensor and env[a].dtype in ("float16", "bfloat16")
                for a in (*args, *kwargs.values())):
            return None
        receiver = primary.ref if primary is not None else None
        place = NAN_SIGN_READERS.get(entry.name)
        if place is not None and place < len(args):
            args[place] = nan_sign_cleared(env, args[place])
            if place == 0:
                receiver = args[0]
        marker = kwargs.pop("_", "")
        overlapping = marker == "overlap"
        tag = entry.name + MARKERS.get(marker, "")
        exact = operands_exact and (primary is None or not needs_self or primary.facts.exact)
        if entry.name in DISCONTINUOUS:
            if not exact:
                return None
            self.reading_exact |= {env[a].facts.group for a in (*args, *kwargs.values())
                                   if isinstance(a, str) and isinstance(env.get(a), Var)}
            if primary is not None:
                self.reading_exact.add(primary.facts.group)
        if needs_self and form in ("method", "inplace"):
            args = args[1:]
        text = ", ".join(args + [f"{k}={v}" for k, v in kwargs.items()])
        returns = schema.returns
        several = len(returns) > 1 or (returns and returns[0].list)
        pick = ""
        if several:
            choices = RESULT_CHOICES.get(entry.name, (0, 1) if len(returns) > 1 else (0, -1))
            if entry.name == "sort" and "stable=True" in text:
                choices = (0, 1)
            pick = f"[{self.rng.choice(choices)}]"
        if entry.name == "svd" and pick == "[0]" and primary is not None and 0 not in primary.shape:
            # U's columns are singular vectors, each up to its sign (which LAPACK builds and sign conventions
            # decide): compared with each column's projection on fixed weights sqrt(i + 2) made positive; with
            # some=False only the first min(m, n) columns, the others spanning the complement in any basis. (Not
            # its largest element made positive: the fuzzer's values tie in magnitude, as atan(c) and atan(-c),
            # and an ulp between the two libraries' vectors picked the other one: seed 8471469 of --out-views 0.5)
            k = min(primary.shape[-2:])
            pick = f"{pick}[..., :{k}]"
            wrap = SVD_SIGN
        else:
            wrap = ""
        if form == "inplace":
            if not exact and not primary.is_float:  # an integer or bool made of inexact floats
                return None
            stmt = f"{primary.ref}.{entry.op.method_name}_({text})"
            taint = {}
            if not (exact and entry.name in EXACT_OPS):
                taint = self.taint(env, primary.facts.group)
            return Stmt((stmt,), (), tag + "_"), taint
        name = self.fresh()
        if form == "method":
            expr = f"{receiver}.{entry.op.method_name}({text}){pick}"
        elif form == "out":
            if several or not entry.op.returns_tensor:
                return None
            return self.out_form(env, entry, text, name, exact and entry.name in EXACT_OPS, MARKERS.get(marker, ""))
        else:
            expr = f"T.{entry.call}({text}){pick}"
        if wrap:
            expr = f"{wrap}({expr})"
        result = self.evaluate(env, expr)
        if result is None or not (exact or _is_float(result)):
            return None
        is_view = entry.op.kind == "view" or entry.name in VIEW_OPS
        facts = Facts(exact=exact and (entry.name in EXACT_OPS or entry.op.kind == "view"),
                      writable=not (entry.name in OVERLAPPING_VIEWS or (is_view and primary is not None
                                                                         and not primary.facts.writable)),
                      group=primary.facts.group if is_view and primary is not None else name)
        if overlapping:
            facts.writable = False
        return Stmt((f"{name} = {expr}",), (name,), tag), {name: facts}

    def writable_by(self, entry, v):
        """Whether ``entry``'s in-place or ``out=`` call may write ``v`` (`TORCH_WRITES_THROUGH_OVERLAP`)."""
        return v.facts.writable and not (entry.name in TORCH_WRITES_THROUGH_OVERLAP
                                         and v.facts.group in self.expanded_inputs)

    def out_form(self, env, entry, text, name, exact, marker=""):
        """``T.op(..., out=buffer)``: mostly into a buffer of the result's shape and dtype; else into an
        empty one, which the call resizes, or one of another dtype, which it casts into. Its tag ends in the call's
        ``marker`` (`MARKERS`: torch's gradient of a composite op's out= call, as nanquantile's, is no oracle there
        either: fuzz seed 9720115 of ``--nets 0.3``, ``T.nanquantile(v5, 0.5, out=v11)`` at tied zeros)."""
        result = self.evaluate(env, f"T.{entry.call}({text})")
        if not isinstance(result, torch.Tensor) or not (exact or _is_float(result)):
            return None
        shape, dtype = tuple(result.shape), str(result.dtype).split(".")[-1]
        if self.rng.random() < 0.1:
            shape = (0,)
        if self.rng.random() < 0.2:
            dtype = self.rng.choice(DTYPES)
        if self.out_views and self.rng.random() < self.out_views and not self.resizes_its_shape(
                env, entry, text, tuple(result.shape), dtype):
            if entry.name in TORCH_WRONG_INTO_BATCHES and result.ndim > 3:
                return None
            return self.out_view(env, entry, text, name, exact, tuple(result.shape), dtype, marker)
        buf = self.fresh()
        lines = (f"{buf} = T.zeros({shape!r}, dtype=T.{dtype}, device=D)", f"T.{entry.call}({text}, out={buf})",
                 f"{name} = {buf}")
        return Stmt(lines, (buf, name), entry.name + "(out)" + marker), {buf: Facts(exact=exact, group=buf),
                                                                name: Facts(exact=exact, group=buf)}

    def out_view(self, env, entry, text, name, exact, shape, dtype, marker=""):
        """``out=`` into memory that is not a new compact tensor of the result's shape: a variable of the program
        of that shape (an input, a view of one, a captured tensor: the write reaches all that share its memory), a
        permuted, stepped or offset view of a new buffer (the program may return the buffer, whose other elements
        must stay zeros), or a new buffer of another non-empty shape, which the call resizes."""
        kind = self.rng.choice(("variable", "permuted", "stepped", "offset", "resized"))
        call = f"T.{entry.call}({text}, out={{}})"
        if kind == "variable":
            target = self.pick([v for v in env.values() if v.is_tensor],
                               lambda v: self.writable_by(entry, v) and v.shape == shape)
            if target is None:
                return None
            facts = {} if exact else self.taint(env, target.facts.group)
            facts[name] = Facts(exact=exact, group=target.facts.group)
            return Stmt((call.format(target.ref), f"{name} = {target.ref}"), (name,),
                        entry.name + "(out)" + marker), facts
        n = len(shape)
        if kind == "resized":
            made, view = (*shape, 2) if n < 3 else (1,), ""
        elif kind == "permuted":
            if n < 2:
                return None
            made, view = shape[::-1], f".permute({tuple(range(n - 1, -1, -1))!r})"
        elif n == 0:
            return None
        elif kind == "stepped":
            made, view = (2 * shape[0], *shape[1:]), "[::2]"
        else:
            made, view = (shape[0] + 1, *shape[1:]), "[1:]"
        base, buf = self.fresh(), self.fresh()
        lines = (f"{base} = T.zeros({made!r}, dtype=T.{dtype}, device=D)", f"{buf} = {base}{view}",
                 call.format(buf), f"{name} = {buf}")
        return Stmt(lines, (base, buf, name), entry.name + "(out)" + marker), {
            ref: Facts(exact=exact, group=base) for ref in (base, buf, name)}

    def resizes_its_shape(self, env, entry, text, shape, dtype):
        """Whether torch resizes an ``out=`` tensor of the result's own shape (its warning): ``matmul`` of a vector by
        a matrix resizes out to [1, n] and back, which gives a strided view of other memory contiguous strides, so
        that torch writes the elements between the view's (main fuzz seed 8490215 of ``--namespaced --out-views
        0.5``); jitorch writes the view. Such calls write no view here."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.evaluate(env, f"T.{entry.call}({text}, out=T.zeros({shape!r}, dtype=T.{dtype}))", quiet=False)
        return any("was resized" in str(w.message) for w in caught)

    def evaluate(self, env, expr, quiet=True):
        """``expr`` on torch with the variables' current values, or None if torch refuses it."""
        module = type("M", (), {})()
        names = {"T": torch, "D": "cpu", "M": module}
        for ref, v in env.items():
            if ref.startswith("M."):
                setattr(module, ref[2:], v.value)
            else:
                names[ref] = v.value
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = eval(expr, names)
        except Exception:
            return None
        if any(NO_DEGREES_OF_FREEDOM in str(w.message) for w in caught):
            return None
        if not quiet:
            for w in caught:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return value

    def taint(self, env, group):
        """Facts marking every variable of an alias group inexact (an inexact write into one of them)."""
        out = {}
        for ref, f in self.facts.items():
            if f.group == group:
                out[ref] = Facts(False, f.writable, f.group, f.role)
        return out

    def generic_args(self, env, tensors, primary, schema):
        """Arguments from the schema's types alone; optional ones sometimes left out (then later ones are
        given by keyword)."""
        args, kwargs, exact = [], {}, True
        by_keyword = False
        for i, a in enumerate(schema.args):
            if a.type == "Device":  # a factory's tensor goes where the program's tensors live, as D says
                kwargs[a.name] = "D"
                by_keyword = True
                continue
            if a.name == "memory_format" and (schema.name.endswith("_like") or schema.name == "empty"):
                # (left out without a draw: these factories took a memory format in session 49, and a draw would
                # change every later seed's program)
                continue
            if a.has_default and self.rng.random() < 0.5:
                by_keyword = True
                continue
            if a.type == "Generator" or (a.type == "Any" and a.name == "memory_format"):
                by_keyword = True
                continue
            made = self.argument(env, tensors, primary, a, i == 0)
            if made is None:
                if a.has_default:
                    by_keyword = True
                    continue
                return None
            text, ok = made
            exact = exact and ok
            if a.kwarg_only or by_keyword:
                kwargs[a.name] = text
            else:
                args.append(text)
        return args, kwargs, exact

    def argument(self, env, tensors, primary, a, first):
        """(source, exact) of one argument of schema type ``a.type``, or None."""
        r = self.rng
        if a.type == "Tensor" and not (a.list or a.varargs):
            if first and primary is not None:
                return primary.ref, primary.facts.exact
            if a.optional and r.random() < 0.3:
                return "None", True
            return self.partner(env, tensors, primary) if primary is not None else None
        if a.type == "Tensor":
            same = [v for v in tensors if primary is not None and v.shape == primary.shape
                    and v.dtype == primary.dtype]
            chosen = [r.choice(same) for _ in range(r.randint(1, 3))] if same else []
            if not chosen:
                return None
            return "[" + ", ".join(v.ref for v in chosen) + "]", all(v.facts.exact for v in chosen)
        if a.type == "int" and (a.list or a.varargs):
            if a.name in ("dim", "dims"):
                return (repr(self.dims(primary)), True) if primary is not None else None
            return repr([r.randint(1, 3) for _ in range(r.randint(1, 3))]), True
        if a.type == "int":
            if a.name in ("dim", "dim0", "dim1", "dim2", "start_dim", "end_dim", "dimension", "axis0", "axis1"):
                return (str(self.dim(primary)), True) if primary is not None else None
            return str(r.randint(-1, 3)), True
        if a.type == "bool":
            return repr(r.random() < 0.5), True
        if a.type == "Scalar":
            return self.scalar_operand(env), True
        if a.type == "float":
            return repr(r.choice((0.5, 1.0, 2.0, 1e-3))), True
        if a.type == "ScalarType":
            if a.optional and r.random() < 0.5:
                return "None", True
            return dtype_ref(r.choice(DTYPES)), True
        if a.type == "str":
            choices = STR_CHOICES.get(a.name)
            return (repr(r.choice(choices)), True) if choices else None
        if a.type == "Any" and a.name == "p":
            return r.choice(("2", "1", "'fro'", "float('inf')")), True
        return None

    # Structural statements ------------------------------------------------------------------------------

    def slicing(self, env, tensors):
        v = self.pick(tensors, lambda v: v.ndim > 0)
        if v is None:
            return None
        r = self.rng
        parts = []
        for n in v.shape:
            c = r.random()
            if c < 0.45:
                start = r.choice((None, 0, 1, -2, n // 2))
                stop = r.choice((None, n, -1, n + 2))
                step = r.choice((None, 1, 2, 3))
                parts.append(":".join("" if x is None else str(x) for x in (start, stop)) +
                             ("" if step is None else f":{step}"))
            elif c < 0.65:
                parts.append(str(r.randrange(-n, n)) if n else ":")
            elif c < 0.75:
                parts.append("None")
            else:
                parts.append(":")
        if r.random() < 0.2:
            parts = ["..."] + parts[r.randrange(len(parts)):]
        name = self.fresh()
        stmt = Stmt((f"{name} = {v.ref}[{', '.join(parts)}]",), (name,), "slice")
        return stmt, {name: Facts(v.facts.exact, v.facts.writable, v.facts.group)}

    def setitem(self, env, tensors):
        v = self.pick(tensors, lambda v: v.facts.writable and v.ndim > 0)
        if v is None:
            return None
        r = self.rng
        c = r.random()
        if c < 0.6:
            d = r.randrange(v.ndim)
            n = v.shape[d]
            index = ", ".join([":"] * d + [r.choice((f"{r.randrange(-n, n)}", f"::{r.randint(1, 3)}",
                                                      f"{r.randrange(n)}:"))])
        elif c < 0.8:
            n = v.shape[0]
            k = r.randint(1, n)
            index = literal(r.sample(range(n), k), "int64")  # distinct: one value per element written
        else:
            masks = [m for m in tensors if m.dtype == "bool" and m.shape == v.shape]
            if not masks:
                return None
            index = r.choice(masks).ref
        target = self.evaluate(env, f"{v.ref}[{index}]")
        if target is None:
            return None
        target_shape = tuple(target.shape)
        tag = "setitem"
        if r.random() < 0.5:
            value, exact = self.scalar_operand(env), True
        else:
            fit = self.pick(tensors, lambda w: _broadcasts_to(w.shape, target_shape))
            if fit is None:
                return None
            value, exact = fit.ref, fit.facts.exact
            # (an inexact float written into integers or bools is a cast, which a last-bit difference can move across
            # a whole number: fuzz seed 53020597, ``v0[::1] = T.corrcoef(x1)``, 1 in jitorch and 0.999... in torch)
            if not exact and fit.is_float and not v.is_float:
                return None
            if c < 0.6 and not fit.ndim:
                tag = SETITEM_0D
        taint = {} if exact else self.taint(env, v.facts.group)
        return Stmt((f"{v.ref}[{index}] = {value}",), (), tag), taint

    def index_read(self, env, tensors):
        v = self.pick(tensors, lambda v: v.ndim > 0 and v.shape[0] > 0)
        if v is None:
            return None
        r = self.rng
        name = self.fresh()
        c = r.random()
        if c < 0.5:
            index = literal([r.randrange(-v.shape[0], v.shape[0]) for _ in range(r.randint(1, 4))], "int64")
            tag = "index_tensor"
        elif c < 0.7 and v.ndim > 1:
            index = f":, {[r.randrange(v.shape[1]) for _ in range(r.randint(1, 3))]!r}"
            tag = "index_list"
        else:
            if not v.facts.exact:
                return None
            self.reading_exact.add(v.facts.group)
            index = f"{v.ref} > {self.number()}"
            tag = "index_mask"  # the result's shape depends on the data: compiled, it runs eagerly
        return Stmt((f"{name} = {v.ref}[{index}]",), (name,), tag), {name: Facts(v.facts.exact, True, name)}

    def cast(self, env, tensors):
        v = self.pick(tensors)
        r = self.rng
        target = r.choice(DTYPES)
        if target not in FLOAT_DTYPES and v.is_float and not v.facts.exact:
            return None
        if target not in FLOAT_DTYPES:
            self.reading_exact.add(v.facts.group)
        form = r.random()
        methods = {"float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16",
                   "int64": "long", "int32": "int", "int16": "short", "int8": "char", "uint8": "byte", "bool": "bool"}
        if form < 0.5:
            expr = f"{v.ref}.to(T.{target})"
        elif form < 0.8:
            expr = f"{v.ref}.{methods[target]}()"
        else:
            other = self.pick(tensors, lambda w: not (w.dtype not in FLOAT_DTYPES and v.is_float
                                                     and not v.facts.exact))
            if other is None:
                return None
            expr, target = f"{v.ref}.type_as({other.ref})", other.dtype
        name = self.fresh()
        same = target == v.dtype  # .to() of the same dtype is the tensor itself
        facts = Facts(v.facts.exact, v.facts.writable if same else True, v.facts.group if same else name)
        return Stmt((f"{name} = {expr}",), (name,), "cast"), {name: facts}

    def unary_expr(self, v):
        """A small expression of ``v`` (for the branches of control flow)."""
        r = self.rng
        return r.choice((f"{v.ref} * 2", f"{v.ref} + 1", f"{v.ref}.abs()", f"-{v.ref}",
                         f"{v.ref}.sum(0)" if v.ndim else f"{v.ref} - 1", f"{v.ref}.flip(0)" if v.ndim else v.ref))

    def shape_control(self, env, tensors):
        v = self.pick(tensors, lambda v: v.ndim > 0)
        if v is None:
            return None
        r = self.rng
        name = self.fresh()
        if r.random() < 0.5:
            d = r.randrange(v.ndim)
            cond = f"{v.ref}.shape[{d}] {r.choice(('>', '<=', '=='))} {r.randint(1, 4)}"
            lines = (f"if {cond}:", f"    {name} = {self.unary_expr(v)}", "else:", f"    {name} = {self.unary_expr(v)}")
            tag = "if_shape"
        else:
            lines = (f"{name} = {v.ref}[0] * 0", f"for i in range(min({v.ref}.shape[0], 3)):",
                     f"    {name} = {name} {r.choice(('+', '*', '-'))} {v.ref}[i]")
            tag = "for_shape"
        return Stmt(lines, (name,), tag), {name: Facts(False, True, name)}

    def data_dependent(self, env, tensors):
        v = self.pick(tensors, lambda v: v.facts.exact and v.dtype not in ("float16", "bfloat16"))
        if v is None:
            return None
        self.reading_exact.add(v.facts.group)
        r = self.rng
        name = self.fresh()
        c = r.random()
        if c < 0.3:
            red = r.choice(("max", "min", "sum")) if v.dtype != "bool" else r.choice(("any", "all"))
            if red == "sum" and v.is_float:
                red = "max"
            stmt = Stmt((f"{name} = {v.ref}.{red}().item()",), (name,), "item")
        elif c < 0.55:
            red = "any" if v.dtype == "bool" else "max"
            lines = (f"if {v.ref}.{red}() > {self.number() if v.dtype != 'bool' else 0}:",
                     f"    {name} = {self.unary_expr(v)}", "else:", f"    {name} = {self.unary_expr(v)}")
            stmt = Stmt(lines, (name,), "if_value")
            return stmt, {name: Facts(False, True, name)}
        elif c < 0.75:
            stmt = Stmt((f"{name} = {v.ref}.nonzero()",), (name,), "nonzero")
        elif c < 0.9:
            stmt = Stmt((f"{name} = T.tensor({v.ref}.tolist(), dtype=T.{v.dtype}, device=D)",), (name,), "tolist")
        else:
            stmt = Stmt((f"{name} = T.masked_select({v.ref}, {v.ref} != 0)",), (name,), "masked_select")
        return stmt, {name: Facts(True, True, name)}

    def pad_windows(self, env, tensors):
        """``F.pad`` of the last 1-3 dims in any mode, then windows over the padded value (avg or max pool,
        ``F.unfold``, ``Tensor.unfold`` or ``as_strided``), sometimes then a pointwise op."""
        v = self.pick(tensors, lambda v: v.is_float and v.ndim >= 2 and 0 not in v.shape)
        if v is None:
            return None
        r = self.rng
        nd = r.choice([k for k in (v.ndim - 2, v.ndim - 1) if 1 <= k <= 3] or [0])
        if not nd:
            return None
        mode = r.choice(("reflect", "replicate", "circular", "constant"))
        pad = []
        for n in reversed(v.shape[-nd:]):  # (pad's pairs start at the last dim; reflect pads less than the size)
            pad += [r.randint(0, min(2, n - (mode == "reflect"))) for _ in range(2)]
        padded = f"T.nn.functional.pad({v.ref}, {tuple(pad)!r}, mode={mode!r})"
        value = self.evaluate(env, padded)
        if value is None:
            return None
        sizes = value.shape[-nd:]
        c = r.random()
        exact, writable = v.facts.exact, False
        if c < 0.55:
            kind = r.choice(("avg", "max"))
            k = r.randint(1, min(3, *sizes))
            expr = f"T.nn.functional.{kind}_pool{nd}d({padded}, {k}, stride={r.randint(1, 2)})"
            exact, writable, tag = exact and kind == "max", True, f"pad {kind}_pool"
        elif c < 0.7 and nd == 2:
            expr = f"T.nn.functional.unfold({padded}, {r.randint(1, min(2, *sizes))})"
            writable, tag = True, "pad F.unfold"
        elif c < 0.85:
            d = r.randrange(value.ndim)
            expr = f"{padded}.unfold({d}, {r.randint(1, value.shape[d])}, {r.randint(1, 2)})"
            tag = "pad unfold"
        else:
            expr, tag = self._as_strided_of(padded, value), "pad as_strided"
            if expr is None:
                return None
        expr, exact, writable = self._pointwise_tail(env, tensors, expr, exact, writable)
        name = self.fresh()
        return Stmt((f"{name} = {expr}",), (name,), tag), {name: Facts(exact, writable, name)}

    def gather_views(self, env, tensors):
        """An ``index_select``, ``gather`` or ``embedding``, then one or two views of its result (a transpose,
        permute, flatten, reshape, unfold, slice, expand or ``as_strided``) and sometimes an index_select of
        that, then sometimes a pointwise op."""
        v = self.pick(tensors, lambda v: v.ndim >= 1 and 0 not in v.shape)
        if v is None:
            return None
        r = self.rng
        d = r.randrange(v.ndim)
        c = r.random()
        if c < 0.45:
            expr = f"T.index_select({v.ref}, {d}, {self._indices(v.shape[d], (r.randint(1, 5),))})"
        elif c < 0.75:
            shape = [r.randint(1, n) for n in v.shape]
            expr = f"{v.ref}.gather({d}, {self._indices(v.shape[d], shape)})"
        elif v.ndim == 2 and v.is_float:
            index = self._indices(v.shape[0], (r.randint(1, 3), r.randint(1, 4)))
            expr = f"T.nn.functional.embedding({index}, {v.ref})"
        else:
            return None
        writable = True
        for _ in range(r.randint(1, 2)):
            value = self.evaluate(env, expr)
            if value is None:
                return None
            viewed = self._view_of(expr, value)
            if viewed is None:
                return None
            expr, overlaps = viewed
            writable = writable and not overlaps
        if r.random() < 0.25:
            value = self.evaluate(env, expr)
            if value is None or value.ndim == 0 or value.shape[0] == 0:
                return None
            expr = f"T.index_select({expr}, 0, {self._indices(value.shape[0], (r.randint(1, 4),))})"
            writable = True
        expr, exact, writable = self._pointwise_tail(env, tensors, expr, v.facts.exact, writable)
        name = self.fresh()
        return Stmt((f"{name} = {expr}",), (name,), "gather views"), {name: Facts(exact, writable, name)}

    def loss_pattern(self, env, tensors):
        """A pattern the ``sums`` and ``lse`` passes rewrite, over a float variable ``v`` seen as rows ``(r, c)``
        (its last dim the classes): cross-entropy or nll of a log-softmax, log-probs picked by a gather or read
        pointwise and summed, a sum of a one-hot ``where(arange(c) == q, w, 0)`` along the classes with targets
        ``q`` partly out of range or negative, or a sum of a reshape of a computed value over merged or split
        dims."""
        v = self.pick(tensors, lambda v: v.ndim >= 1 and v.dtype in ("float32", "float64")
                      and 0 not in v.shape[-1:])
        if v is None:
            return None
        r = self.rng
        c = v.shape[-1]
        rows = prod(v.shape[:-1])
        x = f"({v.ref}.reshape({rows}, {c}) {r.choice(('*', '+'))} {self.number()})"
        kind = r.choice(("ce", "nll", "gather", "pointwise", "one-hot", "reshape sum"))
        if kind == "ce":
            smoothing = r.choice(("", ", label_smoothing=0.25"))
            expr = f"T.nn.functional.cross_entropy({x}, {self._indices(c, (rows,))}" \
                   f", reduction={r.choice(('mean', 'sum', 'none'))!r}{smoothing})"
        elif kind == "nll":
            expr = f"T.nn.functional.nll_loss(T.log_softmax({x}, -1), {self._indices(c, (rows,))}, " \
                   f"reduction={r.choice(('mean', 'sum', 'none'))!r})"
        elif kind == "gather":
            expr = f"T.log_softmax({x}, {r.choice((-1, 1))}).gather(1, {self._indices(c, (rows, r.randint(1, 3)))})"
        elif kind == "pointwise":
            lp = f"T.log_softmax({x}, -1)"
            # (probabilities scaled: a row's sum of them is 1 within rounding, an ill-conditioned argument of a later
            # arcsin or atanh, where the kernels' exp and eager's differ by an ulp: fuzz seed 45300294)
            read = r.choice((f"({lp}).exp() * 0.75", f"({lp}).neg()", f"{lp} * {x}"))
            expr = f"({read}).{r.choice(('sum', 'amax'))}({r.choice((0, -1, (0, 1)))!r})"
        elif kind == "one-hot":
            q = literal(np.random.default_rng(r.randrange(1 << 30)).integers(-1, c + 2, size=(rows, 1)), "int64")
            w = f"{x}.{r.choice(('sum', 'amax'))}(-1, keepdim=True)"
            expr = f"T.where(T.arange({c}, device=D) == {q}, {w}, 0).sum({r.choice((-1, 1, (1,)))!r}, " \
                   f"keepdim={r.random() < 0.5})"
        else:  # (the source's dims split or merged: a reshape the reduced dims cross)
            shape = list(v.shape[:-1]) + list(_factor(c, r)) if r.random() < 0.5 else [rows, c]
            dims = [d for d in range(len(shape)) if r.random() < 0.5] or [0]
            view = f"({v.ref} {r.choice(('*', '+'))} {self.number()}).reshape({shape!r})"
            expr = f"{view}.sum({dims!r}, keepdim={r.random() < 0.5})"
        name = self.fresh()
        return Stmt((f"{name} = {expr}",), (name,), f"loss {kind}"), {name: Facts(False, True, name)}

    def net_pattern(self, env, tensors):
        """A network's pattern over a float32/float64 variable ``v``, its values repeated to sizes past a vector's
        lanes (17, 33, 200: `_spread`) and times fixed weights: a GELU MLP (``gelu(x @ w + b)``, a bias read of
        ``v`` too, maybe a second layer, maybe summed over a reshape), scaled dot-product attention (no mask, the
        causal one, a bool or an additive one broadcast to the scores, ``dropout_p=0.0``, odd lengths and head
        dims), cross-entropy, nll or picked log-probs over odd class counts of a computed (maybe reshaped)
        input, a normalisation whose input is computed pointwise and read again after its reduction (or reduced
        through a permutation), a math function over a row of an odd length, or a reduction's ``out=`` call. In a gradient run, compiled, these
        split into forward and backward graphs with saved values (`jit.partition`)."""
        v = self.pick(tensors, lambda v: v.dtype in ("float32", "float64") and v.value.numel() > 0)
        if v is None:
            return None
        r = self.rng
        kind = r.choice(("gelu mlp", "attention", "wide ce", "norm", "wide map", "reduction out"))
        made = getattr(self, "_net_" + kind.replace(" ", "_"))(env, v)
        if made is None:
            return None
        lines, defines = made
        return Stmt(lines, defines, f"net {kind}"), {name: Facts(False, True, name) for name in defines}

    def conv_pattern(self, env, tensors):
        """A convolution of a float32/float64 variable ``v``'s values spread to a batch ``(n, c, *spatial)`` of one
        or two spatial dims, laid out channels-last half the time (``contiguous(memory_format=T.channels_last)``, or
        a permuted view of a ``(n, *spatial, c)`` value), by fixed weights (channels-last too at times; transposed
        at times: ``conv_transpose``), a bias read of ``v`` or none, with strides, padding, dilation and groups; then
        what a CNN's compiled step does around it: an activation, a residual read of the input, a pooling, a batch
        norm, a sum over the batch and spatial dims (a bias's gradient) or nothing. In a gradient run the
        convolution's input, weight and bias all take gradients through ``v``."""
        v = self.pick(tensors, lambda v: v.dtype in ("float32", "float64") and v.value.numel() > 0)
        if v is None:
            return None
        r = self.rng
        nd, groups, transposed = r.choice((1, 2, 2)), r.choice((1, 1, 2)), r.random() < 0.2
        n, cin, cout = r.choice((1, 2, 3)), groups * r.choice((1, 2, 3)), groups * r.choice((1, 2, 4))
        spatial = tuple(r.choice((1, 3, 5, 8)) for _ in range(nd))
        kernel = tuple(r.choice((1, 2, 3)) for _ in range(nd))
        stride, dilation = r.choice((1, 1, 2)), r.choice((1, 1, 2))
        padding = r.choice((0, 1, "'same'")) if stride == 1 and not transposed else r.choice((0, 1))
        layout = r.choice(("contiguous", "channels_last", "channels_last", "permuted")) if nd == 2 else "contiguous"
        if layout == "permuted":
            x = f"{self._spread(v, (n, *spatial, cin))}.permute(0, 3, 1, 2)"
        else:
            x = self._spread(v, (n, cin, *spatial))
            if layout == "channels_last":
                x = f"{x}.contiguous(memory_format=T.channels_last)"
        w_shape = (cin, cout // groups, *kernel) if transposed else (cout, cin // groups, *kernel)
        w = f"({self._spread(v, w_shape)} + {self._weights(w_shape, v.dtype)})"
        if nd == 2 and r.random() < 0.3:
            w = f"{w}.contiguous(memory_format=T.channels_last)"
        bias = r.choice(("None", self._spread(v, (cout,), scale=False)))
        if transposed:
            conv = f"T.nn.functional.conv_transpose{nd}d({x}, {w}, {bias}, stride={stride}, padding={padding}, " \
                   f"groups={groups}, dilation={dilation})"
        else:
            conv = f"T.nn.functional.conv{nd}d({x}, {w}, {bias}, stride={stride}, padding={padding}, " \
                   f"dilation={dilation}, groups={groups})"
        h, name = self.fresh(), self.fresh()
        made = self.evaluate(env, conv)
        # (none empty: torch's oneDNN path returns a transposed convolution's output of size 0 that its native path,
        # and jitorch, refuse: docs/differences-from-torch.md, fuzz seed 53700024)
        if not isinstance(made, torch.Tensor) or made.numel() == 0:
            return None
        tails = [f"T.relu({h})", f"{h}.sum({(0, *range(2, 2 + nd))!r})",
                 f"T.nn.functional.batch_norm({h}, None, None, training=True)", f"{h} * 1.0"]
        if not bool((made == float("inf")).any()):  # (`_holds_inf`)
            tails.append(f"T.nn.functional.gelu({h}) * {h}")
        if tuple(made.shape) == (n, cin, *spatial):
            tails.append(f"T.relu({h} + {x})")
        if nd == 2 and min(made.shape[2:]) >= 2:
            tails += [f"T.nn.functional.max_pool2d({h}, 2, ceil_mode=True)", f"T.nn.functional.avg_pool2d({h}, 2)",
                      f"T.nn.functional.adaptive_avg_pool2d(T.relu({h}), 1)"]
        return Stmt((f"{h} = {conv}", f"{name} = {r.choice(tails)}"), (h, name), "conv"), \
            {h: Facts(False, True, h), name: Facts(False, True, name)}

    # Edge patterns (``--edges``) --------------------------------------------------------------------------

    def edge_pattern(self, env, tensors):
        """A statement at the edges of the dtype and layout rules (`EDGE_KINDS`): integer division and remainder of
        mixed signs and dtypes, binary ops across dtype categories and 0-d tensors, integer wraparound and shifts,
        ``where`` with Python scalars, index accumulations with repeated indices (``index_add_``, ``index_put_``
        with ``accumulate``, ``scatter_add_``, ``scatter_reduce_``, ``put_``), in-place and ``out=`` calls whose
        operands broadcast and promote, reductions with ``keepdim`` over several dims, dims of size 0 and 1,
        expanded (stride 0) and flipped operands, and channels-last values through pointwise ops and reductions."""
        kind = self.rng.choice(EDGE_KINDS)
        made = getattr(self, "_edge_" + kind.replace(" ", "_"))(env, tensors)
        if made is None:
            return None
        lines, defines, facts = made
        return Stmt(lines, defines, f"edge {kind}"), facts

    def _exact_int(self, tensors, pred=lambda v: True):
        """An integer or bool variable whose values are exact, or None."""
        return self.pick(tensors, lambda v: not v.is_float and v.facts.exact and pred(v))

    def _int_literal(self, shape, dtype, nonzero=False):
        rng = np.random.default_rng(self.rng.randrange(1 << 30))
        low = 0 if dtype == "uint8" else -7
        values = rng.integers(low, 8, size=shape)
        if nonzero:
            values = np.where(values == 0, 3, values)
        return literal(values, dtype)

    def _result(self, env, name, expr, exact, line=None):
        """(lines, defines, facts) of ``name = expr`` when torch runs it, its facts exact when ``exact`` and the
        result is integral (a float result of arithmetic may round otherwise in a fused kernel), else None."""
        value = self.evaluate(env, expr)
        if not isinstance(value, torch.Tensor):
            return None
        exact = exact and not value.is_floating_point()
        return ((line or f"{name} = {expr}",), (name,), {name: Facts(exact, True, name)})

    def _edge_int_divmod(self, env, tensors):
        a = self._exact_int(tensors, lambda v: v.dtype != "bool")
        if a is None:
            return None
        r = self.rng
        shape = a.shape[r.randrange(a.ndim + 1):]
        divisor = r.choice((self._int_literal(shape, r.choice(INT_DTYPES), nonzero=True),
                            str(r.choice((-3, -2, 2, 3, -1))), f"{r.choice((-3, 2))}.0",
                            self._int_literal((), r.choice(INT_DTYPES), nonzero=True)))
        op = r.choice(("{a} // {b}", "{a} % {b}", "T.remainder({a}, {b})", "T.fmod({a}, {b})",
                       "T.div({a}, {b}, rounding_mode='floor')", "T.div({a}, {b}, rounding_mode='trunc')",
                       "T.floor_divide({a}, {b})", "{a} / {b}", "T.remainder({b}, {a})"))
        if op == "T.remainder({b}, {a})" and not bool((a.value != 0).all()):
            return None
        name = self.fresh()
        return self._result(env, name, op.format(a=a.ref, b=divisor), True)

    def _edge_mixed_dtypes(self, env, tensors):
        a = self.pick(tensors, lambda v: v.facts.exact)
        if a is None:
            return None
        r = self.rng
        shape = a.shape[r.randrange(a.ndim + 1):] if r.random() < 0.7 else ()
        dtype = r.choice(DTYPES)
        if dtype in FLOAT_DTYPES:
            other = literal(self.values(shape, dtype).astype(np.float32), dtype)
        elif dtype == "bool":
            other = literal(self.values(shape, dtype), dtype)
        else:
            other = self._int_literal(shape, dtype)
        if r.random() < 0.3:
            other = r.choice(("True", "2", "-3", "0.5", "-1.25", "200", "-129"))
        op = r.choice(("{a} + {b}", "{a} - {b}", "{a} * {b}", "T.maximum({a}, {b})", "T.minimum({a}, {b})",
                       "{a} == {b}", "{a} < {b}", "{a} & {b}", "{a} | {b}", "{a} ^ {b}", "T.add({a}, {b}, alpha=2)",
                       "{b} - {a}", "T.sub({a}, {b}, alpha=-1)", "{a} << {b}", "{a} >> {b}"))
        if ("<<" in op or ">>" in op) and (a.is_float or dtype in FLOAT_DTYPES or a.dtype == "bool"):
            return None
        if ("<<" in op or ">>" in op):  # (shifts by 0..9: past int8's width too)
            other = self._shift_counts(shape, "int64" if dtype == "bool" else dtype)
        if op.startswith("T.add") or op.startswith("T.sub"):
            if other in ("True",) or a.dtype == "bool":
                return None
        exact = not a.is_float and not (dtype in FLOAT_DTYPES or "." in other)
        self.reading_exact.add(a.facts.group)  # (comparisons, shifts and bitwise ops are discontinuous)
        if a.is_float and op in ("T.maximum({a}, {b})", "T.minimum({a}, {b})", "{a} == {b}", "{a} < {b}"):
            exact = True
        name = self.fresh()
        return self._result(env, name, op.format(a=a.ref, b=other), exact)

    def _shift_counts(self, shape, dtype):
        rng = np.random.default_rng(self.rng.randrange(1 << 30))
        return literal(rng.integers(0, 10, size=shape), dtype)

    def condition(self, tensors, threshold=None):
        """A bool variable's reference, or else an exact variable compared with ``threshold`` (a drawn number when
        None); None where there is neither."""
        cond = self.pick(tensors, lambda v: v.dtype == "bool")
        if cond is not None:
            return cond.ref
        base = self.pick(tensors, lambda v: v.facts.exact)
        if base is None:
            return None
        self.reading_exact.add(base.facts.group)
        return f"({base.ref} > {self.number() if threshold is None else threshold})"

    def _edge_where_scalars(self, env, tensors):
        r = self.rng
        cond = self.condition(tensors)
        if cond is None:
            return None
        scalars = ("1", "-2", "0.5", "-1.5", "True", "float('inf')", "300")
        x = self.pick(tensors, lambda v: v.facts.exact)
        options = [(r.choice(scalars), r.choice(scalars))]
        if x is not None:
            options += [(x.ref, r.choice(scalars)), (r.choice(scalars), x.ref)]
        a, b = r.choice(options)
        name = self.fresh()
        return self._result(env, name, f"T.where({cond}, {a}, {b})", True) if r.random() < 0.7 else \
            self._result(env, name, f"{x.ref if x is not None else cond}.where({cond}, {b})", True)

    def _edge_index_accumulate(self, env, tensors):
        v = self.pick(tensors, lambda v: v.facts.writable and v.ndim >= 1 and v.shape[0] > 0
                      and v.dtype != "bool")
        if v is None:
            return None
        r = self.rng
        d = r.randrange(v.ndim)
        n = v.shape[d]
        if n == 0:
            return None
        k = r.randint(1, 6)
        rng = np.random.default_rng(r.randrange(1 << 30))
        idx = rng.integers(-n if r.random() < 0.3 else 0, n, size=k)  # repeats, and negative ones at times
        src_shape = list(v.shape)
        src_shape[d] = k
        src = literal(self.values(tuple(src_shape), v.dtype).astype(
            np.float32 if v.is_float else np.int64), v.dtype)
        kind = r.choice(("index_add", "index_put", "scatter_add", "scatter_reduce", "put", "index_add fn",
                         "setitem add"))
        pos = literal(np.where(idx < 0, idx + n, idx), "int64")
        if kind == "index_add":
            line = f"{v.ref}.index_add_({d}, {pos}, {src}, alpha={r.choice((1, 2, -1))})"
        elif kind == "index_add fn":
            name = self.fresh()
            return self._result(env, name, f"T.index_add({v.ref}, {d}, {pos}, {src})", v.facts.exact)
        elif kind == "index_put":
            if d:
                return None
            line = f"{v.ref}.index_put_(({literal(idx, 'int64')},), {src}, accumulate=True)"
        elif kind == "put":
            m = v.value.numel()
            flat = rng.integers(-m, m, size=k)
            values = literal(self.values((k,), v.dtype).astype(np.float32 if v.is_float else np.int64), v.dtype)
            line = f"{v.ref}.put_({literal(flat, 'int64')}, {values}, accumulate=True)"
        else:
            # scatter's index of the source's shape, along d, repeating positions
            sidx = rng.integers(0, n, size=tuple(src_shape))
            if kind == "scatter_add":
                line = f"{v.ref}.scatter_add_({d}, {literal(sidx, 'int64')}, {src})"
            elif kind == "scatter_reduce":
                reduce = r.choice(("sum", "prod", "mean", "amax", "amin"))
                if reduce in ("mean", "prod") and v.is_float:
                    reduce = "amax"
                if reduce == "mean" and not v.is_float:
                    reduce = "sum"
                line = f"{v.ref}.scatter_reduce_({d}, {literal(sidx, 'int64')}, {src}, {reduce!r}, " \
                       f"include_self={r.random() < 0.5})"
            else:
                if d or any(i < 0 for i in idx):
                    return None
                line = f"{v.ref}[{literal(idx, 'int64')}] += {src}"
                # (a repeated index writes its one gathered-plus-source value: which copy lands is undefined
                # where the source rows differ)
                if len(set(idx.tolist())) != len(idx):
                    return None
        taint = {} if (v.facts.exact and not v.is_float) else self.taint(env, v.facts.group)
        return (line,), (), taint

    def _edge_broadcast_inplace(self, env, tensors):
        v = self.pick(tensors, lambda v: v.facts.writable and v.ndim >= 1)
        if v is None:
            return None
        r = self.rng
        w = self.pick(tensors, lambda w: w.ref != v.ref and _broadcasts_to(w.shape, v.shape))
        if w is None:
            return None
        op = r.choice(("add_", "sub_", "mul_", "copy_", "clamp_min_", "maximum out", "add out", "mul out",
                       "where out", "lerp_", "addcmul_"))
        exact = v.facts.exact and w.facts.exact
        if op.endswith(" out"):
            fn = op.split()[0]
            args = {"maximum": f"{v.ref}, {w.ref}", "add": f"{w.ref}, {v.ref}, alpha=2", "mul": f"{w.ref}, {v.ref}",
                    "where": f"{w.ref} > 0, {w.ref}, {v.ref}"}[fn]
            if fn == "where":
                if not w.facts.exact:
                    return None
                self.reading_exact.add(w.facts.group)
            if fn == "add" and "bool" in (v.dtype, w.dtype):
                return None
            line = f"T.{fn}({args}, out={v.ref})"
        elif op in ("lerp_", "addcmul_"):
            if not (v.is_float and w.is_float):
                return None
            line = f"{v.ref}.lerp_({w.ref}, 0.25)" if op == "lerp_" else \
                f"{v.ref}.addcmul_({w.ref}, {w.ref}, value=-0.5)"
        else:
            line = f"{v.ref}.{op}({w.ref})"
        if not v.is_float and w.is_float and not w.facts.exact:
            return None
        fine = exact and (op in ("copy_", "clamp_min_", "maximum out") or not v.is_float)
        return (line,), (), {} if fine else self.taint(env, v.facts.group)

    def _edge_keepdim_reduce(self, env, tensors):
        v = self.pick(tensors, lambda v: v.ndim >= 2)
        if v is None:
            return None
        r = self.rng
        dims = sorted(r.sample(range(v.ndim), r.randint(2, v.ndim)))
        dims = tuple(d - v.ndim if r.random() < 0.4 else d for d in dims)
        keep = r.random() < 0.7
        op = r.choice(("sum", "amax", "amin", "mean", "var", "std", "logsumexp", "prod", "any", "all",
                       "count_nonzero", "nansum", "sum dtype", "norm", "aminmax"))
        if op in ("mean", "var", "std", "logsumexp", "norm") and not v.is_float:
            return None
        if op == "count_nonzero":
            expr = f"T.count_nonzero({v.ref}, {dims!r})"
        elif op == "sum dtype":
            expr = f"{v.ref}.sum({dims!r}, keepdim={keep}, dtype=T.{r.choice(('float64', 'int64', 'float32'))})"
            if not v.facts.exact and "int" in expr:
                return None
        elif op in ("var", "std"):
            expr = f"{v.ref}.{op}({dims!r}, correction={r.choice((0, 1, 2))}, keepdim={keep})"
        elif op == "norm":
            expr = f"T.linalg.vector_norm({v.ref}, {r.choice((1, 2, 3, float('inf')))!r}, {dims!r}, {keep})"
        elif op == "aminmax":
            expr = f"T.aminmax({v.ref}, dim={dims[0]}, keepdim={keep})[{r.randint(0, 1)}]"
        else:
            expr = f"{v.ref}.{op}({dims!r}, keepdim={keep})"
        name = self.fresh()
        exact = v.facts.exact and op in ("amax", "amin", "any", "all", "count_nonzero", "aminmax")
        exact = exact or (v.facts.exact and not v.is_float and op in ("sum", "nansum", "prod"))
        made = self._result(env, name, expr, exact)
        if made is not None and op in ("amax", "amin", "aminmax") and v.facts.exact:
            made[2][name].exact = True
        return made

    def _edge_size_edges(self, env, tensors):
        v = self.pick(tensors, lambda v: v.ndim >= 1)
        if v is None:
            return None
        r = self.rng
        d = r.randrange(v.ndim)
        view = r.choice((f"{v.ref}.narrow({d}, 0, 0)", f"{v.ref}[{', '.join([':'] * d + ['5:'])}]",
                         f"{v.ref}.unsqueeze({d})", f"{v.ref}.narrow({d}, 0, 1)"))
        tail = r.choice(("{x}.sum({d}, keepdim=True)", "{x}.prod({d})", "{x}.mean({d})", "{x}.cumsum({d})",
                         "{x}.amax({d}) if {x}.shape[{d}] else {x}.sum({d})", "{x} * 2", "{x}.flip({d})",
                         "T.cat([{x}, {x}], {d})", "{x}.transpose(0, {d}).contiguous()", "{x}.std({d})",
                         "{x}.logsumexp({d})", "{x}.cumprod({d})", "{x}.max({d})[0] if {x}.shape[{d}] else {x}",
                         "{x}.softmax({d})", "{x}.argmax({d}) if {x}.shape[{d}] else {x}.sum()"))
        x = self.fresh()
        if "argmax" in tail:
            if not v.facts.exact:
                return None
            self.reading_exact.add(v.facts.group)
        name = self.fresh()
        expr = tail.format(x=x, d=d)
        value = self.evaluate(env, f"(lambda {x}: {expr})({view})")
        if not isinstance(value, torch.Tensor):
            return None
        exact = v.facts.exact and not value.is_floating_point()
        # (a result that may be ``x`` itself or a view of it: ``contiguous()`` of a transpose over size-1 dims)
        aliasing = ".contiguous()" in tail or "else {x}" in tail
        return ((f"{x} = {view}", f"{name} = {expr}"), (x, name),
                {x: Facts(v.facts.exact, v.facts.writable, v.facts.group),
                 name: Facts(exact, not aliasing, v.facts.group if aliasing else name)})

    def _edge_expanded(self, env, tensors):
        v = self.pick(tensors, lambda v: v.ndim >= 1 and v.value.numel() > 0)
        if v is None:
            return None
        r = self.rng
        shape = list(v.shape)
        view = r.choice((f"{v.ref}.expand(2, *{shape!r})", f"{v.ref}.flip(0)",
                         f"{v.ref}[None].expand(3, *{shape!r}).transpose(0, -1)",
                         f"{v.ref}.unsqueeze(-1).expand(*{shape!r}, 2)"))
        tail = r.choice(EDGE_TAILS["expanded"])
        return self._edge_view_tail(env, v, view, tail, copied=".flip(" in view)

    def _edge_channels_last(self, env, tensors):
        v = self.pick(tensors, lambda v: v.value.numel() > 0)
        if v is None:
            return None
        r = self.rng
        shape = (r.choice((1, 2)), r.choice((1, 3, 4)), r.choice((1, 2, 3)), r.choice((2, 3)))
        view = f"{self._spread(v, shape, scale=False)}.contiguous(memory_format=T.channels_last)"
        tails = [t for t in EDGE_TAILS["channels last"] if v.is_float or t not in EDGE_FLOAT_TAILS]
        if v.dtype == "bool":
            tails = [t for t in tails if t != "-{x}"]
        tail = r.choice(tails)
        if "{x} > 0" in tail or tail == "{x}.to(T.int16)" and v.is_float:
            if not v.facts.exact:
                return None
            self.reading_exact.add(v.facts.group)
        return self._edge_view_tail(env, v, view, tail, copied=True)

    def _edge_view_tail(self, env, v, view, tail, copied):
        """``x = view`` of ``v`` (a copy of its values where ``copied``), then ``name = tail`` of ``x``: facts that keep
        a result that may share ``x``'s memory (`EDGE_ALIASING_TAILS`: a view, or ``contiguous()``/``to()`` of a
        tensor already so) in ``x``'s alias group, and no write into either where they may overlap."""
        x, name = self.fresh(), self.fresh()
        expr = tail.format(x=x)
        value = self.evaluate(env, f"(lambda {x}: {expr})({view})")
        if not isinstance(value, torch.Tensor):
            return None
        group = x if copied else v.facts.group
        writable = copied and v.facts.writable
        exact = v.facts.exact and (not value.is_floating_point() or tail in EDGE_EXACT_TAILS)
        aliasing = tail in EDGE_ALIASING_TAILS
        return ((f"{x} = {view}", f"{name} = {expr}"), (x, name),
                {x: Facts(v.facts.exact, writable and not aliasing, group),
                 name: Facts(exact, not aliasing, group if aliasing else name)})

    def _holds_inf(self, env, expr):
        """Whether ``expr`` holds +inf on torch: no pattern applies GELU there, whose value is a documented difference
        (jitorch's inf, the limit of ``x * Phi(x)``; torch 2.13's NaN: docs/differences-from-torch.md; fuzz seed
        53960133 of ``--nets 0.4``, an input made infinite by ``atanh_``)."""
        value = self.evaluate(env, expr)
        return isinstance(value, torch.Tensor) and bool((value == float("inf")).any())

    def _spread(self, v, shape, scale=True):
        """``v``'s values repeated (in row-major order) to fill ``shape``, times a fixed pattern of weights."""
        n = prod(shape)
        flat = f"{v.ref}.reshape(-1).repeat({-(-n // v.value.numel())})[:{n}].reshape({tuple(shape)!r})"
        return f"({flat} * {self._weights(shape, v.dtype)})" if scale else flat

    def _weights(self, shape, dtype):
        """Fixed weights of ``shape``: multiples of 1/8 in [-1, 1] from an integer pattern (exact in both libraries)."""
        r = self.rng
        a, m = r.choice((3, 5, 7, 11)), r.choice((9, 13, 17))
        return f"((T.arange({prod(shape)}, device=D) * {a} % {m} - {m // 2}).to(T.{dtype}) / 8).reshape({tuple(shape)!r})"

    def _net_gelu_mlp(self, env, v):
        r = self.rng
        # (21 rows of 200: past eager's GELU kernel's 4096 elements, `nn.functional.GELU_KERNEL_MIN`)
        rows, c, h = r.choice((1, 2, 3, 5, 21)), r.choice((3, 8, 17)), r.choice((8, 17, 33, 200))
        # (maybe (seq, batch, features): the product's rows merged, the bias's gradient summed over two dims)
        x = self._spread(v, (rows, c) if r.random() < 0.7 else (rows, 2, c))
        approximate = r.choice(("", "", ", approximate='tanh'"))
        pre = f"T.matmul({x}, {self._weights((c, h), v.dtype)}) + {self._spread(v, (h,), scale=False)} * 0.5"
        expr = f"T.nn.functional.gelu({pre}{approximate})"
        width = h
        if r.random() < 0.4:
            width = r.choice((1, 5, 17))
            expr = f"T.matmul({expr}, {self._weights((h, width), v.dtype)})"
        if r.random() < 0.3 and rows > 1:  # (the rows split: a sum whose reduced dims a reshape crosses)
            split = (rows, 1) if r.random() < 0.5 else (1, rows)
            expr = f"({expr}).reshape({split[0]}, {split[1]}, -1).sum({r.choice(((0, 1), (0,), (1,)))!r})"
        elif r.random() < 0.3:  # (the rows merged: a sum over them of a reshape)
            expr = f"({expr}).reshape(-1, {width}).sum(0)"
        if self._holds_inf(env, pre):
            return None
        name = self.fresh()
        return (f"{name} = {expr}",), (name,)

    def _net_attention(self, env, v):
        r = self.rng
        batch = r.choice(((), (1,), (2,), (2, 3)))
        L, S, D = r.choice((1, 3, 5, 17)), r.choice((1, 4, 17)), r.choice((1, 3, 8, 17))
        Dv = D if r.random() < 0.8 else r.choice((2, 5))
        lines = []
        layout = r.choice(("compact", "compact", "heads", "transposed"))
        if layout == "heads" and Dv == D and S == L:  # (split from one product, as a GPT's heads: strided views)
            qkv = self.fresh()
            lines.append(f"{qkv} = {self._spread(v, (*batch, L, 3 * D))}")
            q, k, w = (f"{qkv}[..., {i * D}:{(i + 1) * D}]" for i in range(3))
        elif layout == "transposed":  # (each a transposed view of a compact value)
            q, k, w = (f"{self._spread(v, (*batch, d, n))}.transpose(-2, -1)" for n, d in ((L, D), (S, D), (S, Dv)))
        else:
            q, k, w = (self._spread(v, (*batch, n, d)) for n, d in ((L, D), (S, D), (S, Dv)))
        kwargs = []
        c = r.random()
        if c < 0.25:
            kwargs.append("is_causal=True")
        elif c < 0.7:
            shape = r.choice(((L, S), (S,), (1, S), (*batch, L, S)))
            values = np.random.default_rng(r.randrange(1 << 30))
            mask = r.choice(("bool", "additive", "computed"))
            if mask == "bool":
                kwargs.append(f"attn_mask={literal(values.random(shape) < 0.7, 'bool')}")
            elif mask == "additive":
                mask = values.choice((0.0, 0.0, -1.0, 0.5, -float('inf')), size=shape)
                kwargs.append(f"attn_mask={literal(mask, v.dtype)}".replace("-inf", "-float('inf')"))
            else:  # (of ``v``: a mask that requires grad in a gradient run)
                kwargs.append(f"attn_mask={self._spread(v, shape)}")
        if r.random() < 0.3:
            kwargs.append("dropout_p=0.0")
        if r.random() < 0.3:
            kwargs.append(f"scale={r.choice((0.5, 0.125, 1.0))}")
        name = self.fresh()
        args = ", ".join([q, k, w] + kwargs)
        lines.append(f"{name} = T.nn.functional.scaled_dot_product_attention({args})")
        return tuple(lines), tuple(line.split(" = ")[0] for line in lines)

    def _net_wide_ce(self, env, v):
        r = self.rng
        rows, c = r.choice((1, 3, 5, 7)), r.choice((5, 17, 33, 200))
        if r.random() < 0.5:  # (computed pointwise, maybe a bias over the classes: the lse pass's cone)
            x = f"({self._spread(v, (rows, c))} * 2 + {self._spread(v, (c,), scale=False)})"
        else:  # (a product, then seen through a reshape of its rows)
            inner = r.choice((3, 8))
            x = f"T.matmul({self._spread(v, (rows, inner))}, {self._weights((inner, c), v.dtype)})"
            if rows > 1 and r.random() < 0.5:
                x = f"{x}.reshape(1, {rows}, {c}).reshape({rows}, {c})"
        target = self._indices(c, (rows,))
        kind = r.choice(("ce", "nll", "picked", "entropy"))
        if kind == "ce":
            smoothing = r.choice(("", ", label_smoothing=0.1"))
            expr = f"T.nn.functional.cross_entropy({x}, {target}, reduction={r.choice(('mean', 'sum', 'none'))!r}" \
                   f"{smoothing})"
        elif kind == "nll":
            expr = f"T.nn.functional.nll_loss(T.log_softmax({x}, -1), {target}, " \
                   f"reduction={r.choice(('mean', 'sum'))!r})"
        elif kind == "picked":
            expr = f"T.log_softmax({x}, -1).gather(1, {self._indices(c, (rows, r.randint(1, 3)))}).sum()"
        else:  # (rows of a language model's (seq, batch) logits: log-probs read pointwise and by a row sum)
            lp = f"T.log_softmax({x}.reshape(1, {rows}, {c}), -1)"
            expr = f"({lp}.exp() * {lp}).sum(-1) + {lp}.amax(-1)"
        name = self.fresh()
        return (f"{name} = {expr}",), (name,)

    def _net_norm(self, env, v):
        r = self.rng
        rows, c = r.choice((1, 2, 5)), r.choice((3, 17, 33))
        h, name = self.fresh(), self.fresh()
        spreads = [self._spread(v, (rows, c)) for _ in range(3)]
        gelu = f"T.nn.functional.gelu({spreads[2]})"
        made = r.choice((f"{spreads[0]} * 0.5 + 0.25", f"T.tanh({spreads[1]})", gelu))
        if made == gelu and self._holds_inf(env, spreads[2]):
            return None
        kind = r.choice(("layer_norm", "centred", "softmax", "max shifted", "permuted sum"))
        if kind == "layer_norm":
            expr = f"T.nn.functional.layer_norm({h}, ({c},), eps=1e-5) * {h}"
        elif kind == "centred":
            expr = f"({h} - {h}.mean(-1, keepdim=True)) * ({h}.var(-1, keepdim=True) + 1e-5).rsqrt()"
        elif kind == "softmax":
            expr = f"T.softmax({h}, -1) * {h}"
        elif kind == "max shifted":
            expr = f"({h} - {h}.amax(-1, keepdim=True)).exp() * {h}"
        else:  # (a reduction over a permutation of the computed value: the recompute pass's prologue copy)
            view = r.choice((f"{h}.permute(1, 0)", f"{h}.transpose(0, 1)"))
            expr = f"{view}.{r.choice(('sum', 'mean', 'amax'))}(-1) + {h}.sum(0)"
        return (f"{h} = {made}", f"{name} = {expr}"), (h, name)

    def _net_wide_map(self, env, v):
        r = self.rng
        shape = r.choice(((17,), (33,), (200,), (3, 17), (2, 33)))
        fn = r.choice(("exp", "tanh", "erf", "sigmoid", "sin", "expm1", "log1p"))
        x = self._spread(v, shape)
        arg = f"{x}.abs()" if fn == "log1p" else f"{x} * 0.5"
        name = self.fresh()
        return (f"{name} = T.{fn}({arg}) {r.choice(('*', '+'))} {self._spread(v, shape[-1:], scale=False)}",), (name,)

    def _net_reduction_out(self, env, v):
        r = self.rng
        op = r.choice(("sum", "mean", "amax", "amin", "nansum", "prod"))
        # (detached where it requires grad: an out= call of a value with history is no gradient program, and the
        # fast path serves none)
        x = r.choice((f"{v.ref}.detach()", f"({v.ref}.detach() * 0.5)", f"({v.ref} * 0.5)"))
        dim = r.choice((None, self.dim(v))) if v.ndim else None
        args = f"{x}" if dim is None else f"{x}, {dim}, {r.random() < 0.5}"
        if op in ("amax", "amin") and dim is None:
            args = f"{x}, ()" if v.ndim == 0 else f"{x}, {list(range(v.ndim))!r}"
        result = self.evaluate(env, f"T.{op}({args})")
        if not isinstance(result, torch.Tensor):
            return None
        buf = self.fresh()
        lines = (f"{buf} = T.zeros({tuple(result.shape)!r}, dtype=T.{v.dtype}, device=D)", f"T.{op}({args}, out={buf})")
        return lines, (buf,)

    def _indices(self, n, shape):
        """An int64 literal of ``shape`` holding indices below ``n``."""
        return literal(np.random.default_rng(self.rng.randrange(1 << 30)).integers(0, n, size=shape), "int64")

    def _as_strided_of(self, expr, value):
        """``as_strided`` windows of ``expr`` (a fresh, contiguous ``value``) inside its elements, or None."""
        r = self.rng
        n = value.numel()
        size = [r.randint(1, 3) for _ in range(r.randint(1, 3))]
        stride = [r.randint(0, 4) for _ in size]
        offset = r.randint(0, 2)
        if not n or offset + sum((k - 1) * st for k, st in zip(size, stride)) >= n:
            return None
        return f"{expr}.as_strided({size!r}, {stride!r}, {offset})"

    def _view_of(self, expr, value):
        """(a view of ``expr``, whose value is ``value``, whether its elements may overlap), or None."""
        r = self.rng
        n = value.ndim
        c = r.random()
        if c < 0.2 and n >= 2:
            i, j = r.sample(range(n), 2)
            return f"{expr}.transpose({i}, {j})", False
        if c < 0.3 and n >= 2:
            return f"{expr}.permute({list(reversed(range(n)))!r})", False
        if c < 0.45:
            return (f"{expr}.flatten()" if r.random() < 0.5 else f"{expr}.reshape(-1)"), False
        if c < 0.6 and n >= 1:
            d = r.randrange(n)
            size, step = r.randint(1, max(1, value.shape[d])), r.randint(1, 2)
            return f"{expr}.unfold({d}, {size}, {step})", step < size
        if c < 0.7 and n >= 1:
            return f"{expr}[{', '.join([':'] * r.randrange(n) + ['::2'])}]", False
        if c < 0.8:
            return f"{expr}.unsqueeze(0).expand(2, *{list(value.shape)!r})", True
        # (as_strided addresses storage: only a value that is all of its storage, in order, is windowed by it)
        if not value.is_contiguous() or value.storage_offset() or \
                value.numel() * value.element_size() != value.untyped_storage().nbytes():
            return None
        made = self._as_strided_of(expr, value)
        return None if made is None else (made, True)

    def _pointwise_tail(self, env, tensors, expr, exact, writable):
        """``expr`` with, half the time, a pointwise op applied: (expression, exact, writable)."""
        r = self.rng
        if r.random() < 0.5:
            return expr, exact, writable
        op = r.choice(("neg", "abs", "mul", "add", "exp"))
        if op in ("neg", "abs"):
            return f"({expr}).{op}()", exact, True
        if op == "exp":
            return f"({expr}).float().exp()", False, True
        return f"({expr}) {'*' if op == 'mul' else '+'} {self.number()}", False, True

    def attr_store(self, env, tensors):
        v = self.pick(tensors, lambda v: v.ref.startswith("v"))
        if v is None:
            return None
        attr = f"stored{self.rng.randint(0, 1)}"
        return Stmt((f"M.{attr} = {v.ref}",), (), "attr_store"), {}


def _is_float(value):
    """Whether a result is floats (a continuous function of inexact operands may make them)."""
    if isinstance(value, torch.Tensor):
        return value.is_floating_point()
    if isinstance(value, (list, tuple)):
        return all(_is_float(v) for v in value)
    return isinstance(value, float)


def _broadcasts_to(shape, target):
    try:
        return torch.broadcast_shapes(shape, target) == tuple(target)
    except RuntimeError:
        return False


STR_CHOICES = {"rounding_mode": ("trunc", "floor"), "reduce": ("sum", "prod", "mean", "amax", "amin")}


# Argument hints: ops whose valid arguments the schema's types alone rarely give. Each returns
# (positional sources, keyword sources, operands exact) for the full schema order, self first.

def _factor(n, rng):
    """A random factorisation of ``n`` into up to three sizes."""
    sizes = []
    while n > 1 and len(sizes) < 2:
        divisors = [d for d in range(2, n + 1) if n % d == 0]
        d = rng.choice(divisors)
        sizes.append(d)
        n //= d
    sizes.append(n)
    rng.shuffle(sizes)
    return sizes


def _hint_permute(g, env, tensors, v, entry):
    perm = list(range(v.ndim))
    g.rng.shuffle(perm)
    return [v.ref] + [str(p) for p in perm], {}, v.facts.exact


def _hint_two_dims(g, env, tensors, v, entry):
    if entry.name == "movedim" or entry.name == "moveaxis":
        return [v.ref, str(g.dim(v)), str(g.dim(v))], {}, v.facts.exact
    return [v.ref, str(g.dim(v)), str(g.dim(v))], {}, v.facts.exact


def _hint_expand(g, env, tensors, v, entry):
    r = g.rng
    sizes = [str(r.randint(1, 3)) for _ in range(r.randint(0, 1))]
    sizes += [str(r.randint(1, 4)) if n == 1 else r.choice((str(n), "-1")) for n in v.shape]
    if entry.name == "broadcast_to":
        return [v.ref, "(" + ", ".join(sizes) + ",)"], {}, v.facts.exact
    if entry.name == "expand_as":
        w = g.pick(tensors, lambda w: _broadcasts_to(v.shape, w.shape))
        return ([v.ref, w.ref], {}, v.facts.exact) if w else None
    return [v.ref] + sizes, {}, v.facts.exact


def _hint_view(g, env, tensors, v, entry):
    r = g.rng
    n = int(np.prod(v.shape, dtype=np.int64))
    sizes = [str(s) for s in _factor(n, r)]
    if r.random() < 0.3:
        sizes[r.randrange(len(sizes))] = "-1"
    if entry.name in ("view_as", "reshape_as"):
        w = g.pick(tensors, lambda w: int(np.prod(w.shape, dtype=np.int64)) == n)
        return [v.ref, w.ref], {}, v.facts.exact
    return [v.ref] + sizes, {}, v.facts.exact


def _hint_as_strided(g, env, tensors, v, entry):
    """A window of ``v.contiguous()`` that stays inside its elements (so the values do not depend on the
    caller's layout): ``as_strided`` addresses storage, which other layouts arrange differently."""
    r = g.rng
    n = int(np.prod(v.shape, dtype=np.int64))
    if n == 0:
        return None
    size = [r.randint(1, 3) for _ in range(r.randint(1, 2))]
    stride = [r.randint(0, 3) for _ in size]
    offset = r.randint(0, 2)
    if offset + sum((s - 1) * st for s, st in zip(size, stride)) >= n:
        return None
    overlap = any(st == 0 and s > 1 for s, st in zip(size, stride)) or len(set(
        sum(i * st for i, st in zip(idx, stride)) for idx in np.ndindex(*size))) < int(np.prod(size))
    kwargs = {"_": "overlap" if overlap else ""}
    if entry.name == "as_strided" and r.random() < 0.5:
        kwargs["storage_offset"] = f"{v.ref}.contiguous().storage_offset() + {offset}"
    return [f"{v.ref}.contiguous()", repr(size), repr(stride)], kwargs, v.facts.exact


def _hint_diagonal(g, env, tensors, v, entry):
    if v.ndim < 2:
        return None
    d1, d2 = g.rng.sample(range(v.ndim), 2)
    return [v.ref, str(g.rng.randint(-2, 2)), str(d1), str(d2)], {}, v.facts.exact


def _hint_unfold(g, env, tensors, v, entry):
    if v.ndim == 0:
        return None
    d = g.rng.randrange(v.ndim)
    size = g.rng.randint(1, max(v.shape[d], 1))
    step = g.rng.randint(1, 3)
    return [v.ref, str(d), str(size), str(step)], {"_": "overlap" if step < size else ""}, v.facts.exact


def _hint_narrow(g, env, tensors, v, entry):
    """A start from 0 (torch 2.13's narrow_copy gradient with a negative start ending at the dim's end is zeros:
    docs/differences-from-torch.md, fuzz seed 7500944)."""
    if v.ndim == 0:
        return None
    d = g.rng.randrange(v.ndim)
    start = g.rng.randrange(v.shape[d] + 1)
    return [v.ref, str(d), str(start), str(g.rng.randint(0, v.shape[d] - start))], {}, v.facts.exact


def _hint_select(g, env, tensors, v, entry):
    if v.ndim == 0 or 0 in v.shape:
        return None
    d = g.rng.randrange(v.ndim)
    return [v.ref, str(d), str(g.rng.randrange(-v.shape[d], v.shape[d]))], {}, v.facts.exact


def _hint_split(g, env, tensors, v, entry):
    if v.ndim == 0:
        return None
    d = g.rng.randrange(v.ndim)
    n = v.shape[d]
    if entry.op.name == "split.sizes" or entry.name == "split_with_sizes":
        cut = sorted(g.rng.sample(range(n + 1), min(2, n + 1)))
        sizes = [cut[0]] + [b - a for a, b in zip(cut, cut[1:])] + [n - cut[-1]]
        return [v.ref, repr(sizes), str(d)], {}, v.facts.exact
    return [v.ref, str(g.rng.randint(1, 3)), str(d)], {}, v.facts.exact


def _index_literal(g, v, dim, shape_like=None, distinct=False):
    n = v.shape[dim] if v.ndim else 1
    if n == 0:
        return None
    shape = list(shape_like if shape_like is not None else v.shape)
    if distinct:
        # along ``dim`` each line holds distinct indices (a scatter must not write one element twice)
        shape[dim] = min(shape[dim], n)
        lines = np.stack([np.random.default_rng(g.rng.randrange(1 << 30)).permutation(n)[:shape[dim]]
                          for _ in range(int(np.prod(shape, dtype=np.int64)) // max(shape[dim], 1) or 1)])
        index = np.moveaxis(lines.reshape([s for i, s in enumerate(shape) if i != dim] + [shape[dim]]), -1, dim)
        return literal(index, "int64")
    return literal(np.random.default_rng(g.rng.randrange(1 << 30)).integers(0, n, size=shape), "int64")


def _hint_gather(g, env, tensors, v, entry):
    if v.ndim == 0:
        return None
    d = g.rng.randrange(v.ndim)
    shape = [g.rng.randint(1, n) if n else 0 for n in v.shape]
    name = entry.name
    index = _index_literal(g, v, d, shape, distinct=name in ("scatter", "index_copy"))
    if index is None:
        return None
    if name == "gather":
        return [v.ref, str(d), index], {}, v.facts.exact
    src_shape = tuple(shape)
    if entry.op.name == "scatter.value":
        return [v.ref, str(d), index, g.number(v.dtype not in FLOAT_DTYPES)], {}, v.facts.exact
    src = literal(g.values(src_shape, v.dtype), v.dtype)
    args = [v.ref, str(d), index, src]
    kwargs = {}
    if name == "scatter_reduce":
        args.append(repr(g.rng.choice(("sum", "prod", "mean", "amax", "amin"))))
        kwargs["include_self"] = repr(g.rng.random() < 0.5)
    return args, kwargs, v.facts.exact and name == "scatter"


def nan_sign_cleared(env, ref):
    """``ref`` with the sign bits of its NaNs cleared (``abs``) where it names a float tensor (`NAN_SIGN_READERS`)."""
    var = env.get(ref)
    if isinstance(var, Var) and var.is_float:
        return f"T.where({ref}.isnan(), {ref}.abs(), {ref})"
    return ref


def _hint_ldexp(g, env, tensors, v, entry):
    """ldexp's arguments with an exponent of integers the same in every mode (an integer tensor or number, or an
    exact float tensor of whole values), ldexp's use, exact in both libraries. By a fractional exponent torch's
    power ``pow(2.0, other)`` and jitorch's ``exp2`` differ in the last bit (docs/differences-from-torch.md), and
    the result may be of any size (2 ** 57.3 times x), where a later op with a period (tan, sin, remainder) turns
    that last bit into any value at all, past every tolerance (fuzz seed 7952512 of 40 statements:
    ``v8.ldexp(x1).tan()`` with x1 of ``rad2deg_``: 2.38 vs -5.02). The fractional exponent is tested against
    torch within the documented bound in tests/ops (test_against_torch, test_hunt_divergences)."""
    made = g.generic_args(env, tensors, v, entry.schema)
    if made is None:
        return None
    args, kwargs, exact = made
    other = args[1] if len(args) > 1 else kwargs.get("other")
    return (args, kwargs, exact) if other is not None and _whole(g, env, other) else None


def _whole(g, env, text):
    """Whether the operand ``text`` holds whole numbers in every mode and call: an integer or bool tensor, a
    Python int (a float variable may be rebound to a fraction), or an exact float tensor of whole values."""
    var = env.get(text)
    value = var.value if var is not None else g.evaluate(env, text)
    if not isinstance(value, torch.Tensor):
        return isinstance(value, int)
    if not value.is_floating_point():
        return True
    exact = var.facts.exact if var is not None else True  # (a literal)
    return exact and bool((value == value.round()).all())


def _hint_index_1d(g, env, tensors, v, entry):
    if v.ndim == 0 or 0 in v.shape:
        return None
    d = g.rng.randrange(v.ndim)
    n = v.shape[d]
    k = g.rng.randint(1, n)
    distinct = entry.name in ("index_copy",)
    idx = g.rng.sample(range(n), k) if distinct else [g.rng.randrange(n) for _ in range(k)]
    index = literal(idx, "int64")
    if entry.name == "index_select":
        return [v.ref, str(d), index], {}, v.facts.exact
    if entry.name == "index_fill":
        value = g.number(v.dtype not in FLOAT_DTYPES)
        if entry.op.name == "index_fill.Tensor":
            value = literal(float(value) if v.dtype in FLOAT_DTYPES else int(float(value)), v.dtype)
        return [v.ref, str(d), index, value], {}, v.facts.exact
    shape = list(v.shape)
    shape[d] = k
    source = literal(g.values(tuple(shape), v.dtype), v.dtype)
    return [v.ref, str(d), index, source], {}, v.facts.exact and entry.name == "index_copy"


def _hint_take(g, env, tensors, v, entry):
    n = int(np.prod(v.shape, dtype=np.int64))
    if n == 0:
        return None
    if entry.name == "take":
        idx = [g.rng.randrange(-n, n) for _ in range(g.rng.randint(1, 4))]
        return [v.ref, literal(idx, "int64")], {}, v.facts.exact
    idx = g.rng.sample(range(n), g.rng.randint(1, n))
    source = literal(g.values((len(idx),), v.dtype), v.dtype)
    accumulate = g.rng.random() < 0.5
    return [v.ref, literal(idx, "int64"), source, repr(accumulate)], {}, v.facts.exact and not accumulate


def _hint_index_put(g, env, tensors, v, entry):
    if v.ndim == 0 or v.shape[0] == 0:
        return None
    idx = g.rng.sample(range(v.shape[0]), g.rng.randint(1, v.shape[0]))
    values = literal(g.values((len(idx),) + v.shape[1:], v.dtype), v.dtype)
    accumulate = g.rng.random() < 0.4
    return [v.ref, f"({literal(idx, 'int64')},)", values, repr(accumulate)], {}, v.facts.exact and not accumulate


def _hint_masked_fill(g, env, tensors, v, entry):
    mask = g.pick(tensors, lambda m: m.dtype == "bool" and _broadcasts_to(m.shape, v.shape))
    mask_ref = mask.ref if mask else literal(np.random.default_rng(g.rng.randrange(99)).random(v.shape) < 0.5, "bool")
    value = g.number(v.dtype not in FLOAT_DTYPES)
    if entry.op.name == "masked_fill.Tensor":
        value = literal(float(value), v.dtype if v.dtype in FLOAT_DTYPES else "float32")
    if entry.name == "masked_select":
        return [v.ref, mask_ref], {}, v.facts.exact
    return [v.ref, mask_ref, value], {}, v.facts.exact


def _hint_where(g, env, tensors, v, entry):
    cond_ref = g.condition(tensors, "0")
    if cond_ref is None:
        return None
    other, exact = g.partner(env, tensors, v)
    return [cond_ref, v.ref, other], {}, exact and v.facts.exact


def _matrix_partner(g, tensors, v, shape):
    w = g.pick(tensors, lambda w: w.shape == tuple(shape) and w.dtype == v.dtype)
    if w is not None and g.rng.random() < 0.6:
        return w.ref
    return literal(g.values(tuple(shape), v.dtype), v.dtype)


def _hint_matmul(g, env, tensors, v, entry):
    r = g.rng
    name = entry.name
    m = r.randint(1, 4)
    if name in ("mm", "matmul") and v.ndim == 2:
        return [v.ref, _matrix_partner(g, tensors, v, (v.shape[1], m))], {}, False
    if name == "matmul" and v.ndim >= 1:
        shape = (v.shape[-1],) if r.random() < 0.3 else (v.shape[-1], m)
        return [v.ref, _matrix_partner(g, tensors, v, shape)], {}, False
    if name == "bmm" and v.ndim == 3:
        return [v.ref, _matrix_partner(g, tensors, v, (v.shape[0], v.shape[2], m))], {}, False
    if name == "mv" and v.ndim == 2:
        return [v.ref, _matrix_partner(g, tensors, v, (v.shape[1],))], {}, False
    if name in ("dot", "vdot", "outer", "ger") and v.ndim == 1:
        shape = v.shape if name in ("dot", "vdot") else (m,)
        return [v.ref, _matrix_partner(g, tensors, v, shape)], {}, False
    if name == "addmm" and v.ndim == 2:
        k = r.randint(1, 3)
        mats = [_matrix_partner(g, tensors, v, (v.shape[0], k)), _matrix_partner(g, tensors, v, (k, v.shape[1]))]
        return [v.ref] + mats, {"beta": g.number(), "alpha": g.number()} if r.random() < 0.3 else {}, False
    if name == "baddbmm" and v.ndim == 3:
        k = r.randint(1, 3)
        b, n, p = v.shape
        return [v.ref, _matrix_partner(g, tensors, v, (b, n, k)), _matrix_partner(g, tensors, v, (b, k, p))], {}, False
    return None


def _hint_cat(g, env, tensors, v, entry):
    r = g.rng
    name = entry.name
    if name in ("cat", "concat", "concatenate") and v.ndim:
        d = r.randrange(v.ndim)
        fits = [w for w in tensors if w.ndim == v.ndim and w.dtype == v.dtype
                and all(a == b for i, (a, b) in enumerate(zip(w.shape, v.shape)) if i != d)]
        chosen = [v] + [r.choice(fits) for _ in range(r.randint(0, 2))]
        return [("[" + ", ".join(w.ref for w in chosen) + "]"), str(d)], {}, all(w.facts.exact for w in chosen)
    same = [w for w in tensors if w.shape == v.shape]
    chosen = [v] + [r.choice(same) for _ in range(r.randint(0, 2))]
    args = ["[" + ", ".join(w.ref for w in chosen) + "]"]
    if name == "stack":
        args.append(str(r.randint(-v.ndim - 1, v.ndim)))
    return args, {}, all(w.facts.exact for w in chosen)


def _hint_repeat(g, env, tensors, v, entry):
    reps = [str(g.rng.randint(1, 2)) for _ in range(v.ndim + g.rng.randint(0, 1))] or ["2"]
    if entry.name == "tile":
        return [v.ref, "(" + ", ".join(reps) + ",)"], {}, v.facts.exact
    if entry.name == "repeat_interleave":
        args = [v.ref, str(g.rng.randint(1, 3))]
        if v.ndim and g.rng.random() < 0.6:
            args.append(str(g.dim(v)))
        return args, {}, v.facts.exact
    return [v.ref] + reps, {}, v.facts.exact


def _hint_roll(g, env, tensors, v, entry):
    if v.ndim == 0:
        return None
    dims = g.dims(v)
    return [v.ref, repr([g.rng.randint(-3, 3) for _ in dims]), repr(dims)], {}, v.facts.exact


def _hint_k(g, env, tensors, v, entry):
    """topk, kthvalue: a ``k`` within the chosen dim; marked `AMONG_TIES` where the selection ties."""
    if v.ndim == 0 or 0 in v.shape:
        return None
    d = g.rng.randrange(v.ndim)
    k = g.rng.randint(1, v.shape[d])
    flag = g.rng.random() < 0.5  # topk's largest, kthvalue's keepdim
    n = v.shape[d]
    if entry.name == "topk":  # a tie among the k selected values or with the next
        tied = _ties(v.value.sort(d, descending=flag)[0].narrow(d, 0, min(k + 1, n)), d, v.facts.exact)
    else:  # both libraries pick the same of exactly tied elements; near ties may swap by a rounding
        start = max(k - 2, 0)
        tied = not v.facts.exact and _ties(v.value.sort(d)[0].narrow(d, start, min(k + 1, n) - start), d, False)
    return [v.ref, str(k), str(d), repr(flag)], {"_": "ties"} if tied else {}, v.facts.exact


def _hint_quantile(g, env, tensors, v, entry):
    """quantile, nanquantile: the schema's arguments, marked `AMONG_TIES` where the elements reduced tie (or, for
    inexact values, nearly): the derivative at the rank read goes to one of the tied elements, torch's to the one
    its unstable sort put there, jitorch's to the last in index order (fuzz seed 7994905, 36 elements with the
    maximum twice; docs/differences-from-torch.md)."""
    made = g.generic_args(env, tensors, v, entry.schema)
    if made is None or not v.is_tensor:
        return made
    args, kwargs, exact = made
    dim = args[2] if len(args) > 2 else kwargs.get("dim", "None")
    try:
        rows = v.value.reshape(-1) if dim == "None" else v.value.movedim(int(dim), -1)
    except (IndexError, RuntimeError, ValueError):  # (a dim the call refuses: torch raises there too)
        return made
    if rows.ndim and rows.shape[-1] > 1 and _ties(rows.sort(-1)[0], -1, v.facts.exact):
        kwargs["_"] = "ties"
    return args, kwargs, exact


def _ties(order, dim, exact):
    """Whether neighbours along ``dim`` of sorted values are equal (both NaN too), or for values of an inexact
    computation (`Facts.exact`), so close that another library's roundings may order them otherwise."""
    a, b = order.narrow(dim, 0, order.shape[dim] - 1), order.narrow(dim, 1, order.shape[dim] - 1)
    if not a.is_floating_point():
        return bool((a == b).any())
    a, b = a.double(), b.double()
    same = (a == b) | (a.isnan() & b.isnan())
    if not exact:
        same |= (a - b).abs() <= 1e-2 * torch.maximum(a.abs(), b.abs()) + 1e-6
    return bool(same.any())


def _hint_mode(g, env, tensors, v, entry):
    """No ``mode`` of an operand holding NaN: torch 2.13's CPU kernel sorts with ``<``, which is no ordering
    there, so its value and index are whatever its sort left (docs/differences-from-torch.md)."""
    made = g.generic_args(env, tensors, v, entry.schema)
    if made is None or v.is_float and bool(v.value.isnan().any()):
        return None
    return made


def _hint_full_rank(g, env, tensors, v, entry):
    """qr, geqrf, svd, pinverse: only of matrices of full rank. Past a matrix's rank, a factor's columns span the
    rest of the space in a basis that rounding noise chooses, each library's its own (fuzz seed 7820783: ``qr``
    of a matrix with a repeated column), and pinverse's default cutoff (1e-15 of the largest singular value)
    inverts a float32 SVD's noise (seed 7822517: torch's pinverse of a 3x4 matrix of ones is -4194304.5 where
    the exact one is 1/12)."""
    made = g.generic_args(env, tensors, v, entry.schema)
    if made is None or not v.is_float or v.ndim < 2 or 0 in v.shape:
        return made
    a = v.value.double()
    if not bool(a.isfinite().all()) or bool((torch.linalg.matrix_rank(a, rtol=1e-4) < min(a.shape[-2:])).any()):
        return None
    return made


def _hint_sort(g, env, tensors, v, entry):
    args = [v.ref, str(g.dim(v)), repr(g.rng.random() < 0.5)]
    stable = entry.name == "argsort" or g.rng.random() < 0.5
    return args, {"stable": "True"} if stable else {}, v.facts.exact


def _hint_cov(g, env, tensors, v, entry):
    """No weights for a single observation, where torch 2.13's cov writes zeros into its input
    (docs/differences-from-torch.md)."""
    made = g.generic_args(env, tensors, v, entry.schema)
    if made is None or v.ndim and v.shape[-1] != 1:
        return made
    args, kwargs, exact = made
    return args, {k: a for k, a in kwargs.items() if k not in ("fweights", "aweights")}, exact


def _hint_fill_diagonal(g, env, tensors, v, entry):
    """No wrap on a tall matrix: torch 2.13 steps the wrapped diagonal by the sum of the strides from the
    storage offset, so on a strided input it writes elements outside the tensor (fuzz seed 7802475;
    docs/differences-from-torch.md)."""
    made = g.generic_args(env, tensors, v, entry.schema)
    if made is None or not (v.ndim == 2 and v.shape[0] > v.shape[1] + 1):
        return made
    args, kwargs, exact = made
    return args[:2], {k: a for k, a in kwargs.items() if k != "wrap"}, exact


def _hint_pow(g, env, tensors, v, entry):
    """pow, float_power: no computed (inexact) exponent tensor within 1e-3 of 0 where the base is 0, where the result
    jumps (``0 ** y`` is 0, 1 or inf by the sign of ``y``) and such a ``y`` may take either sign in another library's
    roundings (fuzz seed 9750373 of ``--nets 0.3 --losses 0.2 --out-views 0.3``: ``T.pow(v3, v4, out=v8)``, ``v3`` a
    tanh of 0 and ``v4`` a row's deviations from its mean, rounding noise about 0: torch 0, eager inf, compiled 1)."""
    made = g.generic_args(env, tensors, v, entry.schema)
    # (only with network patterns, whose normalised rows make such noise: without them each seed keeps the program it
    # drew, the transform fuzzer's fixed seeds 7894731 and 8003644 among them, which hold such a pow)
    if made is None or not v.is_tensor or not g.nets:
        return made
    args, kwargs, _ = made
    exponent = env.get(args[1] if len(args) > 1 else kwargs.get("exponent"))
    if exponent is None or not exponent.is_tensor or exponent.facts.exact:
        return made
    try:
        near = (v.value == 0) & (exponent.value.double().abs() < 1e-3)
    except RuntimeError:  # (shapes that do not broadcast: torch refuses the call)
        return made
    return None if bool(near.any()) else made


# Division ops: the position and keyword of their divisor (`_divisor_checked`).
DIVISORS = {"div": (1, "other"), "divide": (1, "other"), "true_divide": (1, "other"), "addcdiv": (2, "tensor2"),
            "remainder": (1, "other"), "fmod": (1, "other"), "floor_divide": (1, "other")}


def _divisor_checked(hint, position, keyword):
    """``hint`` (or the schema's arguments) refusing a computed (inexact) divisor tensor within 1e-3 of 0, where
    the quotient is rounding noise scaled up, or inf in a library whose roundings gave an exact 0 (fuzz seed 47100012
    of ``--nets 0.3 --losses 0.2``: ``v4.addcdiv_(x0, v2)``, ``v2`` a layer norm's output at an element equal to its
    row's mean: eager's exact 0 gave inf, torch's 5.5e-8 gave 4e8). Only with network patterns, as `_hint_pow`."""
    def checked(g, env, tensors, v, entry):
        made = hint(g, env, tensors, v, entry) if hint else g.generic_args(env, tensors, v, entry.schema)
        if made is None or not g.nets:
            return made
        args, kwargs, _ = made
        divisor = env.get(args[position] if len(args) > position else kwargs.get(keyword))
        if divisor is None or not divisor.is_tensor or divisor.facts.exact:
            return made
        return None if bool((divisor.value.double().abs() < 1e-3).any()) else made
    return checked


def _hint_integer_operand(g, env, tensors, v, entry):
    """The schema's arguments, marked where one is an integer or bool tensor (`TORCH_WRONG_BY_AN_INTEGER`)."""
    made = g.generic_args(env, tensors, v, entry.schema)
    if made is None:
        return None
    args, kwargs, exact = made
    if any(a in env and not env[a].is_float for a in args):
        kwargs["_"] = "integer operand"
    return args, kwargs, exact


def _hint_creation(g, env, tensors, v, entry):
    r = g.rng
    name = entry.name
    dtype = r.choice(DTYPES)
    size = repr(tuple(r.randint(1, 4) for _ in range(r.randint(0, 3))))
    if name in ("zeros", "ones"):
        return [size], {"dtype": f"T.{dtype}", "device": "D"}, True
    if name == "full":
        return [size, g.number(dtype not in FLOAT_DTYPES)], {"dtype": f"T.{dtype}", "device": "D"}, True
    if name in ("zeros_like", "ones_like"):
        return [v.ref], {"dtype": f"T.{dtype}"} if r.random() < 0.5 else {}, True
    if name == "full_like":
        return [v.ref, g.number(v.dtype not in FLOAT_DTYPES)], {}, True
    if name in ("new_zeros", "new_ones"):
        return [v.ref, size], {}, True
    if name == "new_full":
        return [v.ref, size, g.number(v.dtype not in FLOAT_DTYPES)], {}, True
    if name == "arange":
        start, step = r.randint(-3, 3), r.choice((1, 2, 3, -1, 0.5))
        end = start + step * r.randint(1, 6) + r.choice((0, 0, 1 if step > 0 else -1))
        return [repr(start), repr(end), repr(step)], {"device": "D"}, True
    if name in ("linspace", "logspace"):
        return [g.number(), g.number(), str(r.randint(1, 6))], {"device": "D"}, False
    if name == "eye":
        args = [str(r.randint(1, 4))] + ([str(r.randint(1, 4))] if entry.op.name == "eye.m" else [])
        return args, {"dtype": f"T.{dtype}", "device": "D"}, True
    if name in ("fill", "zero", "copy"):
        return g.generic_args(env, tensors, v, entry.schema)
    return None


ARG_HINTS = {
    "permute": _hint_permute, "transpose": _hint_two_dims, "swapaxes": _hint_two_dims, "swapdims": _hint_two_dims,
    "movedim": _hint_two_dims, "moveaxis": _hint_two_dims, "expand": _hint_expand, "expand_as": _hint_expand,
    "broadcast_to": _hint_expand, "view": _hint_view, "reshape": _hint_view, "view_as": _hint_view,
    "reshape_as": _hint_view, "as_strided": _hint_as_strided, "diagonal": _hint_diagonal, "unfold": _hint_unfold,
    "narrow": _hint_narrow, "narrow_copy": _hint_narrow, "select": _hint_select, "split": _hint_split, "split_with_sizes": _hint_split,
    "gather": _hint_gather, "scatter": _hint_gather, "scatter_add": _hint_gather, "scatter_reduce": _hint_gather,
    "index_select": _hint_index_1d, "index_add": _hint_index_1d, "index_fill": _hint_index_1d,
    "index_copy": _hint_index_1d, "take": _hint_take, "put": _hint_take, "index_put": _hint_index_put,
    "masked_fill": _hint_masked_fill, "masked_select": _hint_masked_fill, "where": _hint_where,
    "matmul": _hint_matmul, "mm": _hint_matmul, "bmm": _hint_matmul, "mv": _hint_matmul, "dot": _hint_matmul,
    "vdot": _hint_matmul, "outer": _hint_matmul, "ger": _hint_matmul, "addmm": _hint_matmul,
    "baddbmm": _hint_matmul, "cat": _hint_cat, "concat": _hint_cat, "concatenate": _hint_cat, "stack": _hint_cat,
    "hstack": _hint_cat, "vstack": _hint_cat, "row_stack": _hint_cat, "dstack": _hint_cat,
    "column_stack": _hint_cat, "repeat": _hint_repeat, "tile": _hint_repeat, "repeat_interleave": _hint_repeat,
    "roll": _hint_roll, "topk": _hint_k, "kthvalue": _hint_k, "mode": _hint_mode,
    "quantile": _hint_quantile, "nanquantile": _hint_quantile,
    "qr": _hint_full_rank, "geqrf": _hint_full_rank, "svd": _hint_full_rank, "pinverse": _hint_full_rank, "sort": _hint_sort, "argsort": _hint_sort,
    "ldexp": _hint_ldexp, "pow": _hint_pow, "float_power": _hint_pow,
    "zeros": _hint_creation, "ones": _hint_creation, "full": _hint_creation, "zeros_like": _hint_creation,
    "ones_like": _hint_creation, "full_like": _hint_creation, "new_zeros": _hint_creation,
    "new_ones": _hint_creation, "new_full": _hint_creation, "arange": _hint_creation, "linspace": _hint_creation,
    "logspace": _hint_creation, "eye": _hint_creation, "cov": _hint_cov, "fill_diagonal": _hint_fill_diagonal,
    **{name: _hint_integer_operand for name in TORCH_WRONG_BY_AN_INTEGER},
}
ARG_HINTS.update({name: _divisor_checked(ARG_HINTS.get(name), *where) for name, where in DIVISORS.items()})


# Checking on torch ----------------------------------------------------------------------------------------

def probe(program, facts):
    """``{ref: Var}`` of what the program's variables hold after its first call on torch (with the
    generator's ``facts`` of each), or None if torch refuses the program in any of the oracle's calls."""
    if not valid(program):
        return None
    inst = Instance(program, torch)
    fn, _ = inst.build(probe=True)
    inputs, _, _ = inst.inputs(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = fn(*inputs)
    env = {}
    for name, value in local.items():
        if name in facts and isinstance(value, (torch.Tensor, int, float, bool)):
            env[name] = Var(name, value, facts[name])
    for c in program.captured:
        ref = captured_ref(c)
        env[ref] = Var(ref, inst.captured[c.name], facts.get(ref, Facts(group=c.name, role=c.role,
                                                                          writable=c.role == "buffer")))
    for s in program.scalars:
        env[s.ref] = Var(s.ref, s.first, Facts())
    return env


def valid(program):
    """Whether torch runs the program: the first call, the rebinding, the second call (other layouts) and
    a third (the first layouts again), with no error."""
    try:
        inst = Instance(program, torch)
        fn, rebind = inst.build()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for call in range(3):
                inputs, _, _ = inst.inputs(call)
                fn(*inputs)
                if call == 0:
                    rebind()
    except Exception:
        return False
    return True


def grad_valid(program):
    """Whether torch runs the program's first call on inputs (and captured parameters) that require grad,
    and a backward pass through its float outputs."""
    inst = Instance(program, torch, grad=True)
    try:
        fn, _ = inst.build()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inputs, _, leaves = inst.inputs(0, grad=True)
            outs = fn(*inputs)
            loss = grad_loss(torch, outs)
            if loss is None:
                return False
            loss.backward()
    except Exception:
        return False
    return True


def grad_loss(T, outputs):
    """A scalar of the float outputs that require grad, each weighted by fixed values (so that gradients
    of different outputs do not cancel), or None."""
    total = None
    for k, o in enumerate(outputs):
        if isinstance(o, T.Tensor) and o.requires_grad and o.is_floating_point():
            n = o.numel()
            w = T.tensor(((np.arange(n) * 7 + 3 * k) % 11 - 5).reshape(o.shape) / 4, dtype=T.float64, device=o.device)
            term = (o.to(T.float64) * w).sum()
            total = term if total is None else total + term
    return total


# Ops whose torch gradient is wrong: no gradient run compares with it. torch's as_strided_scatter gives
# ``self`` the gradient of the positions ``src`` overwrote, zeros elsewhere (torch.autograd.gradcheck fails
# on it); jitorch's passes tests/autograd/test_registry_gradcheck.py. torch's ldexp by an integer exponent
# computes its gradient's ``2 ** other`` in the exponent's dtype (int8: 2 ** 7 wraps to -128, a negative
# exponent gives 0; fuzz seeds 7200296, and 7701141 by ``ldexp_``); jitorch's is ``2 ** other``
# (docs/differences-from-torch.md). torch's cholesky_solve and cholesky_inverse differentiate the whole factor
# matrix, the triangle their forward ignores too, which then also enters the used triangle's gradient (fuzz
# seeds 7803691, 7804472); jitorch's is the derivative of what the forward reads. Their in-place forms (a
# trailing underscore) likewise. ``as_strided_`` (the in-place form alone): torch regenerates the history of
# the target's earlier views through its new geometry, losing the gradient of the elements it leaves out
# (fuzz seed 7860971; tests/autograd/test_view_base_history.py).
TORCH_WRONG_GRADIENT = {"as_strided_scatter", "ldexp", "cholesky_solve", "cholesky_inverse", "as_strided_"}


def torch_derivative_wrong(tag):
    """Whether torch's derivative of a statement tagged ``tag`` is wrong everywhere (`TORCH_WRONG_GRADIENT`)."""
    return tag in TORCH_WRONG_GRADIENT or tag.removesuffix("_") in TORCH_WRONG_GRADIENT


def torch_gradient_untrusted(tag):
    """Whether torch's derivative of a statement tagged ``tag`` is no oracle for this program: wrong everywhere,
    wrong by an integer operand (`INTEGER_OPERAND`), or taken at another of tied elements (`AMONG_TIES`)."""
    # (an in-place statement's tag ends in "_" after the marker: ``addcdiv of an integer_``, seed 8501812)
    return torch_derivative_wrong(tag) or tag.removesuffix("_").endswith((INTEGER_OPERAND, AMONG_TIES))


def _with_grad(program):
    has_float = any(t.is_float for t in program.inputs) or any(
        c.is_float and c.role == "param" for c in program.captured)
    trusted = not any(torch_gradient_untrusted(s.tag) for s in program.body)
    return replace(program, grad=has_float and trusted and grad_valid(program))


def generate(seed, max_statements=14, table=None, chains=0.0, out_views=0.0, losses=0.0, nets=0.0, convs=0.0,
             regions=0.0, edges=0.0):
    """The program of ``seed`` (the same on every machine: Python's and NumPy's seeded generators), with a
    ``chains`` share of its statements drawn from the view-of-gather chains (`Generator.pad_windows`,
    `Generator.gather_views`) and an ``out_views`` share of its ``out=`` statements writing memory other than a
    new compact tensor (`Generator.out_view`); a ``losses`` share of its statements are loss patterns
    (`Generator.loss_pattern`), a ``nets`` share network patterns (`Generator.net_pattern`), a ``convs`` share
    convolution patterns (`Generator.conv_pattern`); a ``regions`` share of its statements run inside a grad-mode or
    autocast region (`Generator.in_region`); an ``edges`` share are edge patterns (`Generator.edge_pattern`)."""
    g = Generator(seed, max_statements, table, chains, out_views, losses, nets, convs, regions, edges)
    return g.program(), g
