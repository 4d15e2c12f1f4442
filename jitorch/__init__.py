"""jitorch: a PyTorch-style tensor library and JIT compiler in Python.

    import jitorch as jt
    x = jt.arange(6.0).view(2, 3)
    y = (x * 2).sum(dim=1)
"""

from __future__ import annotations

import importlib as _importlib
import inspect as _inspect
import sys as _sys
import types as _types

from .runtime.version import __version__  # noqa: F401
from .runtime.allocator import keep_freed_memory as _keep_freed_memory

_keep_freed_memory()  # eager ops' temporaries reuse freed memory instead of faulting in new pages

from .runtime import dtypes as _dtypes
from .runtime import summation as _summation
from .runtime.dtypes import (  # noqa: F401
    bool, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32, float64, dtype,
    promote_types, result_type as _result_type, get_default_dtype, set_default_dtype, can_cast, finfo, iinfo,
)
from .runtime.device import device, get_default_device, set_default_device  # noqa: F401
from .tensor import Tensor, Size  # noqa: F401
from . import ops as _ops
from .ops import registry as _registry

float = _dtypes.float32
double = _dtypes.float64
half = _dtypes.float16
long = _dtypes.int64
int = _dtypes.int32
short = _dtypes.int16

_registry.install(Tensor)
# torch.special's own ops (``special_zeta``) are only in jitorch.special, as in torch
globals().update({k: v for k, v in _registry.FUNCTIONS.items() if not k.startswith(("_", "special_"))})

from .tensor import install_operators  # noqa: E402

install_operators(_registry.FUNCTIONS)

from .ops.creation import tensor, as_tensor, from_numpy  # noqa: E402,F401
from .ops.dlpack import from_dlpack  # noqa: E402,F401
from .ops.random_ops import manual_seed, seed, initial_seed, Generator, default_generator  # noqa: E402,F401
from ._tensor_str import set_printoptions  # noqa: E402,F401
from .api import *  # noqa: E402,F401,F403
from .ops.factories import *  # noqa: E402,F401,F403
from .backends.cuda import backend as _cuda_backend  # noqa: E402,F401  (registers itself for device "cuda")
from . import backends  # noqa: E402,F401
from .backends.flags import (  # noqa: E402,F401
    are_deterministic_algorithms_enabled, get_deterministic_debug_mode, get_float32_matmul_precision,
    is_deterministic_algorithms_warn_only_enabled, set_deterministic_debug_mode, set_float32_matmul_precision,
    use_deterministic_algorithms,
)
from . import cuda  # noqa: E402,F401
from . import accelerator  # noqa: E402,F401
from . import random  # noqa: E402,F401
from .random import get_rng_state, set_rng_state  # noqa: E402,F401
from .runtime.threads import (  # noqa: E402,F401
    get_num_interop_threads, get_num_threads, init_num_threads, is_warn_always_enabled, set_num_interop_threads,
    set_num_threads, set_warn_always)
from . import special  # noqa: E402,F401
from . import autograd  # noqa: E402,F401
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402,F401
from .autograd.anomaly_mode import (  # noqa: E402,F401
    is_anomaly_check_nan_enabled, is_anomaly_enabled, set_anomaly_enabled)
from . import linalg  # noqa: E402,F401
from . import fft  # noqa: E402,F401
from .codegen.errors import CompileError  # noqa: E402,F401
from .legacy import types as _legacy_types  # noqa: E402

globals().update(_legacy_types("jitorch", is_cuda=False))  # FloatTensor, LongTensor, ...
from . import amp, cpu  # noqa: E402,F401
from .cuda import amp as _cuda_amp  # noqa: E402,F401  (jitorch.cuda.amp)
from .amp import autocast  # noqa: E402,F401
from .runtime.autocast_mode import (  # noqa: E402,F401
    autocast_decrement_nesting, autocast_increment_nesting, clear_autocast_cache, get_autocast_cpu_dtype,
    get_autocast_dtype, get_autocast_gpu_dtype, is_autocast_cache_enabled, is_autocast_cpu_enabled,
    is_autocast_enabled, set_autocast_cache_enabled, set_autocast_cpu_dtype, set_autocast_cpu_enabled,
    set_autocast_dtype, set_autocast_enabled, set_autocast_gpu_dtype,
)


def result_type(tensor1, tensor2):
    """The dtype an op on ``tensor1`` and ``tensor2`` (tensors or numbers) returns."""
    return _result_type(tensor1, tensor2)


def is_tensor(obj):
    """True if ``obj`` is a jitorch Tensor."""
    return isinstance(obj, Tensor)


def numel(input):
    """Number of elements of ``input``."""
    return input.numel()


