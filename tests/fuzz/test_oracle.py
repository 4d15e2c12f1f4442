"""The oracle's allowances for torch's accidents (docs/differences-from-torch.md) and for torch's rules that differ
by device, each on what torch does."""

from dataclasses import replace

import torch

import jitorch as jt
from tests.fuzz import generator
from tests.fuzz.generator import SETITEM_0D, generate, op_table
from tests.fuzz.oracle import CallRecord, _requires_grad, check, compare_calls, compare_grads, record_value, run_mode
from tests.fuzz.program import source


def _integer_tensor_left_requiring_grad(lib):
    """Found by the fuzzer (seed 1000217): ``x1.greater_equal_(x0)`` with x1 uint8 and x0 requiring grad."""
    x1 = lib.tensor([2, 2], dtype=lib.uint8)
    x1.greater_equal_(lib.tensor([1.0, 3.0], requires_grad=True))
    return x1


def test_an_integer_tensor_torch_leaves_requiring_grad_is_recorded_as_not_requiring_it():
    theirs, mine = _integer_tensor_left_requiring_grad(torch), _integer_tensor_left_requiring_grad(jt)
    assert theirs.requires_grad and not mine.requires_grad
    recorded = record_value(torch, theirs, [])
    assert recorded.kind == "tensor" and not recorded.requires_grad
    assert compare_grads((CallRecord(outputs=[record_value(jt, mine, [])]), {}), (CallRecord(outputs=[recorded]), {}),
                         "eager", "torch", against_torch=True) == []


def test_torchs_errors_on_such_a_tensor_are_not_compared():
    theirs, mine = _integer_tensor_left_requiring_grad(torch), _integer_tensor_left_requiring_grad(jt)
    try:
        theirs * 2
    except RuntimeError as e:
        error = f"RuntimeError: {e}"
    assert "Autograd not support dtype" in error
    mine = CallRecord(outputs=[record_value(jt, mine * 2, [])])
    assert compare_calls([mine] * 3, [CallRecord(error=error)], "eager", "torch", against_torch=True) == []
    assert compare_grads((mine, {}), (CallRecord(error=error), {}), "eager", "torch", against_torch=True) == []
    other = CallRecord(error="RuntimeError: something else")
    assert compare_calls([mine], [other], "eager", "torch", against_torch=True)


def test_an_integer_tensor_written_through_a_view_has_no_gradient_to_compare():
    """Found by the fuzzer (seed 2300555): ``c0[:, 0] = cos(x0)`` into a captured int64 ``c0`` leaves torch's
    ``c0`` requiring grad (CopySlices), so the oracle looked for a gradient of c0 that jitorch has not."""
    for lib in (torch, jt):
        c0 = lib.zeros(5, 2, dtype=lib.int64)
        c0[:, 0] = lib.cos(lib.tensor(0.5, requires_grad=True))
        assert c0.requires_grad == (lib is torch) and not _requires_grad(c0)


def test_a_cuda_setitem_from_an_overlapping_0d_tensor_may_raise_where_the_cpus_fills():
    """Found by the fuzzer (seed 3001505): ``v0 = x0[-1]; x0[::1] = v0`` fills on the CPU and raises torch's
    overlap error on CUDA, as torch does on each (tests/cuda/test_layouts.py). Seed 7902717 makes such a
    program with today's op table and generator (programs follow both: 3001678 did until session 39)."""
    program, _ = generate(7902717, table=op_table())
    assert any(s.tag == SETITEM_0D for s in program.body)
    cuda = run_mode(program, "cuda-eager")
    assert any(r.error and "single memory location" in r.error for r in cuda)
    assert check(program, ("eager", "cuda-eager", "cuda-compiled")).mismatches == []
    refused = CallRecord(error="RuntimeError: unsupported operation: some elements of the input tensor and the "
                               "written-to tensor refer to a single memory location. Please clone() the tensor "
                               "before performing the operation.")
    filled = CallRecord()
    assert compare_calls([refused], [filled], "cuda-eager", "eager", setitem_copies=True) == []
    assert compare_calls([refused], [filled], "cuda-eager", "eager")
    other = CallRecord(error="RuntimeError: something else")
    assert compare_calls([other], [filled], "cuda-eager", "eager", setitem_copies=True)


