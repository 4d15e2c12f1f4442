"""jitorch.save / jitorch.load: round trips, shared storages, file objects, every bad file, and a fuzz test."""

from __future__ import annotations

import collections
import io
import json
import zipfile

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
import jitorch.optim as optim
from jitorch.serialization import SerializationError


def _round_trip(obj):
    buf = io.BytesIO()
    jt.save(obj, buf)
    buf.seek(0)
    return jt.load(buf)


def _bytes(obj):
    buf = io.BytesIO()
    jt.save(obj, buf)
    return buf.getvalue()


def _assert_same_tensor(a, b):
    assert type(a) is type(b) and a.dtype is b.dtype and a.shape == b.shape and a.stride() == b.stride()
    assert a.requires_grad == b.requires_grad
    np.testing.assert_array_equal(np.asarray(a.detach()._array()), np.asarray(b.detach()._array()))


def _assert_same(a, b):
    """Equal values and equal container types, all the way down."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, jt.Tensor):
        _assert_same_tensor(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, float) and a != a:
        assert b != b
    else:
        assert a == b


@pytest.mark.parametrize("dtype", [jt.bool, jt.uint8, jt.int8, jt.int16, jt.int32, jt.int64, jt.float16,
                                   jt.bfloat16, jt.float32, jt.float64, jt.uint16, jt.uint32, jt.uint64])
def test_tensor_round_trip_every_dtype(dtype, rng):
    t = jt.tensor(rng.uniform(-50, 50, (3, 4))).to(dtype)
    _assert_same(_round_trip(t), t)


def test_bfloat16_bits_survive():
    values = np.array([1.0, -0.0, np.inf, np.nan, 3.0e38, 1e-40], dtype=ml_dtypes.bfloat16)
    back = _round_trip(jt.from_numpy(values))
    assert back.dtype is jt.bfloat16
    np.testing.assert_array_equal(back._array().view(np.uint16), values.view(np.uint16))


def test_nested_containers_keep_types():
    obj = {"list": [1, 2.5, "s", None, True, False], "tuple": (jt.zeros(2), (3, [4])), 7: "int key",
           (1, "a"): "tuple key", "od": collections.OrderedDict(z=jt.ones(1), a=jt.ones(2)),
           "floats": [float("inf"), float("-inf"), float("nan"), -0.0, 1e308], "big": 2 ** 80,
           "meta": [jt.float16, jt.device("cpu"), jt.Size([2, 3])], "empty": ({}, [], ())}
    _assert_same(_round_trip(obj), obj)


def test_views_share_storage_after_load():
    base = jt.arange(24.0).view(4, 6)
    obj = {"base": base, "t": base.t(), "slice": base[1:, ::2], "row": base[2], "other": jt.ones(3)}
    back = _round_trip(obj)
    assert back["t"].stride() == (1, 6) and back["slice"].storage_offset() == 6
    for key in ("t", "slice", "row"):
        _assert_same(back[key], obj[key])
        assert back[key].untyped_storage() is back["base"].untyped_storage()
    assert back["other"].untyped_storage() is not back["base"].untyped_storage()
    back["base"][2, 0] = -1.0
    assert back["row"][0].tolist() == -1.0 and back["t"][0, 2].tolist() == -1.0


def test_a_tensor_saved_twice_loads_as_one_object():
    # torch.load's pickle memo gives back one object for one saved object (tied weights, a list [p, p])
    from jitorch.nn.parameter import Parameter

    x, w = jt.arange(3.0), Parameter(jt.ones(2))
    back = _round_trip({"a": [x, w], "b": (x, {"w": w}), "view": x[1:]})
    assert back["a"][0] is back["b"][0] and back["a"][1] is back["b"][1]["w"]
    assert isinstance(back["a"][1], Parameter) and back["view"] is not back["a"][0]
    back["a"][0][1] = 7.0
    assert back["view"].tolist() == [7.0, 2.0]


def test_storage_written_once():
    base = jt.zeros(1000)
    with zipfile.ZipFile(io.BytesIO(_bytes([base, base[10:], base.view(10, 100)]))) as z:
        assert sorted(z.namelist()) == ["data/0.npy", "manifest.json"]
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["format"] == "jitorch.save" and manifest["version"] == 1
    assert manifest["storages"] == {"0": {"dtype": "float32", "size": 1000, "device": "cpu"}}


def test_requires_grad_and_parameters():
    from jitorch.nn.parameter import Parameter

    w = Parameter(jt.ones(2, 2))
    x = jt.ones(3, requires_grad=True)
    back = _round_trip({"w": w, "x": x, "y": jt.ones(1)})
    assert isinstance(back["w"], Parameter) and back["w"].requires_grad
    assert back["x"].requires_grad and back["x"].is_leaf and not back["y"].requires_grad


def test_path_and_file_objects(tmp_path):
    obj = collections.OrderedDict(weight=jt.randn(3, 2), bias=jt.zeros(2))
    path = tmp_path / "model.pt"
    jt.save(obj, path)
    _assert_same(jt.load(path), obj)
    _assert_same(jt.load(str(path)), obj)
    with open(path, "rb") as fh:
        _assert_same(jt.load(fh), obj)
    with open(tmp_path / "b.pt", "wb") as fh:
        jt.save(obj, fh)
    _assert_same(jt.load(tmp_path / "b.pt"), obj)


def test_optimizer_state_dict_round_trip_reproduces_step():
    p = jt.tensor([1.0, -2.0, 3.0], requires_grad=True)
    opt = optim.Adam([p], lr=0.1, amsgrad=True)
    for _ in range(3):
        p.grad = p.detach() * 2
        opt.step()
    saved = _round_trip(opt.state_dict())
    assert isinstance(saved["state"][0]["step"], jt.Tensor) and saved["param_groups"][0]["betas"] == (0.9, 0.999)
    q = p.detach().clone().requires_grad_()
    opt2 = optim.Adam([q], lr=0.1, amsgrad=True)
    opt2.load_state_dict(saved)
    for param, o in ((p, opt), (q, opt2)):
        param.grad = jt.ones(3)
        o.step()
    np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_meta_tensors_keep_shape_and_dtype():
    back = _round_trip({"m": jt.empty(3, 4, device="meta", dtype=jt.float16)})["m"]
    assert back.device.type == "meta" and back.shape == (3, 4) and back.dtype is jt.float16


def test_map_location_cpu():
    t = jt.arange(3)
    _assert_same(jt.load(io.BytesIO(_bytes(t)), map_location="cpu"), t)
    _assert_same(jt.load(io.BytesIO(_bytes(t)), map_location={"cpu": "cpu"}), t)


@pytest.mark.skipif(jt.cuda.is_available(), reason="checks the message for machines without CUDA")
def test_map_location_cuda_without_cuda():
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        jt.load(io.BytesIO(_bytes(jt.ones(2))), map_location="cuda")


# Errors on save ---------------------------------------------------------------------------------

class Custom:
    pass


@pytest.mark.parametrize("obj, message", [
    (Custom(), "cannot save an object of type tests.test_serialization.Custom"),
    ({"a": {1, 2}}, "cannot save an object of type builtins.set"),
    (np.zeros(2), "cannot save an object of type numpy.ndarray"),
    (collections.defaultdict(list), "cannot save a dict subclass defaultdict"),
])
def test_save_unsupported_type(obj, message, tmp_path):
    path = tmp_path / "x.pt"
    with pytest.raises(TypeError, match=message):
        jt.save(obj, path)
    assert not path.exists()


def test_save_refuses_cycles():
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="cannot save a list that contains itself"):
        jt.save(loop, io.BytesIO())


# Errors on load ---------------------------------------------------------------------------------

def _archive(manifest, members=None):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        if manifest is not None:
            z.writestr("manifest.json", manifest if isinstance(manifest, (str, bytes)) else json.dumps(manifest))
        for name, data in (members or {}).items():
            z.writestr(name, data)
    buf.seek(0)
    return buf


def _npy(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _manifest(structure=None, storages=None, **extra):
    m = {"format": "jitorch.save", "version": 1, "structure": structure, "storages": storages or {}}
    m.update(extra)
    return m


def _tensor_node(**overrides):
    node = {"type": "tensor", "storage": "0", "shape": [2], "stride": [1], "offset": 0, "requires_grad": False}
    node.update(overrides)
    return node


_F32 = {"0": {"dtype": "float32", "size": 2, "device": "cpu"}}
_F32_MEMBER = {"data/0.npy": _npy(np.zeros(2, np.float32))}

BAD_FILES = [
    ("not a zip", io.BytesIO(b"hello world, not a zip at all"), "not a readable zip archive"),
    ("empty", io.BytesIO(b""), "not a readable zip archive"),
    ("no manifest", _archive(None, {"x": b"1"}), "the archive has no manifest.json"),
    ("manifest not json", _archive("{nope"), "manifest.json is not valid JSON"),
    ("manifest not object", _archive("[1, 2]"), "manifest.json must hold a JSON object"),
    ("unknown format", _archive({"format": "zip of cats", "version": 1}), "unknown format 'zip of cats'"),
    ("newer version", _archive(_manifest(version=2)), "format version 2, newer than this jitorch reads"),
    ("bad version", _archive(_manifest(version="one")), "'version' must be a positive integer"),
    ("no structure", _archive({"format": "jitorch.save", "version": 1, "storages": {}}), "no 'structure'"),
    ("no storages", _archive({"format": "jitorch.save", "version": 1, "structure": 1}),
     "'storages' must be an object"),
    ("unknown tag", _archive(_manifest({"type": "pickle"})), "unknown object type 'pickle'"),
    ("untagged object", _archive(_manifest({"a": 1})), "expected a value or a tagged object"),
    ("items not list", _archive(_manifest({"type": "list", "items": 3})), "list needs a list of 'items'"),
    ("bad pair", _archive(_manifest({"type": "dict", "items": [[1]]})), r"dict items must be \[key, value\] pairs"),
    ("unhashable key", _archive(_manifest({"type": "dict", "items": [[{"type": "list", "items": []}, 1]]})),
     "unusable dict key"),
    ("too deep", _archive('{"format": "jitorch.save", "version": 1, "storages": {}, "structure": '
                          + '{"type": "list", "items": [' * 400 + "]}" * 400 + "}"), "nested too deeply"),
    ("bad float", _archive(_manifest({"type": "float", "value": "1e5"})), "bad float '1e5'"),
    ("bad dtype tag", _archive(_manifest({"type": "dtype", "name": "float128"})), "unknown dtype 'float128'"),
    ("unknown storage", _archive(_manifest(_tensor_node(storage="9"), _F32), _F32_MEMBER),
     "tensor references unknown storage '9'"),
    ("storage dtype", _archive(_manifest(_tensor_node(), {"0": {"dtype": "complex", "size": 2}})),
     "storage '0' has unknown dtype 'complex'"),
    ("storage size", _archive(_manifest(_tensor_node(), {"0": {"dtype": "float32", "size": -1}})),
     "storage '0' needs a non-negative integer size"),
    ("member missing", _archive(_manifest(_tensor_node(), _F32)),
     "member 'data/0.npy' listed in the manifest is missing"),
    ("member not npy", _archive(_manifest(_tensor_node(), _F32), {"data/0.npy": b"garbage"}),
     "member 'data/0.npy' is not a readable .npy array"),
    ("pickled npy", _archive(_manifest(_tensor_node(), _F32), {"data/0.npy": _npy(np.array([None, 1]))}),
     "member 'data/0.npy' holds Python objects, which are never loaded"),
    ("member dtype", _archive(_manifest(_tensor_node(), _F32), {"data/0.npy": _npy(np.zeros(2, np.int32))}),
     r"storage '0' \(float32, 2 elements\): member 'data/0.npy' holds a int32 array of shape \[2\], not float32"),
    ("member shape", _archive(_manifest(_tensor_node(), _F32), {"data/0.npy": _npy(np.zeros(3, np.float32))}),
     r"holds a float32 array of shape \[3\], not float32 of shape \[2\]"),
    ("bad geometry", _archive(_manifest(_tensor_node(shape=[2], stride=[-1]), _F32), _F32_MEMBER),
     "needs non-negative integer shape, stride"),
    ("past the end", _archive(_manifest(_tensor_node(shape=[2], stride=[1], offset=1), _F32), _F32_MEMBER),
     "reaches past the end of storage '0' of 2 elements"),
    ("bad requires_grad", _archive(_manifest(_tensor_node(requires_grad="yes"), _F32), _F32_MEMBER),
     "'requires_grad' must be true or false"),
    ("ref before tensor", _archive(_manifest({"type": "tensor_ref", "index": 0})),
     "tensor_ref index 0 does not name an earlier tensor"),
    ("bad ref", _archive(_manifest({"type": "list", "items": [_tensor_node(), {"type": "tensor_ref", "index": 1}]},
                                   _F32), _F32_MEMBER), "tensor_ref index 1 does not name an earlier tensor"),
    ("int requires grad", _archive(_manifest(_tensor_node(requires_grad=True), {"0": {"dtype": "int64", "size": 2}}),
                                   {"data/0.npy": _npy(np.zeros(2, np.int64))}),
     "a jitorch.int64 tensor cannot require grad"),
]


@pytest.mark.parametrize("name, f, message", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_file(name, f, message):
    with pytest.raises(SerializationError, match=message) as info:
        jt.load(f)
    assert isinstance(info.value, RuntimeError)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.pt"):
        jt.load(tmp_path / "nothing.pt")


def test_truncated_file():
    data = _bytes({"w": jt.ones(100)})
    with pytest.raises(SerializationError, match="not a readable zip archive"):
        jt.load(io.BytesIO(data[: len(data) // 2]))


def test_corrupted_member_fails_crc():
    data = bytearray(_bytes(jt.zeros(64)))
    at = data.index(b"\x93NUMPY") + 200  # inside the array's bytes
    data[at] ^= 0xFF
    with pytest.raises(SerializationError, match="Bad CRC-32"):
        jt.load(io.BytesIO(bytes(data)))


def _zeros_checkpoint(path, n, declared=None):
    """A checkpoint of one float32 tensor of ``n`` zeros whose member is deflated (jitorch.save stores it):
    a file of about n/250 bytes, or a zip bomb."""
    from tests.runtime.zip_helpers import bomb, stored, write_zip
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (n,)})
    manifest = {"format": "jitorch.save", "version": 1, "storages": {"0": {"dtype": "float32", "size": n}},
                "structure": {"type": "tensor", "storage": "0", "shape": [n], "stride": [1], "offset": 0,
                              "requires_grad": False}}
    return write_zip(path, [stored("manifest.json", json.dumps(manifest).encode()),
                            bomb("data/0.npy", header.getvalue(), 4 * n, declared)])


def test_a_compressible_checkpoint_needs_max_bytes(tmp_path):
    """128 MiB of zeros in a file of 130 kB: more than the default budget; the caller may allow it."""
    path = _zeros_checkpoint(tmp_path / "z.pt", 32 << 20)
    with pytest.raises(SerializationError, match=r"^jitorch.load: the archive's members declare \d+ bytes in all, more than "
                                                 r"the \d+ allowed for a file of \d+ bytes \(pass a larger max_bytes"):
        jt.load(path)
    t = jt.load(path, max_bytes=256 << 20)
    assert t.shape == (32 << 20,) and not t.numpy().any()


_PEAK = r"""
import resource, sys
import jitorch as jt
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    jt.load(sys.argv[1])
except jt.serialization.SerializationError as e:
    print(str(e)[:200])
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)
"""


@pytest.mark.parametrize("declared", [None, 1000], ids=["honest", "lying"])
def test_a_zip_bomb_checkpoint_is_refused_without_inflating(tmp_path, declared):
    """The issue's bomb: a 3 MB checkpoint inflating to 3 GiB peaked at 6.3 GB. Now its declaration is refused
    before anything is inflated, or, where the zip directory lies, reading stops at the declared size (where the
    CRC fails)."""
    import os
    import subprocess
    import sys
    path = _zeros_checkpoint(tmp_path / "bomb.pt", 3 << 28, declared)
    assert os.path.getsize(path) < 4 << 20
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": root, "JITORCH_CACHE_DIR": str(tmp_path / "cache")})
    message, peak = done.stdout.strip().splitlines()
    expected = "members declare" if declared is None else "member 'data/0.npy' cannot be read (the file is damaged)"
    assert message.startswith("jitorch.load: ") and expected in message, message
    assert int(peak) < 64, done.stdout  # MiB


def test_pickle_arguments_refused():
    with pytest.raises(TypeError, match="jitorch.load reads no pickle"):
        jt.load(io.BytesIO(_bytes(1)), pickle_module=json)


def test_exported_programs_load_through_jitorch_load(tmp_path):
    program = jt.export(lambda x: x * 2 + 1, (jt.ones(3),))
    buf = io.BytesIO()
    program.save(buf)
    buf.seek(0)
    program.save(tmp_path / "p.jt")
    for source in (buf, tmp_path / "p.jt"):
        assert jt.load(source)(jt.arange(3.0)).tolist() == [1.0, 3.0, 5.0]


# Fuzz: damage never gives a wrong answer --------------------------------------------------------

_FUZZ_OBJECT = {"w": jt.arange(6.0).view(2, 3), "wt": None, "meta": [1, "two", 3.5, (True, None)]}
_FUZZ_OBJECT["wt"] = _FUZZ_OBJECT["w"].t()
_FUZZ_BYTES = _bytes(_FUZZ_OBJECT)


@settings(max_examples=100)
@given(cut=st.integers(0, len(_FUZZ_BYTES) - 1),
       flips=st.lists(st.tuples(st.integers(0, len(_FUZZ_BYTES) - 1), st.integers(1, 255)), max_size=3),
       truncate=st.booleans())
def test_damaged_files_fail_cleanly_or_load_exactly(cut, flips, truncate):
    data = bytearray(_FUZZ_BYTES)
    for at, mask in flips:
        data[at] ^= mask
    if truncate:
        data = data[:cut]
    try:
        back = jt.load(io.BytesIO(bytes(data)))
    except SerializationError:
        return
    _assert_same(back, _FUZZ_OBJECT)


@pytest.mark.parametrize("make", [lambda: jt.nn.Linear(2, 2),
                                  lambda: jt.optim.SGD(jt.nn.Linear(2, 2).parameters(), lr=0.1),
                                  lambda: {"model": jt.nn.Linear(2, 2), "step": 3}],
                         ids=["module", "optimizer", "module_in_a_dict"])
def test_saving_a_whole_object_says_to_save_its_state_dict(make, tmp_path):
    with pytest.raises(TypeError, match=r"cannot save a whole (Linear|SGD): .*Save its state_dict\(\) instead, "
                                        r"jitorch.save\(obj.state_dict\(\), f\)"):
        jt.save(make(), tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def test_the_state_dict_the_message_names_round_trips(tmp_path):
    model = jt.nn.Linear(2, 2)
    jt.save(model.state_dict(), tmp_path / "m.pt")
    fresh = jt.nn.Linear(2, 2)
    fresh.load_state_dict(jt.load(tmp_path / "m.pt"))
    assert all(jt.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))


def test_safe_globals_as_torch_keeps_them():
    import torch.serialization as theirs
    ours = jt.serialization
    before = theirs.get_safe_globals()
    try:
        for s in (ours, theirs):
            s.clear_safe_globals()
            s.add_safe_globals([collections.OrderedDict, (int, "foo.int")])
        assert ours.get_safe_globals() == [collections.OrderedDict, (int, "foo.int")]
        assert sorted(map(str, ours.get_safe_globals())) == sorted(map(str, theirs.get_safe_globals()))
        with ours.safe_globals([dict]):
            assert dict in ours.get_safe_globals()
        assert dict not in ours.get_safe_globals()
        ours.clear_safe_globals()
        assert ours.get_safe_globals() == []
    finally:
        theirs.clear_safe_globals()
        theirs.add_safe_globals(before)
