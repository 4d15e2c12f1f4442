"""Sample inputs for every registered op, in the spirit of PyTorch's OpInfo.

``SAMPLES[op.name](rng, dtype=jitorch.float32)`` gives a list of `Sample`s:
valid arguments for the op, in schema order (a positional prefix, then keyword
arguments by schema name). `bind` completes one into the full schema-ordered
tuple with the schema's defaults, ready for ``registry.call(op, args)`` or
``op(*args)``. ``dtype`` is the dtype of every floating tensor a builder makes
(ask for float64 to gradcheck); integer and bool tensors keep their dtypes, and
`Sample.dtypes` says which dtypes a sample holds.

Together the samples of an op cover, where the op allows them: a
non-contiguous input (transposed, sliced with steps, offset or expanded), a
broadcast or size-1 case, a 0-d or empty case, and an integer or bool dtype.
Random ops get a seeded `jitorch.Generator`; `Sample.clone` copies its state
along with the tensors, so two clones give identical draws.

Pointwise ops are sampled from their schema (operand count, promotion kind)
and a small table of value domains (`DOMAINS`); every other op has a short
hand-written builder below.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

import jitorch as jt
from jitorch.ops import registry
from jitorch.ops.meta import ALWAYS_BOOL, KEEP_INT
from jitorch.ops.orthogonal_polynomials import NAMES as POLYNOMIALS
from tests.support import tensor_and_array

# Ops whose results are uninitialised memory: only their shapes and dtypes can be compared.
VALUES_UNDEFINED = frozenset({"empty", "empty_like", "new_empty"})


@dataclass
class Sample:
    """Arguments of one call: a positional prefix in schema order, the rest by schema name."""

    args: tuple
    kwargs: dict = field(default_factory=dict)

    def values(self):
        """Every argument value, lists and tuples flattened one level (where tensors may sit)."""
        for v in (*self.args, *self.kwargs.values()):
            if isinstance(v, (list, tuple)):
                yield from v
            else:
                yield v

    def tensors(self):
        """The tensors among the arguments, in order."""
        return [v for v in self.values() if isinstance(v, jt.Tensor)]

    def dtypes(self):
        """The set of dtypes of the sample's tensors."""
        return {t.dtype for t in self.tensors()}

    def map(self, fn):
        """A sample with ``fn`` applied to every tensor and generator (inside lists too)."""
        def one(v):
            if isinstance(v, (jt.Tensor, jt.Generator)):
                return fn(v)
            if isinstance(v, (list, tuple)):
                return type(v)(one(x) for x in v)
            return v
        return Sample(tuple(one(v) for v in self.args), {k: one(v) for k, v in self.kwargs.items()})

    def clone(self):
        """A deep copy: tensors with the same values and geometry in new storage, generators in the same state."""
        return self.map(lambda v: copy_generator(v) if isinstance(v, jt.Generator) else copy_layout(v))

    def to_meta(self):
        """The sample on the meta device: tensors keep shapes, strides and offsets; generators are kept."""
        return self.map(lambda v: copy_layout(v, "meta") if isinstance(v, jt.Tensor) else v)

    def __repr__(self):
        def show(v):
            if isinstance(v, jt.Tensor):
                return f"T{list(v.shape)}:{v.dtype.name}@{v.stride()}+{v.storage_offset()}"
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(show(x) for x in v) + "]"
            if isinstance(v, jt.Generator):
                return "Generator"
            return repr(v)
        parts = [show(a) for a in self.args] + [f"{k}={show(v)}" for k, v in self.kwargs.items()]
        return f"Sample({', '.join(parts)})"


def copy_layout(t, device=None):
    """A copy of ``t`` in new storage of the same size, with the same shape, strides and offset."""
    n = len(t.untyped_storage())
    device = jt.device(device or t.device)
    if device.type == "cpu" and t.device.type == "cpu":  # (a NumPy copy: the cheapest, run for every call compared)
        base = jt.from_numpy(np.array(t.as_strided((n,), (1,), 0).numpy(), copy=True))
    else:
        base = jt.empty(n, dtype=t.dtype, device=device)
        if device.type != "meta":
            base.copy_(t.as_strided((n,), (1,), 0))
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def copy_generator(g):
    """A generator in the state of ``g``: it draws what ``g`` would draw next."""
    return jt.Generator().set_state(g.get_state())


def bind(op, sample):
    """The sample's arguments as the full schema-ordered tuple, defaults filled in."""
    args = list(sample.args)
    schema_args = op.schema.args
    if len(args) > len(schema_args):
        raise TypeError(f"{op.name}: {len(args)} positional arguments for {len(schema_args)} parameters")
    unknown = set(sample.kwargs) - {a.name for a in schema_args[len(args):]}
    if unknown:
        raise TypeError(f"{op.name}: unexpected keyword arguments {sorted(unknown)}")
    for a in schema_args[len(args):]:
        if a.name in sample.kwargs:
            args.append(sample.kwargs[a.name])
        elif a.has_default:
            args.append(a.default)
        else:
            raise TypeError(f"{op.name}: sample gives no value for '{a.name}'")
    return tuple(args)


def method_call(op, sample):
    """``(self, args, kwargs)`` of the sample as a method call: the tensor a method binds (the schema argument
    named ``self``, else the first) and the other arguments (``where(condition, self, other)`` is
    ``self.where(condition, other)``)."""
    names = [a.name for a in op.schema.args]
    i = names.index("self") if "self" in names else 0
    return sample.args[i], sample.args[:i] + sample.args[i + 1:], sample.kwargs


# Tensor makers ------------------------------------------------------------------------------

class Maker:
    """Random tensors for one builder call: floating ones in ``dtype``, integer and bool ones as asked."""

    def __init__(self, rng, dtype):
        self.rng = rng
        self.dtype = dtype

    def _array(self, shape, dtype, low, high, nonzero):
        rng = self.rng
        if dtype is jt.bool:
            return rng.random(shape) < 0.5
        if dtype.is_floating_point:
            if nonzero:  # magnitudes at least 0.5, either sign
                return (rng.uniform(0.5, max(abs(low), abs(high)), shape) * rng.choice([-1, 1], shape)).astype(
                    dtype.np)
            return rng.uniform(low, high, shape).astype(dtype.np)
        lo, hi = round(low), round(high)
        if dtype is jt.uint8:
            lo = max(lo, 0)
        values = rng.integers(lo, hi + 1, shape)
        if nonzero:
            values = np.where(values == 0, 1, values)
        return values.astype(dtype.np)

    def t(self, shape, dtype=None, layout="contiguous", low=-3.0, high=3.0, nonzero=False):
        """A tensor of ``shape`` (floating ``self.dtype`` by default) in ``layout`` (tests/support.py)."""
        dtype = dtype or self.dtype
        return tensor_and_array(self._array(shape, dtype, low, high, nonzero), layout)[0]

    def f(self, shape, layout="contiguous", **kw):
        return self.t(shape, None, layout, **kw)

    def i(self, shape, layout="contiguous", dtype=jt.int32, **kw):
        return self.t(shape, dtype, layout, **kw)

    def b(self, shape, layout="contiguous"):
        return self.t(shape, jt.bool, layout)

    def idx(self, shape, n, dtype=jt.int64):
        """Indices in ``[0, n)``."""
        return jt.tensor(self.rng.integers(0, n, shape), dtype=dtype)

    def distinct(self, k, n):
        """``k`` distinct indices in ``[0, n)`` (writes through them are deterministic)."""
        return jt.tensor(self.rng.permutation(n)[:k], dtype=jt.int64)

    def rows(self, shape, n):
        """An index of ``shape`` whose last dim holds distinct values in ``[0, n)`` (a scatter without clashes)."""
        rows = [self.rng.permutation(n)[:shape[-1]] for _ in range(math.prod(shape[:-1]))]
        return jt.tensor(np.array(rows, dtype=np.int64).reshape(shape))

    def prob(self, shape, layout="contiguous"):
        return self.f(shape, layout, low=0.0, high=1.0)

    def gen(self):
        return jt.Generator().manual_seed(int(self.rng.integers(2 ** 31)))

    # the tensors most builders start from
    def mat(self):
        """(3, 4), transposed."""
        return self.f((3, 4), "transposed")

    def cube(self):
        """(2, 3, 4), sliced with steps."""
        return self.f((2, 3, 4), "strided")

    def scalar(self):
        return self.f(())

    def square(self, shape, layout="contiguous", kind="general"):
        """Well-conditioned square matrices of ``shape`` (..., n, n): "general" (diagonally dominant),
        "spd" (symmetric positive-definite) or "sym" (symmetric, with distinct eigenvalues)."""
        n = shape[-1]
        a = self.rng.uniform(-1.0, 1.0, shape)
        if kind == "spd":
            a = a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
        elif kind == "sym":
            a = a + np.swapaxes(a, -1, -2) + np.diag(np.arange(n) * 2.0)
        else:
            a = a + (n + 1) * np.eye(n)
        return tensor_and_array(a.astype(self.dtype.np), layout)[0]

    def lu(self, shape):
        """(LU, pivots) of a well-conditioned matrix of ``shape`` (factored in float32 or float64: the half types
        have no LU)."""
        LU, pivots = jt.linalg.lu_factor(self.square(shape).to(self.wide))
        return LU.to(self.dtype), pivots

    def ldl(self, shape):
        """(LD, pivots) of a symmetric matrix of ``shape`` (factored in float32 or float64)."""
        LD, pivots = jt.linalg.ldl_factor(self.square(shape, kind="sym").to(self.wide))
        return LD.to(self.dtype), pivots

    def reflectors(self, shape):
        """geqrf's Householder reflectors and scales of a matrix of ``shape``."""
        h, tau = jt.geqrf(self.f(shape).to(self.wide))
        return h.to(self.dtype), tau.to(self.dtype)

    @property
    def wide(self):
        return self.dtype if self.dtype in (jt.float32, jt.float64) else jt.float32


