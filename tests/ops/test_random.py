"""Random ops: seeding and generators, shapes and dtypes, value ranges, rough
moments with fixed seeds, bernoulli/multinomial semantics, and torch's errors."""

import numpy as np
import pytest

import jitorch as jt
from tests.support import FLOAT_DTYPES, INT_DTYPES, to_numpy

# Every random op, as (name, call(generator) -> tensor); each draws 1000 values.
DRAWS = [
    ("rand", lambda g: jt.rand(10, 100, generator=g)),
    ("randn", lambda g: jt.randn(1000, generator=g)),
    ("rand_like", lambda g: jt.rand_like(jt.zeros(1000), generator=g)),
    ("randn_like", lambda g: jt.randn_like(jt.zeros(1000), generator=g)),
    ("randint", lambda g: jt.randint(0, 1000, (1000,), generator=g)),
    ("randint_like", lambda g: jt.randint_like(jt.zeros(1000), 1000, generator=g)),
    ("randperm", lambda g: jt.randperm(1000, generator=g)),
    ("normal", lambda g: jt.normal(jt.zeros(1000), jt.ones(1000), generator=g)),
    ("normal_sized", lambda g: jt.normal(2.0, 3.0, (1000,), generator=g)),
    ("bernoulli", lambda g: jt.bernoulli(jt.full((1000,), 0.5), generator=g)),
    ("bernoulli_p", lambda g: jt.bernoulli(jt.zeros(1000), 0.5, generator=g)),
    ("multinomial", lambda g: jt.multinomial(jt.ones(1000), 1000, generator=g)),
    ("normal_", lambda g: jt.empty(1000).normal_(generator=g)),
    ("uniform_", lambda g: jt.empty(1000).uniform_(-1, 1, generator=g)),
    ("exponential_", lambda g: jt.empty(1000).exponential_(generator=g)),
    ("random_", lambda g: jt.empty(1000, dtype=jt.int64).random_(0, 1000, generator=g)),
    ("bernoulli_", lambda g: jt.empty(1000).bernoulli_(0.5, generator=g)),
]
IDS = [name for name, _ in DRAWS]


@pytest.mark.parametrize("draw", [d for _, d in DRAWS], ids=IDS)
def test_manual_seed_makes_every_op_reproducible(draw):
    jt.manual_seed(1234)
    first = to_numpy(draw(None))
    jt.manual_seed(1234)
    again = to_numpy(draw(None))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(to_numpy(draw(None)), first)  # the stream moves on


@pytest.mark.parametrize("draw", [d for _, d in DRAWS], ids=IDS)
def test_generators_are_independent_of_the_global_stream(draw):
    g = jt.Generator().manual_seed(7)
    jt.manual_seed(0)
    first = to_numpy(draw(g))
    jt.randn(5)  # draws from the default generator do not disturb g's stream
    g.manual_seed(7)
    np.testing.assert_array_equal(to_numpy(draw(g)), first)
    other = jt.Generator().manual_seed(8)
    assert not np.array_equal(to_numpy(draw(other)), first)


def test_generator_state_and_seeds():
    g = jt.Generator()
    assert g.device == jt.device("cpu")
    assert g.manual_seed(3) is g and g.initial_seed() == 3
    state = g.get_state()
    a = jt.rand(4, generator=g)
    g.set_state(state)
    np.testing.assert_array_equal(jt.rand(4, generator=g).numpy(), a.numpy())
    assert jt.manual_seed(5) is jt.default_generator and jt.initial_seed() == 5
    s = jt.seed()
    assert jt.initial_seed() == s
    assert g.manual_seed(-1).initial_seed() == -1  # negative seeds are accepted, as in torch