def test_a_new_result_the_call_stores_is_no_view_whose_strides_torch_gives(monkeypatch):
    """Found by the fuzzer (seed 7400036): ``v1 = rot90(x0, 3, [1, 2]); M.stored1 = v1; return v1``. The output
    shares memory with the module's state only because the call stored it there: a new result, whose strides
    are not compared with torch's (another layout of it passes; jitorch's flip has kept a permuted input's order
    as torch's since session 50). Its aliasing is: it is recorded as "stored", in every mode alike. (The program
    as drawn before acosh took exact operands only, seed 7610939: it called acosh on an inexact one.)"""
    monkeypatch.setattr(generator, "DISCONTINUOUS", generator.DISCONTINUOUS - {"acosh", "arccosh"})
    program, _ = generate(7400036, table=op_table())
    assert "M.stored1 = v1" in source(program) and "rot90" in source(program)
    k = program.outputs.index("v1")  # (its place among the outputs follows the generator's draws)
    records = {mode: run_mode(program, mode) for mode in ("eager", "torch")}
    assert all(r.outputs[k].alias == ("stored", "M.stored1") for rs in records.values() for r in rs)
    assert check(program, ("eager", "compiled")).mismatches == []
    ours, torchs = records["eager"][0].outputs[k], records["torch"][0].outputs[k]
    other = replace(ours, strides=(25, 1, 5))  # (another order of the dims than torch's)
    assert other.strides != torchs.strides
    assert compare_calls([CallRecord(outputs=[other])], [CallRecord(outputs=[torchs])], "eager", "torch",
                         against_torch=True) == []
    # on memory the state held before the call, the same output is a view, whose strides are torch's
    mine, theirs = (CallRecord(outputs=[replace(o, alias=("captured", "M.stored1"))]) for o in (other, torchs))
    assert [m.what for m in compare_calls([mine], [theirs], "eager", "torch", against_torch=True)] == [
        "output 0 strides"]


def test_a_result_stored_over_a_replaced_state_tensor_is_stored_not_captured():
    """Found by the fuzzer (seed 7501628): ``M.stored0 = v3`` drops the tensor stored there by the call before;
    the emulated device's allocator gave the next result (``v10 = full_like(...); M.stored1 = v10``) its
    address, which the oracle read as memory the state held before the call ("captured"). The oracle keeps
    the state's tensors alive through the call, so a new result is "stored" on every device."""
    program, _ = generate(7501628, table=op_table())
    assert "M.stored0 = v3" in source(program) and "M.stored1 = v10" in source(program)
    for mode in ("eager", "cuda-eager"):
        assert all(r.outputs[2].alias == ("stored", "M.stored1") for r in run_mode(program, mode))


def test_a_float64_result_of_float32_data_is_compared_at_float32s_tolerance_seed_7811197():
    """``x0.cosh_(); T.stack([x0, c0, x1], out=float64)`` with x0 float32: eager's cosh (NumPy) and the kernels'
    differ by 2 float32 ulps, which the float64 output carried past float64's tolerance. A program with float32
    data compares float64 results at float32's; one of float64 data alone keeps float64's."""
    from tests.fuzz.oracle import TOLERANCE, tolerances
    program, _ = generate(7811197, table=op_table(), chains=0.2)
    assert {d.dtype for d in program.inputs} >= {"float32"}
    assert tolerances(program, False)["float64"] == TOLERANCE["float32"]
    wide = replace(program, inputs=tuple(replace(d, dtype="float64") for d in program.inputs if d.dtype == "float64"),
                   captured=())
    assert tolerances(wide, False)["float64"] == TOLERANCE["float64"]
    assert not check(program).mismatches


def _gradient_through(dtype):
    """torch's gradient of float32 x through ``log_softmax(x, 1, dtype).negative()``, recorded in a
    `ComputedThrough` run as the oracle records it."""
    from tests.fuzz.oracle import ComputedThrough
    x = torch.tensor([[0.3, -1.2, 2.5], [1.0, 0.25, -0.75]], requires_grad=True)
    with ComputedThrough():
        y = torch.log_softmax(x, 1, dtype).negative()
        (y.float() * torch.tensor([[1.0, -0.5, 0.25], [2.0, 1.0, -1.0]])).sum().backward()
        return record_value(torch, x.grad, []), record_value(torch, y, [])


def test_a_float32_gradient_through_bfloat16_is_compared_at_bfloat16s_tolerance_seed_7954111():
    """``v1 = T.log_softmax(x0, 1, T.bfloat16); return v1.negative()`` with x0 float32: the float32 gradient of
    x0 is computed through bfloat16 kernels (torch's log_softmax backward in bfloat16), and eager's was 1
    bfloat16 ulp from torch's (0.48242 vs 0.48438), a mismatch at float32's tolerance. The oracle records the
    narrowest float dtype torch computed each result through and compares there; a float32-only computation
    keeps float32's."""
    from tests.fuzz.oracle import TORCH_TOLERANCE, compare_output
    grad, out = _gradient_through(torch.bfloat16)
    assert (grad.dtype, grad.through, out.dtype, out.through) == ("float32", "bfloat16", "bfloat16", "bfloat16")
    one_ulp_off = replace(grad, values=grad.values * (1 + 2 ** -8), through="")
    assert not compare_output(one_ulp_off, grad, TORCH_TOLERANCE, strides=False)
    wide, _ = _gradient_through(torch.float32)
    assert wide.through == "float32"
    assert compare_output(replace(wide, values=wide.values * (1 + 2 ** -8), through=""), wide, TORCH_TOLERANCE,
                          strides=False)
    program, _ = generate(7954111, 40, table=op_table())
    assert program.grad and not check(program).mismatches