def S(*args, **kwargs):
    """``Sample(args, kwargs)``, written as the call it stands for."""
    return Sample(args, kwargs)


# Pointwise ops: samples from the schema and a domain -------------------------------------------

@dataclass(frozen=True)
class Domain:
    """The values a pointwise op is sampled on."""

    kinds: str | None = None        # dtype kinds: "f" floating, "i" integer, "b" bool; None: by promotion
    ranges: tuple = ((-3.0, 3.0),)  # (low, high) per operand; the last one applies to the rest
    nonzero: bool = False           # operands after the first stay away from zero (divisors)
    scalar: float | None = 2.5      # the Python number given as the last operand (None: never a number)
    bools: tuple = ()               # operand positions that are always bool (where's condition)
    same_dtype: bool = False        # the integer sample uses one dtype for every operand
    kwargs: tuple = ()              # extra keyword arguments, one more sample each
    extra: object = None            # Maker -> [Sample]: samples the generic ones do not cover
    args: tuple = ()                # the op's other arguments, after the operands of every generic sample


_KINDS = {KEEP_INT: "ib", ALWAYS_BOOL: "fib"}  # dtype kinds by promotion kind; "fi" otherwise


def _by_names(*rows):
    """{name: value} from rows of ("name alias ...", value)."""
    return {name: value for names, value in rows for name in names.split()}


DOMAINS = _by_names(
    ("log log2 log10 sqrt rsqrt reciprocal", Domain(ranges=((0.25, 4.0),))),
    ("log1p", Domain(ranges=((-0.5, 3.0),))),
    ("asin arcsin acos arccos atanh arctanh", Domain(ranges=((-0.9, 0.9),))),
    ("acosh arccosh", Domain(ranges=((1.0, 4.0),))),
    ("tan", Domain(ranges=((-1.2, 1.2),))),
    ("pow", Domain(ranges=((0.25, 2.0), (-2.0, 2.0)))),
    ("true_divide floor_divide remainder fmod _div_trunc", Domain(nonzero=True)),
    ("div divide", Domain(nonzero=True, kwargs=({"rounding_mode": "trunc"}, {"rounding_mode": "floor"}))),
    ("add", Domain(kinds="fib", kwargs=({"alpha": 2},))),
    ("sub subtract rsub", Domain(kwargs=({"alpha": 2},))),
    ("mul multiply sign sgn", Domain(kinds="fib")),
    # torch has no Scalar overload for these operands
    ("maximum minimum max.other min.other logical_and logical_or logical_xor", Domain(kinds="fib", scalar=None)),
    ("atan2 arctan2", Domain(scalar=None)),
    ("hypot logaddexp", Domain(kinds="f", scalar=None)),
    ("frac", Domain(kinds="f")),
    ("lerp", Domain(kinds="f", scalar=0.3)),
    ("bitwise_left_shift bitwise_right_shift", Domain(kinds="i", ranges=((-8, 8), (0, 7)))),
    ("where.self", Domain(kinds="fib", bools=(0,))),
    ("isclose", Domain(kinds="fib", scalar=None, same_dtype=True,
                       kwargs=({"rtol": 0.1, "atol": 0.5, "equal_nan": True},))),
    ("round", Domain(kwargs=({"decimals": 1},))),
    ("copysign", Domain(kinds="fib")),
    ("fmax fmin", Domain(kinds="fib", scalar=None)),
    ("heaviside", Domain(kinds="fib", scalar=None, same_dtype=True)),
    ("xlogy", Domain(ranges=((-3.0, 3.0), (0.25, 4.0)))),
    ("special_xlog1py", Domain(ranges=((-3.0, 3.0), (-0.5, 3.0)))),
    ("logaddexp2 nextafter", Domain(kinds="f", scalar=None)),
    ("gcd lcm", Domain(kinds="i", scalar=None, ranges=((-20.0, 20.0),))),
    ("logit", Domain(ranges=((0.05, 0.95),), kwargs=({"eps": 0.2},))),
    ("lgamma digamma", Domain(ranges=((0.25, 4.0),))),
    ("_polygamma", Domain(ranges=((0.25, 4.0),), args=(1,), extra=lambda m: [S(m.f((2, 3), low=0.5, high=3.0), 3)])),
    ("mvlgamma", Domain(ranges=((1.5, 4.0),), args=(2,), extra=lambda m: [S(m.i((2, 3), low=2, high=5), 3)])),
    ("erfinv", Domain(ranges=((-0.9, 0.9),))),
    ("special_entr", Domain(ranges=((0.25, 4.0),))),
    ("ldexp", Domain(scalar=None, extra=lambda m: [S(m.mat(), m.i((3, 4), low=-3, high=3))])),
    ("float_power", Domain(ranges=((0.25, 2.0), (-2.0, 2.0)))),
    # zeta's derivative in its first argument is torch's "not implemented": a number there has a gradient
    ("special_zeta", Domain(kinds="f", ranges=((1.5, 4.0), (0.5, 3.0)),
                            extra=lambda m: [S(2.5, m.f((3, 4), "transposed", low=0.5, high=3.0))])),
    # bounds are two tensors or two numbers (torch's two overloads), either may be None
    ("clamp clip", Domain(scalar=None, extra=lambda m: [S(m.mat(), None, 0.5), S(m.f((3, 4)), -0.5, 0.5),
                                                        S(m.i((2, 3)), max=2)])),
    # torch.special's Cephes-family functions and polynomials (jitorch/ops/special_ops.py)
    ("igamma igammac", Domain(kinds="f", scalar=None, ranges=((0.5, 4.0), (0.25, 4.0)))),
    ("special_ndtri", Domain(ranges=((0.05, 0.95),))),
    ("special_bessel_y0 special_bessel_y1 special_modified_bessel_k0 special_modified_bessel_k1 "
     "special_scaled_modified_bessel_k0 special_scaled_modified_bessel_k1", Domain(ranges=((0.25, 4.0),))),
    (" ".join(f"special_{name}" for name in POLYNOMIALS), Domain(ranges=((-1.5, 1.5), (0.0, 9.0)))),
    ("addcmul", Domain(scalar=None, kwargs=({"value": 0.5},))),
    ("addcdiv", Domain(kinds="f", nonzero=True, scalar=None, kwargs=({"value": -2},))),
)

# Composites that are pointwise in all but name.
POINTWISE_LIKE = ("max.other", "min.other")


def _pointwise_samples(op, domain, m):
    """Same shapes (the first operand transposed), broadcasting, empty with 0-d, a Python number last,
    integers (mixed widths, stride 0) and bools where the op takes them, then the domain's extras."""
    n = len(op.tensor_args)
    kinds = domain.kinds or _KINDS.get(op.attrs.get("promotion"), "fi")
    main = m.dtype if "f" in kinds else jt.int64 if "i" in kinds else jt.bool

    def operands(shapes, dtypes, layouts=()):
        out = []
        for i, shape in enumerate(shapes):
            if shape is None:  # a Python number
                out.append(int(domain.scalar) if main.kind in "iu" else domain.scalar)
                continue
            low, high = domain.ranges[min(i, len(domain.ranges) - 1)]
            dtype = jt.bool if i in domain.bools else dtypes[min(i, len(dtypes) - 1)]
            layout = layouts[i] if i < len(layouts) else "contiguous"
            out.append(m.t(shape, dtype, layout, low, high, nonzero=domain.nonzero and i > 0))
        return S(*out, *domain.args)

    rest = n - 1
    samples = [operands([(3, 4)] * n, [main], ["transposed"])]
    if n == 1:
        samples += [operands([()], [main]), operands([(0, 3)], [main], ["strided"])]
    else:
        samples += [operands([(3, 1)] + [(1, 4)] * rest, [main], ["strided"]),
                    operands([(0, 4)] + [()] * rest, [main])]
        if domain.scalar is not None:
            samples.append(operands([(2, 3)] + [(3,)] * (rest - 1) + [None], [main], ["offset"]))
    if "i" in kinds:
        samples.append(operands([(2, 3)] * n, [jt.int64] if domain.same_dtype else [jt.int32, jt.int64],
                                ["strided"] + ["expanded"] * rest))
    if "b" in kinds:
        samples.append(operands([(2, 3)] * n, [jt.bool]))
    for kw in domain.kwargs:
        s = operands([(3, 4)] * n, [main])
        samples.append(Sample(s.args, dict(kw)))
    if domain.extra is not None:
        samples += domain.extra(m)
    return samples


# Hand-written builders ------------------------------------------------------------------------
# Each takes a Maker ``m`` and returns a list of samples; rows name an op and its aliases.

def _reduce_dims(m, has_keepdim=True):
    """Reductions over ``int[]? dim``: all dims, two dims kept, a 0-d input, integers over one dim, empty."""
    return [S(m.mat()), S(m.cube(), (0, -1), *[True] * has_keepdim), S(m.scalar()),
            S(m.i((2, 3)), (1,)), S(m.f((0, 3)), (1,))]


def _reduce_float_dims(m):
    """Means: floating inputs only (``mean`` also takes integers with a floating ``dtype=``)."""
    return [S(m.mat()), S(m.cube(), (0, -1), True), S(m.scalar()), S(m.f((0, 3)), (1,), dtype=jt.float64)]


def _reduce_one_dim(m):
    """Reductions over ``int? dim``."""
    return [S(m.mat()), S(m.cube(), 1, True), S(m.scalar()), S(m.i((2, 3)), 0)]


