"""Random number generation: Generator, seeding, and the random ops.

Every random op draws from a `Generator` (NumPy's PCG64 underneath): the one
passed as ``generator=``, else its device's default generator: the global
`default_generator` on the CPU, one per CUDA device (`device_generator`, what
``jitorch.cuda.manual_seed`` seeds), as torch keeps one per device. So
``manual_seed(s)``, which seeds them all, makes every op reproducible, and a
seed gives the same numbers on either device. The streams are jitorch's own:
seeded results are reproducible run to run but differ from torch's values.

Meta rules check sizes, dtypes and the Python-number arguments (bounds,
probabilities, standard deviations); checks that need the data (a probability
tensor's values) run in the kernel, before any output is written.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.device import current_cuda_index, to_device
from ..runtime.strided import broadcast_shapes
from ..runtime.summation import add_reduce
from .creation import LIKE_OPTIONS, OPTIONS, c_num, like_spec, like_strides, sized_spec
from .random_parts import random_doubles
from .registry import TensorSpec, cpp_name, defop, scalar_name

_SEED_MASK = (1 << 64) - 1
_DEFAULT_SEED = 67280421310721  # torch's default_rng_seed_val: every generator's seed until one is given


class Generator:
    """A random number generator, seeded and queried like ``torch.Generator``."""

    def __init__(self, device="cpu"):
        self.device = to_device(device)
        self.manual_seed(_DEFAULT_SEED)

    def manual_seed(self, seed):
        """Restart the stream from ``seed``; returns the generator."""
        seed = int(seed)
        self._seed = seed
        self.__dict__.pop("_rng", None)  # made from the seed at the first draw (`__getattr__`)
        return self

    def __getattr__(self, name):
        # Reached only while NumPy's generator is not made yet: `default_generator` exists from ``import
        # jitorch`` on, and numpy.random would be a tenth of that import's time (issue 19).
        if name != "_rng":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._rng = np.random.Generator(np.random.PCG64(self._seed & _SEED_MASK))
        return self._rng

    def seed(self):
        """Reseed from fresh entropy; returns the new seed."""
        s = fresh_seed()
        self.manual_seed(s)
        return s

    def initial_seed(self):
        return self._seed

    def get_state(self):
        return self._rng.bit_generator.state

    def set_state(self, state):
        self._rng.bit_generator.state = state
        return self


# A generator's state as bytes (torch's ByteTensor form): PCG64's 128-bit state and increment, its buffered
# 32-bit half (a flag and the value) and the seed initial_seed() reports
_STATE_FIELDS = ((16, "state"), (16, "inc"), (1, "has_uint32"), (4, "uinteger"), (8, "seed"))
STATE_SIZE = sum(n for n, _ in _STATE_FIELDS)


def state_bytes(gen):
    """``gen``'s state as ``STATE_SIZE`` bytes (a uint8 NumPy array)."""
    st = gen.get_state()
    values = {**st["state"], "has_uint32": st["has_uint32"], "uinteger": st["uinteger"], "seed": gen._seed & _SEED_MASK}
    raw = b"".join(int(values[k]).to_bytes(n, "little") for n, k in _STATE_FIELDS)
    return np.frombuffer(raw, dtype=np.uint8).copy()


def restore_state_bytes(gen, raw):
    """Put ``gen`` back in the state ``state_bytes`` gave (``raw``: bytes or a uint8 array)."""
    raw, values, at = bytes(raw), {}, 0
    for n, k in _STATE_FIELDS:
        values[k], at = int.from_bytes(raw[at:at + n], "little"), at + n
    gen._seed = values["seed"]
    gen.set_state({"bit_generator": "PCG64", "state": {"state": values["state"], "inc": values["inc"]},
                   "has_uint32": values["has_uint32"], "uinteger": values["uinteger"]})


def fresh_seed():
    """A seed from the operating system's entropy."""
    return int(np.random.SeedSequence().entropy) & ((1 << 63) - 1)


default_generator = Generator()

# The CUDA devices' default generators, by device index, made at their first use; a new one starts from the seed
# the last `manual_seed` or `seed` gave every device, as torch's lazily seeded CUDA generators do.
_device_generators: dict = {}
_device_seed = [_DEFAULT_SEED]


