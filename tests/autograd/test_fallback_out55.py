"""torch's autograd fallback (softmax's, log_softmax's, histogram's out= forms) refuses only an out tensor that is a
leaf requiring grad; a non-leaf one, or an input requiring grad, gives the result a node whose backward raises
(fuzz seed 5591419 of ``--edges 0.4 --out-views 0.4 --regions 0.2``: ``log_softmax(v, -1, out=v)`` of a view
``v`` of a tensor requiring grad raised the out= error torch does not). Ops that torch's generated autograd
serves (exp) still refuse any out or input requiring grad."""

import pytest
import torch

import jitorch as jt

CASES = {
    "log_softmax of a view into itself, seed 5591419":
        (lambda m: (lambda v: (m.log_softmax(v, -1, out=v), v))((m.randn(2, 4, requires_grad=True) - 200)[..., 0:-1:2]),
         "derivative for aten::log_softmax is not implemented"),
    "softmax into a non-leaf out":
        (lambda m: (lambda y: (m.softmax(m.randn(2, 4), -1, out=y), y))(m.zeros(2, 4, requires_grad=True) * 1),
         "derivative for aten::softmax is not implemented"),
    "softmax of an input requiring grad":
        (lambda m: (lambda y: (m.softmax(m.randn(2, 4, requires_grad=True), -1, out=y), y))(m.zeros(2, 4)),
         "derivative for aten::softmax is not implemented"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_fallback_records_a_node_whose_backward_raises_as_torchs(name):
    program, message = CASES[name]
    for lib in (jt, torch):
        _, written = program(lib)
        assert written.requires_grad
        with pytest.raises(RuntimeError, match=message):
            written.sum().backward()


@pytest.mark.parametrize("call", [
    lambda m: m.softmax(m.randn(2, 4), -1, out=m.zeros(2, 4, requires_grad=True)),
    lambda m: m.histogram(m.randn(10), 3, out=(m.zeros(3, requires_grad=True), m.zeros(4))),
    lambda m: m.exp(m.randn(3), out=m.zeros(3, requires_grad=True) * 1),
    lambda m: m.exp(m.randn(3, requires_grad=True), out=m.zeros(3)),
], ids=["softmax leaf out", "histogram leaf out", "exp non-leaf out", "exp input requiring grad"])
def test_a_leaf_out_or_a_generated_ops_out_is_refused_as_in_torch(call):
    for lib in (jt, torch):
        with pytest.raises(RuntimeError, match="functions with out=... arguments don't support"):
            call(lib)
