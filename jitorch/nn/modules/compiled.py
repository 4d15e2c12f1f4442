"""`jitorch.compile(module)`: a module whose calls run compiled (torch's ``OptimizedModule``).

The wrapper holds the original module as ``_orig_mod`` (so its parameters,
state dict and ``train()``/``eval()`` are the original's) and compiles calls of
it. A graph is specialised to the modules' ``training`` flags (dropout, batch
norm), so each combination of flags gets its own compiled function. Parameters
are captured tensors: a call records one autograd node whose backward, itself
compiled, gives them their gradients.
"""

from __future__ import annotations

from ...jit.compile import CompiledFunction, register_compiler
from .module import Module


class OptimizedModule(Module):
    """``module`` compiled: call it like the module; ``_orig_mod`` is the module itself."""

    def __init__(self, module, **options):
        super().__init__()
        self._orig_mod = module
        object.__setattr__(self, "_options", options)
        object.__setattr__(self, "_by_mode", {})

    def forward(self, *args, **kwargs):
        mode = _training_flags(self._orig_mod)
        compiled = self._by_mode.get(mode)
        if compiled is None:
            compiled = self._by_mode[mode] = CompiledFunction(self._orig_mod, **self._options)
        return compiled(*args, **kwargs)

    def lower(self, *args, **kwargs):
        """What a call with these arguments compiles to (see `CompiledFunction.lower`)."""
        mode = _training_flags(self._orig_mod)
        compiled = self._by_mode.setdefault(mode, CompiledFunction(self._orig_mod, **self._options))
        return compiled.lower(*args, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)


def _training_flags(root):
    """The ``training`` flag of ``root`` and of each module below it, each module once, in `Module.modules`'
    order: what a graph is specialised to. Read on every call, so walked without `named_modules`' names."""
    flags, seen, todo = [], set(), [root]
    while todo:
        module = todo.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        flags.append(module.training)
        todo.extend(reversed([m for m in module._modules.values() if m is not None]))
    return tuple(flags)


register_compiler(Module, OptimizedModule)
