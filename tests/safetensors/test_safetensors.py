"""jitorch.safetensors against the safetensors package (the reference): files written by either read in the
other, jitorch's bytes are the package's bytes, every dtype both have, 0-d and empty tensors, metadata,
lazy opening and slicing, the package's save rules, and a torch model's weights loaded into jitorch's."""

import json
import os
import struct

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import jitorch as jt
from jitorch import safetensors as js

DTYPES = [jt.bool, jt.uint8, jt.int8, jt.int16, jt.int32, jt.int64, jt.float16, jt.bfloat16, jt.float32,
          jt.float64, jt.uint16, jt.uint32, jt.uint64]


def torch_tensors():
    """One tensor of every dtype (several shapes, 0-d and empty ones among them), by name."""
    out = {}
    for i, d in enumerate(DTYPES):
        dtype = getattr(torch, d.name)
        base = torch.arange(-7, 17).reshape(2, 3, 4)
        out[f"t_{d.name}"] = (base.remainder(2) if d is jt.bool else base if d.is_signed else base.abs()).to(dtype)
        out[f"s_{d.name}"] = torch.tensor(i + 1).to(dtype)
        out[f"e_{d.name}"] = torch.zeros(0, i % 3 + 1, dtype=dtype)
    return out


def as_jitorch(tensors):
    return {k: jt.from_dlpack(v.clone()) for k, v in tensors.items()}


def assert_same(jt_tensors, torch_tensors_):
    assert sorted(jt_tensors) == sorted(torch_tensors_)
    for k, t in torch_tensors_.items():
        x = jt_tensors[k]
        assert x.dtype.name == str(t.dtype).split(".")[1] and tuple(x.shape) == tuple(t.shape), k
        assert torch.equal(torch.from_dlpack(x.contiguous()), t), k


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}], ids=str)
def test_jitorch_writes_the_packages_bytes(metadata, tmp_path):
    tensors = torch_tensors()
    expected = safetensors.torch.save(tensors, metadata=metadata)
    assert js.save(as_jitorch(tensors), metadata=metadata) == expected
    js.save_file(as_jitorch(tensors), tmp_path / "j.safetensors", metadata=metadata)
    assert (tmp_path / "j.safetensors").read_bytes() == expected
    assert (8 + int.from_bytes(expected[:8], "little")) % 8 == 0  # the data starts 8-aligned


def test_files_written_by_the_package_load_in_jitorch(tmp_path):
    tensors = torch_tensors()
    path = tmp_path / "pt.safetensors"
    safetensors.torch.save_file(tensors, path, metadata={"who": "torch", "ü": "ß"})
    assert_same(js.load_file(path), tensors)
    assert_same(js.load(path.read_bytes()), tensors)
    with js.safe_open(path, framework="pt") as f:
        assert f.metadata() == {"who": "torch", "ü": "ß"}
        assert f.keys() == sorted(tensors)
        assert f.get_tensor("s_float64").item() == 10.0 and f.get_tensor("s_float64").shape == ()


def test_files_written_by_jitorch_load_in_the_package(tmp_path):
    tensors = torch_tensors()
    path = tmp_path / "j.safetensors"
    js.save_file(as_jitorch(tensors), path, metadata={"who": "jitorch"})
    loaded = safetensors.torch.load_file(path)
    assert sorted(loaded) == sorted(tensors)
    for k, t in tensors.items():
        assert loaded[k].dtype == t.dtype and torch.equal(loaded[k], t), k
    arrays = safetensors.numpy.load_file(str(path))  # the package's NumPy reader (it has no bfloat16)
    np.testing.assert_array_equal(arrays["t_float32"], tensors["t_float32"].numpy())
    with safetensors.safe_open(path, framework="pt") as f:
        assert f.metadata() == {"who": "jitorch"}


def test_numpy_files_of_the_package_load_in_jitorch(tmp_path):
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4), "flag": np.array([True, False]),
              "n": np.array(-3, dtype=np.int8)}
    path = tmp_path / "np.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    loaded = js.load_file(path)
    for k, a in arrays.items():
        np.testing.assert_array_equal(loaded[k].numpy(), a)
        assert loaded[k].numpy().dtype == a.dtype
    with js.safe_open(path, framework="np") as f:
        assert isinstance(f.get_tensor("x"), np.ndarray)
        np.testing.assert_array_equal(f.get_tensor("x"), arrays["x"])


def test_loaded_tensors_are_copy_on_write_maps_of_the_file(tmp_path):
    path = tmp_path / "w.safetensors"
    js.save_file({"w": jt.arange(4.0)}, path)
    before = path.read_bytes()
    w = js.load_file(path)["w"]
    w.add_(10)  # writable, and the file does not change
    assert w.tolist() == [10.0, 11.0, 12.0, 13.0]
    assert path.read_bytes() == before and js.load_file(path)["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("index", [(slice(1, 3),), (slice(1, 3), slice(2, None)), (Ellipsis, 1), (-1,), 1,
                                   (slice(None, None, 2),), (slice(1, 3), 0)], ids=str)
def test_get_slice_selects_as_the_package(index, tmp_path):
    path = tmp_path / "s.safetensors"
    safetensors.torch.save_file({"b": torch.arange(20.0).view(4, 5)}, path)
    with safetensors.safe_open(path, framework="pt") as ref, js.safe_open(path) as f:
        s, r = f.get_slice("b"), ref.get_slice("b")
        assert s.get_shape() == r.get_shape() == [4, 5] and s.get_dtype() == r.get_dtype() == "F32"
        assert s[index].tolist() == r[index].tolist()


