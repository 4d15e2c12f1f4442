"""`BoundedZip`: sizes checked against the zip directory, the data and a budget before anything is
inflated; each member read once; .npy members parsed without pickle, straight into their array."""

import hashlib
import io
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from jitorch.runtime.zipfiles import ArchiveError, BoundedZip, default_budget

from .zip_helpers import bomb, deflated, stored, write_zip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _npy(arr, version=None):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, arr, allow_pickle=True)
    else:
        np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def _npy_header(dtype, shape):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                               "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _zip(tmp_path, *entries):
    return write_zip(tmp_path / "a.zip", list(entries))


def test_members_read_with_their_hash(tmp_path):
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = _zip(tmp_path, stored("a.npy", _npy(arr)), deflated("t.txt", b"text " * 100))
    with BoundedZip(path) as z:
        h = hashlib.sha256()
        got = z.read_npy("a.npy", np.dtype(np.float32), (3, 4), h)
        assert h.hexdigest() == hashlib.sha256(_npy(arr)).hexdigest()
        np.testing.assert_array_equal(got, arr)
        assert got.flags.writeable and got.flags.owndata and got.flags.c_contiguous
        assert z.read("t.txt") == b"text " * 100


@pytest.mark.parametrize("arr", [np.float64(3.5) * np.ones(()), np.asfortranarray(np.arange(6.0).reshape(2, 3)),
                                 np.zeros((0, 3), np.int8)], ids=["0-d", "fortran", "empty"])
def test_npy_shapes(tmp_path, arr):
    path = _zip(tmp_path, stored("a.npy", _npy(arr)))
    with BoundedZip(path) as z:
        got = z.read_npy("a.npy", arr.dtype, arr.shape)
    np.testing.assert_array_equal(got, arr)
    assert got.flags.c_contiguous


def test_a_member_is_read_once(tmp_path):
    path = _zip(tmp_path, stored("a", b"x"))
    with BoundedZip(path) as z:
        z.read("a")
        with pytest.raises(ArchiveError, match="member 'a' is named twice by the file"):
            z.read("a")


def test_declarations_over_the_budget_are_refused_before_reading(tmp_path):
    """A 1 GiB member deflated into 1 MB: the default budget (64 MiB and 16 times the file) refuses it,
    a caller's larger max_bytes lets it through."""
    path = _zip(tmp_path, bomb("z", b"", 1 << 30))
    size = os.path.getsize(path)
    with pytest.raises(ArchiveError, match=rf"the archive's members declare {1 << 30} bytes in all, more than the "
                                           rf"{default_budget(size)} allowed for a file of {size} bytes \(pass a "
                                           r"larger max_bytes"):
        BoundedZip(path)
    with BoundedZip(path, max_bytes=2 << 30) as z:
        assert z.budget == 2 << 30


@pytest.mark.parametrize("entry, message", [
    (("s", zipfile.ZIP_STORED, b"abc", 4, 0), "member 's' claims 4 bytes from 3 stored bytes"),
    (deflated("d", b"abc", declared=10 << 20), r"member 'd' claims 10485760 bytes from \d+ stored bytes, more than "
                                               "its compression can produce"),
    (("m", 12, b"abc", 3, 0), "member 'm' uses compression method 12"),
], ids=["stored", "deflate", "method"])
def test_impossible_sizes_are_refused(tmp_path, entry, message):
    with pytest.raises(ArchiveError, match=message):
        BoundedZip(_zip(tmp_path, entry))


def test_a_member_that_inflates_past_its_declared_size(tmp_path):
    """The directory says 100 bytes, the stream inflates to 1 GiB: reading stops at 100, where the CRC fails."""
    path = _zip(tmp_path, bomb("z", b"", 1 << 30, declared=100))
    with BoundedZip(path) as z, pytest.raises(ArchiveError, match="member 'z' cannot be read .the file is damaged.: "
                                                                  "BadZipFile: Bad CRC-32"):
        z.read("z")


def test_a_member_shorter_than_declared(tmp_path):
    path = _zip(tmp_path, deflated("d", b"abc" * 100, declared=301))
    with BoundedZip(path) as z, pytest.raises(ArchiveError, match="member 'd' ends after 300 of its 301 bytes"):
        z.read("d")


