"""Random ops: their samples carry no gradient to their parameters (as torch's bernoulli,
multinomial and random_ give none; jitorch does not reparameterise normal either)."""

from ..rule import nondifferentiable

nondifferentiable(
    "bernoulli", "bernoulli.Tensor_", "bernoulli.float_", "bernoulli.p", "exponential", "multinomial",
    "normal.Tensor_Tensor", "normal.Tensor_float", "normal.float_Tensor", "normal.inplace", "random",
    "random.from_to", "random.to", "uniform",
)
