"""The entries measured: torch's public API, each with its area and, where it does not apply, why."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re

import torch
import torch.optim.lr_scheduler as lr_scheduler
import torch.overrides

# Namespaces whose functions torch.overrides lists, in the order a function's public names are looked up.
FUNCTION_NAMESPACES = ("torch", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft", "torch.nn.init")

AREAS = {
    "torch": "torch.*", "Tensor": "torch.Tensor", "nn.functional": "torch.nn.functional",
    "linalg": "torch.linalg", "special": "torch.special", "fft": "torch.fft", "nn.init": "torch.nn.init",
    "nn": "torch.nn modules", "optim": "torch.optim", "lr_scheduler": "torch.optim.lr_scheduler",
    "autograd": "torch.autograd",
}
# The areas of the headline figure: the functions and Tensor methods (what torch.overrides enumerates).
FUNCTION_AREAS = ("torch", "Tensor", "nn.functional", "linalg", "special", "fft", "nn.init")


@dataclasses.dataclass
class Entry:
    """One public name of torch, e.g. ``torch.Tensor.add_``; ``excluded`` says why it does not apply."""

    area: str
    path: str
    kind: str
    excluded: str | None = None

    @property
    def short(self):
        """The name inside its namespace: ``add_`` for ``torch.Tensor.add_``."""
        return self.path.rsplit(".", 1)[1]


# (pattern on the entry's path, reason): the first match excludes the entry. Patterns are anchored searches.
EXCLUSIONS = [
    (r"(^|\.)_(?!_)", "private name"),
    (r"\.__(torch_function|torch_dispatch|class|init_subclass|subclasshook|new|dir|delitem|dlpack|dlpack_device|"
     r"cuda_array_interface|array_wrap|reduce_ex|setstate)__$", "Python/interop protocol, not user API"),
    (r"\.__(complex)__$|\.(complex|polar|view_as_real|view_as_complex|imag|cfloat|cdouble|chalf|stft|istft|eig|eigvals)$",
     "complex numbers"),
    (r"^torch\.fft\.(?!(fftfreq|rfftfreq|fftshift|ifftshift)$)", "complex numbers (FFT)"),
    (r"(?<!init\.)sparse|coalesce|crow_indices|ccol_indices|col_indices|row_indices|\.(indices|values|smm|spmm|hspmm|"
     r"sspaddmm|dense_dim|to_dense|saddmm|dsmm|hsmm)$", "sparse layouts"),
    (r"quantiz|\.q_|qscheme|int_repr|dequantize|fake_quant|qparams|fbgemm", "quantized tensors"),
    (r"\.(names|name|rename|rename_|refine_names|align_to|align_as|has_names)$", "named tensors"),
    (r"nested|to_padded_tensor", "nested tensors"),
    (r"mkldnn|miopen|cudnn|vulkan|nnpack", "backend internals (MKLDNN, MIOpen, cuDNN, Vulkan)"),
    (r"\.(ipu|xpu|mtia|maia)$|_(ipu|xla|hpu|mtia)_|autocast_(in|de)crement_nesting|clear_autocast_cache",
     "other accelerators / autocast internals"),
    (r"\.(is_distributed)$|distributed", "torch.distributed (its own issue)"),
    (r"^torch\.(sym_\w+|fork|wait|import_ir_module\w*|parse_ir|parse_schema|parse_type_comment|"
     r"merge_type_from_type_comment|unify_type_list|cond)$", "TorchScript / symbolic-shape internals"),
    (r"^torch\.(?!index_copy$|narrow_copy$)\w+_copy$", "functionalisation copy variant (torch.compile internals)"),
    (r"^torch\.(native_\w+|batch_norm_\w+|\w+_backward\w*|convolution|constant_pad_nd|norm_except_dim|"
     r"grid_sampler\w*|affine_grid_generator|segment_reduce|rnn_tanh\w*|rnn_relu\w*|lstm|gru|lstm_cell|gru_cell|"
     r"embedding_renorm_|slice_inverse|feature_dropout|feature_alpha_dropout|conv_tbc|hash_tensor)$|"
     r"\.Tensor\.slice_inverse$|native_channel_shuffle",
     "ATen kernel behind a module or functional, not documented as API"),
    (r"^torch\.nn\.functional\.(boolean_dispatch|handle_torch_function|has_torch_function\w*|assert_int_or_pair)$",
     "torch_function protocol helpers"),
    (r"^torch\.nn\.functional\.(grouped_mm|scaled_mm|scaled_grouped_mm)$", "CUDA low-precision (fp8) GEMM"),
    (r"^torch\.nn\.init\.(constant|normal|uniform|xavier_normal|xavier_uniform|kaiming_normal|kaiming_uniform|"
     r"dirac|eye|orthogonal|sparse)$", "deprecated alias (torch warns; the `_` form is the API)"),
    (r"\.Tensor\.(eig|lstsq|solve|symeig|reinforce|volatile)$", "removed from torch (raises or is a no-op)"),
    (r"^torch\.(from_file|frombuffer|set_flush_denormal|empty_permuted|is_storage|typename|"
     r"thread_safe_generator|get_device_module|set_default_tensor_type)$",
     "storage/process internals without a jitorch counterpart"),
    (r"^torch\.nn\.(Container|NLLLoss2d|DataParallel|SyncBatchNorm|Lazy\w+)$",
     "deprecated, distributed or lazy-initialisation module"),
    (r"^torch\.optim\.(SparseAdam)$", "sparse layouts"),
    (r"^torch\.autograd\.(NestedIOFunction|profiler\w*|grad_mode|variable|anomaly_mode)$|"
     r"^torch\.autograd\.graph\.(set_override_stale_capture_stream|set_warn_on_accumulate_grad_stream_mismatch|"
     r"region_activation_memory_budget)$",
     "deprecated, a submodule, a profiler or a CUDA-stream setting"),
]


# Applicable although an exclusion's pattern matches: the Tensor.is_* predicates that real code asks of a
# plain tensor (optimizers test ``p.grad.is_sparse``), answered False.
KEPT = r"\.Tensor\.is_(sparse|sparse_csr|quantized|nested|mkldnn|vulkan|xpu|ipu|mtia|maia)$"


def exclusion(path):
    """Why ``path`` does not apply to jitorch, or None when it does."""
    if re.search(KEPT, path):
        return None
    for pattern, reason in EXCLUSIONS:
        if re.search(pattern, path):
            return reason
    return None


def area_of(path):
    """The area (a key of AREAS) of a dotted torch path."""
    for prefix, area in (("torch.Tensor.", "Tensor"), ("torch.nn.functional.", "nn.functional"),
                         ("torch.nn.init.", "nn.init"), ("torch.linalg.", "linalg"), ("torch.special.", "special"),
                         ("torch.fft.", "fft"), ("torch.optim.lr_scheduler.", "lr_scheduler"),
                         ("torch.optim.", "optim"), ("torch.autograd.", "autograd"), ("torch.nn.", "nn")):
        if path.startswith(prefix):
            return area
    return "torch"


def resolve(root, path):
    """The object at dotted ``path`` below module ``root`` (``torch.nn.ReLU`` with root jitorch is
    ``jitorch.nn.ReLU``), importing submodules that are not attributes yet; AttributeError if absent."""
    parts = path.split(".")[1:]
    obj = root
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            if not inspect.ismodule(obj):
                raise
            name = ".".join([root.__name__] + parts[:i + 1])
            try:
                obj = importlib.import_module(name)
            except ImportError:
                raise AttributeError(f"{name} does not exist") from None
    return obj


def _listed_functions():
    """ids of every function and Tensor method torch.overrides knows (the overridable and the ignored)."""
    listed = set(map(id, torch.overrides.get_testing_overrides()))
    listed |= set(map(id, torch.overrides.get_ignored_functions()))
    return listed


def _namespace_functions(listed):
    """{path: kind} of the public callables of FUNCTION_NAMESPACES: those torch.overrides lists, and, for
    the namespaces other than torch itself, every function they define."""
    found = {}
    for namespace in FUNCTION_NAMESPACES:
        module = importlib.import_module(namespace)
        for name in dir(module):
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.ismodule(obj) or not callable(obj):
                continue
            own = namespace != "torch" and (getattr(obj, "__module__", None) or "").startswith("torch")
            if id(obj) in listed or own:
                found[f"{namespace}.{name}"] = "function"
    return found


def _tensor_members(listed):
    """{path: kind} of torch.Tensor's methods and properties (dunders only where torch.overrides lists them)."""
    found = {}
    for key in list(torch.overrides.get_testing_overrides()) + list(torch.overrides.get_ignored_functions()):
        name = torch.overrides.resolve_name(key) if callable(key) else None
        if name and name.startswith("torch.Tensor."):
            prop = name.endswith(".__get__")
            found[name.removesuffix(".__get__")] = "property" if prop else "method"
    for name in dir(torch.Tensor):
        if not name.startswith("_") and f"torch.Tensor.{name}" not in found:
            obj = inspect.getattr_static(torch.Tensor, name)
            found[f"torch.Tensor.{name}"] = "method" if callable(obj) else "property"
    return found