def _values_indices(m):
    """(values, indices) over a required dim."""
    return [S(m.mat(), 1), S(m.cube(), 0, True), S(m.scalar(), 0), S(m.i((2, 3)), -1)]


def _scan(m):
    return [S(m.mat(), 1), S(m.cube(), -1), S(m.scalar(), 0), S(m.f((0, 3)), 0), S(m.i((2, 3)), 0, dtype=jt.int64)]


def _softmax(m):
    return [S(m.mat(), 1), S(m.cube(), 0), S(m.scalar(), 0), S(m.f((0, 3)), 1), S(m.i((2, 3)), 1, dtype=m.dtype)]


def _moments_legacy(m):
    return [S(m.mat()), S(m.cube(), False), S(m.f((5,), "offset")), S(m.scalar(), False)]


def _moments_dim(m):
    return [S(m.mat(), (1,)), S(m.cube(), (0, 2), False, True), S(m.f((4,)), None)]


def _moments_correction(m):
    return [S(m.mat()), S(m.cube(), (0, 2), correction=0, keepdim=True), S(m.f((5,)), correction=2),
            S(m.scalar(), correction=0)]


def _sorting(m):
    return [S(m.mat()), S(m.cube(), 0, True), S(m.i((5,)), stable=True), S(m.scalar()), S(m.f((0, 3)))]


def _k_of(m):
    """topk / kthvalue: (self, k, dim, ...)."""
    return [S(m.mat(), 2), S(m.cube(), 1, 0, False), S(m.i((6,)), 3), S(m.scalar(), 1)]


def _transpose(m):
    return [S(m.mat(), 0, 1), S(m.cube(), -1, 0), S(m.scalar(), 0, -1), S(m.i((2, 3)), 1, 1)]


def _movedim(m):
    return [S(m.cube(), 0, 2), S(m.f((2, 3, 4), "transposed"), (0, 1), (-1, 0)), S(m.scalar(), (), ())]


def _split_sizes(m):
    return [S(m.f((5, 4), "transposed"), (2, 3)), S(m.cube(), (1, 3), -1), S(m.i((3,)), (0, 3))]


def _like(m):
    """``*_like`` factories."""
    return [S(m.mat()), S(m.i((2, 3), "strided"), dtype=m.dtype), S(m.scalar(), dtype=jt.int64)]


def _sized(m):
    """Factories from ``int... size``."""
    return [S((2, 3)), S((), dtype=jt.int32), S((0, 4), dtype=m.dtype)]


def _new_sized(m):
    return [S(m.mat(), (2,)), S(m.i((2, 3)), (), dtype=m.dtype), S(m.scalar(), (0, 2))]


def _cat(m):
    return [S([m.mat(), m.f((2, 4))]), S([m.cube(), m.i((2, 3, 1))], -1), S([m.f((0,)), m.f((3,), "strided")]),
            S([m.f((2,))])]


def _stacker(m):
    """hstack, vstack, dstack, column_stack: matrices, vectors (mixed dtypes), scalars."""
    return [S([m.f((2, 3)), m.mat().t()[:2]]), S([m.f((3,)), m.i((3,))]), S([m.scalar(), m.scalar()])]


def _triangle(m):
    return [S(m.mat()), S(m.cube(), 1), S(m.i((3, 3)), -1), S(m.f((0, 3)))]


def _dot(m):
    return [S(m.f((4,), "strided"), m.f((4,))), S(m.i((3,)), m.i((3,))), S(m.f((0,)), m.f((0,)))]


def _outer(m):
    return [S(m.f((3,), "strided"), m.f((4,))), S(m.i((2,)), m.f((3,))), S(m.f((0,)), m.f((2,)))]


def _close(m):
    x = m.mat()
    return [S(x, x.clone()), S(m.f((3,)), m.f((3,)), 0.1, 2.0, True), S(m.i((2, 3)), m.i((2, 3)))]


def _equal(m):
    x = m.mat()
    return [S(x, x.clone()), S(m.f((3,)), m.f((2, 3))), S(m.i((3,)), m.i((3,), dtype=jt.int64))]


def _decomposition(*extra):
    """Ops of one matrix: a batch of tall ones, a wide one (transposed), and ``extra`` arguments on a square one."""
    return lambda m: [S(m.f((2, 4, 3)), *extra), S(m.f((2, 3), "transposed"), *extra), S(m.square((3, 3)), *extra)]


def _square(kind="general", *extra):
    """Ops of square matrices: a batch, a transposed one, and an empty one."""
    return lambda m: [S(m.square((2, 3, 3), kind=kind), *extra), S(m.square((3, 3), "transposed", kind), *extra),
                      S(m.square((0, 0), kind=kind), *extra)]


def _lu_unpack(m):
    LU, pivots = m.lu((2, 3, 3))
    return [S(LU, pivots), S(m.f((4, 3)), jt.tensor([3, 3, 3], dtype=jt.int32), True, False),
            S(m.i((3, 2)), jt.tensor([1, 2], dtype=jt.int32), False)]


def _householder(m):
    return [S(*m.reflectors((2, 4, 3))), S(m.f((3, 2), "transposed"), m.f((1,)))]


def _ormqr(m):
    h, tau = m.reflectors((4, 3))
    return [S(h, tau, m.f((4, 2))), S(h, tau, m.f((2, 4), "transposed"), False, True)]


def _random_fill(*extra):
    """In-place random initialisers: default arguments, then ``extra`` on a 0-d tensor."""
    return lambda m: [S(m.mat(), generator=m.gen()), S(m.scalar(), *extra, generator=m.gen())]


