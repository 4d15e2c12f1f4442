"""A compiled call's backward recomputes its forward: the random ops in it (dropout's mask, a draw from an
explicit generator) must draw again what the forward drew, and leave the generators where eager leaves them."""

import numpy as np

import jitorch as jt


def graph_ops(compiled):
    return {node.op.name for entry in compiled.cache.values() for node in entry.graph.nodes}


def run(fn, seed, *params):
    """``fn()``'s value, the gradients of ``params`` and the default generator's next draw, from ``seed``."""
    jt.manual_seed(seed)
    for p in params:
        p.grad = None
    out = fn()
    out.backward()
    return out.item(), [p.grad.numpy().copy() for p in params], jt.rand(1).item()


def assert_same_runs(eager, compiled):
    np.testing.assert_allclose(compiled[0], eager[0], rtol=1e-6)
    for got, expected in zip(compiled[1], eager[1]):  # a mask drawn again differently differs by whole elements
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-7)
    assert compiled[2] == eager[2]  # the generator continues as after the eager call


def test_compiled_dropout_backward_uses_the_forward_mask():
    w = jt.ones(8, requires_grad=True)
    dropout = jt.nn.Dropout(0.5)
    x = jt.ones(8)

    def loss():
        return (dropout(x * w) * jt.arange(8.0)).sum()

    compiled = jt.compile(loss)
    eager = run(loss, 0, w)
    for _ in range(2):  # the call that traces, then the compiled graph
        assert_same_runs(eager, run(compiled, 0, w))
    assert any("bernoulli" in name for name in graph_ops(compiled))


def test_compiled_lstm_dropout_gradients_equal_eager_with_masks_of_one_shape():
    jt.manual_seed(0)
    lstm = jt.nn.LSTM(4, 4, 2, dropout=0.5)
    dropout = jt.nn.Dropout(0.5)
    x = jt.randn(3, 2, 4)

    def loss():  # three masks of one shape: drawing them again in another order would go unnoticed in shape
        return dropout(lstm(dropout(x))[0]).pow(2).sum()

    params = list(lstm.parameters())
    compiled = jt.compile(loss)
    eager = run(loss, 1, *params)
    for _ in range(2):
        assert_same_runs(eager, run(compiled, 1, *params))


def test_compiled_backward_draws_again_from_an_explicit_generator():
    w = jt.ones(8, requires_grad=True)
    gen = jt.Generator()

    def loss():
        return (w * jt.rand(8, generator=gen)).sum()  # w's gradient is the draw itself

    compiled = jt.compile(loss)
    for _ in range(3):
        gen.manual_seed(5)
        expected = jt.rand(8, generator=gen).numpy()
        after = jt.rand(1, generator=gen).item()
        gen.manual_seed(5)
        w.grad = None
        compiled().backward()
        np.testing.assert_array_equal(w.grad.numpy(), expected)
        assert jt.rand(1, generator=gen).item() == after


def test_compiled_dropout_backward_on_cuda_uses_the_forward_mask():
    with jt.cuda.emulated():
        w = jt.ones(8, device="cuda", requires_grad=True)
        x = jt.ones(8, device="cuda")

        def loss(x):
            return (jt.nn.functional.dropout(x * w, 0.5) * jt.arange(8.0, device="cuda")).sum()

        def run_on_cuda(fn):
            jt.cuda.manual_seed(3)
            w.grad = None
            fn(x).backward()
            return w.grad.cpu().numpy(), jt.rand(1, device="cuda").item()

        compiled = jt.compile(loss)
        compiled_runs = [run_on_cuda(compiled) for _ in range(2)]  # before eager draws on the device
        eager = run_on_cuda(loss)
        for grad, after in compiled_runs:
            np.testing.assert_array_equal(grad, eager[0])
            assert after == eager[1]
