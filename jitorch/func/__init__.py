"""torch.func: composable function transforms.

``vmap`` maps a function over a batch dimension (batching rules per op kind, a per-sample fallback:
`batching`, `rules`); ``grad``, ``vjp``, ``jacrev`` differentiate by reverse mode, ``jvp``, ``jacfwd``,
``linearize`` by forward mode (`jitorch.autograd.forward_ad`), ``hessian`` by both; ``functional_call``
runs a module with other parameters. They nest: ``vmap(grad(loss))`` gives per-sample gradients.
"""

from .functional_call import functional_call, stack_module_state
from .transforms import grad, hessian, jacfwd, jacrev, jvp, linearize, value_and_grad, vjp
from .vmap import vmap

__all__ = ["vmap", "grad", "value_and_grad", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "functional_call", "stack_module_state"]
