"""Warnings of ops' meta rules (var's "degrees of freedom is <= 0") come once per call in every mode,
as eager jitorch and torch give them: a compiled call gives its trace's warnings again on each run,
never twice (the trace, a code generator or an op the graph runs eagerly warn no more)."""

import warnings

import pytest
import torch

import jitorch as jt

DOF = "degrees of freedom is <= 0"


def warned(fn, *args):
    """How many degrees-of-freedom warnings one call of ``fn`` gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args)
    return sum(DOF in str(w.message) for w in caught)


def var_of_one_element(T, x):
    return x.var()


def std_over_no_dims_of_a_0d_tensor(T, x):
    return x.std([])


def var_mean_whose_result_is_dead(T, x):
    # the compiled graph drops the unused node; eager still computed it, and warned
    T.var_mean(x, [])
    return x + 1


def std_next_to_other_ops(T, x):
    y = x * 2
    return y.std(), y.exp()


PROGRAMS = [var_of_one_element, std_over_no_dims_of_a_0d_tensor, var_mean_whose_result_is_dead,
            std_next_to_other_ops]


def _input(T, program, requires_grad=False, device="cpu"):
    shape = () if program is not var_of_one_element else (1,)
    return T.full(shape, 1.5, device=device, requires_grad=requires_grad)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_eager_warns_once_per_call_as_torch(program):
    assert warned(program, jt, _input(jt, program)) == warned(program, torch, _input(torch, program)) == 1


@pytest.mark.parametrize("backend", ["llvm", "interpreter"])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_a_meta_rule_warning_comes_once_per_compiled_call(program, backend):
    step = jt.compile(lambda x: program(jt, x), backend=backend)
    x = _input(jt, program)
    assert [warned(step, x) for _ in range(3)] == [1, 1, 1]
    assert all(e.graph is not None and e.eager_reason is None for e in step.cache.values())


@pytest.mark.parametrize("backend", ["llvm", "interpreter"])
def test_a_compiled_call_with_a_backward_warns_once_forward_and_not_in_backward(backend):
    step = jt.compile(lambda x: (x * 2).var(), backend=backend)
    for _ in range(2):
        x = jt.full((1,), 1.5, requires_grad=True)
        outs = []
        assert warned(lambda: outs.append(step(x))) == 1
        assert outs[0].grad_fn is not None
        assert warned(outs[0].backward) == 0


def _messages(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args)
    return [str(w.message) for w in caught]


def where_of_a_uint8_condition(T, x):
    """Fuzz seed 3000037: the condition check warned directly, so a compiled call warned when traced and
    again through its graph (the interpreter on every call), and the llvm graph's later calls never."""
    c = (x > 2).to(T.uint8)
    return c.where(c, x)


def index_by_a_list_of_items(T, x):
    """The deprecation of a non-tuple index is Python code around the ops, run only when traced."""
    return x[[0, slice(None)]] * 2


@pytest.mark.parametrize("backend", ["llvm", "interpreter"])
@pytest.mark.parametrize("program", [where_of_a_uint8_condition, index_by_a_list_of_items], ids=lambda p: p.__name__)
def test_an_ops_deprecation_warning_comes_once_per_compiled_call_as_eagerly(program, backend):
    x = jt.arange(12.0).reshape(3, 4)
    eager = _messages(program, jt, x)
    assert len(eager) == 1  # (torch gives where's only once a process: TORCH_WARN_ONCE)
    step = jt.compile(lambda x: program(jt, x), backend=backend)
    assert [_messages(step, x) for _ in range(3)] == [eager] * 3
    assert all(e.graph is not None and e.eager_reason is None for e in step.cache.values())
