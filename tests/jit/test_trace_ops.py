"""Every registry op, traced alone: the verified graph, run by the interpreter, equals eager.

Parametrised over the registry with the sample database, so a new op is
covered as soon as it has samples. Ops whose result depends on the data
(its size, or a Python value) must raise TraceError instead.
"""

import zlib

import numpy as np
import pytest

import jitorch as jt
from jitorch.ir import interpret, verify
from jitorch.ir.fake import fake_tensor
from jitorch.jit import TraceError
from jitorch.jit.tracer import trace_with_inputs
from jitorch.ops import registry
from jitorch.runtime.strided import is_non_overlapping_and_dense
from tests.ops.samples import SAMPLES, VALUES_UNDEFINED, bind, samples
from tests.support import flat_results

OPS = sorted(registry.OPS)


def fake_like(t):
    """A data-less tensor with ``t``'s geometry, on which meta rules run as the tracer runs them."""
    return fake_tensor(t.shape, t.dtype, t.device, t.stride(), t.storage_offset(), t.untyped_storage().size)


def data_dependent(op, sample):
    """Whether the op's result has a size or a Python value only the data decides
    (then tracing may refuse it; where it does not, the traced result must still match)."""
    if op.schema.returns[0].type not in ("Tensor", "Any"):
        return True
    if op.composite is None:
        spec = op.meta(*registry.convert_args(op, bind(op, sample.map(
            lambda v: fake_like(v) if isinstance(v, jt.Tensor) else v))))
        specs = [spec] if isinstance(spec, registry.TensorSpec) else spec
        return any(n is None for s in specs for n in s.shape)
    try:
        registry.call(op, bind(op, sample.to_meta()))  # a composite's parts refuse meta tensors if the data decides
    except NotImplementedError:
        return True
    return False


def addresses_a_strided_storage(op, args):
    """as_strided of an input that does not fill its storage exactly (in some order of its dims): a graph,
    whose inputs hold only the tensor's elements, cannot express it (the tracer refuses it)."""
    t = args[0]
    return op.public_name == "as_strided" and not (
        is_non_overlapping_and_dense(t.shape, t.stride()) and t.storage_offset() == 0
        and t.untyped_storage().size == t.numel())


def split_tensors(args):
    """(tensors, rebuild): the tensors in a schema-ordered argument tuple, and a function
    that puts replacements back in their places (inside lists too)."""
    tensors, slots = [], []
    for i, a in enumerate(args):
        if isinstance(a, jt.Tensor):
            slots.append((i, None))
            tensors.append(a)
        elif isinstance(a, (list, tuple)):
            for j, x in enumerate(a):
                if isinstance(x, jt.Tensor):
                    slots.append((i, j))
                    tensors.append(x)

    def rebuild(ts):
        out = [list(a) if isinstance(a, (list, tuple)) else a for a in args]
        for (i, j), t in zip(slots, ts):
            if j is None:
                out[i] = t
            else:
                out[i][j] = t
        return tuple(type(a)(o) if isinstance(a, tuple) and isinstance(o, list) else o for a, o in zip(args, out))

    return tensors, rebuild


flat = flat_results


@pytest.mark.parametrize("name", OPS)
def test_traced_op_equals_eager(name):
    op = registry.OPS[name]
    if name not in SAMPLES:
        pytest.fail(f"{name} has no samples (tests/ops/samples.py)")
    for i, sample in enumerate(samples(name, seed=zlib.crc32(name.encode()))):
        what = f"{name} sample {i} {sample}"
        eager_sample = sample.clone()  # before anything draws from the sample's generator
        args = bind(op, sample.clone())
        tensors, rebuild = split_tensors(args)

        def fn(*ts):
            return registry.call(op, rebuild(ts))

        if name == "view.dtype":  # a graph's values have one dtype each: the tracer refuses the reinterpretation
            with pytest.raises(TraceError, match="reads the memory as another dtype"):
                trace_with_inputs(fn, tuple(tensors), {})
            continue
        if addresses_a_strided_storage(op, args):
            with pytest.raises(TraceError, match="addresses the storage of an input that does not fill it exactly"):
                trace_with_inputs(fn, tuple(tensors), {})
            continue
        try:
            graph, inputs = trace_with_inputs(fn, tuple(tensors), {})
        except TraceError:
            assert data_dependent(op, sample.clone()), f"{what}: TraceError for an op whose shapes are fixed"
            continue
        verify(graph)
        jt.manual_seed(i)
        got, mutations = interpret(graph, inputs)
        assert not mutations, what
        jt.manual_seed(i)
        expected = registry.call(op, bind(op, eager_sample))
        got, expected = flat(got), flat(expected)
        assert len(got) == len(expected), what
        for g, e in zip(got, expected):
            if not isinstance(e, jt.Tensor):  # a Python value decided without the data (equal of two shapes)
                assert g == e, what
                continue
            assert g.shape == e.shape and g.dtype is e.dtype, f"{what}: {g.shape} {g.dtype} vs {e.shape} {e.dtype}"
            if name in VALUES_UNDEFINED:
                continue
            # view inputs are compacted, which may change a float reduction's summation order
            tol = {jt.float16: 1e-3, jt.bfloat16: 1e-2, jt.float32: 1e-6, jt.float64: 1e-12}.get(g.dtype, 0)
            np.testing.assert_allclose(np.asarray(g._array(), dtype=np.float64) if tol else g._array(),
                                       np.asarray(e._array(), dtype=np.float64) if tol else e._array(),
                                       rtol=tol, atol=tol, err_msg=what)