def test_a_damaged_member_fails_its_crc(tmp_path):
    name, method, payload, size, crc = stored("s", b"abcdef")
    path = _zip(tmp_path, (name, method, payload, size, crc ^ 1))
    with BoundedZip(path) as z, pytest.raises(ArchiveError, match="member 's' cannot be read .the file is damaged.: "
                                                                  "BadZipFile: Bad CRC-32"):
        z.read("s")


@pytest.mark.parametrize("data, message", [
    (_npy(np.array([{"a": 1}], dtype=object)), "holds Python objects, which are never loaded"),
    (_npy(np.zeros(3, np.float64)), r"holds a float64 array of shape \[3\], not float32 of shape \[3\]"),
    (_npy(np.zeros(4, np.float32)), r"holds a float32 array of shape \[4\], not float32 of shape \[3\]"),
    (_npy(np.zeros(3, ">f4")), r"holds a >f4 array"),
    (_npy(np.zeros(3, np.float32))[:-4], r"holds 136 bytes, but its header describes 140"),
    (_npy(np.zeros(3, np.float32)) + b"xx", r"holds 142 bytes, but its header describes 140"),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'", "is not a readable .npy array: ValueError"),
    (b"\x93NUMPY\x01\x00\x10\x00" + b"(" * 16, "is not a readable .npy array"),
    (b"\x93NUMPY\x01\x00\x20\x00" + b"{'descr': '<f4', 'shape': (\"\"\"" + b" " * 2, "is not a readable .npy array"),
    (b"\x93NUMPY\x09\x00", r"is not a readable .npy array: ValueError: unsupported .npy format version \(9, 0\)"),
    (_npy_header("<f4", (-1,)), r"bad .npy shape \(-1,\)"),
], ids=["object", "dtype", "shape", "big-endian", "short", "long", "header", "nested", "tokenize", "version",
        "negative"])
def test_bad_npy_members(tmp_path, data, message):
    path = _zip(tmp_path, stored("a.npy", data))
    with BoundedZip(path) as z, pytest.raises(ArchiveError, match=message):
        z.read_npy("a.npy", np.dtype(np.float32), (3,))


def test_npy_version_2(tmp_path):
    arr = np.arange(3, dtype=np.float32)
    path = _zip(tmp_path, stored("a.npy", _npy(arr, version=(2, 0))))
    with BoundedZip(path) as z:
        np.testing.assert_array_equal(z.read_npy("a.npy", arr.dtype, (3,)), arr)


def test_not_an_archive(tmp_path):
    (tmp_path / "n").write_bytes(b"PK\x03\x04 certainly not a zip")
    with pytest.raises(ArchiveError, match="not a readable zip archive: BadZipFile"):
        BoundedZip(tmp_path / "n")
    with pytest.raises(FileNotFoundError):
        BoundedZip(tmp_path / "missing")


PEAK = r"""
import resource, sys
import numpy as np
from jitorch.runtime.zipfiles import ArchiveError, BoundedZip
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with BoundedZip(sys.argv[1], max_bytes=int(sys.argv[2])) as z:
    try:
        z.read_npy("a.npy", np.dtype(np.float32), (int(sys.argv[3]),))
    except ArchiveError as e:
        print("refused:", e)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)
"""


def test_reading_needs_no_more_memory_than_the_array(tmp_path):
    """64 MiB of zeros as a .npy member: reading it peaks at the array's size (not twice, as reading the
    member into bytes and parsing them would); a member inflating past its declared size is stopped."""
    n = 16 << 20
    path = _zip(tmp_path, bomb("a.npy", _npy_header("<f4", (n,)), 4 * n))
    run = [sys.executable, "-c", PEAK, str(path), str(1 << 30)]
    done = subprocess.run([*run, str(n)], capture_output=True, text=True, env={"PYTHONPATH": ROOT}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) < 80, done.stdout  # MiB: the array, not twice it
    done = subprocess.run([*run, str(n // 16)], capture_output=True, text=True, env={"PYTHONPATH": ROOT},
                          timeout=300)
    assert "refused: member 'a.npy' holds a float32 array of shape [16777216], not" in done.stdout
    assert int(done.stdout.split()[-1]) < 20, done.stdout
