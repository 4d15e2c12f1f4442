"""The autocast state (jitorch/runtime/autocast_mode.py): per device type, thread-local, with the key the
registry and the compile guards read."""

import pytest
import torch

import jitorch as jt
from jitorch.runtime import autocast_mode as am


@pytest.fixture(autouse=True)
def clean_state():
    yield
    for device_type in am.DEVICE_TYPES:
        am.set_autocast_enabled(device_type, False)
        am.set_autocast_dtype(device_type, am.DEFAULT_DTYPES[device_type])


def test_the_key_names_the_device_types_that_autocast():
    assert am.STATE.key is None
    am.set_autocast_enabled("cuda", True)
    am.set_autocast_dtype("cpu", jt.float16)
    assert am.STATE.key == (("cuda", jt.float16),)
    am.set_autocast_enabled("cpu", True)
    assert am.STATE.key == (("cpu", jt.float16), ("cuda", jt.float16))


def test_the_one_argument_form_sets_cuda_as_torchs():
    am.set_autocast_enabled(True)
    torch.set_autocast_enabled(True)
    assert am.is_autocast_enabled("cuda") == torch.is_autocast_enabled("cuda") is True
    torch.set_autocast_enabled(False)


def test_excluded_turns_every_device_type_off_then_back():
    am.set_autocast_enabled("cpu", True)
    with am.excluded():
        assert am.STATE.key is None and not am.is_autocast_enabled("cpu")
    assert am.STATE.key == (("cpu", jt.bfloat16),)


def test_restored_gives_a_saved_state_for_its_block():
    saved = (("cpu", jt.float16),)
    with am.restored(saved):
        assert am.STATE.key == saved and am.get_autocast_dtype("cpu") is jt.float16
    assert am.STATE.key is None and am.get_autocast_dtype("cpu") is jt.bfloat16


def test_bad_device_types_and_dtypes():
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        am.get_autocast_dtype("gpu")
    with pytest.raises(RuntimeError, match="unknown device type for autocast: 'meta'"):
        am.is_autocast_enabled("meta")
    with pytest.raises(TypeError, match="must be torch.dtype, not str"):
        am.set_autocast_dtype("cpu", "bfloat16")
