"""Autocast's op policy (jitorch/ops/autocast.py) against torch 2.13: its op lists are torch's, and every
listed op jitorch has gives torch's result dtype and values under CPU autocast (bfloat16 and float16).
CUDA autocast cannot run in a torch without CUDA: there each listed op runs on the emulated device, and
its result is compared with torch computing the op on the inputs cast as the policy says."""

import ast
import pathlib

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch as jt
import jitorch.nn.functional as JF
from jitorch.ops import autocast as policy
from jitorch.ops.registry import PUBLIC
from jitorch.runtime.autocast_mode import STATE

GEN = torch.Generator().manual_seed(0)


def r(*shape):
    return torch.randn(*shape, generator=GEN)


def pos(*shape):
    return torch.rand(*shape, generator=GEN) + 0.5


def unit(*shape):
    return torch.rand(*shape, generator=GEN) * 1.6 - 0.8


def prob(*shape):
    return torch.rand(*shape, generator=GEN) * 0.8 + 0.1


def sign(*shape):
    return torch.randint(0, 2, shape, generator=GEN).float() * 2 - 1


def square(n, batch=()):
    """Well-conditioned square matrices."""
    return torch.randn(*batch, n, n, generator=GEN) + n * torch.eye(n)


def spd(n):
    a = torch.randn(n, n, generator=GEN)
    return a @ a.mT + n * torch.eye(n)


def classes(n, k):
    return torch.randint(0, k, (n,), generator=GEN)


def pad(mode, width):
    return lambda m, F: lambda x: F.pad(x, (1, 1) * width, mode=mode)


def interpolate(mode, **kw):
    return lambda m, F: lambda x: F.interpolate(x, scale_factor=2, mode=mode, **kw)