def device_generator(device):
    """The generator random ops on ``device`` draw from when given none."""
    if device.type != "cuda":
        return default_generator
    index = current_cuda_index() if device.index is None else device.index
    found = _device_generators.get(index)
    if found is None:
        found = _device_generators[index] = Generator(f"cuda:{index}").manual_seed(_device_seed[0])
    return found


def seed_devices(seed):
    """Seed every CUDA device's generator, those made later too, with ``seed``."""
    _device_seed[0] = int(seed)
    for gen in _device_generators.values():
        gen.manual_seed(seed)


def generator_states(extra=()):
    """A snapshot of the default generators (the CPU's and each CUDA device's) and of the ``extra``
    generators, for `replaying_generators` to draw the same numbers again."""
    gens = dict.fromkeys([default_generator, *_device_generators.values(), *extra])
    return [(gen, gen.get_state()) for gen in gens]


@contextlib.contextmanager
def replaying_generators(snapshot):
    """Within: the generators of ``snapshot`` (from `generator_states`) draw again from the states it
    holds; after: they continue from where they were, as if nothing had been drawn (torch's checkpoint
    keeps the RNG state so, for a recomputed forward to draw its dropout masks again)."""
    now = [(gen, gen.get_state()) for gen, _ in snapshot]
    for gen, state in snapshot:
        gen.set_state(state)
    try:
        yield
    finally:
        for gen, state in now:
            gen.set_state(state)


def manual_seed(seed):
    """Seed the default generator and every device's; returns the default generator."""
    found = default_generator.manual_seed(seed)
    seed_devices(seed)
    return found


def seed():
    """Seed the default generator and every device's from entropy; returns the seed."""
    s = default_generator.seed()
    seed_devices(s)
    return s


def initial_seed():
    """The seed the default generator was last seeded with."""
    return default_generator.initial_seed()


def rng(generator):
    """The NumPy generator behind ``generator`` (the default one when None)."""
    return (generator or default_generator)._rng


# Checks shared by the meta rules ------------------------------------------------------

def _check_generator(op_name, generator):
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"{op_name}(): argument 'generator' must be jitorch.Generator, "
                        f"not {type(generator).__name__}")


def _floating_only(kernel_name, dtype):
    if not dtype.is_floating_point:
        raise NotImplementedError(f'"{kernel_name}" not implemented for \'{scalar_name(dtype)}\'')


# Mantissa digits: integers up to 2**digits are exact in the floating dtype.
_DIGITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _value_range(dtype):
    """(lowest, max) values a dtype holds, as Python numbers."""
    if dtype.is_floating_point:
        info = _dt.finfo(dtype)
        return info.min, info.max
    return (0, 1) if dtype is _dt.bool else _dt.iinfo_range(dtype)


def _check_in_range(value, what, dtype):
    lo, hi = _value_range(dtype)
    if not lo <= value <= hi:
        raise RuntimeError(f"{what} is out of bounds for {cpp_name(dtype)}")


def _random_bounds(low, high, dtype):
    """torch's checks of an integer range ``[low, high)`` for ``dtype``."""
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    _check_in_range(low, "from", dtype)
    _check_in_range(high - 1, "to - 1", dtype)


def _check_std(std):
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {c_num(std)}")


def _check_p(p):
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={c_num(p)}")


def _check_expandable(shape, target):
    """torch's expand check: ``shape`` must broadcast to ``target`` unchanged."""
    if len(shape) > len(target):
        raise RuntimeError(f"expand: the number of sizes provided ({len(target)}) must be greater or equal to "
                           f"the number of dimensions in the tensor ({len(shape)})")
    off = len(target) - len(shape)
    for i in reversed(range(len(shape))):
        if shape[i] != 1 and shape[i] != target[off + i]:
            raise RuntimeError(
                f"The expanded size of the tensor ({target[off + i]}) must match the existing size ({shape[i]}) "
                f"at non-singleton dimension {off + i}.  Target sizes: {list(target)}.  "
                f"Tensor sizes: {list(shape)}")


# Samplers: NumPy arrays of a spec's shape ----------------------------------------------

def _uniform01(gen, shape, dtype):
    """Uniform in [0, 1), exact in ``dtype``: a random integer of the dtype's
    mantissa width, scaled, so rounding never reaches 1."""
    if dtype is _dt.float64:  # (in parts on the thread team where large: `random_parts`)
        return random_doubles(rng(gen), shape)
    if dtype is _dt.float32:
        return rng(gen).random(shape, dtype=np.float32)
    digits = _DIGITS[dtype.name]
    return rng(gen).integers(0, 1 << digits, size=shape) * 2.0 ** -digits


