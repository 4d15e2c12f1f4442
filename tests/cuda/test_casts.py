"""Casts on the fake CUDA device (the generated copy kernel and fused kernels, run by the kernel
emulator) give torch's results on x86 bit for bit, over every ordered pair of dtypes and the values of
tests/runtime/test_casts.py."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.runtime import dtypes as D
from tests.runtime.test_casts import ALL, all_casts, assert_as_torch, values  # noqa: F401  (values: a fixture)


@pytest.mark.parametrize("src", ALL)
def test_device_copy_kernel_casts_give_torchs_results(values, src, fake):
    x = jt.from_numpy(values[src].copy()).cuda()
    for dst in D.ALL:
        fake.launches.clear()
        got = x.to(dst).cpu().numpy()
        assert [launch.ops for launch in fake.launches] == ([] if dst is src else [["copy"]])
        assert_as_torch(got, values[src], dst, "cuda copy kernel")


@pytest.mark.parametrize("src", ALL)
def test_compiled_casts_of_a_strided_input_on_the_device_give_torchs_results(values, src, fake):
    x = jt.from_numpy(np.repeat(values[src], 2)).cuda()[1::2]
    compiled = jt.compile(all_casts)
    fake.launches.clear()
    got = compiled(x)
    casts = [launch.ops.count("_to_copy") for launch in fake.launches]
    assert [n for n in casts if n] == [len(D.ALL) - 1]  # one fused kernel
    for dst, r in zip(D.ALL, got):
        assert_as_torch(r.cpu().numpy(), values[src], dst, "compiled on cuda")
