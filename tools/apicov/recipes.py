"""Hand-written smoke calls for the functions and Tensor methods torch's OpInfos do not cover (factories,
global settings, autograd methods, Python protocols) and for nn.init. Each recipe is ``fn(lib)``, run once
on torch and once on jitorch (``lib.root`` is the library, ``lib.tensor(array)`` makes a tensor), paired
with the comparison mode (see compare.difference). Setters are called with the value their getter
returns, so no recipe changes either library's state."""

from __future__ import annotations

import copy
import os
import tempfile

import numpy as np

RNG_DATA = np.random.default_rng(1234).standard_normal((3, 4)).astype(np.float32)


def x(lib, requires_grad=False, data=RNG_DATA):
    """The recipes' standard 3x4 float32 tensor (fixed values)."""
    return lib.tensor(data, requires_grad)


def _graded(lib):
    """A leaf that requires grad, and the gradient of sum(leaf ** 3) through it."""
    w = x(lib, True)
    (w ** 3).sum().backward()
    return w


def _with_setting(getter, setter):
    """A recipe that sets a global setting to the value its getter returns, then reads it again."""
    def recipe(lib):
        value = getter(lib.root)
        setter(lib.root, value)
        return getter(lib.root)
    return recipe


def _save_load(lib):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.pt")
        lib.root.save({"x": x(lib)}, path)
        return lib.root.load(path)["x"]


def _compile(lib):
    options = {"backend": "eager"} if lib.is_torch else {}
    return lib.root.compile(lambda t: (t * 2 + 1).relu().sum(0), **options)(x(lib))


def _print_options(lib):
    lib.root.set_printoptions(precision=2)
    try:
        return repr(x(lib))
    finally:
        lib.root.set_printoptions(profile="default")


def _default_device(lib):
    lib.root.set_default_device("cpu")
    try:
        return lib.root.get_default_device()
    finally:
        lib.root.set_default_device(None)


def _post_accumulate_hook(lib):
    seen = []
    w = x(lib, True)
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.sum().item()))
    (w * w).sum().backward()
    return seen


def _retain_grad(lib):
    w = x(lib, True)
    y = w * 2
    y.retain_grad()
    (y ** 2).sum().backward()
    return y.grad


def _register_hook(lib):
    w = x(lib, True)
    w.register_hook(lambda g: g * 3)
    (w * w).sum().backward()
    return w.grad


def _setitem(lib):
    t = x(lib)
    t[0, 1] = 5.0
    t[1:, ::2] = lib.tensor(np.ones((2, 2), np.float32))
    return t


def _bounded(fn, low, high):
    """A recipe that fills a tensor with random init ``fn`` and checks its values lie in [low, high]."""
    def recipe(lib):
        w = fn(lib.root.nn.init, lib.root.empty(40, 50))
        return bool((w.min() >= low).item() and (w.max() <= high).item()), list(w.shape)
    return recipe


def _orthogonal(lib):
    w = lib.root.nn.init.orthogonal_(lib.root.empty(3, 5))
    return w @ w.t()


def _sparse_init(lib):
    w = lib.root.nn.init.sparse_(lib.root.empty(10, 4), sparsity=0.5)
    return (w == 0).sum(0)


def _seeded(fn):
    """A recipe of random values that depend only on the seed: compared by shape and dtype."""
    def recipe(lib):
        lib.root.manual_seed(0)
        return fn(lib.root)
    return recipe


def r(fn, mode="values"):
    return fn, mode