HAND_WRITTEN = _by_names(
    ("special_ndtr", lambda m: [S(m.mat()), S(m.scalar()), S(m.i((2, 3)))]),
    ("frexp", lambda m: [S(m.mat()), S(m.scalar()), S(m.f((0, 3)))]),
    ("polygamma", lambda m: [S(1, m.f((3, 4), "transposed", low=0.5, high=3.0)), S(0, m.f(())),
                             S(2, m.i((2, 3), low=1, high=4))]),
    # reductions, scans, softmax, sorting
    ("sum nansum", lambda m: _reduce_dims(m) + [S(m.i((2, 3)), (0,), dtype=jt.int64)]),
    ("mean", lambda m: _reduce_float_dims(m) + [S(m.i((2, 3)), (1,), dtype=m.dtype)]),
    ("nanmean", _reduce_float_dims),
    ("amax amin", _reduce_dims),
    ("all any", lambda m: [S(m.b((3, 4), "transposed")), S(m.cube(), (0, -1), True), S(m.i((2, 3), dtype=jt.uint8),
                                                                                         (1,)),
                           S(m.f((0, 3)), (1,))]),
    ("count_nonzero", lambda m: _reduce_dims(m, has_keepdim=False)),
    ("logsumexp", lambda m: [S(m.mat(), (1,)), S(m.cube(), (0, -1), True), S(m.f((0, 3)), (1,)),
                             S(m.i((2, 3)), (1,))]),
    ("prod argmax argmin", _reduce_one_dim),
    ("max min", lambda m: [S(m.mat()), S(m.scalar()), S(m.i((2, 3), "transposed")), S(m.b((3,)))]),
    ("median", lambda m: [S(m.mat()), S(m.scalar()), S(m.i((2, 3)))]),
    ("max.dim min.dim median.dim", _values_indices),
    ("std var std_mean var_mean", _moments_legacy),
    ("std.dim var.dim std_mean.dim var_mean.dim", _moments_dim),
    ("std.correction var.correction std_mean.correction var_mean.correction", _moments_correction),
    ("cross", lambda m: [S(m.f((4, 3)), m.f((4, 3)), 1), S(m.f((3, 2)), m.f((3, 1)), 0),
                         S(m.f((2, 3, 3), "transposed"), m.f((2, 3, 3)), -1)]),
    ("dist", lambda m: [S(m.mat(), m.f((4,))), S(m.cube(), m.cube(), 1), S(m.scalar(), m.scalar(), 0),
                        S(m.f((2, 3)), m.f((2, 3)), math.inf), S(m.f((3,)), m.f((3,)), 1.5)]),
    ("norm", lambda m: [S(m.mat()), S(m.cube(), 1, (0, 2), True), S(m.scalar(), 2), S(m.f((2, 3)), math.inf, (1,)),
                        S(m.f((0, 3)), 0, dtype=jt.float64)]
     + [S(m.f((3, 4)), "nuc")] * (m.dtype not in (jt.float16, jt.bfloat16))),  # no half SVD in torch
    ("cumsum cumprod", _scan),
    ("softmax log_softmax", _softmax),
    ("sort argsort", _sorting),
    ("topk kthvalue", _k_of),
    ("unique _unique", lambda m: [S(m.i((3, 4), "transposed", low=-2, high=2)),
                                  S(m.f((5,), "strided"), True, True, True),
                                  S(m.i((3, 2), low=0, high=1), True, True, True, 0),
                                  S(m.scalar(), return_inverse=True), S(m.f((0, 3)))]),
    # views
    ("alias", lambda m: [S(m.mat()), S(m.scalar())]),
    ("as_strided", lambda m: [S(m.f((3, 4)), (2, 2), (1, 2)), S(m.mat(), (2, 3), (3, 1), 1),
                              S(m.i((4,)), (), (), 2)]),
    ("as_strided_scatter", lambda m: [S(m.f((3, 4)), m.f((3,)), (3,), (5,), 0),
                                      S(m.f((3, 4), "transposed"), m.f((2, 2)), (2, 2), (1, 4), 1),
                                      S(m.i((4,)), m.i(()), (), (), 2)]),
    # overlapping windows (each element reached several times), a stride-0 dim, a strided source
    ("_as_strided_add", lambda m: [S(m.f((12,)), m.f((2, 3, 3)), (2, 3, 3), (4, 1, 1), 1),
                                   S(m.f((6,)), m.f((3, 4), "transposed"), (3, 4), (1, 0), 2),
                                   S(m.i((5,)), m.i((2, 2)), (2, 2), (1, 1), 0)]),
    ("broadcast_to expand", lambda m: [S(m.f((3, 1), "strided"), (2, 3, 4)), S(m.scalar(), (2,)),
                                       S(m.i((1, 3)), (4, -1))]),
    ("expand_as", lambda m: [S(m.f((3, 1), "strided"), m.f((2, 3, 4))), S(m.scalar(), m.i((2,)))]),
    ("broadcast_tensors", lambda m: [S([m.f((3, 1), "strided"), m.f((2, 1, 4)), m.scalar()]),
                                     S([m.i((2,))])]),
    ("chunk unsafe_chunk", lambda m: [S(m.f((5, 4), "transposed"), 2), S(m.cube(), 3, -1), S(m.f((0, 3)), 2), S(m.i((6,)), 4)]),
    ("diagonal", lambda m: [S(m.mat()), S(m.cube(), 1, 0, 2), S(m.f((3, 3)), -1), S(m.i((2, 3)), 5)]),
    ("movedim moveaxis", _movedim),
    ("narrow narrow_copy", lambda m: [S(m.mat(), 1, 1, 2), S(m.cube(), 0, -1, 1), S(m.i((5,)), 0, 0, 0)]),
    ("permute", lambda m: [S(m.cube(), (2, 0, 1)), S(m.mat(), (-1, 0)), S(m.scalar(), ())]),
    ("select", lambda m: [S(m.mat(), 1, 2), S(m.cube(), 0, -1), S(m.i((3,)), 0, 1)]),
    ("slice", lambda m: [S(m.mat(), 1, 1, 3), S(m.cube(), 0, None, None, 2), S(m.i((5,)), 0, -3, 100)]),
    ("split unsafe_split", lambda m: [S(m.f((5, 4), "transposed"), 2), S(m.cube(), 3, -1), S(m.i((0,)), 1)]),
    ("split.sizes split_with_sizes unsafe_split_with_sizes", _split_sizes),
    ("squeeze", lambda m: [S(m.f((3, 1, 2), "transposed")), S(m.f((1, 3, 1), "strided"), (0, 2)), S(m.scalar()),
                           S(m.i((1,)), 0)]),
    ("transpose swapaxes swapdims", _transpose),
    ("t", lambda m: [S(m.mat()), S(m.f((3,), "strided")), S(m.scalar()), S(m.i((2, 3)))]),
    ("unbind", lambda m: [S(m.mat()), S(m.cube(), -1), S(m.i((0, 3)), 1)]),
    ("unflatten", lambda m: [S(m.mat(), 1, (2, -1)), S(m.cube(), -1, (2, 2)), S(m.i((6,)), 0, (2, 3))]),
    ("unfold", lambda m: [S(m.mat(), 1, 2, 1), S(m.cube(), 0, 2, 2), S(m.scalar(), 0, 1, 1), S(m.i((5,)), 0, 3, 2)]),
    ("unsqueeze", lambda m: [S(m.mat(), 0), S(m.cube(), -1), S(m.scalar(), 0), S(m.i((2,)), 1)]),
    ("view", lambda m: [S(m.mat(), (3, 2, 2)), S(m.f((2, 3, 4)), (6, -1)), S(m.scalar(), (1,)),
                        S(m.i((0, 3)), (3, 0))]),
    ("view.dtype", lambda m: [S(m.f((3, 4)), jt.uint8), S(m.f((2, 3), "strided"), m.dtype),
                              S(m.i((2, 4)), jt.int16), S(m.i((3, 2)), jt.float32)]),
    ("view_as", lambda m: [S(m.f((2, 6)), m.f((3, 4))), S(m.mat(), m.i((3, 2, 2)))]),
    ("reshape", lambda m: [S(m.mat(), (12,)), S(m.f((2, 3, 4)), (4, -1)), S(m.scalar(), (1, 1)),
                           S(m.i((0, 3)), (-1,))]),
    ("reshape_as", lambda m: [S(m.mat(), m.f((12,))), S(m.f((2, 3)), m.i((3, 2)))]),
    ("flatten", lambda m: [S(m.mat()), S(m.cube(), 1), S(m.scalar()), S(m.i((2, 3, 4)), 0, 1)]),
    ("contiguous", lambda m: [S(m.mat()), S(m.f((3, 4))), S(m.i((2, 3), "strided"))]),
    ("clone", lambda m: [S(m.mat()), S(m.cube()), S(m.f((2, 3), "transposed"), memory_format=jt.contiguous_format),
                         S(m.i((3,)))]),
    ("_to_copy", lambda m: [S(m.mat(), dtype=jt.float64), S(m.i((2, 3), "strided"), dtype=m.dtype),
                            S(m.scalar(), device="cpu"), S(m.b((3,)), dtype=jt.int64)]),
    # creation
    ("arange", lambda m: [S(5), S(1, 4, 0.5), S(0, 10, 3, dtype=jt.int32), S(10, 0, -2.5, dtype=m.dtype), S(0)]),
    ("zeros ones empty", _sized),
    ("zeros_like ones_like empty_like", _like),
    ("new_zeros new_ones new_empty", _new_sized),
    ("eye", lambda m: [S(3), S(0, dtype=jt.int32)]),
    ("eye.m", lambda m: [S(2, 4), S(3, 1, dtype=m.dtype)]),
    ("full", lambda m: [S((2, 3), 1.5), S((), 7), S((0, 2), True), S((2,), 3, dtype=m.dtype)]),
    ("full_like", lambda m: [S(m.mat(), 2.5), S(m.i((2, 3)), 7), S(m.scalar(), 1, dtype=jt.int64)]),
    ("new_full", lambda m: [S(m.mat(), (2, 3), 1.5), S(m.i((2,)), (0,), 7)]),
    ("linspace", lambda m: [S(0, 1, 5), S(-2, 2, 4, dtype=m.dtype), S(0, 10, 6, dtype=jt.int32), S(1, 1, 0)]),
    ("logspace", lambda m: [S(0, 2, 3), S(-1, 1, 5, 2.0, dtype=m.dtype), S(0, 3, 4, dtype=jt.int64)]),
    ("fill.Scalar", lambda m: [S(m.mat(), 2.5), S(m.i((2, 3), "strided"), 7), S(m.scalar(), True)]),
    ("fill.Tensor", lambda m: [S(m.mat(), m.scalar()), S(m.i((2, 3)), m.scalar())]),
    ("zero", lambda m: [S(m.mat()), S(m.i((2, 3), "strided")), S(m.f((0, 2)))]),
    ("copy", lambda m: [S(m.mat(), m.f((4,))), S(m.i((2, 3)), m.f((2, 3), "transposed")), S(m.scalar(), m.scalar())]),
    # indexing
    ("nonzero_static", lambda m: [S(m.i((3, 4), "transposed", low=-1, high=1), size=5),
                                  S(m.b((2, 3)), size=2, fill_value=-7), S(m.f((4,)), size=0)]),
    ("where", lambda m: [S(m.b((3, 4))), S(m.i((2, 3), "transposed", low=-1, high=1)), S(m.scalar())]),
    ("argwhere nonzero", lambda m: [S(m.i((3, 4), "transposed", low=-1, high=1)), S(m.b((2, 3))), S(m.scalar()),
                                    S(m.f((0, 3)))]),
    ("gather", lambda m: [S(m.mat(), 1, m.idx((3, 2), 4)), S(m.cube(), 0, m.idx((1, 3, 4), 2)),
                          S(m.i((3,)), 0, m.idx((5,), 3)), S(m.scalar(), 0, m.idx((), 1))]),
    ("index", lambda m: [S(m.mat(), [m.idx((2,), 3)]), S(m.cube(), [None, m.idx((2, 2), 3), m.idx((2,), 4)]),
                         S(m.f((2, 3)), [m.b((2, 3))]), S(m.i((4,)), [m.idx((), 4, jt.int32)])]),
    ("index_put", lambda m: [S(m.mat(), [m.distinct(2, 3)], m.f((4,))),
                             S(m.cube(), [None, m.distinct(2, 3)], m.f((2, 4))),
                             S(m.f((2, 3)), [m.b((2, 3))], m.scalar()),
                             S(m.i((5,)), [m.idx((3,), 5)], m.i((3,)), True)]),
    ("index_select", lambda m: [S(m.mat(), 1, m.idx((5,), 4)), S(m.cube(), 0, m.idx((), 2)),
                                S(m.i((3,)), 0, m.idx((2,), 3, jt.int32))]),
    ("index_add", lambda m: [S(m.mat(), 1, m.idx((5,), 4), m.f((3, 5))),
                             S(m.cube(), 0, m.idx((2,), 2), m.f((2, 3, 4)), alpha=2),
                             S(m.i((5,)), 0, m.idx((3,), 5), m.i((3,)))]),
    ("index_copy", lambda m: [S(m.mat(), 1, m.distinct(2, 4), m.f((3, 2))),
                              S(m.i((5,)), 0, m.distinct(2, 5), m.i((2,)))]),
    ("index_fill", lambda m: [S(m.mat(), 1, m.idx((2,), 4), -1.5), S(m.i((5,)), 0, m.idx((), 5), 7)]),
    ("index_fill.Tensor", lambda m: [S(m.mat(), 1, m.idx((2,), 4), m.scalar()),
                                     S(m.i((5,)), 0, m.idx((), 5), m.i(()))]),
    ("masked_fill", lambda m: [S(m.mat(), m.b((3, 4)), 0.5), S(m.cube(), m.b((4,)), -1),
                               S(m.i((3, 1)), m.b((1, 4)), 7), S(m.scalar(), m.b(()), 2)]),
    ("masked_fill.Tensor", lambda m: [S(m.mat(), m.b((3, 4)), m.scalar()), S(m.i((2, 3)), m.b((3,)), m.i(()))]),
    ("masked_select", lambda m: [S(m.mat(), m.b((3, 4))), S(m.cube(), m.b((4,))), S(m.i((3, 1)), m.b((1, 4))),
                                 S(m.scalar(), m.b(()))]),
    ("put", lambda m: [S(m.mat(), m.distinct(3, 12), m.f((3,))), S(m.i((2, 3)), m.idx((2, 2), 6), m.i((2, 2)), True)]),
    ("scatter", lambda m: [S(m.mat(), 1, m.rows((3, 2), 4), m.f((3, 4))),
                           S(m.cube(), 0, m.idx((2, 2, 3), 2), m.cube(), reduce="add"),
                           S(m.i((5,)), 0, m.idx((3,), 5), m.i((4,)), reduce="multiply")]),
    ("scatter.value", lambda m: [S(m.mat(), 1, m.rows((3, 2), 4), 2.5), S(m.i((5,)), 0, m.idx((3,), 5), 7,
                                                                          reduce="add")]),
    ("scatter_add", lambda m: [S(m.mat(), 1, m.idx((3, 5), 4), m.f((3, 5))), S(m.i((5,)), 0, m.idx((3,), 5), m.i((4,))),
                               S(m.scalar(), 0, m.idx((), 1), m.scalar())]),
    ("scatter_reduce", lambda m: [S(m.mat(), 1, m.idx((3, 5), 4), m.f((3, 5)), "sum"),
                                  S(m.cube(), 0, m.idx((2, 2, 3), 2), m.cube(), "amax", include_self=False),
                                  S(m.i((5,)), 0, m.idx((4,), 5), m.i((4,)), "mean"),
                                  S(m.f((2, 3)), 1, m.idx((2, 3), 3), m.f((2, 3)), "prod")]),
    ("take", lambda m: [S(m.mat(), m.idx((2, 3), 12)), S(m.i((5,)), m.idx((), 5)), S(m.f((0,)), m.idx((0,), 1))]),
    # shape ops
    ("cat concat concatenate", _cat),
    ("stack", lambda m: [S([m.mat(), m.f((3, 4))]), S([m.scalar(), m.scalar()]), S([m.i((2, 3)), m.i((2, 3))], -1)]),
    ("hstack vstack row_stack dstack column_stack", _stacker),
    ("flip", lambda m: [S(m.mat(), (0,)), S(m.cube(), (0, -1)), S(m.scalar(), ()), S(m.i((3,)), (0,))]),
    ("fliplr", lambda m: [S(m.mat()), S(m.cube())]),
    ("flipud", lambda m: [S(m.mat()), S(m.f((3,), "strided")), S(m.i((2, 2)))]),
    ("roll", lambda m: [S(m.mat(), 1), S(m.cube(), (1, -2), (0, 2)), S(m.i((5,)), 7), S(m.scalar(), 1)]),
    ("repeat", lambda m: [S(m.mat(), (2, 1)), S(m.scalar(), (2, 3)), S(m.i((3,)), (2, 0, 2))]),
    ("tile", lambda m: [S(m.mat(), (2,)), S(m.f((3,)), (2, 2)), S(m.i((2, 3)), ())]),
    ("repeat_interleave", lambda m: [S(m.mat(), 2), S(m.cube(), 3, 1), S(m.i((3,)), 0, 0), S(m.scalar(), 2)]),
    ("repeat_interleave.Tensor", lambda m: [S(m.idx((4,), 3)), S(m.idx((0,), 1, jt.int32)), S(m.idx((3,), 3),
                                                                                            output_size=None)]),
    ("repeat_interleave.self_Tensor", lambda m: [S(m.mat(), m.idx((3,), 3), 0), S(m.cube(), m.idx((), 3), -1),
                                                 S(m.i((2, 3)), m.idx((6,), 3)), S(m.scalar(), m.idx((1,), 3))]),
    ("tril triu", _triangle),
    # linear algebra
    ("mm", lambda m: [S(m.mat(), m.f((4, 2))), S(m.i((2, 3)), m.i((3, 2), "transposed")), S(m.f((0, 3)), m.f((3, 2)))]),
    ("bmm", lambda m: [S(m.cube(), m.f((2, 4, 2))), S(m.i((2, 2, 3)), m.i((2, 3, 1)))]),
    ("mv", lambda m: [S(m.mat(), m.f((4,), "strided")), S(m.i((2, 3)), m.i((3,)))]),
    ("dot vdot", _dot),
    ("matmul", lambda m: [S(m.mat(), m.f((4, 2))), S(m.f((4,)), m.f((2, 4, 3))), S(m.cube(), m.f((4,))),
                          S(m.i((2, 3)), m.i((3, 2)))]),
    ("addmm", lambda m: [S(m.f((3, 2)), m.mat(), m.f((4, 2))),
                         S(m.f((2,)), m.f((3, 4)), m.f((4, 2)), beta=0.5, alpha=2),
                         S(m.i((2, 2)), m.i((2, 3)), m.i((3, 2)), beta=2)]),
    ("baddbmm", lambda m: [S(m.f((2, 3, 2)), m.cube(), m.f((2, 4, 2))),
                           S(m.f((2,)), m.f((2, 3, 4)), m.f((2, 4, 2)), alpha=0.5)]),
    ("einsum", lambda m: [S("ij,jk->ik", [m.mat(), m.f((4, 2))]), S("bij->bji", [m.cube()]),
                          S("i,i", [m.f((3,)), m.f((3,))]), S("...j,j->...", [m.i((2, 3)), m.i((3,))])]),
    ("outer ger", _outer),
    ("addmv", lambda m: [S(m.f((3,)), m.mat(), m.f((4,), "strided")),
                         S(m.f(()), m.f((2, 3)), m.f((3,)), beta=0.5, alpha=2), S(m.i((2,)), m.i((2, 2)), m.i((2,)))]),
    ("addr", lambda m: [S(m.mat(), m.f((3,)), m.f((4,), "strided"), beta=0.5),
                        S(m.f((4,)), m.f((2,)), m.f((4,)), alpha=2), S(m.i((2, 2)), m.i((2,)), m.f((2,)))]),
    ("addbmm", lambda m: [S(m.f((3, 2)), m.f((2, 3, 2), "strided"), m.f((2, 2, 2))),
                          S(m.f((2,)), m.f((2, 2, 3)), m.f((2, 3, 2)), beta=2, alpha=0.5)]),
    ("trace", lambda m: [S(m.mat()), S(m.i((3, 3))), S(m.f((0, 2)))]),
    ("kron", lambda m: [S(m.f((2, 3), "transposed"), m.f((2, 1))), S(m.f((3,)), m.f((2, 1, 2))),
                        S(m.i((2,)), m.i((2,)))]),
    ("inner", lambda m: [S(m.mat(), m.f((2, 4))), S(m.f((3,)), m.f((3,))), S(m.scalar(), m.f((2,))),
                         S(m.i((2, 2)), m.i((2,)))]),
    ("tensordot", lambda m: [S(m.f((2, 2, 3), "strided"), m.f((2, 3, 2))), S(m.mat(), m.f((4, 2)), 1),
                             S(m.f((2, 2, 3)), m.f((3, 2)), ([2], [0])),
                             S(m.i((2, 2)), m.i((2, 2)), 0)]),
    ("chain_matmul", lambda m: [S([m.mat(), m.f((4, 2)), m.f((2, 3))]), S([m.f((2, 2))])]),
    ("matrix_power", lambda m: [S(m.square((2, 2, 2)), 3), S(m.square((2, 2), "transposed"), -2), S(m.i((2, 2)), 0),
                                S(m.f((3, 3)), 1)]),
    # decompositions and solvers
    ("det", _square()),
    ("slogdet", _square()),
    ("logdet", _square("spd")),
    ("linalg_inv_ex inverse", _square()),
    ("matrix_exp", lambda m: [S(m.f((2, 3, 3), low=-1.0, high=1.0)), S(m.f((2, 2), "transposed")), S(m.f((0, 0)))]),
    ("linalg_solve_ex", lambda m: [S(m.square((2, 2, 2)), m.f((2, 1))), S(m.square((2, 2), "transposed"), m.f((2,))),
                                   S(m.square((2, 2)), m.f((3, 2)), left=False)]),
    ("linalg_solve_triangular", lambda m: [S(m.square((2, 2, 2)), m.f((2, 1)), upper=True),
                                           S(m.square((2, 2), "transposed"), m.f((3, 2)), upper=False, left=False,
                                             unitriangular=True)]),
    ("triangular_solve", lambda m: [S(m.f((2, 2, 1)), m.square((2, 2))), S(m.f((2, 3)), m.square((2, 2), "transposed"),
                                                                            False, True)]),
    ("linalg_cholesky_ex", lambda m: [S(m.square((2, 2, 2), kind="spd")), S(m.square((2, 2), "transposed", "spd"),
                                                                             upper=True)]),
    ("cholesky", lambda m: [S(m.square((2, 2, 2), kind="spd")), S(m.square((2, 2), "transposed", "spd"), True)]),
    ("cholesky_solve", lambda m: [S(m.f((2, 2, 1)), m.square((2, 2), kind="spd").tril()),
                                  S(m.f((2, 3)), m.square((2, 2), kind="spd").triu(), True)]),
    ("cholesky_inverse", lambda m: [S(m.square((2, 2), kind="spd").tril()),
                                    S(m.square((2, 2, 2), kind="spd").triu(), True)]),
    ("linalg_lu_factor_ex", lambda m: [S(m.square((2, 2, 2))), S(m.f((3, 4), "transposed")), S(m.f((2, 2)),
                                                                                                 check_errors=True)]),
    ("lu", lambda m: [S(m.square((2, 2, 2))), S(m.f((4, 3)), True, True)]),
    ("linalg_ldl_factor_ex", lambda m: [S(m.square((2, 3, 3), kind="sym")), S(m.f((4, 4), "transposed"), hermitian=True),
                                        S(m.f((3, 3)), check_errors=True)]),
    ("linalg_ldl_solve", lambda m: [S(*m.ldl((3, 3)), m.f((3, 2))), S(*m.ldl((2, 3, 3)), m.f((3, 1), "transposed"))]),
    ("lu_unpack", _lu_unpack),
    ("lu_solve", lambda m: [S(m.f((2, 2, 1)), *m.lu((2, 2))), S(m.f((2, 3)), *m.lu((2, 2, 2)))]),
    ("linalg_qr", _decomposition()),
    ("qr", lambda m: [S(m.f((2, 3, 2))), S(m.f((3, 3), "transposed"), False)]),
    ("geqrf", lambda m: [S(m.f((2, 3, 2))), S(m.f((3, 2), "strided"))]),
    ("orgqr linalg_householder_product", _householder),
    ("ormqr", _ormqr),
    # (full U and Vh of a rectangular matrix have columns without a gradient: square ones only)
    ("_linalg_svd", lambda m: [S(m.f((2, 3, 2))), S(m.square((3, 3), "transposed"), True),
                               S(m.f((2, 3)), False, False)]),
    ("svd", lambda m: [S(m.f((2, 3, 2))), S(m.f((2, 3), "transposed")), S(m.square((3, 3)), False), S(m.f((3, 2)), True,
                                                                                                      False)]),
    ("_linalg_eigh", lambda m: [S(m.square((2, 2, 2), kind="sym")), S(m.square((3, 3), "transposed", "sym"), "U"),
                                S(m.square((3, 3), kind="sym"), "L", False)]),
    ("linalg_pinv.atol_rtol_float", lambda m: [S(m.f((2, 3, 2))), S(m.f((2, 3), "transposed"), rtol=1e-3),
                                               S(m.square((2, 2), kind="sym"), atol=1e-3, hermitian=True)]),
    ("pinverse", lambda m: [S(m.f((3, 2))), S(m.f((2, 2, 3), "transposed"), 1e-3)]),
    ("_lu_permutation", lambda m: [S(m.lu((2, 2, 2))[1], 3, m.dtype),
                                   S(jt.tensor([3, 3], dtype=jt.int32), 4, jt.int64)]),
    ("linalg_lstsq", lambda m: [S(m.f((2, 3, 2)), m.f((2, 3, 1))), S(m.square((2, 2), "transposed"), m.f((2,)))]),
    ("_linalg_lstsq", lambda m: [S(m.f((4, 2), "transposed"), m.f((4,))), S(m.f((4, 2)), m.f((4, 1)), driver="gelsd")]),
    ("allclose", _close),
    ("equal", _equal),
    # random
    ("rand randn", lambda m: [S((2, 3), generator=m.gen()), S((), generator=m.gen(), dtype=m.dtype),
                              S((0, 2), generator=m.gen())]),
    ("rand_like randn_like", lambda m: [S(m.mat(), generator=m.gen()), S(m.scalar(), generator=m.gen(),
                                                                          dtype=jt.float64)]),
    ("randint", lambda m: [S(10, (2, 3), generator=m.gen()), S(3, (), generator=m.gen(), dtype=jt.int32)]),
    ("randint.low", lambda m: [S(-5, 5, (4,), generator=m.gen()), S(0, 2, (2, 2), generator=m.gen(), dtype=m.dtype)]),
    ("randint_like", lambda m: [S(m.mat(), 10, generator=m.gen()), S(m.i((3,)), 5, generator=m.gen())]),
    ("randint_like.low", lambda m: [S(m.mat(), -3, 3, generator=m.gen()), S(m.i((3,)), 1, 4, generator=m.gen())]),
    ("randperm", lambda m: [S(5, generator=m.gen()), S(0, generator=m.gen()), S(4, generator=m.gen(), dtype=jt.int32)]),
    ("normal.Tensor_Tensor", lambda m: [S(m.mat(), m.f((4,), low=0.1, high=2.0), generator=m.gen()),
                                        S(m.scalar(), m.f((2,), low=0.1, high=2.0), generator=m.gen())]),
    ("normal.Tensor_float", lambda m: [S(m.mat(), 0.5, generator=m.gen()), S(m.scalar(), generator=m.gen())]),
    ("normal.float_Tensor", lambda m: [S(1.0, m.f((2, 3), "transposed", low=0.1, high=2.0), generator=m.gen()),
                                       S(-2.0, m.f((), low=0.1, high=2.0), generator=m.gen())]),
    ("normal.float_float", lambda m: [S(0.0, 1.0, (2, 3), generator=m.gen()),
                                      S(1.0, 2.0, (), generator=m.gen(), dtype=m.dtype)]),
    ("bernoulli", lambda m: [S(m.prob((3, 4), "transposed"), generator=m.gen()), S(m.prob(()), generator=m.gen())]),
    ("bernoulli.p", lambda m: [S(m.mat(), 0.3, generator=m.gen()), S(m.i((3,)), 0.5, generator=m.gen())]),
    ("bernoulli.Tensor_", lambda m: [S(m.mat(), m.prob((3, 4)), generator=m.gen()),
                                     S(m.f((2, 3)), m.prob((3,)), generator=m.gen())]),
    ("bernoulli.float_", lambda m: [S(m.mat(), generator=m.gen()), S(m.i((3,)), 0.2, generator=m.gen())]),
    ("multinomial", lambda m: [S(m.prob((4,), "strided"), 2, generator=m.gen()),
                               S(m.prob((2, 5)), 3, True, generator=m.gen())]),
    ("normal.inplace", _random_fill(1.0, 2.0)),
    ("uniform", _random_fill(-2.0, 3.0)),
    ("exponential", _random_fill(2.0)),
    ("cauchy", _random_fill(1.0, 2.0)),
    ("log_normal", _random_fill(0.5, 0.3)),
    ("geometric", lambda m: [S(m.mat(), 0.3, generator=m.gen()), S(m.i((3,)), 0.5, generator=m.gen())]),
    ("poisson", lambda m: [S(m.f((3, 4), "transposed", low=0.0, high=5.0), generator=m.gen()),
                           S(m.f((), low=0.1, high=2.0), generator=m.gen())]),
    ("binomial", lambda m: [S(m.f((2, 3), low=0.0, high=9.0), m.prob((2, 3)), generator=m.gen()),
                            S(m.f((3,), low=0.0, high=4.0), m.prob(()), generator=m.gen())]),
    ("random", lambda m: [S(m.mat(), generator=m.gen()), S(m.i((3,)), generator=m.gen())]),
    ("random.from_to", lambda m: [S(m.mat(), 0, 10, generator=m.gen()), S(m.i((3,)), -5, None, generator=m.gen())]),
    ("random.to", lambda m: [S(m.mat(), 10, generator=m.gen()), S(m.i((3,)), 3, generator=m.gen())]),
)