@pytest.mark.parametrize("call,shape,dtype", [
    (lambda: jt.rand(2, 3), (2, 3), jt.float32),
    (lambda: jt.rand((2, 3), dtype=jt.float64), (2, 3), jt.float64),
    (lambda: jt.rand(()), (), jt.float32),
    (lambda: jt.randn(0, 4, dtype=jt.bfloat16), (0, 4), jt.bfloat16),
    (lambda: jt.rand_like(jt.zeros(3, dtype=jt.float16)), (3,), jt.float16),
    (lambda: jt.randn_like(jt.zeros(2, 2), dtype=jt.float64), (2, 2), jt.float64),
    (lambda: jt.randint(3, (2,)), (2,), jt.int64),
    (lambda: jt.randint(3, size=(2,)), (2,), jt.int64),
    (lambda: jt.randint(low=0, high=3, size=(4, 1)), (4, 1), jt.int64),
    (lambda: jt.randint(1, (2,), dtype=jt.float32), (2,), jt.float32),
    (lambda: jt.randint(0, 2, (3,), dtype=jt.bool), (3,), jt.bool),
    (lambda: jt.randint_like(jt.zeros(2, dtype=jt.int32), 5), (2,), jt.int32),
    (lambda: jt.randint_like(jt.zeros(2), 2, 5), (2,), jt.float32),
    (lambda: jt.randperm(5), (5,), jt.int64),
    (lambda: jt.randperm(0), (0,), jt.int64),
    (lambda: jt.randperm(3, dtype=jt.float16), (3,), jt.float16),
    (lambda: jt.normal(jt.zeros(2, 1), jt.ones(3)), (2, 3), jt.float32),
    (lambda: jt.normal(jt.zeros(2, dtype=jt.float16), jt.ones(2, dtype=jt.float64)), (2,), jt.float16),
    (lambda: jt.normal(jt.zeros(2, dtype=jt.float64), 1.0), (2,), jt.float64),
    (lambda: jt.normal(jt.zeros(2)), (2,), jt.float32),
    (lambda: jt.normal(0.0, jt.ones(2, dtype=jt.float64)), (2,), jt.float64),
    (lambda: jt.normal(2, 3, size=(2,)), (2,), jt.float32),
    (lambda: jt.normal(0, 1, (2,), dtype=jt.float64), (2,), jt.float64),
    (lambda: jt.bernoulli(jt.zeros(2, 3, dtype=jt.float64)), (2, 3), jt.float64),
    (lambda: jt.bernoulli(jt.zeros(3, dtype=jt.int64), 0.5), (3,), jt.int64),
    (lambda: jt.zeros(3).bernoulli(), (3,), jt.float32),
    (lambda: jt.multinomial(jt.ones(2, 3), 2), (2, 2), jt.int64),
    (lambda: jt.ones(3, dtype=jt.float16).multinomial(5, True), (5,), jt.int64),
    (lambda: jt.rand(2, 3, device="meta"), (2, 3), jt.float32),
])
def test_shapes_and_dtypes(call, shape, dtype):
    t = call()
    assert t.shape == shape and t.dtype is dtype


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_rand_and_uniform_stay_in_their_interval(dtype):
    jt.manual_seed(0)
    u = to_numpy(jt.rand(20000, dtype=dtype))
    assert u.min() >= 0 and u.max() < 1  # even after rounding to the half types
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 1 / 12) < 0.01
    v = to_numpy(jt.empty(20000, dtype=dtype).uniform_(-3, 5))
    assert v.min() >= -3 and v.max() <= 5 and abs(v.mean() - 1) < 0.1
    assert to_numpy(jt.zeros(3, dtype=dtype).uniform_(2, 2)).tolist() == [2, 2, 2]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_normal_moments(dtype):
    jt.manual_seed(1)
    z = to_numpy(jt.randn(20000, dtype=dtype)).astype(np.float64)
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    x = to_numpy(jt.empty(20000, dtype=dtype).normal_(5, 2)).astype(np.float64)
    assert abs(x.mean() - 5) < 0.06 and abs(x.std() - 2) < 0.06


def test_normal_broadcasts_mean_and_std():
    jt.manual_seed(2)
    mean = jt.tensor([[0.0], [100.0]])
    std = jt.tensor([1.0, 0.0, 10.0] * 1000)
    x = jt.normal(mean, std).numpy()
    assert x.shape == (2, 3000)
    np.testing.assert_array_equal(x[:, 1::3], np.broadcast_to([[0.0], [100.0]], (2, 1000)))  # std 0: the mean
    assert abs(x[1, 2::3].mean() - 100) < 1.5 and abs(x[0, 2::3].std() - 10) < 0.7
    assert jt.normal(3.0, jt.zeros(4)).tolist() == [3.0] * 4
    y = jt.normal(-2.0, 0.5, (20000,)).numpy()
    assert abs(y.mean() + 2) < 0.02 and abs(y.std() - 0.5) < 0.02