def _autocast_settings():
    """Recipes of the autocast getters and setters (each setter given its getter's value)."""
    return {
        "torch.get_autocast_dtype": [r(lambda lib: lib.root.get_autocast_dtype("cpu"))],
        "torch.get_autocast_cpu_dtype": [r(lambda lib: lib.root.get_autocast_cpu_dtype())],
        "torch.get_autocast_gpu_dtype": [r(lambda lib: lib.root.get_autocast_gpu_dtype())],
        "torch.is_autocast_enabled": [r(lambda lib: lib.root.is_autocast_enabled("cpu"))],
        "torch.is_autocast_cpu_enabled": [r(lambda lib: lib.root.is_autocast_cpu_enabled())],
        "torch.is_autocast_cache_enabled": [r(lambda lib: lib.root.is_autocast_cache_enabled())],
        "torch.set_autocast_enabled": [r(_with_setting(lambda t: t.is_autocast_enabled("cpu"),
                                                       lambda t, v: t.set_autocast_enabled("cpu", v)))],
        "torch.set_autocast_cpu_enabled": [r(_with_setting(lambda t: t.is_autocast_cpu_enabled(),
                                                           lambda t, v: t.set_autocast_cpu_enabled(v)))],
        "torch.set_autocast_dtype": [r(_with_setting(lambda t: t.get_autocast_dtype("cpu"),
                                                     lambda t, v: t.set_autocast_dtype("cpu", v)))],
        "torch.set_autocast_cpu_dtype": [r(_with_setting(lambda t: t.get_autocast_cpu_dtype(),
                                                         lambda t, v: t.set_autocast_cpu_dtype(v)))],
        "torch.set_autocast_gpu_dtype": [r(_with_setting(lambda t: t.get_autocast_gpu_dtype(),
                                                         lambda t, v: t.set_autocast_gpu_dtype(v)))],
        "torch.set_autocast_cache_enabled": [r(_with_setting(lambda t: t.is_autocast_cache_enabled(),
                                                             lambda t, v: t.set_autocast_cache_enabled(v)))],
    }


def _global_settings():
    """Recipes of torch's global getters and setters."""
    same = _with_setting
    return {
        "torch.get_default_dtype": [r(lambda lib: lib.root.get_default_dtype())],
        "torch.set_default_dtype": [r(same(lambda t: t.get_default_dtype(), lambda t, v: t.set_default_dtype(v)))],
        "torch.get_num_threads": [r(lambda lib: lib.root.get_num_threads(), "meta")],
        "torch.set_num_threads": [r(same(lambda t: t.get_num_threads(), lambda t, v: t.set_num_threads(v)), "meta")],
        "torch.get_num_interop_threads": [r(lambda lib: lib.root.get_num_interop_threads(), "meta")],
        "torch.set_num_interop_threads": [r(same(lambda t: t.get_num_interop_threads(),
                                                 lambda t, v: t.set_num_interop_threads(v)), "meta")],
        "torch.init_num_threads": [r(lambda lib: lib.root.init_num_threads())],
        "torch.manual_seed": [r(lambda lib: type(lib.root.manual_seed(0)).__name__)],
        "torch.seed": [r(lambda lib: lib.root.seed(), "meta")],
        "torch.initial_seed": [r(lambda lib: (lib.root.manual_seed(3), lib.root.initial_seed())[1])],
        "torch.get_rng_state": [r(lambda lib: lib.root.get_rng_state(), "ok")],
        "torch.set_rng_state": [r(lambda lib: (lib.root.manual_seed(0), lib.root.set_rng_state(
            lib.root.get_rng_state()), lib.root.rand(3).shape)[2])],
        "torch.is_grad_enabled": [r(lambda lib: lib.root.is_grad_enabled())],
        "torch.is_inference_mode_enabled": [r(lambda lib: lib.root.is_inference_mode_enabled())],
        "torch.are_deterministic_algorithms_enabled": [r(lambda lib: lib.root.are_deterministic_algorithms_enabled())],
        "torch.use_deterministic_algorithms": [r(same(lambda t: t.are_deterministic_algorithms_enabled(),
                                                      lambda t, v: t.use_deterministic_algorithms(v)))],
        "torch.is_deterministic_algorithms_warn_only_enabled": [
            r(lambda lib: lib.root.is_deterministic_algorithms_warn_only_enabled())],
        "torch.get_deterministic_debug_mode": [r(lambda lib: lib.root.get_deterministic_debug_mode())],
        "torch.set_deterministic_debug_mode": [r(same(lambda t: t.get_deterministic_debug_mode(),
                                                      lambda t, v: t.set_deterministic_debug_mode(v)))],
        "torch.get_float32_matmul_precision": [r(lambda lib: lib.root.get_float32_matmul_precision())],
        "torch.set_float32_matmul_precision": [r(same(lambda t: t.get_float32_matmul_precision(),
                                                      lambda t, v: t.set_float32_matmul_precision(v)))],
        "torch.is_anomaly_enabled": [r(lambda lib: lib.root.is_anomaly_enabled())],
        "torch.is_anomaly_check_nan_enabled": [r(lambda lib: lib.root.is_anomaly_check_nan_enabled())],
        "torch.set_anomaly_enabled": [r(same(lambda t: t.is_anomaly_enabled(), lambda t, v: t.set_anomaly_enabled(v)))],
        "torch.is_warn_always_enabled": [r(lambda lib: lib.root.is_warn_always_enabled())],
        "torch.set_warn_always": [r(same(lambda t: t.is_warn_always_enabled(), lambda t, v: t.set_warn_always(v)))],
        "torch.get_default_device": [r(lambda lib: lib.root.get_default_device())],
        "torch.set_default_device": [r(_default_device)],
        "torch.set_printoptions": [r(_print_options)],
        **_autocast_settings(),
    }


