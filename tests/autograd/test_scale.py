"""Autograd follows no recursion over the program: a backward through 10,000 ops (at Python's
default recursion limit), with torch as the oracle."""

import sys

import numpy as np
import torch

import jitorch as jt
from tests.deep import deep_chain


def test_eager_backward_through_a_10000_op_chain_equals_torch():
    assert sys.getrecursionlimit() <= 1000
    x = jt.tensor([0.5, -1.0, 2.0], requires_grad=True)
    deep_chain(x).sum().backward()
    expected = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    deep_chain(expected).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected.grad.numpy(), rtol=1e-6)