# Scans, statistics, lookups, arrangements, diagonals and selections (jitorch/ops/scans.py ... windows.py) ----

def _running(m):
    """cummax, cummin: distinct values (a tie's index is a choice), ints and bools, a 0-d and an empty input."""
    return [S(m.mat(), 1), S(m.cube(), 0), S(m.scalar(), 0), S(m.i((2, 3)), -1), S(m.b((4,)), 0), S(m.f((0, 3)), 0)]


def _sorted_boundaries(m, n):
    return jt.tensor(np.sort(m.rng.choice(np.arange(-20, 20), n, replace=False)) / 4, dtype=m.dtype)


def _window_samples(*extra):
    return lambda m: [S(5), S(8, False, *extra), S(1), S(0, dtype=jt.float64), S(6, dtype=m.dtype)]


def _rnn_layer_args(m):
    """Arguments of ``_rnn_layer`` (mode, input projection, hx, cx, w_hh, b_hh, w_hr, reverse): every mode, a
    strided input projection, LSTM with a projection, GRU without bias, one step and reversed ones."""
    return [("RNN_TANH", m.f((3, 2, 4), "strided"), m.f((2, 4)), None, m.f((4, 4)), m.f((4,)), None, False),
            ("RNN_RELU", m.f((2, 3, 3)), m.f((3, 3)), None, m.f((3, 3), "transposed"), None, None, True),
            ("LSTM", m.f((3, 2, 12)), m.f((2, 3)), m.f((2, 3)), m.f((12, 3)), m.f((12,)), None, True),
            ("LSTM", m.f((1, 2, 8)), m.f((2, 1)), m.f((2, 2)), m.f((8, 1)), m.f((8,)), m.f((1, 2)), False),
            ("GRU", m.f((3, 1, 6), "transposed"), m.f((1, 2)), None, m.f((6, 2)), None, None, False),
            ("GRU", m.f((2, 2, 9)), m.f((2, 3)), None, m.f((9, 3)), m.f((9,)), None, True)]