def test_exponential_moments():
    jt.manual_seed(3)
    x = jt.empty(20000, dtype=jt.float64).exponential_(4.0).numpy()
    assert x.min() >= 0 and abs(x.mean() - 0.25) < 0.01


@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES)
def test_randint_covers_its_range(dtype):
    jt.manual_seed(4)
    low, high = (0, 7) if dtype is jt.uint8 else (-3, 4)
    x = to_numpy(jt.randint(low, high, (5000,), dtype=dtype))
    assert set(np.unique(x).tolist()) == set(range(low, high))
    assert abs(x.astype(np.float64).mean() - (low + high - 1) / 2) < 0.15
    y = to_numpy(jt.empty(5000, dtype=dtype).random_(low, high))
    assert set(np.unique(y).tolist()) == set(range(low, high))


@pytest.mark.parametrize("dtype,high", [(jt.uint8, 255), (jt.int8, 127), (jt.bool, 1), (jt.float16, 2048),
                                        (jt.bfloat16, 256), (jt.int64, 2 ** 63 - 1)])
def test_random_defaults_to_the_dtype_range(dtype, high):
    jt.manual_seed(5)
    x = to_numpy(jt.empty(5000, dtype=dtype).random_()).astype(np.float64)
    assert x.min() >= 0 and x.max() <= high
    assert x.max() > high * 0.9
    assert set(to_numpy(jt.zeros(100, dtype=dtype).random_(1)).tolist()) == {0}


def test_randperm_is_a_permutation():
    jt.manual_seed(6)
    p = jt.randperm(1000).numpy()
    assert sorted(p.tolist()) == list(range(1000)) and not np.array_equal(p, np.arange(1000))
    assert sorted(jt.randperm(256, dtype=jt.uint8).tolist()) == list(range(256))


def test_bernoulli_frequencies():
    jt.manual_seed(7)
    p = jt.tensor([0.0, 0.2, 0.9, 1.0]).expand(5000, 4)
    x = jt.bernoulli(p).numpy()
    assert set(np.unique(x).tolist()) <= {0.0, 1.0}
    np.testing.assert_allclose(x.mean(axis=0), [0.0, 0.2, 0.9, 1.0], atol=0.03)
    assert abs(jt.bernoulli(jt.zeros(20000), 0.3).numpy().mean() - 0.3) < 0.02
    b = jt.zeros(5000, 2, dtype=jt.bool).bernoulli_(jt.tensor([0.25, 1.0]))
    assert b.dtype is jt.bool
    np.testing.assert_allclose(b.numpy().mean(axis=0), [0.25, 1.0], atol=0.03)
    assert jt.zeros(3, dtype=jt.int64).bernoulli_(1.0).tolist() == [1, 1, 1]


def test_multinomial_with_replacement_follows_the_weights():
    jt.manual_seed(8)
    w = jt.tensor([[0.0, 1.0, 3.0], [5.0, 0.0, 0.0]])
    s = jt.multinomial(w, 8000, replacement=True).numpy()
    assert s.shape == (2, 8000)
    counts = np.bincount(s[0], minlength=3) / 8000
    np.testing.assert_allclose(counts, [0.0, 0.25, 0.75], atol=0.02)
    assert set(s[1].tolist()) == {0}


def test_multinomial_without_replacement():
    jt.manual_seed(9)
    s = jt.multinomial(jt.ones(3, 50), 50).numpy()
    for row in s:
        assert sorted(row.tolist()) == list(range(50))
    # zero-probability categories come only after every positive one
    picks = jt.multinomial(jt.tensor([0.0, 1.0, 0.0, 2.0]), 4).tolist()
    assert sorted(picks[:2]) == [1, 3] and sorted(picks[2:]) == [0, 2]
    # the heavier category is drawn first more often
    first = [jt.multinomial(jt.tensor([1.0, 9.0]), 1).item() for _ in range(400)]
    assert 0.85 < np.mean(first) < 0.95


