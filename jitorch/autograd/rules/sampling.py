"""Random ops: their samples carry a zero gradient to their parameters, as torch's bernoulli, normal,
uniform and random_ do (torch's results require grad; jitorch does not reparameterise normal either).
Written in place (``x.uniform_()``), the zero gradient cuts what ``x`` held before."""

from ..rule import defgrad, nondifferentiable
from .common import cut

defgrad("bernoulli", cut("input"))
defgrad("bernoulli.float_ exponential random random.from_to random.to uniform normal.inplace cauchy log_normal "
        "geometric", cut("self"))
defgrad("poisson", cut("input"))
defgrad("binomial", cut("count", "prob"))
defgrad("bernoulli.Tensor_", cut("self", "p"))
defgrad("normal.Tensor_Tensor", cut("mean", "std"))
defgrad("normal.Tensor_float", cut("mean"))
defgrad("normal.float_Tensor", cut("std"))
# torch has no derivative for bernoulli(input, p) (its backward raises); multinomial gives indices.
nondifferentiable("bernoulli.p", "multinomial")