def _factories():
    """Recipes of the tensor factories."""
    return {
        "torch.arange": [r(lambda lib: lib.root.arange(5)), r(lambda lib: lib.root.arange(1, 10, 2.5)),
                         r(lambda lib: lib.root.arange(0, 1, 0.1, dtype=lib.root.float64))],
        "torch.range": [r(lambda lib: lib.root.range(0, 3))],
        "torch.zeros": [r(lambda lib: lib.root.zeros(2, 3)),
                        r(lambda lib: lib.root.zeros((2, 3), dtype=lib.root.int64))],
        "torch.ones": [r(lambda lib: lib.root.ones(2, 3)), r(lambda lib: lib.root.ones([4], dtype=lib.root.bool))],
        "torch.full": [r(lambda lib: lib.root.full((2, 3), 1.5)), r(lambda lib: lib.root.full((2,), 7))],
        "torch.empty": [r(lambda lib: lib.root.empty(2, 3), "meta")],
        "torch.empty_strided": [r(lambda lib: lib.root.empty_strided((2, 3), (1, 2)).stride())],
        "torch.eye": [r(lambda lib: lib.root.eye(3)), r(lambda lib: lib.root.eye(2, 4, dtype=lib.root.int32))],
        "torch.linspace": [r(lambda lib: lib.root.linspace(0, 1, 5)), r(lambda lib: lib.root.linspace(-2, 2, 1))],
        "torch.logspace": [r(lambda lib: lib.root.logspace(0, 2, 3)),
                           r(lambda lib: lib.root.logspace(0, 3, 4, base=2))],
        "torch.tensor": [r(lambda lib: lib.root.tensor([[1, 2], [3, 4]])), r(lambda lib: lib.root.tensor([1.5, 2])),
                         r(lambda lib: lib.root.tensor(3, dtype=lib.root.float16))],
        "torch.as_tensor": [r(lambda lib: lib.root.as_tensor([1, 2, 3])),
                            r(lambda lib: lib.root.as_tensor(np.arange(3.0), dtype=lib.root.float32))],
        "torch.asarray": [r(lambda lib: lib.root.asarray([1.0, 2.0])), r(lambda lib: lib.root.asarray(np.eye(2)))],
        "torch.from_numpy": [r(lambda lib: lib.root.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3)))],
        "torch.scalar_tensor": [r(lambda lib: lib.root.scalar_tensor(2.5))],
        "torch.rand": [r(_seeded(lambda t: t.rand(2, 3)), "meta")],
        "torch.randn": [r(_seeded(lambda t: t.randn(2, 3, dtype=t.float64)), "meta")],
        "torch.randint": [r(_seeded(lambda t: t.randint(0, 10, (3,))), "meta"),
                          r(_seeded(lambda t: sorted(set(t.randint(3, 5, (50,)).tolist()))))],
        "torch.randperm": [r(_seeded(lambda t: t.randperm(6).sort().values))],
        "torch.normal": [r(_seeded(lambda t: t.normal(0.0, 1.0, (3,))), "meta"),
                         r(_seeded(lambda t: t.normal(t.zeros(3), 1.0)), "meta")],
        "torch.bartlett_window": [r(lambda lib: lib.root.bartlett_window(5))],
        "torch.blackman_window": [r(lambda lib: lib.root.blackman_window(5))],
        "torch.hamming_window": [r(lambda lib: lib.root.hamming_window(5))],
        "torch.hann_window": [r(lambda lib: lib.root.hann_window(5)),
                              r(lambda lib: lib.root.hann_window(4, periodic=False))],
        "torch.kaiser_window": [r(lambda lib: lib.root.kaiser_window(5))],
        "torch.tril_indices": [r(lambda lib: lib.root.tril_indices(3, 3))],
        "torch.triu_indices": [r(lambda lib: lib.root.triu_indices(3, 4, 1))],
    }