def _normal(gen, shape, dtype):
    return rng(gen).standard_normal(shape, dtype=np.float64 if dtype is _dt.float64 else np.float32)


def _integers(gen, shape, low, high):
    """Uniform integers in ``[low, high)`` (int64)."""
    return rng(gen).integers(low, high, size=shape, dtype=np.int64, endpoint=False)


_RANDOM = "Generator? generator=None"


# rand, randn and their _like forms -----------------------------------------------------

_FLOAT_FACTORIES = (
    # name, kernel name in torch's dtype error, sampler, what it draws
    ("rand", "check_uniform_bounds", _uniform01, "uniform on [0, 1)"),
    ("randn", "normal_kernel_cpu", _normal, "standard normal"),
)


def _float_factory(name, kernel_name, sampler, what):
    def sized_meta(size, generator, dtype, device, requires_grad):
        _check_generator(name, generator)
        spec = sized_spec(size, dtype, device)
        _floating_only(kernel_name, spec.dtype)
        return spec

    def like_meta(x, generator, dtype, device, requires_grad, fmt):
        _check_generator(f"{name}_like", generator)
        spec = like_spec(x, dtype, device, fmt, f"{name}_like")
        _floating_only(kernel_name, spec.dtype)
        return spec

    defop(f"{name}(int... size, *, {_RANDOM}, {OPTIONS}) -> Tensor", meta=sized_meta,
          cpu=lambda spec, size, gen, *a: sampler(gen, spec.shape, spec.dtype), kind="random",
          variants=("function",), doc=f"A tensor of the given size with {what} values.")
    defop(f"{name}_like(Tensor input, *, {_RANDOM}, {LIKE_OPTIONS}) -> Tensor", meta=like_meta,
          cpu=lambda spec, x, gen, *a: sampler(gen, spec.shape, spec.dtype), kind="random",
          variants=("function",), layout=like_strides,
          doc=f"A tensor with the shape (and dtype, device) of ``input`` with {what} values.")


for _entry in _FLOAT_FACTORIES:
    _float_factory(*_entry)


# randint, randint_like, randperm --------------------------------------------------------

def _randint_meta(low, high, size, generator, dtype, device, rg):
    _check_generator("randint", generator)
    spec = sized_spec(size, dtype, device, _dt.int64)
    _random_bounds(low, high, spec.dtype)
    return spec


def _randint_like_meta(x, low, high, generator, dtype, device, rg, fmt):
    _check_generator("randint_like", generator)
    spec = like_spec(x, dtype, device, fmt, "randint_like")
    _random_bounds(low, high, spec.dtype)
    return spec


_RANDINT_DOC = "Uniform random integers in ``[low, high)`` (``low`` 0 unless given); int64 unless ``dtype``."
defop(f"randint(int high, int[] size, *, {_RANDOM}, {OPTIONS}) -> Tensor",
      meta=lambda high, size, *rest: _randint_meta(0, high, size, *rest),
      cpu=lambda spec, high, size, gen, *a: _integers(gen, spec.shape, 0, high), kind="random",
      variants=("function",), doc=_RANDINT_DOC)
defop(f"randint.low(int low, int high, int[] size, *, {_RANDOM}, {OPTIONS}) -> Tensor", meta=_randint_meta,
      cpu=lambda spec, low, high, size, gen, *a: _integers(gen, spec.shape, low, high), kind="random",
      variants=("function",), doc=_RANDINT_DOC)
_RANDINT_LIKE_DOC = "Uniform random integers in ``[low, high)`` with the shape (and dtype, device) of ``input``."
defop(f"randint_like(Tensor input, int high, *, {_RANDOM}, {LIKE_OPTIONS}) -> Tensor",
      meta=lambda x, high, *rest: _randint_like_meta(x, 0, high, *rest),
      cpu=lambda spec, x, high, gen, *a: _integers(gen, spec.shape, 0, high), kind="random",
      variants=("function",), layout=like_strides, doc=_RANDINT_LIKE_DOC)