def _classes(module_name, base, kind):
    """{path: kind} of the public subclasses of ``base`` in ``module_name`` (``base`` itself included)."""
    module = importlib.import_module(module_name)
    return {f"{module_name}.{n}": kind for n in dir(module)
            if not n.startswith("_") and inspect.isclass(getattr(module, n)) and issubclass(getattr(module, n), base)
            and getattr(module, n).__module__.startswith(module_name.rsplit(".", 1)[0])}


def _autograd_names():
    """{path: kind} of torch.autograd's public API: its __all__ and its functional, forward_ad and graph
    helpers."""
    found = {f"torch.autograd.{n}": "autograd" for n in torch.autograd.__all__}
    for sub in ("functional", "forward_ad", "graph"):
        module = importlib.import_module(f"torch.autograd.{sub}")
        for name in dir(module):
            obj = getattr(module, name)
            if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__:
                found[f"torch.autograd.{sub}.{name}"] = "autograd"
    return found


def entries():
    """Every entry, sorted by area then path, exclusions included (with their reason)."""
    listed = _listed_functions()
    paths = {**_namespace_functions(listed), **_tensor_members(listed)}
    paths.update(_classes("torch.nn", torch.nn.Module, "module"))
    paths.update(_classes("torch.optim", torch.optim.Optimizer, "optimizer"))
    paths.update({f"torch.optim.lr_scheduler.{n}": "scheduler" for n in lr_scheduler.__all__})
    paths.update(_autograd_names())
    order = list(AREAS)
    found = [Entry(area_of(p), p, k, exclusion(p)) for p, k in paths.items()]
    return sorted(found, key=lambda e: (order.index(e.area), e.path))
