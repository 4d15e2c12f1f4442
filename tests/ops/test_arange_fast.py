"""arange's eager shortcut (`creation._arange_fast`): Python int bounds and step within 2**31 give NumPy's int64
arange, the general path's values, dtype and layout (and torch's); anything else, and every error, is the general
path's."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import creation, registry
from tests.support import general_path

SERVED = [(5,), (0, 32), (3, 17, 4), (17, 3, -4), (-5, 5), (0, 0), (7, 7, -1), (0, 10, 3), (-2**31, -2**31 + 5),
          (2**31 - 3, 2**31, 1)]


def _fast(*args, dtype=None, device=None, requires_grad=False):
    start, end, step = (args + (None, 1))[:3] if len(args) == 1 else (args + (1,))[:3]
    return registry.OPS["arange"].fast((start, end, step, dtype, device, requires_grad))


@pytest.mark.parametrize("args", SERVED)
def test_arange_shortcut_gives_the_general_paths_and_torchs_values(args):
    got = _fast(*args)
    assert got is not None  # (served)
    with general_path():
        want = jt.arange(*args)
    t = torch.arange(*args)
    for result in (got, jt.arange(*args), jt.arange(*args, dtype=jt.int64)):
        assert result.dtype is jt.int64 and result.shape == want.shape and result.stride() == want.stride()
        assert result.tolist() == want.tolist() == t.tolist()


@pytest.mark.parametrize("args, options", [
    ((0, 5.0), {}), ((0.0, 5), {}), ((True,), {}), ((0, 5, 0.5), {}), ((np.int64(5),), {}),
    ((0, 5), {"dtype": jt.float32}), ((0, 5), {"device": "cpu"}), ((0, 5), {"requires_grad": True}),
    ((2**31 + 1, 2**31 + 3), {}), ((-2**31 - 2, -2**31), {}), ((0, 4, 2**32), {}),
    ((0, 5, 0), {}), ((5, 0), {}), ((0, 5, -1), {}),
])
def test_arange_shortcut_leaves_other_calls_and_errors_to_the_general_path(args, options):
    assert _fast(*args, **options) is None
    torch_options = {k: getattr(torch, str(v).split(".")[-1]) if k == "dtype" else v for k, v in options.items()}
    try:
        want = torch.arange(*args, **torch_options)
    except Exception as e:  # noqa: BLE001 (torch's error is what jitorch raises)
        with pytest.raises(type(e)) as raised:
            jt.arange(*args, **options)
        # (lowered: the general path's requires_grad message begins "only", torch's factories' "Only" -- a
        # difference of the general path, not of this shortcut)
        assert str(raised.value).lower() == str(e).lower()
        return
    got = jt.arange(*args, **options)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_arange_shortcut_serves_only_the_cpu_as_default_device():
    jt.set_default_device("meta")
    try:
        assert _fast(0, 5) is None
        assert jt.arange(0, 5).device.type == "meta"
    finally:
        jt.set_default_device("cpu")
    assert _fast(0, 5) is not None and creation.get_default_device().type == "cpu"
