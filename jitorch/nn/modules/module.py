"""``Module``: the base class of layers, with torch's registration, traversal, state and hooks."""

from __future__ import annotations

import itertools
import warnings
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from ...autograd.gradients import zero_grad_
from ...ops.views import memory_format
from ...runtime.grad_mode import no_grad
from ...runtime.hooks import add_hook, user_stacklevel
from ...compiler import guard, is_compiling
from ...jit.errors import trace_error
from ...runtime import dtypes as _dt
from ...runtime.device import device as _device
from ...runtime.shared_memory import share_tensors
from ...tensor import Tensor
from ..parameter import Parameter
from .hooks import BackwardHook


def typename(obj):
    """torch.typename: a tensor's type string, else the qualified name of ``obj``'s class."""
    if isinstance(obj, Tensor):
        return obj.type()
    cls = obj if isinstance(obj, type) else type(obj)
    module = cls.__module__
    return cls.__qualname__ if module in (None, "builtins") else f"{module}.{cls.__qualname__}"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys it missed and the keys it did not use."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(s, num_spaces):
    """Indent every line of ``s`` but the first by ``num_spaces``: how torch nests child reprs."""
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    pad = " " * num_spaces
    return lines[0] + "\n" + "\n".join(pad + line for line in lines[1:])


def _check_member_name(kind, name, module, table):
    """The checks torch applies to a new parameter/buffer name (TypeError/KeyError)."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {typename(name)}")
    if "." in name:
        raise KeyError(f"{kind} name can't contain \".\"")
    if name == "":
        raise KeyError(f"{kind} name can't be empty string \"\"")
    if hasattr(module, name) and name not in table:
        raise KeyError(f"attribute '{name}' already exists")


def _quoted(keys):
    return ", ".join(f'"{k}"' for k in keys)


def _hook_tables(module):
    """The ids of ``module``'s hooks in each table, or None when it has none (the common case, checked
    cheaply)."""
    d = module.__dict__
    pre, post, backward_pre, backward = (d["_forward_pre_hooks"], d["_forward_hooks"], d["_backward_pre_hooks"],
                                         d["_backward_hooks"])
    if not (pre or post or backward_pre or backward):
        return None
    return tuple(pre), tuple(post), tuple(backward_pre), tuple(backward)


def _guard_call_state(module):
    """A traced call is specialised to ``module.training`` (Dropout, BatchNorm's statistics) and to the
    hooks it ran (forward hooks ran in the trace, backward hooks are in its backward): make the graph
    valid only while both stay, so that ``train()``/``eval()`` or a hook added or removed between
    compiled calls traces again."""
    mode = module.training
    hooks = _hook_tables(module)
    guard(lambda: module.training == mode and _hook_tables(module) == hooks,
          f"{module._get_name()}.training is {mode} and its hooks are unchanged")


def _parse_to(args, kwargs):
    """(device, dtype, memory format) from ``Module.to``'s torch-style arguments."""
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    fmt = kwargs.pop("memory_format", None)
    if fmt is not None and not isinstance(fmt, memory_format):
        raise TypeError(f"to() received an invalid combination of arguments - got (memory_format={typename(fmt)}, )")
    if kwargs:
        raise TypeError(f"to() got an unexpected keyword argument '{next(iter(kwargs))}'")
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, _dt.dtype):
            dtype = a
        elif isinstance(a, (str, int, _device)) and not isinstance(a, bool):
            device = a
        elif not isinstance(a, bool) and a is not None:
            raise TypeError(f"to() received an invalid combination of arguments - got ({typename(a)})")
    if dtype is not None:
        dtype = _dt.to_dtype(dtype)
        if not dtype.is_floating_point:
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, "
                            f"but got desired dtype={dtype}")
    return device, dtype, fmt


