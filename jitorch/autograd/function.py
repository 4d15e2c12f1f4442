"""Custom differentiable functions: ``class Square(jitorch.autograd.Function)`` with static
``forward(ctx, ...)`` and ``backward(ctx, *grads)``, applied with ``Square.apply(x)``."""

from __future__ import annotations

from typing import NamedTuple

from ..ops import registry
from . import saved_hooks
from .engine import CUSTOM_FUNCTION_VIEW, NodeHooks, check_also_saved, gradient_edge, saved_edge, sum_to
from ..runtime.grad_mode import enable_grad, is_grad_enabled, no_grad


class FunctionCtx:
    """What ``forward`` leaves for ``backward``: saved tensors (version-checked) and flags."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self._saved = ()
        self._versions = ()
        self.non_differentiable = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self._versions = tuple(t._version if t is not None else None for t in tensors)
        pair = saved_hooks.active()
        if pair is not None:  # (packed tensors are not version-checked, as torch's)
            what = (type(self).__name__, "saved_tensors")
            tensors = tuple(saved_hooks.Packed(t, pair, saved_edge(t), what) if t is not None else None
                            for t in tensors)
        self._saved = tensors

    @property
    def saved_tensors(self):
        return self.saved_tensors_reading(range(len(self._saved)) if self._saved is not None else ())

    def saved_tensors_reading(self, positions):
        """The saved tensors, of which those at ``positions`` (the ones a backward really reads) must
        not have been written since they were saved."""
        if self._saved is None:
            raise RuntimeError("Trying to backward through the graph a second time (or directly access saved "
                               "tensors after they have already been freed). Specify retain_graph=True if you "
                               "need to backward through the graph a second time.")
        if any(t.__class__ is saved_hooks.Packed for t in self._saved):
            return tuple(saved_hooks.unpacked(self._saved))
        for i in positions:
            t, v = self._saved[i], self._versions[i]
            if t is not None and t._version != v:
                raise RuntimeError(f"one of the variables needed for gradient computation has been modified by "
                                   f"an inplace operation: [{t.dtype}{list(t.shape)}] is at version {t._version}; "
                                   f"expected version {v} instead.")
        return self._saved

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)


class _OutputInfo(NamedTuple):
    """An output tensor's shape, dtype and device: a missing gradient is zeros of them (torch's VariableInfo)."""

    shape: tuple
    dtype: object
    device: object


class FunctionNode(NodeHooks):
    """The backward node of one ``Function.apply`` call."""

    def __init__(self, cls, ctx, inputs, outputs):
        self.cls = cls
        self.ctx = ctx
        self.inputs = inputs          # (position among apply's args, tensor shape, dtype) per tensor arg
        # what a missing gradient's zeros are made from, as torch keeps each output's metadata: the node
        # holding its output tensors, whose grad_fn it is, made a reference cycle that kept them (a compiled
        # model's saved activations) alive until the cyclic collector ran, so their pooled memory was not
        # reused and the next step faulted fresh pages in
        self.outputs = [_OutputInfo(tuple(o.shape), o.dtype, o.device) if isinstance(o, registry.Tensor) else o
                        for o in outputs]
        self.next_functions = tuple((gradient_edge(t), getattr(t, "_output_nr", 0)) if t.requires_grad
                                    else (None, 0) for _, t in inputs)
        self.hooks = {}
        self.retained = {}
        self.pre_hooks = None
        self.post_hooks = None
        self.freed = False
        self.also_checked = ()  # (tensor, version) of what torch's node of the op saves too (`engine.saves_also`)

    def name(self):
        # (a function of jitorch's own that stands for one of torch's ops names its node as torch's: ``_node_name``)
        return self.cls.__dict__.get("_node_name") or f"{self.cls.__name__}Backward"

    @property
    def num_outputs(self):
        return len(self.outputs)

    def apply(self, grads, create_graph):
        if self.also_checked:
            check_also_saved(self, self.also_checked)
        gs = []
        for k, o in enumerate(self.outputs):
            g = grads.get(k)
            if g is None and self.ctx.materialize_grads:
                g = (registry.FUNCTIONS["zeros"](o.shape, dtype=o.dtype, device=o.device)
                     if isinstance(o, _OutputInfo) else registry.FUNCTIONS["zeros_like"](o))
            gs.append(g)
        with (enable_grad() if create_graph else no_grad()):
            result = self.cls.backward(self.ctx, *gs)
        result = result if isinstance(result, tuple) else (result,)
        out = []
        for pos, t in self.inputs:
            g = result[pos] if pos < len(result) else None
            out.append(None if g is None else sum_to(g, tuple(t.shape), t.dtype))
        return out

    def release(self):
        """Free the tensors ``forward`` saved: reading them in a later backward raises torch's "backward through
        the graph a second time"; a function that saved none runs again, as torch's."""
        self.freed = True
        if self.ctx._saved:
            self.ctx._saved = None
        self.also_checked = ()


class Function:
    """Base class of custom autograd functions (torch.autograd.Function's protocol)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("a Function subclass must define forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("a Function subclass must define backward(ctx, *grad_outputs)")

    @classmethod
    def apply(cls, *args):
        Tensor = registry.Tensor
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        with no_grad():
            result = cls.forward(ctx, *args)
        if not (is_grad_enabled() and any(needs)):
            return result
        outs = list(result) if isinstance(result, tuple) else [result]
        tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
        returned = {id(o) for o in outs if any(o is a for a in args)}
        fresh = [o.view_as(o) if id(o) in returned else o for o in outs]
        node = FunctionNode(cls, ctx, tensors, fresh)
        for k, o in enumerate(fresh):
            if isinstance(o, Tensor) and o.dtype.is_floating_point and id(outs[k]) not in ctx.non_differentiable:
                o.grad_fn = node
                o._requires_grad = True
                o._output_nr = k
                if id(outs[k]) in returned:
                    # a view of an input whose history is this node: writing into its memory would
                    # need view+inplace history that bypasses the custom backward, which torch forbids
                    o._creation_meta = CUSTOM_FUNCTION_VIEW
        return tuple(fresh) if isinstance(result, tuple) else fresh[0]