defop(f"randint_like.low(Tensor input, int low, int high, *, {_RANDOM}, {LIKE_OPTIONS}) -> Tensor",
      meta=_randint_like_meta,
      cpu=lambda spec, x, low, high, gen, *a: _integers(gen, spec.shape, low, high), kind="random",
      variants=("function",), layout=like_strides, doc=_RANDINT_LIKE_DOC)

# The largest n whose permutation a floating dtype holds exactly, as torch words it.
_RANDPERM_FLOAT_LIMITS = {"float16": (2049, "2049"), "float32": (2 ** 24 + 1, "2^24+1"),
                          "float64": (2 ** 53 + 1, "2^53+1")}


def _randperm_meta(n, generator, dtype, device, rg):
    _check_generator("randperm", generator)
    spec = sized_spec((n,), dtype, device, _dt.int64)
    dtype = spec.dtype
    if dtype is _dt.bool:
        raise NotImplementedError("\"randperm\" not implemented for 'Bool'")
    if dtype.name in _RANDPERM_FLOAT_LIMITS:
        limit, text = _RANDPERM_FLOAT_LIMITS[dtype.name]
        if n > limit:
            raise RuntimeError(f"n cannot be greater than {text} for {scalar_name(dtype)} type.")
    elif not dtype.is_floating_point and n - 1 > _dt.iinfo_range(dtype)[1]:
        raise RuntimeError(f"value cannot be converted to type {_dt.C_NAMES[dtype.name]} without overflow")
    return spec


defop(f"randperm(int n, *, {_RANDOM}, {OPTIONS}) -> Tensor", meta=_randperm_meta,
      cpu=lambda spec, n, gen, *a: rng(gen).permutation(n), kind="random", variants=("function",),
      doc="A random permutation of ``0 .. n-1`` (int64 unless ``dtype``).")


# normal -----------------------------------------------------------------------------

def _normal_tensor_spec(dtype_of, shape, device):
    _floating_only("normal_kernel_cpu", dtype_of)
    return TensorSpec(shape, dtype_of, device)


def _normal_cpu(spec, mean, std, gen):
    if isinstance(std, np.ndarray) and not np.all(std >= 0.0):
        raise RuntimeError("normal expects all elements of std >= 0.0")
    z = _normal(gen, spec.shape, _dt.float64)
    return np.asarray(mean, dtype=np.float64) + np.asarray(std, dtype=np.float64) * z


def _normal_tt_meta(mean, std, generator):
    _check_generator("normal", generator)
    return _normal_tensor_spec(mean.dtype, broadcast_shapes(mean.shape, std.shape), mean.device)


def _normal_tf_meta(mean, std, generator):
    _check_generator("normal", generator)
    _check_std(std)
    return _normal_tensor_spec(mean.dtype, mean.shape, mean.device)


def _normal_ft_meta(mean, std, generator):
    _check_generator("normal", generator)
    return _normal_tensor_spec(std.dtype, std.shape, std.device)


def _normal_ff_meta(mean, std, size, generator, dtype, device, rg):
    _check_generator("normal", generator)
    _check_std(std)
    spec = sized_spec(size, dtype, device)
    _floating_only("normal_kernel_cpu", spec.dtype)
    return spec


_NORMAL_DOC = ("Normal samples with the given ``mean`` and ``std`` (tensors broadcast together; the result "
               "takes the dtype of the tensor mean, else of the tensor std).")
defop("normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None) -> Tensor",
      meta=_normal_tt_meta, cpu=_normal_cpu, kind="random", variants=("function",), doc=_NORMAL_DOC)
defop("normal.Tensor_float(Tensor mean, float std=1, *, Generator? generator=None) -> Tensor",
      meta=_normal_tf_meta, cpu=_normal_cpu, kind="random", variants=("function",), doc=_NORMAL_DOC)
defop("normal.float_Tensor(float mean, Tensor std, *, Generator? generator=None) -> Tensor",
      meta=_normal_ft_meta, cpu=_normal_cpu, kind="random", variants=("function",), doc=_NORMAL_DOC)
defop(f"normal.float_float(float mean, float std, int[] size, *, {_RANDOM}, {OPTIONS}) -> Tensor",
      meta=_normal_ff_meta, cpu=lambda spec, mean, std, size, gen, *a: _normal_cpu(spec, mean, std, gen),
      kind="random", variants=("function",), doc=_NORMAL_DOC)


# bernoulli, multinomial ------------------------------------------------------------