def _dual(lib):
    """A dual tensor through ops, in a level entered by function and one by context manager: the primal and
    tangent of ``sin(x) * x``, and whether the result is an UnpackedDualTensor."""
    ad = lib.root.autograd.forward_ad
    level = ad.enter_dual_level()
    try:
        first = ad.unpack_dual(lib.root.sin(ad.make_dual(x(lib), x(lib) * 0 + 1)) * x(lib))
    finally:
        ad.exit_dual_level(level=level)
    with ad.dual_level():
        second = ad.unpack_dual(ad.make_dual(x(lib), x(lib)).exp())
    return first.primal, first.tangent, second.tangent, isinstance(first, ad.UnpackedDualTensor)


def _utilities():
    """Recipes of the type queries, saving, compiling and vmap."""
    return {
        "torch.promote_types": [r(lambda lib: lib.root.promote_types(lib.root.int32, lib.root.float16))],
        "torch.can_cast": [r(lambda lib: lib.root.can_cast(lib.root.float32, lib.root.int32))],
        "torch.result_type": [r(lambda lib: lib.root.result_type(x(lib), 1.0)),
                              r(lambda lib: lib.root.result_type(lib.root.tensor([1]), 2.5))],
        "torch.is_tensor": [r(lambda lib: (lib.root.is_tensor(x(lib)), lib.root.is_tensor([1])))],
        "torch.broadcast_shapes": [r(lambda lib: lib.root.broadcast_shapes((2, 1), (1, 3)))],
        "torch.save": [r(_save_load)],
        "torch.load": [r(_save_load)],
        "torch.compile": [r(_compile)],
        "torch.vmap": [r(lambda lib: lib.root.vmap(lambda row: (row * row).sum())(x(lib)))],
        "torch.numel": [r(lambda lib: lib.root.numel(x(lib)))],
        **{"torch.autograd.forward_ad." + name: [r(_dual)] for name in
           ("dual_level", "make_dual", "unpack_dual", "UnpackedDualTensor", "enter_dual_level", "exit_dual_level")},
        "torch.get_device": [r(lambda lib: lib.root.get_device(x(lib)))],
    }