# torch's op name -> (fn(module, functional) -> the call, its arguments (float tensors are varied by dtype))
SAMPLES = {
    "addmm": (lambda m, F: m.addmm, lambda: [r(3, 5), r(3, 4), r(4, 5)]),
    "baddbmm": (lambda m, F: m.baddbmm, lambda: [r(2, 3, 5), r(2, 3, 4), r(2, 4, 5)]),
    "bmm": (lambda m, F: m.bmm, lambda: [r(2, 3, 4), r(2, 4, 5)]),
    "matmul": (lambda m, F: m.matmul, lambda: [r(2, 3, 4), r(4, 2)]),
    "mm": (lambda m, F: m.mm, lambda: [r(3, 4), r(4, 5)]),
    "mv": (lambda m, F: m.mv, lambda: [r(3, 4), r(4)]),
    "dot": (lambda m, F: m.dot, lambda: [r(5), r(5)]),
    "vdot": (lambda m, F: m.vdot, lambda: [r(5), r(5)]),
    "einsum": (lambda m, F: lambda a, b: m.einsum("ij,jk->ik", a, b), lambda: [r(3, 4), r(4, 2)]),
    "addmv": (lambda m, F: m.addmv, lambda: [r(3), r(3, 4), r(4)]),
    "addr": (lambda m, F: m.addr, lambda: [r(3, 4), r(3), r(4)]),
    "addbmm": (lambda m, F: m.addbmm, lambda: [r(3, 5), r(2, 3, 4), r(2, 4, 5)]),
    "chain_matmul": (lambda m, F: m.chain_matmul, lambda: [r(3, 4), r(4, 2), r(2, 3)]),
    "tensordot": (lambda m, F: lambda a, b: m.tensordot(a, b, 1), lambda: [r(3, 4), r(4, 2)]),
    "trace": (lambda m, F: m.trace, lambda: [r(3, 4)]),
    "inverse": (lambda m, F: m.inverse, lambda: [square(3)]),
    "linalg_inv_ex": (lambda m, F: lambda x: m.linalg.inv_ex(x)[0], lambda: [square(3)]),
    "cholesky": (lambda m, F: m.cholesky, lambda: [spd(3)]),
    "linalg_cholesky_ex": (lambda m, F: lambda x: m.linalg.cholesky_ex(x)[0], lambda: [spd(3)]),
    "cholesky_inverse": (lambda m, F: m.cholesky_inverse, lambda: [spd(3).tril()]),
    "cholesky_solve": (lambda m, F: m.cholesky_solve, lambda: [r(3, 2), spd(3).tril()]),
    "lu_solve": (lambda m, F: m.lu_solve, lambda: [r(3, 2), square(3), torch.tensor([2, 2, 3], dtype=torch.int32)]),
    "triangular_solve": (lambda m, F: lambda b, a: m.triangular_solve(b, a)[0], lambda: [r(3, 2), square(3)]),
    "qr": (lambda m, F: lambda x: m.qr(x)[0], lambda: [r(4, 3)]),
    "linalg_qr": (lambda m, F: lambda x: m.linalg.qr(x)[1], lambda: [r(4, 3)]),
    "geqrf": (lambda m, F: lambda x: m.geqrf(x)[1].abs(), lambda: [r(4, 3)]),
    "orgqr": (lambda m, F: m.orgqr, lambda: [r(4, 3), r(2)]),
    "linalg_householder_product": (lambda m, F: m.linalg.householder_product, lambda: [r(4, 3), r(2)]),
    "ormqr": (lambda m, F: m.ormqr, lambda: [r(4, 3), r(2), r(4, 2)]),
    # (singular vectors are unique up to sign: the values only)
    "svd": (lambda m, F: lambda x: m.svd(x)[1], lambda: [r(4, 3)]),
    "pinverse": (lambda m, F: m.pinverse, lambda: [r(4, 3)]),
    "linalg_lstsq": (lambda m, F: lambda a, b: m.linalg.lstsq(a, b).solution, lambda: [r(4, 3), r(4, 2)]),
    "linear": (lambda m, F: F.linear, lambda: [r(3, 4), r(5, 4), r(5)]),
    "bilinear": (lambda m, F: F.bilinear, lambda: [r(3, 4), r(3, 2), r(5, 4, 2), r(5)]),
    "conv1d": (lambda m, F: F.conv1d, lambda: [r(1, 2, 6), r(3, 2, 3), r(3)]),
    "conv2d": (lambda m, F: F.conv2d, lambda: [r(1, 2, 5, 5), r(3, 2, 3, 3), r(3)]),
    "conv3d": (lambda m, F: F.conv3d, lambda: [r(1, 2, 4, 4, 4), r(3, 2, 2, 2, 2), r(3)]),
    "conv_transpose1d": (lambda m, F: F.conv_transpose1d, lambda: [r(1, 2, 5), r(2, 3, 3), r(3)]),
    "conv_transpose2d": (lambda m, F: F.conv_transpose2d, lambda: [r(1, 2, 4, 4), r(2, 3, 3, 3), r(3)]),
    "conv_transpose3d": (lambda m, F: F.conv_transpose3d, lambda: [r(1, 2, 3, 3, 3), r(2, 3, 2, 2, 2), r(3)]),
    "scaled_dot_product_attention": (lambda m, F: F.scaled_dot_product_attention,
                                     lambda: [r(1, 2, 3, 4), r(1, 2, 5, 4), r(1, 2, 5, 4)]),
    "cat": (lambda m, F: lambda a, b: m.cat([a, b]), lambda: [r(2, 3), r(1, 3)]),
    "stack": (lambda m, F: lambda a, b: m.stack([a, b], 1), lambda: [r(2, 3), r(2, 3)]),
    "index_copy": (lambda m, F: lambda x, i, s: x.index_copy(0, i, s),
                   lambda: [r(4, 3), torch.tensor([2, 0]), r(2, 3)]),
    "index_put": (lambda m, F: lambda x, i, v: x.index_put((i,), v), lambda: [r(4, 3), torch.tensor([3, 1]), r(2, 3)]),
    "scatter_add": (lambda m, F: lambda x, i, s: x.scatter_add(0, i, s),
                    lambda: [r(3, 2), torch.tensor([[0, 2], [1, 0]]), r(2, 2)]),
    "atan2": (lambda m, F: m.atan2, lambda: [r(4), r(4)]),
    "prod": (lambda m, F: lambda x: x.prod(1), lambda: [unit(3, 4) + 1]),
    "sum": (lambda m, F: lambda x: x.sum(0), lambda: [r(3, 4)]),
    "cumsum": (lambda m, F: lambda x: x.cumsum(1), lambda: [r(3, 4)]),
    "cumprod": (lambda m, F: lambda x: x.cumprod(1), lambda: [unit(3, 4) + 1]),
    "softmax": (lambda m, F: lambda x: m.softmax(x, 1), lambda: [r(3, 4)]),
    "log_softmax": (lambda m, F: lambda x: m.log_softmax(x, 1), lambda: [r(3, 4)]),
    "logsumexp": (lambda m, F: lambda x: m.logsumexp(x, 1), lambda: [r(3, 4)]),
    "norm": (lambda m, F: lambda x: x.norm(), lambda: [r(3, 4)]),
    "pow": (lambda m, F: m.pow, lambda: [pos(4), r(4)]),
    **{name: ((lambda n: lambda m, F: getattr(m, n))(name), lambda: [pos(5)])
       for name in ("exp", "expm1", "log", "log10", "log1p", "log2", "reciprocal", "rsqrt", "cosh", "sinh", "tan")},
    "acos": (lambda m, F: m.acos, lambda: [unit(5)]),
    "erfinv": (lambda m, F: m.erfinv, lambda: [unit(5)]),
    "renorm": (lambda m, F: lambda x: m.renorm(x, 2, 0, 1.0), lambda: [r(3, 4)]),
    "quantile": (lambda m, F: lambda x: m.quantile(x, 0.3, dim=1), lambda: [r(3, 4)]),
    "nanquantile": (lambda m, F: lambda x: m.nanquantile(x, 0.3, dim=1), lambda: [r(3, 4)]),
    "cdist": (lambda m, F: m.cdist, lambda: [r(3, 4), r(2, 4)]),
    "addcmul": (lambda m, F: m.addcmul, lambda: [r(3, 4), r(3, 4), r(4)]),
    "addcdiv": (lambda m, F: m.addcdiv, lambda: [r(3, 4), r(3, 4), pos(4)]),
    "dist": (lambda m, F: m.dist, lambda: [r(3, 4), r(4)]),
    "cross": (lambda m, F: lambda a, b: m.cross(a, b, dim=1), lambda: [r(4, 3), r(4, 3)]),
    "asin": (lambda m, F: m.asin, lambda: [unit(5)]),
    "layer_norm": (lambda m, F: lambda x, w, b: F.layer_norm(x, (4,), w, b), lambda: [r(3, 4), r(4), r(4)]),
    "group_norm": (lambda m, F: lambda x, w, b: F.group_norm(x, 2, w, b), lambda: [r(2, 4, 3), r(4), r(4)]),
    "softplus": (lambda m, F: F.softplus, lambda: [r(5)]),
    "cosine_similarity": (lambda m, F: F.cosine_similarity, lambda: [r(3, 4), r(3, 4)]),
    "mse_loss": (lambda m, F: F.mse_loss, lambda: [r(5), r(5)]),
    "l1_loss": (lambda m, F: F.l1_loss, lambda: [r(5), r(5)]),
    "smooth_l1_loss": (lambda m, F: F.smooth_l1_loss, lambda: [r(5), r(5)]),
    "huber_loss": (lambda m, F: F.huber_loss, lambda: [r(5), r(5)]),
    "kl_div": (lambda m, F: lambda x, y: F.kl_div(x, y, reduction="batchmean"), lambda: [r(3, 4), prob(3, 4)]),
    "nll_loss": (lambda m, F: F.nll_loss, lambda: [r(4, 3), classes(4, 3)]),
    "cross_entropy_loss": (lambda m, F: F.cross_entropy, lambda: [r(4, 3), classes(4, 3)]),
    "binary_cross_entropy": (lambda m, F: F.binary_cross_entropy, lambda: [prob(5), prob(5)]),
    "binary_cross_entropy_with_logits": (lambda m, F: F.binary_cross_entropy_with_logits, lambda: [r(5), prob(5)]),
    "margin_ranking_loss": (lambda m, F: F.margin_ranking_loss, lambda: [r(5), r(5), sign(5)]),
    "hinge_embedding_loss": (lambda m, F: F.hinge_embedding_loss, lambda: [r(5), sign(5)]),
    "soft_margin_loss": (lambda m, F: F.soft_margin_loss, lambda: [r(5), sign(5)]),
    "cosine_embedding_loss": (lambda m, F: F.cosine_embedding_loss, lambda: [r(3, 4), r(3, 4), sign(3)]),
    "triplet_margin_loss": (lambda m, F: F.triplet_margin_loss, lambda: [r(3, 4), r(3, 4), r(3, 4)]),
    "poisson_nll_loss": (lambda m, F: F.poisson_nll_loss, lambda: [r(5), pos(5)]),
    "multi_margin_loss": (lambda m, F: F.multi_margin_loss, lambda: [r(4, 3), classes(4, 3)]),
    "reflection_pad1d": (pad("reflect", 1), lambda: [r(1, 2, 4)]),
    "reflection_pad2d": (pad("reflect", 2), lambda: [r(1, 2, 4, 4)]),
    "replication_pad1d": (pad("replicate", 1), lambda: [r(1, 2, 4)]),
    "replication_pad2d": (pad("replicate", 2), lambda: [r(1, 2, 4, 4)]),
    "replication_pad3d": (pad("replicate", 3), lambda: [r(1, 2, 3, 3, 3)]),
    "adaptive_avg_pool3d": (lambda m, F: lambda x: F.interpolate(x, size=(2, 2, 2), mode="area"),
                            lambda: [r(1, 2, 4, 4, 4)]),
    "upsample_nearest1d": (interpolate("nearest"), lambda: [r(1, 2, 3)]),
    "upsample_nearest2d": (interpolate("nearest"), lambda: [r(1, 2, 3, 3)]),
    "upsample_nearest3d": (interpolate("nearest"), lambda: [r(1, 2, 2, 2, 2)]),
    "_upsample_nearest_exact1d": (interpolate("nearest-exact"), lambda: [r(1, 2, 3)]),
    "_upsample_nearest_exact2d": (interpolate("nearest-exact"), lambda: [r(1, 2, 3, 3)]),
    "_upsample_nearest_exact3d": (interpolate("nearest-exact"), lambda: [r(1, 2, 2, 2, 2)]),
    "upsample_linear1d": (interpolate("linear", align_corners=False), lambda: [r(1, 2, 3)]),
    "upsample_bilinear2d": (interpolate("bilinear", align_corners=False), lambda: [r(1, 2, 3, 3)]),
    "upsample_trilinear3d": (interpolate("trilinear", align_corners=False), lambda: [r(1, 2, 2, 2, 2)]),
}


