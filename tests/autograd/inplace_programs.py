"""Programs mixing in-place writes with autograd, written once for torch and jitorch (``T`` is
either module): those torch differentiates, and those where torch refuses because a tensor a
derivative formula saved was overwritten. Each takes ``(T, x, w)``: ``x`` (3x4) and ``w`` (3x4)
require grad; each returns the tensor to sum and backpropagate from."""

import numpy as np


def scalar_multiple_then_index_assignments(T, x, w):
    # x * 2 saves nothing of its operands or result: writes into y are no error
    y = x * 2
    y[1] = w[0]
    y[:, 0] = 0
    return y


def chain_of_inplace_ops_on_a_non_leaf_and_its_views(T, x, w):
    y = x * 2
    y.add_(1)
    y[:, 0].mul_(3)
    y.clamp_(min=-1)
    y.t()[1] += x[:, 2]
    return y


def relu_in_place_on_a_transposed_product(T, x, w):
    # Conv2d(bias=False) or ConvTranspose2d then ReLU(inplace=True): matmul saves its operands, not its result
    return (x @ w.t()).t().relu_()


def mul_in_place_by_a_tensor_reads_the_old_self(T, x, w):
    y = x * 1
    y.mul_(w)
    return y


def overwriting_a_saved_input_that_needs_no_gradient_there(T, x, w):
    # mul saves self only for other's gradient: w.detach() wants none
    y = x * 1
    z = y * w.detach()
    y.add_(1)
    return z


def values_of_max_written_in_place(T, x, w):
    # max.dim saves its indices, not its values
    values, _ = x.max(0)
    values.add_(1)
    return values * w[0]


def in_place_on_a_view_taken_before_its_base_was_written(T, x, w):
    y = x * 2
    v = y[0]
    y.mul_(w)
    v.add_(1)
    return y


def comparisons_written_in_place_cut_the_gradient(T, x, w):
    # x.ge_(x) holds 1.0s: torch's gradient through it is zero, not the old history's
    y = x * 2
    y.greater_equal_(y)
    z = w * 3
    z.lt_(x)
    return y + z + w


def rounding_and_sign_written_in_place_cut_the_gradient(T, x, w):
    y = x * 2
    y.floor_()
    z = w * 1.5
    z.sign_()
    return y * w + z


def a_random_fill_in_place_cuts_the_gradient(T, x, w):
    y = x * 2
    y.uniform_()
    return y + w


def logical_not_in_place_keeps_the_history_as_in_torch(T, x, w):
    # torch's logical_not_ writes through its out= form, which autograd does not see
    y = x * 2
    y.logical_not_()
    return y * w


def a_view_of_a_tensor_reshaped_in_place_then_written(T, x, w):
    # found by the fuzzer (seed 2300497): y.unsqueeze_ left y taken for a view, whose history was
    # refreshed from a base it does not have
    y = x * 1
    y.unsqueeze_(1)
    v = y.unsqueeze(2)
    y[T.tensor([2, 0])] = 0.5
    return v * w


def in_place_through_views_of_non_contiguous_bases(T, x, w):
    # y has x.t()'s memory order; z is transposed in place: torch's CopySlices covers both
    y = x.t() * 2
    y[1:, 0].mul_(w[0, 1:])
    z = x * 1
    z.t_()
    z[::2, 2].add_(z[::2, 0])
    return y * z


def in_place_through_a_view_of_a_tensor_restrided_in_place(T, x, w):
    # found by the fuzzer (seed 2300448): y.as_strided_ leaves y a tensor over part of its storage
    y = x * 1
    y.as_strided_((2, 3), (4, 1), 1)
    y[:, 1].sin_()
    y[-1] = 2.0
    return y * w[1:, :3]


WORKING = [scalar_multiple_then_index_assignments, chain_of_inplace_ops_on_a_non_leaf_and_its_views,
           relu_in_place_on_a_transposed_product, mul_in_place_by_a_tensor_reads_the_old_self,
           overwriting_a_saved_input_that_needs_no_gradient_there, values_of_max_written_in_place,
           in_place_on_a_view_taken_before_its_base_was_written, comparisons_written_in_place_cut_the_gradient,
           rounding_and_sign_written_in_place_cut_the_gradient, a_random_fill_in_place_cuts_the_gradient,
           logical_not_in_place_keeps_the_history_as_in_torch, a_view_of_a_tensor_reshaped_in_place_then_written,
           in_place_through_views_of_non_contiguous_bases,
           in_place_through_a_view_of_a_tensor_restrided_in_place]


def result_of_exp_written_in_place(T, x, w):
    y = x.exp()
    y.add_(1)
    return y


def result_of_exp_written_through_a_view(T, x, w):
    y = x.exp()
    y[1].add_(1)
    return y


def saved_input_of_mul_written_in_place(T, x, w):
    y = x * 1
    z = y * w
    y.add_(1)
    return z


def saved_tensor_without_history_written_in_place(T, x, w):
    c = w.detach().clone()
    z = x * c
    c.add_(1)
    return z


def saved_relu_result_of_a_view_written_through_its_base(T, x, w):
    y = x * 1
    z = y.t().relu_()
    y.add_(1)
    return z


def mul_in_place_by_itself(T, x, w):
    y = x * 1
    y.mul_(y)
    return y


RAISING = [result_of_exp_written_in_place, result_of_exp_written_through_a_view, saved_input_of_mul_written_in_place,
           saved_tensor_without_history_written_in_place, saved_relu_result_of_a_view_written_through_its_base,
           mul_in_place_by_itself]


def inputs(T, seed=0):
    """``x`` and ``w``, 3x4, requiring grad, equal for torch and jitorch."""
    rng = np.random.default_rng(seed)
    return [T.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True) for _ in range(2)]


def torch_message(program):
    """torch's error for ``program`` in jitorch's words: ``jitorch.`` type names, no hint about
    anomaly detection (which jitorch does not have)."""
    import torch
    x, w = inputs(torch)
    try:
        program(torch, x, w).sum().backward()
    except RuntimeError as e:
        return str(e).split(" Hint:")[0].replace("[torch.", "[jitorch.")
    raise AssertionError(f"torch differentiates {program.__name__}")