def _tensor_methods():
    """Recipes of Tensor methods that need particular arguments or a graph."""
    t = "torch.Tensor."
    return {
        t + "new_tensor": [r(lambda lib: x(lib).new_tensor([1, 2]))],
        t + "new_zeros": [r(lambda lib: x(lib).new_zeros((2, 3)))],
        t + "new_ones": [r(lambda lib: x(lib).new_ones(2, dtype=lib.root.int64))],
        t + "new_full": [r(lambda lib: x(lib).new_full((2,), 3.5))],
        t + "new_empty": [r(lambda lib: x(lib).new_empty((2, 3)), "meta")],
        t + "new_empty_strided": [r(lambda lib: x(lib).new_empty_strided((2, 3), (3, 1)), "meta")],
        t + "new": [r(lambda lib: x(lib).new(2, 3), "meta"), r(lambda lib: x(lib).new([1.0, 2.0]))],
        t + "numpy": [r(lambda lib: x(lib).numpy())],
        t + "tolist": [r(lambda lib: x(lib).tolist()), r(lambda lib: lib.root.tensor([[1, 2]]).tolist())],
        t + "item": [r(lambda lib: lib.root.tensor([2.5]).item()), r(lambda lib: lib.root.tensor(3).item())],
        t + "backward": [r(lambda lib: _graded(lib).grad)],
        t + "grad": [r(lambda lib: _graded(lib).grad)],
        t + "register_hook": [r(_register_hook)],
        t + "register_post_accumulate_grad_hook": [r(_post_accumulate_hook)],
        t + "retain_grad": [r(_retain_grad)],
        t + "retains_grad": [r(lambda lib: (lambda y: (y.retain_grad(), y.retains_grad)[1])(x(lib, True) * 2))],
        t + "grad_fn": [r(lambda lib: (x(lib, True) * 2).grad_fn is not None)],
        t + "is_leaf": [r(lambda lib: (x(lib, True).is_leaf, (x(lib, True) * 2).is_leaf))],
        t + "requires_grad_": [r(lambda lib: x(lib).requires_grad_().requires_grad)],
        t + "requires_grad": [r(lambda lib: (x(lib).requires_grad, x(lib, True).requires_grad))],
        t + "detach_": [r(lambda lib: (lambda y: (y.detach_(), y.requires_grad)[1])(x(lib, True) * 2))],
        t + "apply_": [r(lambda lib: x(lib).apply_(lambda v: v * 2 + 1))],
        t + "map_": [r(lambda lib: x(lib).map_(x(lib), lambda a, b: a * b - 1))],
        t + "map2_": [r(lambda lib: x(lib).map2_(x(lib), x(lib), lambda a, b, c: a + b * c))],
        t + "__iter__": [r(lambda lib: list(iter(x(lib))))],
        t + "__contains__": [r(lambda lib: (2.0 in lib.root.tensor([1.0, 2.0]), 5.0 in lib.root.tensor([1.0])))],
        t + "__deepcopy__": [r(lambda lib: copy.deepcopy(x(lib, True)))],
        t + "__format__": [r(lambda lib: f"{lib.root.tensor(2.5):.3f}")],
        t + "__repr__": [r(lambda lib: repr(x(lib))), r(lambda lib: repr(lib.root.tensor([1, 2])))],
        t + "__setitem__": [r(_setitem)],
        t + "__len__": [r(lambda lib: len(x(lib)))],
        t + "__hash__": [r(lambda lib: hash(x(lib)), "meta")],
        t + "to": [r(lambda lib: x(lib).to(lib.root.float64)), r(lambda lib: x(lib).to("cpu")),
                   r(lambda lib: x(lib).to(lib.root.tensor([1]))), r(lambda lib: x(lib).to("cpu", lib.root.int32))],
        t + "type": [r(lambda lib: x(lib).type()), r(lambda lib: x(lib).type(lib.root.float64))],
    }


def _init():
    """Recipes of torch.nn.init."""
    n = "torch.nn.init."
    return {
        n + "calculate_gain": [r(lambda lib: lib.root.nn.init.calculate_gain("relu")),
                               r(lambda lib: lib.root.nn.init.calculate_gain("leaky_relu", 0.2))],
        n + "constant_": [r(lambda lib: lib.root.nn.init.constant_(lib.root.empty(2, 3), 0.3))],
        n + "ones_": [r(lambda lib: lib.root.nn.init.ones_(lib.root.empty(2, 3)))],
        n + "zeros_": [r(lambda lib: lib.root.nn.init.zeros_(lib.root.empty(2, 3)))],
        n + "eye_": [r(lambda lib: lib.root.nn.init.eye_(lib.root.empty(3, 4)))],
        n + "dirac_": [r(lambda lib: lib.root.nn.init.dirac_(lib.root.empty(2, 2, 3)))],
        n + "uniform_": [r(_bounded(lambda init, w: init.uniform_(w, -0.5, 0.5), -0.5, 0.5))],
        n + "normal_": [r(_seeded(lambda t: t.nn.init.normal_(t.empty(4, 5), 0.0, 0.1)), "meta")],
        n + "trunc_normal_": [r(_bounded(lambda init, w: init.trunc_normal_(w, std=1.0, a=-0.5, b=0.5), -0.5, 0.5))],
        n + "xavier_uniform_": [r(_bounded(lambda init, w: init.xavier_uniform_(w), -(6 / 90) ** 0.5,
                                           (6 / 90) ** 0.5))],
        n + "xavier_normal_": [r(_seeded(lambda t: t.nn.init.xavier_normal_(t.empty(4, 5))), "meta")],
        n + "kaiming_uniform_": [r(_bounded(lambda init, w: init.kaiming_uniform_(w), -(6 / 50) ** 0.5,
                                            (6 / 50) ** 0.5))],
        n + "kaiming_normal_": [r(_seeded(lambda t: t.nn.init.kaiming_normal_(t.empty(4, 5))), "meta")],
        n + "orthogonal_": [r(_orthogonal)],
        n + "sparse_": [r(_sparse_init)],
    }


