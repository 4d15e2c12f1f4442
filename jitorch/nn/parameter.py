"""``Parameter``: a tensor that a Module registers as one of its parameters."""

from __future__ import annotations

from ..ops.creation import tensor as _tensor
from ..tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor (sharing ``data``'s storage) that modules list in ``parameters()``.

    ``Parameter(data=None, requires_grad=True)``; ops on it return plain Tensors, as in torch.
    """

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _tensor([])
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): argument 'data' must be Tensor, not {type(data).__name__}")
        p = cls._make(data._storage, data._shape, data._stride, data._offset, data._arr)
        p.requires_grad_(requires_grad)
        return p

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = Parameter(self.data.clone(), self.requires_grad)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol):
        return (Parameter, (self.data, self.requires_grad))