def _rnn_backward_samples(m):
    """Gradients of the outputs of each `_rnn_layer_args` sample, with its forward's output and reserve."""
    out = []
    for mode, x, hx, cx, w_hh, b_hh, w_hr, reverse in _rnn_layer_args(m):
        output, h_n, c_n, reserve = registry.OPS["_rnn_layer"](mode, x, hx, cx, w_hh, b_hh, w_hr, reverse)
        out.append(S(mode, m.f(tuple(output.shape)), m.f(tuple(h_n.shape)), m.f(tuple(c_n.shape)), hx, cx, w_hh, w_hr,
                     output, reserve, reverse))
    return out


def _attention_args(m):
    """Arguments of ``_attention`` (query, key, value, attn_mask, is_causal, scale): causal with more queries
    than keys (every row keeps key 0) and strided, transposed keys and values; fewer queries than keys with an
    additive mask broadcast over the batch; one tile of no batch dims with keys repeated (stride 0); a bool
    mask broadcast over the heads; no queries at all."""
    return [(m.f((2, 2, 5, 3)), m.f((2, 2, 4, 3), "strided"), m.f((2, 2, 4, 3), "transposed"), None, True, 0.5),
            (m.f((2, 3, 4)), m.f((2, 6, 4)), m.f((2, 6, 4)), m.f((3, 6)), False, 0.3),
            (m.f((4, 8)), m.f((4, 8), "expanded"), m.f((4, 8)), None, True, 1.0),
            (m.f((2, 2, 5, 3)), m.f((2, 2, 7, 3)), m.f((2, 2, 7, 3)), m.b((2, 1, 5, 7)), False, 0.5),
            (m.f((2, 0, 3)), m.f((2, 2, 3)), m.f((2, 2, 3)), None, False, 0.5)]