# the names F.pad and F.interpolate run as, by their mode (their autocast name is a function of the call)
BY_MODE = {name for name in SAMPLES if name.startswith(("reflection_pad", "replication_pad", "adaptive_avg_pool",
                                                         "upsample_", "_upsample_"))}


def implemented():
    """torch's op names on autocast's lists that jitorch has: registry ops, and the Python ops `autocasts`
    marks with a name."""
    marked = {getattr(getattr(JF, n), "autocast_name", None) for n in dir(JF)}
    names = {n for n in marked if isinstance(n, str)} | BY_MODE
    return {name for table in policy.POLICIES.values() for name in table if name in PUBLIC or name in names}


def listed(device_type):
    """The sampled ops on ``device_type``'s lists that autocast runs (not the one it refuses)."""
    table = policy.POLICIES[device_type]
    return sorted(n for n in implemented() if table.get(n, policy.BANNED) != policy.BANNED and n in SAMPLES)


def to_jt(v):
    if isinstance(v, torch.Tensor):
        t = jt.tensor(v.detach().double().numpy() if v.is_floating_point() else v.numpy())
        return t.to(getattr(jt, str(v.dtype).split(".")[1]))
    return v


def variants(args, lower):
    """The sample's arguments with float tensors all float32, all ``lower``, the first ``lower`` and the
    rest float32, and all float64 (which autocast leaves alone)."""
    floats = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]

    def cast(dtypes):
        out = list(args)
        for i, d in zip(floats, dtypes):
            out[i] = out[i].to(d)
        return out
    n = len(floats)
    return {"float32": cast([torch.float32] * n), "lower": cast([lower] * n),
            "mixed": cast([lower] + [torch.float32] * (n - 1)), "float64": cast([torch.float64] * n)}


def outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # the oracle's exception type is compared
        return None, type(e)


def assert_matches(got, want, lower_is_bfloat16):
    tol = 3e-2 if lower_is_bfloat16 else 4e-3
    assert str(got.dtype).split(".")[1] == str(want.dtype).split(".")[1]
    np.testing.assert_allclose(jt_values(got), want.detach().double().numpy(), rtol=tol, atol=tol)


def jt_values(t):
    return np.asarray(t.double()._array())


def test_the_op_lists_are_torchs():
    """The names on each device type's lists are exactly those torch 2.13 registers autocast kernels for."""
    for key, device_type in (("AutocastCPU", "cpu"), ("AutocastCUDA", "cuda")):
        names = {n[len("aten::"):].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                 if n.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(n, key)}
        assert names == set(policy.POLICIES[device_type])


def torch_test_lists():
    """{(list class, list name): op names} of torch's own autocast tests (its lists of ops by expected
    dtype, in torch/testing/_internal/autocast_test_lists.py, read without importing it)."""
    src = pathlib.Path(torch.__file__).parent / "testing" / "_internal" / "autocast_test_lists.py"
    found = {}
    for cls in (n for n in ast.parse(src.read_text()).body if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute) \
                    and isinstance(node.value, ast.List):
                found[cls.name, node.targets[0].attr] = {e.elts[0].value for e in node.value.elts
                                                         if isinstance(e, ast.Tuple) and isinstance(e.elts[0], ast.Constant)}
    return found