# Submodules and names that load at first use, as torch loads torch.onnx: attribute access
# (``jitorch.optim.SGD``, ``jitorch.utils.data``, ``jitorch.explain(f)``) imports them, so no program needs an import
# of its own, while ``import jitorch`` stays quick (issue 19; tests/test_import.py lists what it must not load).


def _row_kernel(name, dtype, cols):
    """ops.reductions' row softmax kernel: the code generator loads at the first eager softmax large enough
    to take it (an eager program need not load LLVM at ``import jitorch``), and registers its own."""
    from .codegen import rows
    return rows.row_kernel(name, dtype, cols)


def _layer_norm_kernel(dtype, weight, bias):
    """ops.normalization's layer norm kernel, loaded as `_row_kernel` is."""
    from .codegen import rows
    return rows.layer_norm_kernel(dtype, weight, bias)


def _block_sums(blocks, squares):
    """runtime.summation's block sums on the team (codegen/pairwise.py), loaded as `_row_kernel` is."""
    from .codegen import pairwise
    return pairwise.block_sums(blocks, squares)


def _scatter_rows_kernel(dtype):
    """ops.indexing's scatter-add of rows (index_add, an embedding's backward), loaded as `_row_kernel` is."""
    from .codegen import scatter
    return scatter.scatter_rows_kernel(dtype)


def _skinny_kernel(dtype, m, k, n, a_strides, b_rows, c_rows):
    """ops.linalg's generated product of few rows and a short sum (small convolutions), loaded as `_row_kernel`
    is."""
    from .codegen import gemm
    return gemm.skinny_product(dtype, m, k, n, a_strides, b_rows, c_rows)


def _window_kernel(dtype, m, k, n, a_strides, rows, cols, c_rows):
    """ops.linalg's generated product of a weight and a convolution's windows read in place, loaded as
    `_row_kernel` is."""
    from .codegen import gemm
    return gemm.window_product(dtype, m, k, n, a_strides, rows, cols, c_rows)


def _window_sum_kernel(dtype, m, k, n, a_rows, rows, cols, c_strides):
    """ops.linalg's generated weight-gradient product over a convolution's windows read in place, loaded as
    `_row_kernel` is."""
    from .codegen import gemm
    return gemm.window_sum_product(dtype, m, k, n, a_rows, rows, cols, c_strides)


def _long_sum_kernel(dtype, m, k, n, a_rows, bt_rows, c_strides):
    """ops.linalg's generated product over a long sum (small convolutions' weight gradients), loaded as
    `_row_kernel` is."""
    from .codegen import gemm
    return gemm.long_sum_product(dtype, m, k, n, a_rows, bt_rows, c_strides)


def _power_kernel(name, dtype):
    """ops.powers' kernel of pow, xlogy or a float32 arc function (jitorch's own definitions, `_POWER_OPS`), loaded
    as `_row_kernel` is."""
    from .jit import eager_kernels
    fn, arity = _POWER_OPS[name]
    return eager_kernels.kernel(fn, name, dtype, arity)


def _loop_kernel(dtype, op, scalars):
    """ops.special_cephes' loop calling a C function (``expf``, ``lgamma`` ...) or an fma on each element, loaded
    as `_row_kernel` is."""
    from .codegen import c_calls
    return c_calls.loop_kernel(dtype, op, scalars)


_POWER_OPS = {"pow": (Tensor.__pow__, 2), "xlogy": (Tensor.xlogy, 2),
              **{name: (getattr(Tensor, name), 1) for name in ("asin", "acos", "atan", "asinh", "acosh", "atanh")}}
_ops.reductions.ROW_KERNEL = _row_kernel
_ops.powers.KERNEL = _power_kernel
_summation.BLOCK_SUMS = _block_sums
_ops.indexing.SCATTER_ROWS_KERNEL = _scatter_rows_kernel
_ops.normalization.LAYER_NORM_KERNEL = _layer_norm_kernel
_ops.linalg.SKINNY_KERNEL = _skinny_kernel
_ops.linalg.LONG_SUM_KERNEL = _long_sum_kernel
_ops.linalg.WINDOW_KERNEL = _window_kernel
_ops.linalg.WINDOW_SUM_KERNEL = _window_sum_kernel
_ops.special_cephes.LOOP_KERNEL = _loop_kernel