def _check_probabilities(p):
    if not np.all((p >= 0) & (p <= 1)):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
                           "message be improved?  If so, please report an enhancement request to PyTorch.)")


def _bernoulli_cpu(spec, x, p, gen):
    """Ones with probability ``p`` (a float, or an array broadcast to the output)."""
    if isinstance(p, np.ndarray):
        _check_probabilities(p)
        p = np.broadcast_to(p.astype(np.float64), spec.shape)
    return _uniform01(gen, spec.shape, _dt.float64) < p


def _bernoulli_meta(x, generator):
    _check_generator("bernoulli", generator)
    _floating_only("bernoulli_tensor_cpu_p_", x.dtype)
    return TensorSpec(x.shape, x.dtype, x.device)


def _bernoulli_p_meta(x, p, generator):
    _check_generator("bernoulli", generator)
    _check_p(p)
    return TensorSpec(x.shape, x.dtype, x.device)


def _bernoulli_inplace_tensor_meta(x, p, generator):
    _check_generator("bernoulli_", generator)
    _floating_only("bernoulli_tensor_cpu_p_", p.dtype)
    _check_expandable(p.shape, x.shape)
    return TensorSpec(x.shape, x.dtype, x.device)


defop("bernoulli(Tensor input, *, Generator? generator=None) -> Tensor", meta=_bernoulli_meta,
      cpu=lambda spec, x, gen: _bernoulli_cpu(spec, x, x, gen), kind="random", variants=("function", "method"),
      doc="Ones with probability ``input`` (elementwise, in [0, 1]), else zeros, in ``input``'s dtype.")
defop("bernoulli.p(Tensor input, float p, *, Generator? generator=None) -> Tensor", meta=_bernoulli_p_meta,
      cpu=_bernoulli_cpu, kind="random", variants=("function", "method"),
      doc="Ones with probability ``p``, else zeros, with the shape and dtype of ``input``.")
defop("bernoulli.Tensor_(Tensor self, Tensor p, *, Generator? generator=None) -> Tensor",
      meta=_bernoulli_inplace_tensor_meta, cpu=_bernoulli_cpu, kind="random", variants=("inplace",),
      doc="``x.bernoulli_(p)`` fills ``x`` with ones with probability ``p`` (a tensor or a float).")
defop("bernoulli.float_(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor",
      meta=_bernoulli_p_meta, cpu=_bernoulli_cpu, kind="random", variants=("inplace",),
      doc="``x.bernoulli_(p)`` fills ``x`` with ones with probability ``p`` (a tensor or a float).")


