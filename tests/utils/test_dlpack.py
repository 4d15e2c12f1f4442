"""jitorch.utils.dlpack, as torch.utils.dlpack: legacy capsules both ways with torch (the oracle)."""

import pytest
import torch
import torch.utils.dlpack

import jitorch as jt
import jitorch.utils.dlpack


def test_torch_utils_dlpack_capsules_both_ways():
    t = torch.arange(6.0)
    cap = torch.utils.dlpack.to_dlpack(t)
    x = jt.from_dlpack(cap)
    assert x.data_ptr() == t.data_ptr() and '"used_dltensor"' in repr(cap)
    with pytest.raises(RuntimeError, match="consumed only once"):
        jt.from_dlpack(cap)
    y = jt.arange(6.0)
    cap = jitorch.utils.dlpack.to_dlpack(y)
    assert '"dltensor"' in repr(cap)
    back = torch.utils.dlpack.from_dlpack(cap)
    assert back.data_ptr() == y.data_ptr()
    assert jitorch.utils.dlpack.from_dlpack(t).data_ptr() == t.data_ptr()


def test_device_types_are_dlpacks_numbers():
    assert jitorch.utils.dlpack.DLDeviceType.kDLCPU == torch.utils.dlpack.DLDeviceType.kDLCPU == 1
    assert jitorch.utils.dlpack.DLDeviceType.kDLCUDA == torch.utils.dlpack.DLDeviceType.kDLCUDA == 2
    assert {d.name: int(d) for d in jitorch.utils.dlpack.DLDeviceType} == \
        {d.name: int(d) for d in torch.utils.dlpack.DLDeviceType}