_CATEGORIES = {"torch_fp16": {policy.LOWER}, "torch_16": {policy.LOWER}, "nn_fp16": {policy.LOWER},
               "nn_16": {policy.LOWER}, "linalg_fp16": {policy.LOWER}, "torch_fp32": {policy.FP32, policy.FP32_DTYPE},
               "nn_fp32": {policy.FP32, policy.FP32_DTYPE}, "torch_need_autocast_promote": {policy.PROMOTE},
               "banned": {policy.BANNED}}


def test_each_op_has_the_policy_torchs_own_tests_expect():
    """The policy of every op torch's autocast tests name (CUDA's lists as well as CPU's) is the one they
    check for: an independent check of the CUDA policies, which no torch here can run."""
    checked = 0
    for (cls, attr), names in torch_test_lists().items():
        device_type = "cpu" if cls == "AutocastCPUTestLists" else "cuda"
        for name in names & set(policy.POLICIES[device_type]) if attr in _CATEGORIES else ():
            assert policy.POLICIES[device_type][name] in _CATEGORIES[attr], (device_type, name)
            checked += 1
    assert checked > 100


def test_every_listed_op_jitorch_has_is_sampled():
    """An op added to jitorch under a listed name needs a sample here, which checks its autocast."""
    assert implemented() - set(SAMPLES) == set()