# name -> (module, attribute of that module, or None for the module itself)
_LAZY = {
    "multiprocessing": (".multiprocessing", None),  # the stdlib's multiprocessing and socket modules
    "distributed": (".distributed", None),  # and MPI
    "safetensors": (".safetensors", None),  # a file format most programs never read
    "optim": (".optim", None),
    "utils": (".utils", None),  # jitorch.utils.data loads at its first use in turn
    "explain": (".jit.explain", "explain"),  # the plan cache, the HTML report
    "onnx": (".onnx", None),
    "profiler": (".profiler", None),  # the socket module, for its traces' host name
    "serialization": (".serialization", None),  # the zipfile, json and secrets modules
    "save": (".serialization", "save"),
    "load": (".serialization", "load"),
    "export": (".export", None),  # a callable package: jitorch.export(fn, args)
    # the tracer, the graph library and the compiler's passes, with the logging module
    "jit": (".jit", None),
    "ir": (".ir", None),
    "compiler": (".compiler", None),
    "compile": (".jit", "compile"),
    "func": (".func", None),
    "vmap": (".func", "vmap"),  # torch.vmap
    "nn": (".nn", None),  # modules, functional, aten forms: ~11 ms CPU, and jit through them
}
# torch's own names for nn ops (``torch.conv2d``, ``torch.batch_norm``): jitorch.nn.aten_forms, loaded with
# jitorch.nn at the first of them (tests/test_import.py checks this list against that module's __all__)
_ATEN_FORMS = (
    "adaptive_avg_pool1d", "adaptive_max_pool1d", "alpha_dropout", "alpha_dropout_", "avg_pool1d", "batch_norm",
    "bilinear", "binary_cross_entropy_with_logits", "celu", "celu_", "channel_shuffle", "conv1d", "conv2d", "conv3d",
    "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cosine_embedding_loss",
    "cosine_similarity", "ctc_loss", "dropout", "dropout_", "embedding", "embedding_bag", "feature_alpha_dropout",
    "feature_alpha_dropout_", "feature_dropout", "feature_dropout_", "group_norm", "hardshrink",
    "hinge_embedding_loss", "instance_norm", "kl_div", "layer_norm", "margin_ranking_loss", "max_pool1d",
    "max_pool1d_with_indices", "max_pool2d", "max_pool3d", "native_layer_norm", "pairwise_distance", "pdist",
    "pixel_shuffle", "pixel_unshuffle", "poisson_nll_loss", "prelu", "rms_norm", "rrelu", "rrelu_", "selu", "selu_",
    "threshold", "threshold_", "triplet_margin_loss",
)
_LAZY.update((name, (".nn.aten_forms", name)) for name in _ATEN_FORMS)
for _name in _ATEN_FORMS:  # the aten form, not the registry op of that name (layer_norm), as torch's namespace has
    globals().pop(_name, None)


def _lazy_method(name, module):
    """A Tensor method that ``module`` (a higher layer) defines and installs when imported: until then, this
    stub, which imports it and calls what it installed. Its signature is the method's (asked for, it loads it)."""
    def installed():
        _importlib.import_module(module, __name__)
        return getattr(Tensor, name)

    def load_and_call(self, *args, **kwargs):
        return installed()(self, *args, **kwargs)
    load_and_call.__name__ = load_and_call.__qualname__ = name
    load_and_call.__signature__ = _registry._DeferredSignature(lambda: _inspect.signature(installed()))
    return load_and_call


# the Tensor methods torch has for nn ops, which jitorch.nn.aten_forms installs
for _name in ("prelu", "hardshrink"):
    setattr(Tensor, _name, _lazy_method(_name, ".nn.aten_forms"))
del _name


def __getattr__(name):
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module 'jitorch' has no attribute {name!r}")
    module = _importlib.import_module(found[0], __name__)
    value = module if found[1] is None else getattr(module, found[1])
    globals()[name] = value  # later lookups find it without coming here
    return value


def __dir__():
    return sorted({*globals(), *_LAZY})


class _Namespace(_types.ModuleType):
    """The ``jitorch`` module's type: it loads `jitorch.export` with `jitorch.serialization`."""

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        # `load` reads exported programs with the loader that jitorch.export registers when imported (a higher
        # layer than serialization, which cannot import it). Python sets this attribute when it has imported
        # jitorch.serialization by any route (``jitorch.load``, ``import jitorch.serialization``, ``from
        # jitorch.serialization import load``), so a program that can reach `load` finds the format registered.
        if name == "serialization":
            _importlib.import_module(".export", __name__)


_sys.modules[__name__].__class__ = _Namespace

# ``from jitorch import *`` binds the public names, the lazy ones among them as they were bound when they
# loaded at import (it loads them, as such an import did); not the libraries that start MPI or processes.
__all__ = sorted({name for name in globals() if not name.startswith("_")}
                 | (set(_LAZY) - {"multiprocessing", "distributed", "safetensors"}))