def _multinomial_meta(x, num_samples, replacement, generator):
    _check_generator("multinomial", generator)
    if x.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {scalar_name(x.dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    categories = x.shape[-1]
    if not replacement and num_samples > categories:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if categories > 2 ** 24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    return TensorSpec(x.shape[:-1] + (num_samples,), _dt.int64, x.device)


def _multinomial_cpu(spec, x, num_samples, replacement, gen):
    probs = np.atleast_2d(x.astype(np.float64))
    if not np.all(np.isfinite(probs) & (probs >= 0)):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    totals = add_reduce(probs, -1)
    if not np.all(totals > 0):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    g = rng(gen)
    if replacement:
        cdf = np.cumsum(probs, axis=-1)
        u = g.random((len(probs), num_samples)) * cdf[:, -1:]
        out = np.stack([np.searchsorted(c, row, side="right") for c, row in zip(cdf, u)])
        out = np.minimum(out, probs.shape[-1] - 1)
    else:
        # Without replacement: the ``num_samples`` largest p / Exp(1) keys (the
        # exponential race torch uses); zero-probability categories come last.
        keys = probs / g.standard_exponential(probs.shape)
        out = np.argsort(-keys, axis=-1, kind="stable")[:, :num_samples]
    return out.reshape(spec.shape)


defop("multinomial(Tensor input, int num_samples, bool replacement=False, *, Generator? generator=None) -> Tensor",
      meta=_multinomial_meta, cpu=_multinomial_cpu, kind="random", variants=("function", "method"),
      doc="Indices drawn from the categorical distribution in each row of ``input`` (weights, not necessarily "
          "normalised), with or without ``replacement``.")


# In-place initialisers: normal_, uniform_, exponential_, random_ -----------------------------

def _inplace_spec(x):
    return TensorSpec(x.shape, x.dtype, x.device)


def _normal_inplace_meta(x, mean, std, generator):
    _check_generator("normal_", generator)
    _floating_only("normal_kernel_cpu", x.dtype)
    _check_std(std)
    return _inplace_spec(x)


def _uniform_meta(x, low, high, generator):
    _check_generator("uniform_", generator)
    _floating_only("check_uniform_bounds", x.dtype)
    _check_in_range(low, "from", x.dtype)
    _check_in_range(high, "to", x.dtype)
    if low > high:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={c_num(low)} > "
                           f"to={c_num(high)}")
    return _inplace_spec(x)


def _exponential_meta(x, lambd, generator):
    _check_generator("exponential_", generator)
    if not x.dtype.is_floating_point:
        raise RuntimeError("Exponential distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {scalar_name(x.dtype)}")
    if not lambd > 0.0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={c_num(lambd)}")
    return _inplace_spec(x)


defop("normal.inplace(Tensor self, float mean=0, float std=1, *, Generator? generator=None) -> Tensor",
      meta=_normal_inplace_meta, kind="random", variants=("inplace",),
      cpu=lambda spec, x, mean, std, gen: mean + std * _normal(gen, spec.shape, spec.dtype),
      doc="``x.normal_(mean, std)`` fills ``x`` with normal samples.")
defop("uniform(Tensor self, float from_=0, float to=1, *, Generator? generator=None) -> Tensor",
      meta=_uniform_meta, kind="random", variants=("inplace",),
      cpu=lambda spec, x, low, high, gen: low + (high - low) * _uniform01(gen, spec.shape, spec.dtype),
      doc="``x.uniform_(from, to)`` fills ``x`` with samples uniform on ``[from, to)``.")
defop("exponential(Tensor self, float lambd=1, *, Generator? generator=None) -> Tensor",
      meta=_exponential_meta, kind="random", variants=("inplace",),
      cpu=lambda spec, x, lambd, gen: rng(gen).standard_exponential(spec.shape) / lambd,
      doc="``x.exponential_(lambd)`` fills ``x`` with exponential samples of rate ``lambd``.")


def _cauchy_meta(x, median, sigma, generator):
    _check_generator("cauchy_", generator)
    if not x.dtype.is_floating_point:
        raise RuntimeError("Cauchy distribution is a continuous probability distribution. dtype must be a floating "
                           f"point but you specified {cpp_name(x.dtype)}")
    if not sigma > 0.0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={c_num(sigma)}")
    return _inplace_spec(x)


def _log_normal_meta(x, mean, std, generator):
    _check_generator("log_normal_", generator)
    _floating_only("log_normal_cpu", x.dtype)
    if not std > 0.0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={c_num(std)}")
    return _inplace_spec(x)


def _geometric_meta(x, p, generator):
    _check_generator("geometric_", generator)
    if x.dtype is _dt.bool:
        raise NotImplementedError("\"geometric_cpu\" not implemented for 'Bool'")
    if not 0.0 < p < 1.0:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={c_num(p)}")
    return _inplace_spec(x)


defop("cauchy(Tensor self, float median=0, float sigma=1, *, Generator? generator=None) -> Tensor",
      meta=_cauchy_meta, kind="random", variants=("inplace",),
      cpu=lambda spec, x, median, sigma, gen: median + sigma * rng(gen).standard_cauchy(spec.shape),
      doc="``x.cauchy_(median, sigma)`` fills ``x`` with Cauchy samples.")
defop("log_normal(Tensor self, float mean=1, float std=2, *, Generator? generator=None) -> Tensor",
      meta=_log_normal_meta, kind="random", variants=("inplace",),
      cpu=lambda spec, x, mean, std, gen: np.exp(mean + std * _normal(gen, spec.shape, _dt.float64)),
      doc="``x.log_normal_(mean, std)`` fills ``x`` with samples whose log is normal of ``mean`` and ``std``.")
defop("geometric(Tensor self, float p, *, Generator? generator=None) -> Tensor",
      meta=_geometric_meta, kind="random", variants=("inplace",),
      cpu=lambda spec, x, p, gen: rng(gen).geometric(p, spec.shape),
      doc="``x.geometric_(p)`` fills ``x`` with the number of Bernoulli(``p``) trials up to the first success.")


def _poisson_meta(rates, generator):
    _check_generator("poisson", generator)
    _floating_only("poisson_cpu", rates.dtype)
    return TensorSpec(rates.shape, rates.dtype, rates.device)


def _poisson_cpu(spec, rates, gen):
    lam = rates.astype(np.float64)
    if not (lam >= 0).all():  # (NaN fails it too)
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    finite = np.isfinite(lam)  # an infinite rate's sample is inf (NumPy refuses it; torch gives garbage)
    return np.where(finite, rng(gen).poisson(np.where(finite, lam, 0.0)), np.inf)


def _binomial_meta(count, prob, generator):
    _check_generator("binomial", generator)
    if not count.dtype.is_floating_point:
        raise ValueError(f"binomial only supports floating-point dtypes for count, got: {scalar_name(count.dtype)}")
    if prob.dtype is not count.dtype:
        raise RuntimeError(f"Found dtype {scalar_name(prob.dtype)} but expected {scalar_name(count.dtype)}")
    if count.dtype.itemsize < 4:
        raise NotImplementedError(f"\"binomial_cpu\" not implemented for '{scalar_name(count.dtype)}'")
    return TensorSpec(broadcast_shapes(count.shape, prob.shape), count.dtype, count.device)


def _binomial_cpu(spec, count, prob, gen):
    """Successes in ``count`` trials (rounded down; none below 0) of probability ``prob`` (clipped to
    [0, 1], as torch's sampler reads it); a NaN probability gives NaN."""
    n, p = np.broadcast_arrays(np.floor(np.maximum(count.astype(np.float64), 0)), prob.astype(np.float64))
    nan = np.isnan(p)
    drawn = rng(gen).binomial(n.astype(np.int64), np.where(nan, 0.0, np.clip(p, 0.0, 1.0)))
    return np.where(nan, np.nan, drawn)


defop("poisson(Tensor input, Generator? generator=None) -> Tensor", meta=_poisson_meta, cpu=_poisson_cpu,
      kind="random", variants=("function",),
      doc="Poisson samples of the rates ``input`` (non-negative; an infinite rate gives inf).")
defop("binomial(Tensor count, Tensor prob, Generator? generator=None) -> Tensor", meta=_binomial_meta,
      cpu=_binomial_cpu, kind="random", variants=("function",),
      doc="Binomial samples: successes in ``count`` trials of probability ``prob``.")


def _default_high(dtype):
    """The largest value ``random_`` draws by default: 2**digits for floats, else the max."""
    return 2 ** _DIGITS[dtype.name] if dtype.is_floating_point else _value_range(dtype)[1]


def _random_range(dtype, low, high):
    """``random_``'s half-open range ``[low, high)`` for ``dtype``."""
    if high is None:
        return low, _default_high(dtype) + 1
    return low, high


def _random_meta(x, low, high, generator):
    _check_generator("random_", generator)
    _random_bounds(*_random_range(x.dtype, low, high), x.dtype)
    return _inplace_spec(x)


def _random_cpu(spec, x, low, high, gen):
    low, high = _random_range(spec.dtype, low, high)
    # uint64's default range reaches past int64's
    drawn = np.uint64 if high - 1 > np.iinfo(np.int64).max else np.int64
    return rng(gen).integers(low, high - 1, size=spec.shape, dtype=drawn, endpoint=True)


_RANDOM_DOC = ("``x.random_(from=0, to=None)`` fills ``x`` with integers uniform on ``[from, to)``; without "
               "``to``, up to the dtype's max (2**mantissa digits for floats).")
defop("random.from_to(Tensor self, int from_, int? to, *, Generator? generator=None) -> Tensor",
      meta=_random_meta, cpu=_random_cpu, kind="random", variants=("inplace",), doc=_RANDOM_DOC)
defop("random.to(Tensor self, int to, *, Generator? generator=None) -> Tensor",
      meta=lambda x, high, generator: _random_meta(x, 0, high, generator),
      cpu=lambda spec, x, high, gen: _random_cpu(spec, x, 0, high, gen), kind="random", variants=("inplace",),
      doc=_RANDOM_DOC)
defop("random(Tensor self, *, Generator? generator=None) -> Tensor",
      meta=lambda x, generator: _random_meta(x, 0, None, generator),
      cpu=lambda spec, x, gen: _random_cpu(spec, x, 0, None, gen), kind="random", variants=("inplace",),
      doc=_RANDOM_DOC)

__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed", "rng"]
