"""The oracle's torch runs compute overlapping writes from the old values, and keep torch's errors."""

import pytest
import torch

from tests.fuzz.old_values import OldValues
from tests.fuzz.oracle import record_value


def test_torch_addmm_into_its_own_first_matrix_gives_the_old_values_result():
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    m = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
    want = v + v @ m
    with OldValues():
        v.addmm_(v, m)
    assert torch.equal(v, want)


def test_torch_divide_by_a_strided_view_of_itself_gives_the_old_values_result():
    x = torch.arange(1.0, 17.0).view(1, 4, 4)
    want = x / x[..., 2].clone()
    with OldValues():
        x.true_divide_(x[..., 2])
    assert torch.equal(x, want)


def test_torchs_overlap_errors_still_come_and_leave_the_tensor_unwritten():
    x = torch.arange(6.0)
    with OldValues(), pytest.raises(RuntimeError, match="single memory location"):
        x[:4].add_(x[2:])
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_write_outside_the_written_region_survives():
    x = torch.arange(8.0)
    with OldValues():
        torch.sum(x.view(2, 4), 0, out=x[1:5])
    assert x.tolist() == [0.0, 4.0, 6.0, 8.0, 10.0, 5.0, 6.0, 7.0]


def test_a_torch_zero_tensor_gradient_is_recorded_as_zeros():
    """Found by the fuzzer (seed 1000708): ``sgn_``'s gradient in torch is a ZeroTensor without memory,
    which the oracle recorded as unreadable where jitorch's zeros were read."""
    leaf = torch.tensor([[0.5, -2.0]], requires_grad=True)
    leaf.clone().sgn_().sum().backward()
    assert leaf.grad._is_zerotensor()
    rec = record_value(torch, leaf.grad, [])
    assert rec.kind == "tensor" and rec.values.tolist() == [[0.0, 0.0]]


def test_forward_ad_through_a_zero_tangent_runs_under_the_mode_seed_7870006():
    """Transform-fuzz seed 7870006: ``torch.func.jvp`` of ``torch.subtract(x, -1, alpha=0)`` under `OldValues`
    crashed the process (torch's ``mul.Scalar`` of the number's efficient zero tangent, redispatched from a Python
    mode); the mode hands torch ordinary zeros. Run in a child process, so that a crash fails this test alone."""
    import subprocess
    import sys
    code = ("import torch\nfrom tests.fuzz.old_values import OldValues\n"
            "x, t = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0])\n"
            "with OldValues():\n"
            "    for alpha in (0, -1, 2):\n"
            "        out, tangent = torch.func.jvp(lambda x: torch.subtract(x, -1, alpha=alpha), (x,), (t,))\n"
            "        assert torch.equal(out, x + alpha) and torch.equal(tangent, t)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