def _attention_backward_samples(m):
    """The output's gradient with each `_attention_args` sample and its forward's reserve; the scores'
    gradient asked for where the sample has a mask."""
    out = []
    for q, k, v, mask, causal, scale in _attention_args(m):
        _, reserve = registry.OPS["_attention"](q, k, v, mask, causal, scale)
        out.append(S(m.f(tuple(q.shape)), q, k, v, reserve, causal, scale, mask is not None))
    return out


def _ctc_args(m):
    """Arguments of ``_ctc_loss`` (log_probs, targets, input_lengths, target_lengths, blank, zero_infinity): padded
    targets with a repeated label and transposed log-probabilities, concatenated targets with another blank, an
    empty target and an empty input."""
    lengths = functools.partial(jt.tensor, dtype=jt.int64)
    repeated = jt.tensor([[1, 1, 2], [3, 1, 0]])
    return [(m.f((6, 2, 4), "transposed"), repeated, lengths([6, 5]), lengths([3, 2]), 0, False),
            (m.f((5, 3, 4)), m.idx((5,), 3), lengths([5, 4, 3]), lengths([2, 0, 3]), 3, True),
            (m.f((3, 2, 3)), jt.tensor([[1, 2]]).expand(2, 2), lengths([0, 3]), lengths([0, 1]), 0, False)]


def _ctc_backward_samples(m):
    """Each `_ctc_args` sample with a gradient of its losses and the losses."""
    return [S(m.f((args[0].shape[1],)), *args[:4], registry.OPS["_ctc_loss"](*args), *args[4:])
            for args in _ctc_args(m)]