def test_random_ops_on_meta_and_in_place_versions():
    m = jt.empty(3, device="meta")
    assert m.normal_() is m and m.uniform_() is m and m.random_(5) is m
    x = jt.empty(3)
    v = x._version
    x.normal_().uniform_().exponential_().random_(4).bernoulli_()
    assert x._version == v + 5


RANDOM_ERRORS = [
    (lambda: jt.rand(2, dtype=jt.int64), NotImplementedError, "\"check_uniform_bounds\" not implemented for 'Long'"),
    (lambda: jt.rand(2, dtype=jt.bool), NotImplementedError, "\"check_uniform_bounds\" not implemented for 'Bool'"),
    (lambda: jt.randn(2, dtype=jt.int64), NotImplementedError, "\"normal_kernel_cpu\" not implemented for 'Long'"),
    (lambda: jt.rand_like(jt.zeros(2, dtype=jt.int64)), NotImplementedError, "check_uniform_bounds"),
    (lambda: jt.rand(-1), RuntimeError, r"Trying to create tensor with negative dimension -1: \[-1\]"),
    (lambda: jt.rand(2, generator=3), TypeError, "rand\\(\\): argument 'generator' must be jitorch.Generator, not int"),
    (lambda: jt.randint(5, 3, (2,)), RuntimeError,
     "random_ expects 'from' to be less than 'to', but got from=5 >= to=3"),
    (lambda: jt.randint(3, 3, (2,)), RuntimeError, "but got from=3 >= to=3"),
    (lambda: jt.randint(0, 300, (2,), dtype=jt.uint8), RuntimeError, "to - 1 is out of bounds for unsigned char"),
    (lambda: jt.randint(-1, 3, (2,), dtype=jt.uint8), RuntimeError, "from is out of bounds for unsigned char"),
    (lambda: jt.randint(0, 3, (3,), dtype=jt.bool), RuntimeError, "to - 1 is out of bounds for bool"),
    (lambda: jt.randint(3, (2, -1)), RuntimeError, r"negative dimension -1: \[2, -1\]"),
    (lambda: jt.randint_like(jt.zeros(2), 5, 2), RuntimeError, "but got from=5 >= to=2"),
    (lambda: jt.randperm(-1), RuntimeError, r"negative dimension -1: \[-1\]"),
    (lambda: jt.randperm(3, dtype=jt.bool), NotImplementedError, "\"randperm\" not implemented for 'Bool'"),
    (lambda: jt.randperm(257, dtype=jt.uint8), RuntimeError,
     "value cannot be converted to type uint8_t without overflow"),
    (lambda: jt.randperm(3000, dtype=jt.float16), RuntimeError, "n cannot be greater than 2049 for Half type."),
    (lambda: jt.normal(0.0, -1.0, (2, 3)), RuntimeError, "normal expects std >= 0.0, but found std -1"),
    (lambda: jt.normal(jt.zeros(2), -1.0), RuntimeError, "normal expects std >= 0.0, but found std -1"),
    (lambda: jt.normal(jt.zeros(2), jt.tensor([-1.0, 1.0])), RuntimeError,
     "normal expects all elements of std >= 0.0"),
    (lambda: jt.normal(jt.zeros(2, dtype=jt.int64), 1.0), NotImplementedError,
     "\"normal_kernel_cpu\" not implemented for 'Long'"),
    (lambda: jt.normal(jt.zeros(2), jt.ones(3)), RuntimeError,
     "The size of tensor a \\(2\\) must match the size of tensor b \\(3\\) at non-singleton dimension 0"),
    (lambda: jt.bernoulli(jt.tensor([0, 1])), NotImplementedError,
     "\"bernoulli_tensor_cpu_p_\" not implemented for 'Long'"),
    (lambda: jt.bernoulli(jt.tensor([2.0, 1.0])), RuntimeError,
     "Expected p_in >= 0 && p_in <= 1 to be true, but got false."),
    (lambda: jt.bernoulli(jt.zeros(3), 1.5), RuntimeError, "bernoulli_ expects p to be in \\[0, 1\\], but got p=1.5"),
    (lambda: jt.zeros(3).bernoulli_(-1), RuntimeError, "bernoulli_ expects p to be in \\[0, 1\\], but got p=-1"),
    (lambda: jt.zeros(3).bernoulli_(jt.ones(2)), RuntimeError,
     r"The expanded size of the tensor \(3\) must match the existing size \(2\) at non-singleton dimension 0.  "
     r"Target sizes: \[3\].  Tensor sizes: \[2\]"),
    (lambda: jt.zeros(3).bernoulli_(jt.tensor([2.0, 1.0, 1.0])), RuntimeError, "Expected p_in >= 0 && p_in <= 1"),
    (lambda: jt.multinomial(jt.ones(2, 2, 2), 1), RuntimeError, "prob_dist must be 1 or 2 dim"),
    (lambda: jt.multinomial(jt.ones(3, dtype=jt.int64), 1), RuntimeError,
     "multinomial only supports floating-point dtypes for input, got: Long"),
    (lambda: jt.multinomial(jt.ones(3), 4), RuntimeError,
     "cannot sample n_sample > prob_dist.size\\(-1\\) samples without replacement"),
    (lambda: jt.multinomial(jt.ones(3), 0), RuntimeError, "cannot sample n_sample <= 0 samples"),
    (lambda: jt.multinomial(jt.tensor([1.0, -1.0, 1.0]), 1), RuntimeError,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    (lambda: jt.multinomial(jt.tensor([1.0, float("nan")]), 1), RuntimeError, "contains either `inf`, `nan`"),
    (lambda: jt.multinomial(jt.zeros(3), 1), RuntimeError,
     "invalid multinomial distribution \\(sum of probabilities <= 0\\)"),
    (lambda: jt.zeros(3).uniform_(1, 0), RuntimeError,
     "uniform_ expects to return a \\[from, to\\) range, but found from=1 > to=0"),
    (lambda: jt.zeros(3, dtype=jt.int64).uniform_(), NotImplementedError, "check_uniform_bounds"),
    (lambda: jt.zeros(3).uniform_(0, 1e39), RuntimeError, "to is out of bounds for float"),
    (lambda: jt.zeros(3, dtype=jt.float16).uniform_(-7e4, 0), RuntimeError, "from is out of bounds for c10::Half"),
    (lambda: jt.zeros(3).normal_(0, -1), RuntimeError, "normal expects std >= 0.0, but found std -1"),
    (lambda: jt.zeros(3, dtype=jt.int64).normal_(), NotImplementedError, "normal_kernel_cpu"),
    (lambda: jt.zeros(3).exponential_(0), RuntimeError, "exponential_ expects lambda > 0.0, but found lambda=0"),
    (lambda: jt.zeros(3, dtype=jt.int64).exponential_(), RuntimeError,
     "Exponential distribution is a continuous probability distribution. dtype must be a floating point but you "
     "specified Long"),
    (lambda: jt.zeros(3).random_(5, 2), RuntimeError, "but got from=5 >= to=2"),
    (lambda: jt.zeros(3).random_(-3), RuntimeError, "but got from=0 >= to=-3"),
    (lambda: jt.zeros(3, dtype=jt.int8).random_(0, 300), RuntimeError, "to - 1 is out of bounds for signed char"),
    (lambda: jt.zeros(3, dtype=jt.int16).random_(0, 2 ** 20), RuntimeError, "to - 1 is out of bounds for short int"),
    (lambda: jt.zeros(3, dtype=jt.float16).random_(0, 2 ** 20), RuntimeError, "to - 1 is out of bounds for c10::Half"),
]


@pytest.mark.parametrize("call,exc,match", RANDOM_ERRORS)
def test_random_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_errors_do_not_consume_the_stream():
    jt.manual_seed(10)
    with pytest.raises(RuntimeError):
        jt.multinomial(jt.zeros(3), 1)
    with pytest.raises(RuntimeError):
        jt.bernoulli(jt.tensor([2.0]))
    after = jt.rand(3).numpy()
    jt.manual_seed(10)
    np.testing.assert_array_equal(jt.rand(3).numpy(), after)