def test_safe_open_reads_the_header_and_errors_like_the_package(tmp_path):
    path = tmp_path / "k.safetensors"
    js.save_file({"b": jt.ones(2), "a": jt.ones(3, dtype=jt.int8)}, path)
    with js.safe_open(path) as f:
        assert f.keys() == ["a", "b"] and f.offset_keys() == ["b", "a"] and f.metadata() is None
        with pytest.raises(js.SafetensorError, match="File does not contain tensor zz"):
            f.get_tensor("zz")
    with pytest.raises(js.SafetensorError, match="framework xx is invalid"):
        js.safe_open(path, framework="xx")
    with pytest.raises(FileNotFoundError):
        js.safe_open(tmp_path / "missing.safetensors")


def test_save_refuses_what_the_package_refuses():
    a = jt.arange(4.0)
    with pytest.raises(RuntimeError, match="Some tensors share memory") as e:
        js.save({"a": a, "b": a[:2]})
    assert "{'a', 'b'}" in str(e.value) or "{'b', 'a'}" in str(e.value)
    t = torch.arange(4.0)
    with pytest.raises(RuntimeError, match="Some tensors share memory"):
        safetensors.torch.save({"a": t, "b": t[:2]})
    # two tensors over one memory through different storages count too (the package looks within a storage)
    base = np.arange(4.0)
    with pytest.raises(RuntimeError, match="Some tensors share memory"):
        js.save({"a": jt.from_numpy(base), "b": jt.from_numpy(base[1:3])})
    # disjoint parts of one storage are no sharing, for the package either
    assert sorted(js.load(js.save({"a": a[:2], "b": a[2:]}))) == ["a", "b"]
    assert sorted(safetensors.torch.load(safetensors.torch.save({"a": t[:2], "b": t[2:]}))) == ["a", "b"]
    with pytest.raises(ValueError, match="non contiguous tensor: `a`"):
        js.save({"a": jt.arange(4.0)[::2]})
    with pytest.raises(ValueError, match="non contiguous tensor: `a`"):
        safetensors.torch.save({"a": torch.arange(4.0)[::2]})
    with pytest.raises(ValueError, match=r"Expected a dict of \[str, torch.Tensor\]"):
        js.save([a])
    with pytest.raises(ValueError, match="Key `a` is invalid, expected torch.Tensor"):
        js.save({"a": 1})
    with pytest.raises(TypeError, match="metadata must be a dict of strings"):
        js.save({"a": a}, metadata={"k": 1})
    assert js.load(js.save({"a": a[::2].contiguous()}))["a"].tolist() == [0.0, 2.0]


def test_a_failed_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "keep.safetensors"
    js.save_file({"a": jt.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="non contiguous"):
        js.save_file({"a": jt.zeros(4)[::2]}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.safetensors"]


def test_cuda_tensors_are_saved_from_and_loaded_to_the_device(tmp_path):
    from jitorch.backends.cuda.fake import FakeBackend
    from jitorch.runtime.cuda_backend import use_backend
    path = tmp_path / "c.safetensors"
    with use_backend(FakeBackend()):
        js.save_file({"c": jt.arange(3.0, device="cuda")}, path)
        c = js.load_file(path, device="cuda")["c"]
        assert c.device == jt.device("cuda:0") and c.cpu().tolist() == [0.0, 1.0, 2.0]
    assert safetensors.torch.load_file(path)["c"].tolist() == [0.0, 1.0, 2.0]


def test_a_torch_models_weights_load_into_the_same_jitorch_model(tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    path = tmp_path / "model.safetensors"
    safetensors.torch.save_file(ref.state_dict(), path)
    model = jt.nn.Sequential(jt.nn.Linear(5, 8), jt.nn.ReLU(), jt.nn.Linear(8, 3))
    model.load_state_dict(js.load_file(path))
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    with torch.no_grad():
        expected = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(jt.from_numpy(x)).detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    # and back: jitorch's weights load into torch's model
    js.save_file(model.state_dict(), path)
    ref2 = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    ref2.load_state_dict(safetensors.torch.load_file(path))
    with torch.no_grad():
        np.testing.assert_allclose(ref2(torch.from_numpy(x)).numpy(), expected, rtol=1e-6)


def test_the_module_is_reachable_from_the_namespace():
    assert jt.safetensors.load_file is js.load_file
    assert issubclass(js.SafetensorError, jt.serialization.SerializationError)
    assert os.path.basename(js.__file__) == "safetensors.py"


def test_tensors_a_file_leaves_misaligned_are_copied_to_aligned_memory(tmp_path):
    # another writer may put an F32 right after one byte: a view there would be misaligned for its dtype
    header = json.dumps({"u": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                         "f": {"dtype": "F32", "shape": [2], "data_offsets": [1, 9]}}).encode()
    header += b" " * (-len(header) % 8)
    data = struct.pack("<Q", len(header)) + header + b"\x07" + np.array([1.5, -2.0], "<f4").tobytes()
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    for loaded in (js.load_file(path), js.load(data)):
        f = loaded["f"]
        assert f.tolist() == [1.5, -2.0] and loaded["u"].tolist() == [7]
        assert f.data_ptr() % 4 == 0
    assert safetensors.torch.load(data)["f"].tolist() == [1.5, -2.0]  # the package reads it the same