class Module:
    """Base class for all neural network modules, as ``torch.nn.Module``.

    Assigning a Parameter, a Module or (for a registered name) a buffer tensor to an
    attribute registers it; ``module(*args)`` runs the forward pre-hooks, ``forward`` and
    the forward hooks.
    """

    training: bool

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            got = len(args) + 1
            raise TypeError(f"Module.__init__() takes 1 positional argument but {got} were given" if args else
                            f"Module.__init__() got an unexpected keyword argument '{next(iter(kwargs))}'")
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", {})
        setattr_(self, "_buffers", {})
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_modules", {})
        setattr_(self, "_forward_pre_hooks", OrderedDict())
        setattr_(self, "_forward_hooks", OrderedDict())
        setattr_(self, "_backward_pre_hooks", OrderedDict())
        setattr_(self, "_backward_hooks", OrderedDict())

    def forward(self, *args, **kwargs):
        """The computation of this module; subclasses define it."""
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # Registration -------------------------------------------------------------------------------

    def register_buffer(self, name, tensor, persistent=True):
        """Add a tensor that is state but not a parameter (e.g. BatchNorm's running mean);
        ``persistent=False`` keeps it out of ``state_dict``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_member_name("buffer", name, self, self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{typename(tensor)}' object to buffer '{name}' "
                            "(jitorch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name, param):
        """Add a Parameter (or None) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_member_name("parameter", name, self, self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{typename(param)}' object to parameter '{name}' "
                            "(jitorch.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be created "
                f"explicitly. To express '{name}' as a function of another Tensor, compute the value in "
                "the forward() method.")
        self._parameters[name] = param

    def add_module(self, name, module):
        """Add a child module (or None) under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{typename(module)} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {typename(name)}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f"module name can't contain \".\", got: {name}")
        if name == "":
            raise KeyError("module name can't be empty string \"\"")
        self._modules[name] = module

    def register_module(self, name, module):
        """Alias for `add_module`."""
        self.add_module(name, module)

    def get_submodule(self, target):
        """The submodule at the dotted path ``target`` ("" is this module); AttributeError naming
        the step of the path that is missing or not a Module."""
        mod = self
        for item in target.split(".") if target else ():
            if not hasattr(mod, item):
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def set_submodule(self, target, module, strict=False):
        """Put ``module`` at the dotted path ``target``, replacing the module there or (unless
        ``strict``) adding it to an existing parent."""
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        if not hasattr(parent, name):
            if strict:
                raise AttributeError(f"{parent._get_name()} has no attribute `{name}`")
        elif not isinstance(getattr(parent, name), Module):
            raise AttributeError(f"`{name}` is not an nn.Module")
        setattr(parent, name, module)

    def _get_member(self, target):
        """(owning module, attribute name, value) of the dotted path ``target``."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        return mod, name, getattr(mod, name)

    def get_parameter(self, target):
        """The parameter at the dotted path ``target`` (``"encoder.0.weight"``)."""
        _, name, param = self._get_member(target)
        if not isinstance(param, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return param

    def get_buffer(self, target):
        """The buffer at the dotted path ``target`` (``"bn.running_mean"``)."""
        mod, name, buffer = self._get_member(target)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return buffer

    # Attribute protocol ---------------------------------------------------------------------------

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            members = d.get(table)
            if members is not None and name in members:
                return members[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name, keep="_parameters")
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{typename(value)}' as parameter '{name}' "
                                "(jitorch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, keep="_modules")
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{typename(value)}' as child module '{name}' "
                                "(jitorch.nn.Module or None expected)")
            modules[name] = value
            return
        buffers = d.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{typename(value)}' as buffer '{name}' "
                                "(jitorch.Tensor or None expected)")
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def _forget(self, name, keep):
        """Drop ``name`` from the other tables before it is registered in ``keep`` (where it
        keeps its place, so reassigning a member does not reorder it)."""
        d = self.__dict__
        d.pop(name, None)
        for table in ("_parameters", "_buffers", "_modules"):
            if table != keep:
                d[table].pop(name, None)
        d["_non_persistent_buffers_set"].discard(name)

    def __delattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            members = self.__dict__[table]
            if name in members:
                del members[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(object.__dir__(self)) + list(self._parameters) + list(self._modules) + list(self._buffers)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    # Traversal -------------------------------------------------------------------------------------

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(qualified name, module) for this module and all below it, depth first."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if self in memo:
                return
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        """This module and every module below it."""
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        """(name, module) for each direct child (each module once)."""
        seen = set()
        for name, module in self._modules.items():
            if module is not None and module not in seen:
                seen.add(module)
                yield name, module

    def children(self):
        """The direct child modules."""
        for _, module in self.named_children():
            yield module

    def _named_members(self, table, prefix, recurse, remove_duplicate):
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        seen = set()
        for mod_prefix, module in modules:
            for name, value in module.__dict__[table].items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield (mod_prefix + "." if mod_prefix else "") + name, value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """(qualified name, parameter) pairs; shared parameters once unless ``remove_duplicate=False``."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        """The parameters of this module (and, with ``recurse``, of all below it)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        """(qualified name, buffer) pairs."""
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        """The buffers of this module (and, with ``recurse``, of all below it)."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # State --------------------------------------------------------------------------------------------

    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        """An OrderedDict of parameters and persistent buffers by qualified name (detached unless
        ``keep_vars``)."""
        if destination is None:
            destination = OrderedDict()
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def _local_state(self):
        persistent = {k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set}
        return {k: v for k, v in itertools.chain(self._parameters.items(), persistent.items()) if v is not None}

    def _match_state(self, state_dict, prefix, missing, unexpected, errors, copies):
        """Pair this module's tensors with their entries (recursing), noting torch's mismatches."""
        local = self._local_state()
        for name, target in local.items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            source = state_dict[key]
            if not isinstance(source, Tensor):
                errors.append(f'While copying the parameter named "{key}", expected jitorch.Tensor or Tensor-like '
                              f"object from checkpoint but received {type(source)}")
            elif target.ndim == 0 and source.shape == (1,):  # torch's allowance for old 1-element checkpoints
                copies.append((self, name, target, source.reshape(())))
            elif source.shape != target.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape {source.shape} from checkpoint, "
                              f"the shape in current model is {target.shape}.")
            else:
                copies.append((self, name, target, source))
        for key in state_dict:
            if not key.startswith(prefix):
                continue
            head, dot, _ = key[len(prefix):].partition(".")
            if (dot and head not in self._modules) or (not dot and head not in local):
                unexpected.append(key)
        for name, module in self._modules.items():
            if module is not None:
                module._match_state(state_dict, prefix + name + ".", missing, unexpected, errors, copies)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy parameters and buffers from ``state_dict``; returns (missing_keys, unexpected_keys).

        Raises RuntimeError with torch's message for a shape mismatch, or for missing or
        unexpected keys when ``strict``; nothing is copied when it raises.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        state_dict = OrderedDict(state_dict)  # a module may fill in entries old checkpoints lack
        missing, unexpected, errors, copies = [], [], [], []
        self._match_state(state_dict, "", missing, unexpected, errors, copies)
        if strict:
            if unexpected:
                errors.insert(0, f"Unexpected key(s) in state_dict: {_quoted(unexpected)}. ")
            if missing:
                errors.insert(0, f"Missing key(s) in state_dict: {_quoted(missing)}. ")
        if errors:
            details = "\n\t".join(errors)
            raise RuntimeError(f"Error(s) in loading state_dict for {self._get_name()}:\n\t{details}")
        with no_grad():
            for module, name, target, source in copies:
                if not assign:
                    target.copy_(source)
                elif isinstance(target, Parameter):
                    setattr(module, name, Parameter(source, requires_grad=target.requires_grad))
                else:
                    module._buffers[name] = source
        return _IncompatibleKeys(missing, unexpected)

    # Modes and conversions ------------------------------------------------------------------------

    def train(self, mode=True):
        """Set training mode on this module and all below it; returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        """``train(False)``: dropout off, batch norm on running statistics."""
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        """Set ``requires_grad`` on every parameter; returns self."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Reset every parameter's gradient: to None (default) or to zeros."""
        zero_grad_(self.parameters(), set_to_none)

    def apply(self, fn):
        """Call ``fn`` on every submodule (children first) and then on this module; returns self."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def _apply(self, fn):
        """Replace every parameter's (and gradient's) data and every buffer by ``fn`` of it,
        keeping the Parameter objects, so optimisers holding them stay valid."""
        for module in self.children():
            module._apply(fn)
        with no_grad():
            for p in self._parameters.values():
                if p is None:
                    continue
                p.data = fn(p)
                if p.grad is not None:
                    p.grad = fn(p.grad)
            for name, b in self._buffers.items():
                if b is not None:
                    self._buffers[name] = fn(b)
        return self

    def share_memory(self):
        """Move every parameter, gradient and buffer into shared memory (``Tensor.share_memory_``), all in one
        go, so processes given this module (jitorch.multiprocessing) update the same tensors; returns self."""
        tensors = [t for p in self.parameters() for t in (p, p.grad) if t is not None] + list(self.buffers())
        share_tensors(tensors)
        return self

    def to(self, *args, **kwargs):
        """Move and/or cast parameters and buffers: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``,
        ``to(tensor)``; a dtype casts floating tensors only; ``memory_format`` lays out the 4-d and 5-d ones
        (``to(memory_format=jitorch.channels_last)`` for a convolutional network)."""
        device, dtype, fmt = _parse_to(args, dict(kwargs))

        def convert(t):
            if fmt is not None and t.dim() in (4, 5):
                return t.to(device=device, dtype=dtype if t.is_floating_point() else None, memory_format=fmt)
            return t.to(device=device, dtype=dtype if t.is_floating_point() else None)
        return self._apply(convert)

    def _cast_floats(self, dtype):
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def float(self):
        """Cast floating parameters and buffers to float32."""
        return self._cast_floats(_dt.float32)

    def double(self):
        """Cast floating parameters and buffers to float64."""
        return self._cast_floats(_dt.float64)

    def half(self):
        """Cast floating parameters and buffers to float16."""
        return self._cast_floats(_dt.float16)

    def bfloat16(self):
        """Cast floating parameters and buffers to bfloat16."""
        return self._cast_floats(_dt.bfloat16)

    def type(self, dst_type):
        """Cast every parameter and buffer to ``dst_type``."""
        return self._apply(lambda t: t.type(dst_type))

    def cpu(self):
        """Move parameters and buffers to the CPU."""
        return self._apply(lambda t: t.cpu())

    def cuda(self, device=None):
        """Move parameters and buffers to a CUDA device."""
        return self._apply(lambda t: t.cuda(device))

    # Calls and hooks ---------------------------------------------------------------------------------

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """Call ``hook(module, args)`` (or ``hook(module, args, kwargs)``) before forward; a non-None
        result replaces the arguments. Returns a handle whose ``remove()`` unregisters it."""
        return self._add_hook(self._forward_pre_hooks, (hook, with_kwargs), prepend, "register_forward_pre_hook")

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False):
        """Call ``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) after
        forward; a non-None result replaces the output. Returns a removable handle."""
        return self._add_hook(self._forward_hooks, (hook, with_kwargs), prepend, "register_forward_hook")

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """Call ``hook(module, grad_output)`` when the gradients of this module's outputs are known,
        before its inputs' are computed; a returned tuple (one entry per output) replaces them.

        Modifying the module's inputs or outputs in place is then an error, as in torch (they pass
        through an identity autograd Function). Returns a removable handle."""
        return self._add_hook(self._backward_pre_hooks, hook, prepend, "register_full_backward_pre_hook")

    def register_full_backward_hook(self, hook, prepend=False):
        """Call ``hook(module, grad_input, grad_output)`` once per backward through a call of this
        module, when the gradients of its inputs are computed; a returned tuple (one entry per
        positional input) replaces ``grad_input``. Entries are None for non-tensor arguments and
        outputs; with no input requiring grad, ``grad_input`` is all None and the hook fires (with a
        warning) when ``grad_output`` is known.

        Modifying the module's inputs or outputs in place is then an error, as in torch. Returns a
        removable handle.

        In a function compiled with ``jitorch.compile`` the hook runs while tracing, as forward hooks
        do: the ops it calls become part of the compiled backward, its other Python effects happen
        once, and reading tensor values (``.item()``) makes the function run eagerly."""
        return self._add_hook(self._backward_hooks, hook, prepend, "register_full_backward_hook")

    @staticmethod
    def _add_hook(hooks, entry, prepend, method):
        if is_compiling():
            raise trace_error(method, "it adds a hook to a module, which a graph cannot repeat at each call; "
                              "register the hook once, outside the compiled function")
        return add_hook(hooks, entry, prepend)

    def _call_with_hooks(self, args, kwargs):
        for hook, with_kwargs in list(self._forward_pre_hooks.values()):
            if with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                                           f"but got {result}.")
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        backward_hook = None
        if self._backward_hooks or self._backward_pre_hooks:
            backward_hook = BackwardHook(self, list(self._backward_hooks.values()),
                                         list(self._backward_pre_hooks.values()))
            args = backward_hook.setup_input_hook(args)
        output = self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_hooks.values()):
            result = hook(self, args, kwargs, output) if with_kwargs else hook(self, args, output)
            if result is not None:
                output = result
        if backward_hook is not None:
            if not isinstance(output, (Tensor, tuple)):
                warnings.warn("For backward hooks to be called, module output should be a Tensor or a tuple of "
                              f"Tensors but received {type(output)}", stacklevel=user_stacklevel())
            output = backward_hook.setup_output_hook(output)
        return output

    def __call__(self, *args, **kwargs):
        if is_compiling():
            _guard_call_state(self)
        if self._forward_pre_hooks or self._forward_hooks or self._backward_hooks or self._backward_pre_hooks:
            return self._call_with_hooks(args, kwargs)
        return self.forward(*args, **kwargs)

    # Printing ---------------------------------------------------------------------------------------

    def _get_name(self):
        return type(self).__name__

    def extra_repr(self):
        """The layer's settings shown inside its repr's parentheses; layers override it."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2) for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        body = ""
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                body = extra_lines[0]
            else:
                body = "\n  " + "\n  ".join(lines) + "\n"
        return f"{self._get_name()}({body})"
