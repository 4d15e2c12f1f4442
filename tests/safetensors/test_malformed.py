"""Malformed safetensors files: each is refused with jitorch's SafetensorError (never another exception, never
a crash or a huge allocation), and the safetensors package refuses the same bytes."""

import json
import struct

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch

import jitorch as jt
from jitorch import safetensors as js


def file_of(header, data=b""):
    h = header if isinstance(header, bytes) else header.encode()
    return struct.pack("<Q", len(h)) + h + data


def f32(name="a", shape=(2,), offsets=(0, 8), **extra):
    return {name: {"dtype": "F32", "shape": list(shape), "data_offsets": list(offsets), **extra}}


def header(*entries, metadata=None):
    out = {} if metadata is None else {"__metadata__": metadata}
    for e in entries:
        out.update(e)
    return json.dumps(out)


MALFORMED = {
    "empty": (b"", "header too small"),
    "seven bytes": (b"\x01" * 7, "header too small"),
    "header over 100 MB": (struct.pack("<Q", 100_000_001) + b"{}", "header too large"),
    "header size 2**64-1": (struct.pack("<Q", 2**64 - 1) + b"{}", "header too large"),
    "header beyond the file": (struct.pack("<Q", 100) + b"{}", "invalid header length"),
    "not UTF-8": (file_of(b'{"a\xff":1}'), "invalid UTF-8"),
    "not JSON": (file_of("{nope"), "invalid JSON"),
    "trailing garbage": (file_of(header(f32()) + "x", b"\0" * 8), "invalid JSON"),
    "trailing NUL": (file_of(header(f32()) + "\0", b"\0" * 8), "invalid JSON"),
    "a list": (file_of("[]"), "expected an object"),
    "nested too deep": (file_of("[" * 100_000 + "]" * 100_000), "invalid JSON"),
    "metadata not strings": (file_of(header(metadata={"x": 1})), "__metadata__ must map strings"),
    "tensor not an object": (file_of('{"a": 3}'), "tensor `a` is not an object"),
    "unknown dtype": (file_of(header({"a": {"dtype": "X32", "shape": [2], "data_offsets": [0, 8]}}), b"\0" * 8),
                      "unknown dtype 'X32'"),
    "negative dimension": (file_of(header(f32(shape=[-2])), b"\0" * 8), "shape of tensor `a`"),
    "float dimension": (file_of(header(f32(shape=[2.0])), b"\0" * 8), "shape of tensor `a`"),
    "missing offsets": (file_of('{"a":{"dtype":"F32","shape":[2]}}', b"\0" * 8), "data_offsets of tensor `a`"),
    "three offsets": (file_of(header(f32(offsets=[0, 4, 8])), b"\0" * 8), "data_offsets of tensor `a`"),
    "offsets past the data": (file_of(header(f32(offsets=[0, 8])), b"\0" * 4), "invalid offset for tensor `a`"),
    "offsets reversed": (file_of(header(f32(offsets=[8, 0])), b"\0" * 8), "invalid offset for tensor `a`"),
    "overlapping": (file_of(header(f32("a", offsets=[0, 8]), f32("b", offsets=[4, 12])), b"\0" * 12),
                    "invalid offset for tensor `b`"),
    "a gap": (file_of(header(f32("a", offsets=[0, 8]), f32("b", offsets=[16, 24])), b"\0" * 24),
              "invalid offset for tensor `b`"),
    "span not dtype x shape": (file_of(header(f32(offsets=[0, 12])), b"\0" * 12), "invalid shape, data type"),
    "shape overflowing": (file_of(header(f32(shape=[2**32, 2**32, 2**32, 4])), b"\0" * 8), "invalid shape, data type"),
    "data not covered": (file_of(header(f32()), b"\0" * 16), "file not fully covered"),
    "duplicate names": (file_of('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                '"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', b"\0" * 16), "duplicate key"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=str)
def test_malformed_files_raise_safetensor_error(case, tmp_path):
    data, message = MALFORMED[case]
    with pytest.raises(js.SafetensorError, match=message):
        js.load(data)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(js.SafetensorError, match=message):
        js.load_file(path)
    with pytest.raises(safetensors.SafetensorError):  # the reference refuses it too
        safetensors.torch.load(data)


def reference_file():
    return safetensors.torch.save({"w": torch.arange(6.0).view(2, 3), "b": torch.ones(3, dtype=torch.bfloat16),
                                   "n": torch.tensor(7, dtype=torch.int64)}, metadata={"k": "v"})


def test_every_truncation_is_refused(tmp_path):
    data = reference_file()
    for n in range(len(data)):
        with pytest.raises(js.SafetensorError):
            js.load(data[:n])
    path = tmp_path / "t.safetensors"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(js.SafetensorError, match="header length|not fully covered"):
        js.safe_open(path)


def test_random_byte_changes_load_or_raise_as_the_package_does():
    data = reference_file()
    rng = np.random.default_rng(0)
    outcomes = set()
    for _ in range(300):
        bad = bytearray(data)
        for at in rng.integers(0, len(data), size=rng.integers(1, 4)):
            bad[at] = rng.integers(0, 256)
        bad = bytes(bad)
        try:
            ours = js.load(bad)
        except js.SafetensorError:
            ours = None
        try:
            theirs = safetensors.torch.load(bad)
        except safetensors.SafetensorError:
            theirs = None
        assert (ours is None) == (theirs is None), bad[:200]
        if ours is not None:
            assert sorted(ours) == sorted(theirs)
            for k, t in theirs.items():
                assert torch.equal(torch.from_dlpack(ours[k]), t)
        outcomes.add(ours is None)
    assert outcomes == {True, False}  # both kinds of change were met


def test_dtypes_jitorch_lacks_are_listed_but_not_read(tmp_path):
    path = tmp_path / "c.safetensors"
    # written by hand: the package's torch API has complex64 only from 0.6.2
    c64 = {"c": {"dtype": "C64", "shape": [2], "data_offsets": [0, 16]}}
    path.write_bytes(file_of(header(c64, f32("f", offsets=[16, 24])), b"\0" * 16 + np.ones(2, "<f4").tobytes()))
    with js.safe_open(path) as f:
        assert f.keys() == ["c", "f"] and f.get_slice("c").get_dtype() == "C64"
        assert f.get_tensor("f").tolist() == [1.0, 1.0]
        with pytest.raises(js.SafetensorError, match="tensor `c` has dtype C64, which jitorch does not have"):
            f.get_tensor("c")
    with pytest.raises(js.SafetensorError, match="C64"):
        js.load_file(path)


def test_the_header_is_never_executed_or_unpickled(tmp_path):
    # a header is data: a name that looks like code is only a name
    name = "__import__('os').system('exit 3')"
    data = js.save({name: jt.ones(1)}, metadata={"x": "eval('1')"})
    assert list(js.load(data)) == [name]
    assert list(safetensors.torch.load(data)) == [name]