def _sdpa(lib):
    q, k, v = (lib.tensor(np.random.default_rng(i).standard_normal((2, 3, 5, 4)).astype(np.float32)) for i in range(3))
    F = lib.root.nn.functional
    return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _embedding(lib):
    weight = lib.tensor(np.arange(30, dtype=np.float32).reshape(10, 3))
    return lib.root.nn.functional.embedding(lib.root.tensor([[1, 2], [0, 9]]), weight, padding_idx=0)


def _more_recipes():
    """Recipes of functions whose OpInfo wraps them in a lambda (so its samples do not fit) or has none."""
    return {
        "torch.einsum": [r(lambda lib: lib.root.einsum("ij,kj->ik", x(lib), x(lib))),
                         r(lambda lib: lib.root.einsum("ii", x(lib)[:, :3]))],
        "torch.multinomial": [r(_seeded(lambda t: t.multinomial(t.tensor([0.2, 0.3, 0.5]), 4, True)), "meta"),
                              r(_seeded(lambda t: t.multinomial(t.tensor([0.0, 1.0, 0.0]), 2, True)))],
        "torch.randint_like": [r(_seeded(lambda t: t.randint_like(t.zeros(2, 3), 5)), "meta")],
        "torch.nn.functional.embedding": [r(_embedding)],
        "torch.nn.functional.scaled_dot_product_attention": [r(_sdpa)],
        "torch.Tensor.__index__": [r(lambda lib: [10, 20, 30][lib.root.tensor(1)])],
    }


def _reduction_forms():
    """numpy-style ``axis=``/``keepdims=`` on every reduction that takes them in torch (issue 18)."""
    forms = {}
    for name in ("sum", "mean", "amax", "amin", "std", "var", "logsumexp", "nansum", "argmax", "argmin", "all",
                 "any", "prod", "max", "min", "median", "norm", "count_nonzero", "cumsum", "softmax"):
        for path in (f"torch.{name}", f"torch.Tensor.{name}"):
            method = path.startswith("torch.Tensor.")
            forms[path] = [r(lambda lib, n=name, m=method: (getattr(x(lib), n) if m else
                                                            (lambda *a, **k: getattr(lib.root, n)(x(lib), *a, **k)))(
                axis=1, keepdims=True)),
                r(lambda lib, n=name, m=method: (getattr(x(lib), n) if m else
                                                 (lambda *a, **k: getattr(lib.root, n)(x(lib), *a, **k)))(axis=0))]
    return forms


def _pool_padding_error(name):
    def recipe(lib):
        return getattr(lib.root.nn.functional, name)(x(lib).reshape(1, 1, 3, 4), 2, padding=(1, 1, 1))
    return recipe


# nn ops added by helper 139 (sampling, CTC, fractional pooling, multi-head attention's functional form) --------

def _normal(lib, seed, *shape):
    return lib.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _bag_args(lib):
    weight = _normal(lib, 1, 6, 3)
    return weight, lib.root.tensor([1, 2, 4, 5, 4, 3, 2, 0]), lib.root.tensor([0, 2, 2, 5])