@pytest.mark.parametrize("lower", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name", listed("cpu"))
def test_cpu_autocast_matches_torch(name, lower):
    fn, make = SAMPLES[name]
    for which, args in variants(make(), lower).items():
        with torch.autocast("cpu", dtype=lower):
            want, want_error = outcome(lambda: fn(torch, TF)(*args))
        jt_lower = getattr(jt, str(lower).split(".")[1])
        with jt.autocast("cpu", dtype=jt_lower):
            got, got_error = outcome(lambda: fn(jt, JF)(*[to_jt(a) for a in args]))
        assert got_error is want_error, f"{which}: torch {want_error}, jitorch {got_error}"
        if want is not None:
            assert_matches(got, want, lower is torch.bfloat16)


def cuda_expected(name, args):
    """torch's CUDA result for the listed op ``name`` on ``args``, computed on the CPU: the inputs cast as
    the op's policy says (float16 being CUDA's autocast dtype), then the op without autocast."""
    kind = policy.POLICIES["cuda"][name]
    floats = [a for a in args if isinstance(a, torch.Tensor) and a.dtype in (torch.float16, torch.float32)]
    to = {policy.LOWER: torch.float16, policy.FP32: torch.float32, policy.FP32_DTYPE: torch.float32,
          policy.PROMOTE: torch.float32 if any(a.dtype is torch.float32 for a in floats) else torch.float16}[kind]
    return [a.to(to) if any(a is f for f in floats) else a for a in args]


# the listed ops whose float16 kernels torch's CPU lacks: their reference runs in float32, rounded after
_NO_CPU_HALF = {"addmm", "baddbmm", "bmm", "matmul", "mm", "mv", "dot", "vdot", "einsum", "linear", "bilinear"}


@pytest.mark.parametrize("name", listed("cuda"))
def test_cuda_autocast_follows_the_cuda_list(name):
    fn, make = SAMPLES[name]
    args = variants(make(), torch.float16)["mixed"]
    cast = cuda_expected(name, args)
    if name in _NO_CPU_HALF and policy.POLICIES["cuda"][name] == policy.LOWER:
        want = fn(torch, TF)(*[a.float() if a.is_floating_point() else a for a in cast]).half()
    else:
        want = fn(torch, TF)(*cast)
    with jt.cuda.emulated(), jt.autocast("cuda"):
        got = fn(jt, JF)(*[to_jt(a).cuda() for a in args]).cpu()
    assert_matches(got, want, lower_is_bfloat16=False)


def test_binary_cross_entropy_is_refused_under_cuda_autocast():
    with jt.cuda.emulated(), jt.autocast("cuda"):
        x = jt.full((3,), 0.5, device="cuda")
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            JF.binary_cross_entropy(x, x)


def test_cpu_tensors_follow_the_cpu_list_under_cuda_autocast():
    with jt.cuda.emulated(), jt.autocast("cuda"):
        assert jt.exp(jt.ones(2, dtype=jt.float16)).dtype is jt.float16  # exp: on CUDA's list only
        assert jt.exp(jt.ones(2, dtype=jt.float16, device="cuda")).dtype is jt.float32


def test_out_and_in_place_forms_are_not_autocast():
    a, b = jt.randn(3, 4), jt.randn(4, 5)
    out = jt.empty(3, 5)
    with jt.autocast("cpu"):
        jt.mm(a, b, out=out)
        c = jt.zeros(3, 5).addmm_(a, b)
    assert out.dtype is jt.float32 and c.dtype is jt.float32
    np.testing.assert_allclose(out.numpy(), (a.numpy() @ b.numpy()), rtol=1e-5, atol=1e-5)


def test_integer_and_float64_inputs_are_not_cast():
    with jt.autocast("cpu"):
        assert jt.cat([jt.arange(3), jt.arange(2)]).dtype is jt.int64
        assert jt.mm(jt.ones(2, 2, dtype=jt.float64), jt.ones(2, 2, dtype=jt.float64)).dtype is jt.float64


def test_fast_paths_step_aside_only_while_autocast_is_on():
    """mm has an eager fast path: under autocast the call goes through the hook, after it the fast path again."""
    a = jt.randn(2, 2)
    with jt.autocast("cpu"):
        assert jt.mm(a, a).dtype is jt.bfloat16 and (a @ a).dtype is jt.bfloat16 and a.mm(a).dtype is jt.bfloat16
    assert jt.mm(a, a).dtype is jt.float32


def test_an_autocast_op_runs_its_body_without_autocast():
    """linear casts its three inputs and adds the bias in bfloat16 (the add would promote to float32 if the
    body's matmul were autocast on its own)."""
    with jt.autocast("cpu"):
        y = JF.linear(jt.randn(2, 3), jt.randn(4, 3), jt.randn(4))
        assert jt.is_autocast_enabled("cpu")
    assert y.dtype is jt.bfloat16


class TestCastCache:
    def cast(self, w):
        return policy._cast(w, jt.bfloat16, "cpu")

    def test_a_parameter_is_cast_once_per_region(self):
        w = jt.randn(3, 3, requires_grad=True)
        with jt.autocast("cpu"):
            first = self.cast(w)
            assert self.cast(w) is first
            assert self.cast(w.detach()) is not first  # not a leaf that requires grad: never cached
        assert not STATE.casts
        with jt.autocast("cpu"):
            assert self.cast(w) is not first

    def test_a_write_into_the_parameter_recasts_it(self):
        """torch's cache would give the cast of the old values."""
        w = jt.zeros(2, requires_grad=True)
        with jt.autocast("cpu"):
            first = self.cast(w)
            with jt.no_grad():
                w.add_(1)
            again = self.cast(w)
        assert again is not first and again.tolist() == [1.0, 1.0]

    def test_casts_without_grad_mode_are_not_cached(self):
        """A cast made under no_grad has no history: reused by a later forward in grad mode, it would cut
        the parameter off from its gradient."""
        w = jt.ones(2, requires_grad=True)
        with jt.autocast("cpu"):
            with jt.no_grad():
                self.cast(w)
            y = self.cast(w)
        assert y.grad_fn is not None

    def test_cache_enabled_false_casts_every_time(self):
        w = jt.randn(2, requires_grad=True)
        with jt.autocast("cpu", cache_enabled=False):
            assert self.cast(w) is not self.cast(w)