SHAPES_AND_STATISTICS = _by_names(
    ("cummax cummin", _running),
    ("logcumsumexp", lambda m: [S(m.mat(), 1), S(m.cube(), 0), S(m.scalar(), 0), S(m.f((0, 3)), 1)]),
    ("diff", lambda m: [S(m.mat()), S(m.cube(), 2, 0), S(m.f((3, 4)), 1, 1, m.f((3, 1)), m.i((3, 2))),
                        S(m.b((5,))), S(m.i((4,)), 0)]),
    ("gradient", lambda m: [S(m.mat()), S(m.cube(), spacing=[0.5, 2.0], dim=[0, 2]),
                            S(m.f((5,)), spacing=[jt.tensor([0.0, 1.0, 3.0, 3.5, 5.0], dtype=m.dtype)], edge_order=2),
                            S(m.i((3, 4)), dim=1)]),
    ("trapezoid.x trapz.x", lambda m: [S(m.mat(), jt.tensor([0.0, 1.0, 2.5, 3.0], dtype=m.dtype)),
                                       S(m.cube(), m.f((2, 3, 4)), dim=0), S(m.f((0, 3)), m.f((3,)))]),
    ("cumulative_trapezoid.x", lambda m: [S(m.mat(), jt.tensor([0.0, 1.0, 2.5, 3.0], dtype=m.dtype)),
                                          S(m.cube(), m.f((3, 1)), dim=1)]),
    ("trapezoid.dx trapz.dx cumulative_trapezoid.dx", lambda m: [S(m.mat()), S(m.cube(), dx=0.5, dim=0),
                                                                 S(m.i((2, 3)), dim=1), S(m.f((0, 3)))]),
    ("aminmax", lambda m: [S(m.mat()), S(m.cube(), dim=1, keepdim=True), S(m.scalar()), S(m.i((2, 3)), dim=-1)]),
    ("mode", lambda m: [S(m.i((3, 5), low=0, high=2)), S(m.mat(), 0, True), S(m.scalar()), S(m.b((2, 3)), 1)]),
    ("nanmedian.dim", _values_indices),
    ("nanmedian", lambda m: [S(m.mat()), S(m.scalar()), S(m.i((2, 3)))]),
    ("msort", lambda m: [S(m.mat()), S(m.i((3,))), S(m.scalar())]),
    ("quantile nanquantile", lambda m: [S(m.mat(), jt.tensor([0.2, 0.5], dtype=m.dtype)),
                                        S(m.cube(), jt.tensor(0.7, dtype=m.dtype), 1, True, interpolation="lower")]
     * (m.dtype in (jt.float32, jt.float64))),
    ("quantile.scalar nanquantile.scalar", lambda m: [S(m.mat(), 0.3), S(m.cube(), 0.25, -1, interpolation="midpoint"),
                                                      S(m.scalar(), 0.5, 0, True, interpolation="nearest")]
     * (m.dtype in (jt.float32, jt.float64))),
    ("cov", lambda m: [S(m.mat()), S(m.f((5,))), S(m.f((2, 4)), correction=0, fweights=m.idx((4,), 3) + 1,
                                                    aweights=m.prob((4,)) + 0.1), S(m.i((2, 3)))]),
    ("corrcoef", lambda m: [S(m.mat()), S(m.i((2, 4))), S(m.f((4,)))]),
    ("searchsorted.Tensor", lambda m: [S(_sorted_boundaries(m, 6), m.mat()),
                                       S(_sorted_boundaries(m, 6), m.f((5,)), right=True, out_int32=True),
                                       S(jt.stack([_sorted_boundaries(m, 4) for _ in range(3)]), m.f((3, 2)),
                                         side="right"),
                                       S(m.i((5,)), m.i((3,)), sorter=m.i((5,)).argsort())]),
    ("searchsorted.Scalar", lambda m: [S(_sorted_boundaries(m, 6), 0.5), S(m.i((4,)).sort().values, 2, right=True)]),
    ("bucketize.Tensor", lambda m: [S(m.mat(), _sorted_boundaries(m, 5)), S(m.i((2, 3)), m.i((4,)).sort().values,
                                                                             right=True)]),
    ("bucketize.Scalar", lambda m: [S(0.5, _sorted_boundaries(m, 5)), S(3, m.i((4,)).sort().values, out_int32=True)]),
    ("isin.Tensor_Tensor", lambda m: [S(m.i((3, 4), low=0, high=6), m.i((3,), low=0, high=6)),
                                      S(m.i((5,)), m.i((2, 2)), invert=True), S(m.mat(), m.f((3,)))]),
    ("isin.Tensor_Scalar", lambda m: [S(m.i((3, 4), low=0, high=3), 1), S(m.mat(), 0.5, invert=True)]),
    ("isin.Scalar_Tensor", lambda m: [S(2, m.i((4,), low=0, high=3)), S(1.5, m.mat())]),
    ("unique_consecutive _unique_consecutive",
     lambda m: [S(m.i((8,), low=0, high=2)), S(m.i((3, 4), low=0, high=1), True, True),
                S(m.i((4, 2), low=0, high=1), True, True, 0), S(m.f((0, 3)))]),
    ("_check_values", lambda m: [S([m.prob((3,))], "probabilities", []), S([m.idx((4,), 5)], "class_targets", [5, -100]),
                                 S([m.mat(), m.idx((2,), 3)], "op", ["index_select", [None, 0, None], [[0], [2]]])]),
    ("bincount", lambda m: [S(m.idx((6,), 4)), S(m.idx((5,), 3), m.f((5,)), 6), S(m.idx((0,), 1))]),
    ("histc", lambda m: [S(m.mat()), S(m.f((10,)), 4, -1, 1), S(m.f((0,)), 3)]),
    ("histogram.bins_tensor", lambda m: [S(m.mat(), jt.tensor([-2.0, 0.0, 0.5, 3.0], dtype=m.dtype)),
                                         S(m.f((6,)), jt.tensor([-1.0, 1.0], dtype=m.dtype), weight=m.prob((6,)),
                                           density=True)] * (m.dtype in (jt.float32, jt.float64))),
    ("histogram.bin_ct", lambda m: [S(m.mat(), 4), S(m.f((10,)), 3, range=[-1.0, 1.0], weight=m.prob((10,)),
                                                      density=True)] * (m.dtype in (jt.float32, jt.float64))),
    ("_histogramdd_edges", lambda m: [S(m.mat(), 1, 3), S(m.f((6, 2), "strided"), 0, 2, -1.0, 1.0),
                                      S(m.f((0, 2)), 1, 4)] * (m.dtype in (jt.float32, jt.float64))),
    ("_histogramdd_from_bin_tensors _histogramdd_from_bin_cts",
     lambda m: [S(m.mat(), [jt.tensor(e, dtype=m.dtype) for e in ([-2.0, 0.0, 3.0], [-1.0, 1.0], [0.0, 0.5, 1.0, 2.0],
                                                                    [-3.0, 3.0])]),
                S(m.f((5, 2), "strided"), [jt.tensor([-1.0, 0.0, 1.0], dtype=m.dtype)] * 2, weight=m.prob((5,)),
                  density=True)] * (m.dtype in (jt.float32, jt.float64))),
    ("histogramdd", lambda m: [S(m.mat(), 2), S(m.f((6, 2)), [3, 2], [-1.0, 1.0, 0.0, 2.0], m.prob((6,)), True),
                               S(m.f((5, 1)), [jt.tensor([-1.0, 0.0, 2.0], dtype=m.dtype)])]
     * (m.dtype in (jt.float32, jt.float64))),
    ("hash_tensor", lambda m: [S(m.mat()), S(m.cube(), 1, keepdim=True), S(m.i((2, 3)), (0, 1)), S(m.b((4,)), 0),
                               S(m.f((2, 0)), 0)]),
    ("atleast_1d atleast_2d atleast_3d", lambda m: [S([m.scalar()]), S([m.f((3,), "strided"), m.mat()]),
                                                     S([m.cube()]), S([m.i((2, 3))])]),
    ("ravel", lambda m: [S(m.mat()), S(m.scalar()), S(m.i((2, 3)))]),
    ("adjoint", lambda m: [S(m.mat()), S(m.cube())]),
    ("conj conj_physical resolve_conj resolve_neg real positive",
     lambda m: [S(m.mat()), S(m.scalar()), S(m.i((2, 3)))]),
    ("sum_to_size", lambda m: [S(m.mat(), (1, 4)), S(m.cube(), (3, 1)), S(m.i((2, 3)), (2, 3)), S(m.f((2, 3)), (3,))]),
    ("rot90", lambda m: [S(m.mat()), S(m.cube(), 2, (2, 0)), S(m.i((2, 3)), -1), S(m.f((2, 2)), 4)]),
    ("tensor_split.sections", lambda m: [S(m.f((7, 2), "transposed"), 3), S(m.cube(), 2, -1)]),
    ("tensor_split.indices", lambda m: [S(m.f((7, 2)), (1, 5)), S(m.cube(), (3, 1), 2)]),
    ("tensor_split.tensor_indices_or_sections", lambda m: [S(m.f((7,)), jt.tensor(3)), S(m.mat(), jt.tensor([1]), 1)]),
    ("hsplit.int", lambda m: [S(m.f((3, 4), "transposed"), 2), S(m.f((6,)), 3)]),
    ("hsplit.array vsplit.array", lambda m: [S(m.mat(), (1, 2)), S(m.cube(), (1,))]),
    ("vsplit.int", lambda m: [S(m.f((4, 3), "transposed"), 2), S(m.i((3, 2)), 3)]),
    ("dsplit.int", lambda m: [S(m.cube(), 2), S(m.i((1, 2, 3)), 1)]),
    ("dsplit.array", lambda m: [S(m.cube(), (1, 3)), S(m.i((1, 1, 2)), (0,))]),
    ("meshgrid", lambda m: [S([m.f((3,)), m.f((2,), "strided")], indexing="ij"),
                            S([m.f((2,)), m.f((3,)), m.scalar()], indexing="xy"), S([m.i((4,))], indexing="ij")]),
    ("cartesian_prod", lambda m: [S([m.f((3,)), m.f((2,), "strided")]), S([m.i((2,)), m.i((2,)), m.i((3,))])]),
    ("combinations", lambda m: [S(m.f((4,))), S(m.f((3,), "strided"), 3, True), S(m.i((3,)), 1)]),
    ("block_diag", lambda m: [S([m.mat(), m.f((2,)), m.scalar()]), S([m.i((2, 2)), m.f((0, 2))])]),
    ("diag", lambda m: [S(m.f((3,), "strided")), S(m.mat(), 1), S(m.i((3,)), -2)]),
    ("diagflat", lambda m: [S(m.mat()), S(m.scalar(), 1)]),
    ("diag_embed", lambda m: [S(m.mat()), S(m.cube(), 1, 0, 2), S(m.i((3,)), -1)]),
    ("diagonal_scatter", lambda m: [S(m.mat(), m.f((3,))), S(m.cube(), m.f((4, 2)), 1, 0, 1)]),
    ("select_scatter", lambda m: [S(m.mat(), m.f((4,)), 0, 1), S(m.cube(), m.f((2, 4)), 1, -1)]),
    ("slice_scatter", lambda m: [S(m.mat(), m.f((1, 4)), 0, 1, 2), S(m.cube(), m.f((2, 3, 2)), 2, None, None, 2),
                                 S(m.i((5,)), m.i((2,)), 0, -2)]),
    ("fill_diagonal", lambda m: [S(m.mat(), 2.5), S(m.f((5, 2)), -1, True), S(m.f((2, 2, 2)), 1)]),
    ("tril_indices triu_indices", lambda m: [S(3, 4), S(4, 2, -1, dtype=jt.int32), S(0, 3)]),
    ("vander", lambda m: [S(m.f((3,), "strided")), S(m.i((4,)), 2, True), S(m.f((2,)), 0)]),
    ("take_along_dim", lambda m: [S(m.mat(), m.idx((2, 4), 3), 0), S(m.cube(), m.idx((1, 3, 2), 4), -1),
                                  S(m.f((3,)), m.idx((5,), 3))]),
    ("masked_scatter", lambda m: [S(m.mat(), m.b((3, 4)), m.f((12,))), S(m.f((3, 1)), m.b((1, 4)), m.f((3, 5))),
                                  S(m.i((2, 3)), m.b((3,)), m.i((7,)))]),
    ("index_reduce", lambda m: [S(m.mat(), 1, m.distinct(2, 4), m.f((3, 2)), "prod"),
                                S(m.cube(), 0, m.idx((3,), 2), m.f((3, 3, 4)), "mean", include_self=False),
                                S(m.i((5,)), 0, m.idx((3,), 5), m.i((3,)), "amax")]),
    ("unravel_index", lambda m: [S(m.idx((2, 3), 24), (2, 3, 4)), S(m.idx((), 5), (5,))]),
    ("cdist", lambda m: [S(m.mat(), m.f((2, 4))), S(m.cube(), m.f((1, 5, 4)), 1.0), S(m.f((3, 2)), m.f((2, 2)), 3.0)]),
    ("renorm", lambda m: [S(m.mat(), 2, 0, 1.0), S(m.cube(), 1, 2, 2.0)]),
    ("hann_window blackman_window bartlett_window", _window_samples()),
    ("hamming_window", _window_samples(0.5, 0.4)),
    ("kaiser_window", _window_samples(6.0)),
    ("_rnn_layer", lambda m: [S(*args) for args in _rnn_layer_args(m)]),
    ("_rnn_layer_backward", _rnn_backward_samples),
    ("_attention", lambda m: [S(*args) for args in _attention_args(m)]),
    ("_attention_backward", _attention_backward_samples),
    ("_ctc_loss", lambda m: [S(*args) for args in _ctc_args(m)]),
    ("_log_softmax_stats", lambda m: [S(m.mat(), 1), S(m.cube(), -1), S(m.f((5, 3), "strided"), 0)]),
    ("_ctc_loss_backward", _ctc_backward_samples),
    ("linear", lambda m: [S(m.cube(), m.f((5, 4)), m.f((5,))), S(m.mat(), m.f((2, 4), "transposed")),
                          S(m.f((4,)), m.f((3, 4)), m.f(())), S(m.f((0, 4)), m.f((2, 4)), m.f((2,)))]),
    ("layer_norm", lambda m: [S(m.cube(), [4], m.f((4,)), m.f((4,))), S(m.mat(), [3, 4]), S(m.f((5, 3), "strided"), [3], None,
                                                                                    m.f((3,)), 1e-3),
                              S(m.cube(), [3, 4], m.f((3, 4)), eps=0.5), S(m.f((0, 3)), [3], m.f((3,)))]),
)


# The database -------------------------------------------------------------------------------

def _pointwise_builder(name, domain):
    return lambda m: _pointwise_samples(registry.OPS[name], domain, m)


def _builders():
    out = {}
    for name, op in registry.OPS.items():
        if op.kind == "pointwise" or name in POINTWISE_LIKE:
            out[name] = _pointwise_builder(name, DOMAINS.get(name, Domain()))
    overlap = set(out) & set(HAND_WRITTEN)
    if overlap:
        raise ValueError(f"ops both generated and hand-written: {sorted(overlap)}")
    out.update(HAND_WRITTEN)
    out.update(SHAPES_AND_STATISTICS)
    return out


def _with_maker(build):
    def builder(rng, dtype=jt.float32):
        return list(build(Maker(rng, dtype)))
    return builder


# op full name -> builder(rng, dtype=jitorch.float32) -> [Sample]
SAMPLES = {name: _with_maker(build) for name, build in _builders().items()}


def samples(op, dtype=jt.float32, seed=0):
    """The samples of ``op`` (an OpDef or its full name), floating tensors in ``dtype``; reproducible by ``seed``."""
    name = op if isinstance(op, str) else op.name
    return SAMPLES[name](np.random.default_rng(seed), dtype)


def missing_ops():
    """Registered ops without samples."""
    return sorted(set(registry.OPS) - set(SAMPLES))


def unknown_ops():
    """Sample builders naming no registered op (a renamed or removed op)."""
    return sorted(set(SAMPLES) - set(registry.OPS))