def _ctc_args(lib):
    return (_normal(lib, 2, 6, 2, 4).log_softmax(2), lib.root.tensor([[1, 2, 2], [3, 1, 0]]), [6, 5], [3, 2])


def _fractional(nd, name):
    def recipe(lib):
        shape = (2, 3, 7, 8) if nd == 2 else (1, 2, 5, 6, 7)
        samples = lib.tensor(np.random.default_rng(3).random((shape[0], shape[1], nd)).astype(np.float32))
        pool = getattr(lib.root.nn.functional, name)
        return pool(_normal(lib, 4, *shape), 2, (3,) * nd, return_indices=True, _random_samples=samples)
    return recipe


def _mha(lib):
    q, w, ow = _normal(lib, 5, 3, 2, 8), _normal(lib, 6, 24, 8), _normal(lib, 7, 8, 8)
    return lib.root.nn.functional.multi_head_attention_forward(q, q, q, 8, 2, w, None, None, None, False, 0.0, ow,
                                                                None, need_weights=True)


def _nn_op_recipes():
    F = "torch.nn.functional."
    return {
        "torch.embedding_bag": [r(lambda lib: lib.root.embedding_bag(*_bag_args(lib), False, mode, False, None, False,
                                                                     None)) for mode in (0, 1, 2)],
        F + "embedding_bag": [r(lambda lib: (lambda w, i, o: lib.root.nn.functional.embedding_bag(
            i, w, o, mode="max"))(*_bag_args(lib)))],
        "torch.ctc_loss": [r(lambda lib: lib.root.ctc_loss(*_ctc_args(lib)))],
        F + "affine_grid": [r(lambda lib: lib.root.nn.functional.affine_grid(_normal(lib, 8, 2, 2, 3), (2, 1, 3, 4),
                                                                             align_corners=False))],
        F + "conv_tbc": [r(lambda lib: lib.root.nn.functional.conv_tbc(
            _normal(lib, 9, 5, 2, 3), _normal(lib, 10, 3, 3, 4), _normal(lib, 11, 4), 1))],
        **{F + name: [r(_fractional(nd, name))] for nd in (2, 3)
           for name in (f"fractional_max_pool{nd}d", f"fractional_max_pool{nd}d_with_indices")},
        F + "multi_head_attention_forward": [r(_mha)],
    }


# Argument forms the issue found missing, tried besides an entry's own samples (they must match too).
FORMS = {
    **_reduction_forms(),
    "torch.Tensor.flip": [r(lambda lib: x(lib).flip(0, 1))],
    "torch.where": [r(lambda lib: lib.root.where(x(lib) > 0)), r(lambda lib: lib.root.where(x(lib) > 0, x(lib), 0.0))],
    "torch.repeat_interleave": [r(lambda lib: lib.root.repeat_interleave(lib.root.tensor([1, 2, 3]),
                                                                         lib.root.tensor([1, 0, 2])))],
    "torch.Tensor.repeat_interleave": [r(lambda lib: lib.root.tensor([1, 2, 3]).repeat_interleave(
        lib.root.tensor([2, 1, 0])))],
    "torch.Tensor.view": [r(lambda lib: x(lib).view(lib.root.int32))],
    "torch.nn.functional.pad": [r(lambda lib: lib.root.nn.functional.pad(x(lib).reshape(1, 3, 4), (-1, 2),
                                                                         mode="circular"))],
    "torch.nn.functional.avg_pool2d": [r(_pool_padding_error("avg_pool2d"), "raises")],
    "torch.nn.functional.max_pool2d": [r(_pool_padding_error("max_pool2d"), "raises")],
}

# Entries no smoke call can exercise on this machine, and why (torch here is a CPU-only build).
UNCALLED = {f"torch.Tensor.{name}": "needs CUDA (torch here is CPU-only)" for name in ("cuda", "pin_memory",
                                                                                   "record_stream", "is_pinned")}

RECIPES = {**_global_settings(), **_factories(), **_utilities(), **_tensor_methods(), **_init(),
           **_more_recipes(), **_nn_op_recipes()}
