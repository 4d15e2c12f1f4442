"""Compiled functions alias as eager does: ops that copy or view depending on the layout (``contiguous``,
``reshape``, ``flatten``, ``view``, ``.float()``...) see an input's real strides in the trace, so an
in-place write after them reaches the caller's tensor exactly when it would eagerly (issue 15)."""

import pytest

import jitorch as jt


def transposed():
    return jt.arange(6.0).reshape(3, 2).t()


LAYOUTS = {
    "contiguous": lambda: jt.arange(6.0).reshape(2, 3),
    "transposed": transposed,
    "sliced with gaps": lambda: jt.arange(12.0).reshape(3, 4)[:2, :3],
    "sliced with an offset": lambda: jt.arange(12.0).reshape(3, 4)[1:, 1:],
    "strided": lambda: jt.arange(12.0).reshape(2, 6)[:, ::2],
    "expanded": lambda: jt.arange(3.0).expand(2, 3),
    "permuted 3-d slice": lambda: jt.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1)[:, :, :3],
}

# each copies for some layouts and returns a view (or the tensor itself) for others
SOMETIMES_COPIES = {
    "contiguous": lambda x: x.contiguous(),
    "reshape": lambda x: x.reshape(-1),
    "reshape to its shape": lambda x: x.reshape(x.shape),
    "flatten": lambda x: x.flatten(),
    "view": lambda x: x.view(-1),
    "t then contiguous": lambda x: x.t().contiguous(),
    "t then reshape": lambda x: x.t().reshape(-1),
    "unsqueeze then reshape": lambda x: x.unsqueeze(0).reshape(x.shape[0], -1),
    "row then reshape": lambda x: x[0].reshape(-1),
    "float of a float tensor": lambda x: x.float(),
    "to its own dtype": lambda x: x.to(jt.float32),
    "clone": lambda x: x.clone(),
    "expand then contiguous": lambda x: x[:, :1].expand(x.shape[0], 4).contiguous(),
    "is_contiguous": lambda x: x + (1.0 if x.is_contiguous() else 2.0),
}


def outcome(fn, make):
    """What calling ``fn`` on a fresh tensor from ``make`` does: the input afterwards, the result and
    whether it is the input itself, or the error."""
    x = make()
    try:
        result = fn(x)
    except RuntimeError as e:
        return "raises", type(e), str(e)
    return x.tolist(), result.tolist(), result is x


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", SOMETIMES_COPIES)
def test_compiled_inplace_after_a_sometimes_copying_op_mutates_as_eager(layout, op):
    def f(x):
        k = SOMETIMES_COPIES[op](x)
        k.mul_(-1.0)
        return k
    assert outcome(jt.compile(f), LAYOUTS[layout]) == outcome(f, LAYOUTS[layout])


@pytest.mark.parametrize("backend", ["llvm", "interpreter"])
def test_compiled_contiguous_copy_then_inplace_leaves_input_untouched(backend):
    @jt.compile(backend=backend)
    def f(x):
        k = x.contiguous()
        k.mul_(0.0)
        return k

    x = transposed()
    k = f(x)
    assert x.tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
    assert k.tolist() == [[0.0] * 3] * 2 and k is not x
    assert not f.lower(x).graph.mutations


def test_compiled_contiguous_of_a_view_that_is_contiguous_writes_through():
    """``x.t()`` of a transposed input is contiguous: eagerly ``contiguous()`` returns it, so the write
    reaches ``x``; the graph writes the input back."""
    def f(x):
        k = x.t().contiguous()
        k.add_(10.0)
        return k

    x = transposed()
    jt.compile(f)(x)
    assert x.tolist() == [[10.0, 12.0, 14.0], [11.0, 13.0, 15.0]]
    assert [t.name for t, _ in jt.compile(f).lower(transposed()).graph.mutations] == ["x"]


def test_compiled_view_of_a_transposed_input_raises_as_eager():
    f = jt.compile(lambda x: x.view(6), fullgraph=True)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        f(transposed())
    assert f(jt.arange(6.0).reshape(2, 3)).tolist() == list(range(6))


def test_compiled_inplace_on_an_expanded_input_raises_as_eager():
    f = jt.compile(lambda x: x.mul_(2.0))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        f(jt.ones(3).expand(2, 3))


def test_compiled_contiguous_of_a_captured_transposed_tensor_leaves_it_untouched():
    w = transposed()

    def f(x):
        k = w.contiguous()
        k.mul_(0.0)
        return k + x

    assert jt.compile(f)(jt.ones(2, 3)).tolist() == [[1.0] * 3] * 2
    assert w.tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]


def test_inputs_of_one_shape_with_other_strides_retrace():
    calls = []

    def f(x):
        calls.append(1)
        return x.reshape(-1).mul_(2.0)

    compiled = jt.compile(f)
    gaps, strided = LAYOUTS["sliced with gaps"], lambda: jt.arange(12.0).reshape(2, 6)[:, ::2]
    for make in (gaps, strided, gaps):
        x = make()
        assert compiled(x).tolist() == [2 * v for v in make().reshape(-1).tolist()]
    assert len(calls) == 2
    assert "strides=[4, 1]" in str(jt.explain(compiled, gaps()))


def test_as_strided_of_a_transposed_input_that_fills_its_storage_is_traced():
    """Its fake's storage is the transposed tensor's memory in order, so storage offsets mean what they do
    eagerly."""
    def f(x):
        return x.as_strided((2, 2), (1, 2), 1)

    x = transposed()
    assert jt.compile(f, fullgraph=True)(x).tolist() == f(x).tolist() == [[1.0, 3.0], [2.0, 4.0]]
