"""``x[index]`` by whole-dim slices and one list of Python ints (`indexing._take_fast`): the general path's
values, dtype, strides and errors, torch's values and strides; anything else left to the general path."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.ops import indexing
from tests.support import general_path

torch = pytest.importorskip("torch")

SLICE = slice(None)
CASES = [
    ((1, 65), (SLICE, [-1])),  # (sampling code's ``v[:, [-1]]``)
    ((4, 5), [0, 3, 3, -4]),
    ((4, 5), ([2, 0],)),
    ((2, 3, 4), (SLICE, SLICE, [3, 0, 1])),
    ((2, 3, 4), (SLICE, [1, -1])),
    ((2, 1, 4), (SLICE, [0, 0, -1])),
    ((5,), [4, -5]),
    ((3, 0), ([1, 2],)),
]


@pytest.mark.parametrize("dtype", [jt.float32, jt.int64, jt.bool])
@pytest.mark.parametrize("shape,index", CASES)
def test_a_list_index_takes_the_general_paths_copy(shape, index, dtype, monkeypatch):
    a = (np.arange(int(np.prod(shape))).reshape(shape) % 7).astype(dtype.np)
    x = jt.tensor(a).clone(memory_format=jt.contiguous_format)  # (tensor() keeps an empty array's strides (0, 0))
    taken = []
    take = indexing._take_fast
    monkeypatch.setattr(indexing, "_take_fast", lambda *args: taken.append(take(*args)) or taken[-1])
    got = x[index]
    assert taken and taken[-1] is got  # (the shortcut served it)
    with general_path():
        want = x[index]
    t = torch.from_numpy(a)[index]
    assert got.dtype is want.dtype and got.shape == want.shape == tuple(t.shape)
    assert got.stride() == want.stride()
    if got.numel() > 1:
        assert got.stride() == t.stride()
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(got.numpy(), t.numpy())
    assert got.data_ptr() != x.data_ptr()  # (a copy)
    got.fill_(0) if dtype is not jt.bool else got.fill_(False)
    np.testing.assert_array_equal(x.numpy(), a)


@pytest.mark.parametrize("index", [
    (SLICE, [1, 5]),  # (out of range: the general path's IndexError)
    (SLICE, [True]),  # (a bool list is a mask)
    (SLICE, [np.int64(1)]),
    (SLICE, []),
    ([0], [1]),
    (slice(0, 1), [1]),
    (0, [1]),
    (SLICE, [1], None),
    (SLICE, SLICE, [0]),  # (more items than dims)
])
def test_other_indices_take_the_general_path(index):
    x = jt.arange(10.0).reshape(2, 5)
    assert indexing._take_fast(x, index) is None
    try:
        want = torch.arange(10.0).reshape(2, 5)[index]
    except IndexError as e:
        with pytest.raises(IndexError, match=str(e).split(" for ")[0].replace("[", r"\[")):
            x[index]
    else:
        np.testing.assert_array_equal(x[index].numpy(), want.numpy())


def test_a_strided_tensor_or_one_recording_history_takes_the_general_path():
    x = jt.arange(12.0).reshape(3, 4)
    assert indexing._take_fast(x.T, (SLICE, [0])) is None
    w = jt.ones(2, 3, requires_grad=True)
    assert indexing._take_fast(w, (SLICE, [2])) is None
    y = w[:, [2, 2]]
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[0, 0, 2], [0, 0, 2]])
    with jt.no_grad():
        assert indexing._take_fast(w, (SLICE, [2])) is not None
