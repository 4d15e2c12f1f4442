"""The kernel cache: entry format, damaged entries, unusable folders, other processes and concurrent writers."""

from __future__ import annotations

import errno
import hashlib
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import llvmlite
import pytest

import jitorch
from jitorch.codegen import cache as cache_mod
from jitorch.codegen.cache import FORMAT_VERSION, MAGIC, KernelCache, cache_dir, cache_key

ROOT = Path(__file__).resolve().parents[2]
HEADER = struct.Struct("<4sIQ32s")
PAYLOAD = b"\x7fELF object code " * 100


@pytest.fixture
def env(monkeypatch, tmp_path):
    """A clean environment: no cache variables, and a home of its own."""
    for name in ("JITORCH_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return monkeypatch


def entry_path(directory, key):
    return Path(directory) / key[:2] / f"{key}.jitk"


def header(payload, version=FORMAT_VERSION, magic=MAGIC):
    return HEADER.pack(magic, version, len(payload), hashlib.sha256(payload).digest())


def flip(raw, index):
    return raw[:index] + bytes([raw[index] ^ 0x01]) + raw[index + 1:]


def assert_only_valid_entries(directory):
    """Every file under ``directory`` is a whole entry that reads back, and no temporary file is left."""
    files = [p for p in Path(directory).rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert path.suffix == ".jitk", path
        assert path.parent.name == path.name[:2]
        assert KernelCache(directory).get(path.stem) is not None, path


# --- keys -------------------------------------------------------------------------------------------


def test_cache_key_is_a_sha256_hex_digest_and_deterministic():
    key = cache_key("define void @k() { ret void }", "x86_64-unknown-linux-gnu", "znver3", "+avx2")
    assert len(key) == 64 and int(key, 16) >= 0 and key == key.lower()
    assert key == cache_key("define void @k() { ret void }", "x86_64-unknown-linux-gnu", "znver3", "+avx2")


@pytest.mark.parametrize("a, b", [
    (("ab", "c"), ("a", "bc")),
    (("a",), ("a", "")),
    (("a", ""), ("", "a")),
    (("a",), (b"a",)),
    (("ir", "cpu1"), ("ir", "cpu2")),
])
def test_cache_key_is_unambiguous(a, b):
    assert cache_key(*a) != cache_key(*b)


@pytest.mark.parametrize("module", [jitorch, llvmlite], ids=["jitorch", "llvmlite"])
def test_cache_key_depends_on_versions(monkeypatch, module):
    before = cache_key("ir")
    cache_mod._toolchain.cache_clear()
    monkeypatch.setattr(module, "__version__", module.__version__ + ".post1")
    try:
        assert cache_key("ir") != before
    finally:
        cache_mod._toolchain.cache_clear()


def test_cache_key_rejects_other_types():
    with pytest.raises(TypeError, match="parts must be str or bytes, got int"):
        cache_key("ir", 3)


@pytest.mark.parametrize("key", ["", "abc", "ABCDEF12", "../../etc/passwd", "ab/cd", 1234])
def test_bad_keys_raise(tmp_path, key):
    cache = KernelCache(tmp_path)
    with pytest.raises(ValueError, match="lowercase hex"):
        cache.put(key, PAYLOAD)
    with pytest.raises(ValueError, match="lowercase hex"):
        cache.get(key)


def test_put_rejects_non_bytes(tmp_path):
    with pytest.raises(TypeError, match="data must be bytes, got str"):
        KernelCache(tmp_path).put(cache_key("k"), "text")


# --- entries ----------------------------------------------------------------------------------------


def test_round_trip_through_disk(tmp_path):
    key = cache_key("ir")
    writer = KernelCache(tmp_path)
    assert writer.get(key) is None
    writer.put(key, bytearray(PAYLOAD))
    assert writer.get(key) == PAYLOAD
    # The entry format and layout are a contract: a sharded file, header then payload.
    assert entry_path(tmp_path, key).read_bytes() == header(PAYLOAD) + PAYLOAD
    reader = KernelCache(tmp_path)
    assert reader.get(key) == PAYLOAD
    assert reader.get(cache_key("other")) is None


def test_empty_payload_round_trips(tmp_path):
    key = cache_key("empty")
    KernelCache(tmp_path).put(key, b"")
    assert KernelCache(tmp_path).get(key) == b""


def test_memory_layer_answers_without_the_disk(tmp_path):
    key = cache_key("ir")
    KernelCache(tmp_path).put(key, PAYLOAD)
    cache = KernelCache(tmp_path)
    assert cache.get(key) == PAYLOAD
    entry_path(tmp_path, key).unlink()  # a disk read now would miss
    assert cache.get(key) == PAYLOAD
    info = cache.info()
    assert (info.disk_hits, info.memory_hits, info.misses, info.memory_entries) == (1, 1, 0, 1)


def _newer_format(raw):
    payload = raw[HEADER.size:]
    return header(payload, version=FORMAT_VERSION + 1) + payload


CORRUPTIONS = {
    "empty": lambda raw: b"",
    "short header": lambda raw: raw[:10],
    "header only": lambda raw: raw[:HEADER.size],
    "truncated payload": lambda raw: raw[:-1],
    "trailing bytes": lambda raw: raw + b"\0",
    "flipped payload byte": lambda raw: flip(raw, len(raw) - 7),
    "flipped checksum byte": lambda raw: flip(raw, HEADER.size - 3),
    "flipped length byte": lambda raw: flip(raw, 8),
    "foreign": lambda raw: b"\x7fELF" + raw[4:],
    "newer format": _newer_format,
    "huge length": lambda raw: HEADER.pack(MAGIC, FORMAT_VERSION, 2**63, b"\0" * 32) + raw[HEADER.size:],
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_damaged_entry_is_a_miss_and_put_rebuilds_it(tmp_path, corrupt):
    key = cache_key("ir")
    KernelCache(tmp_path).put(key, PAYLOAD)
    path = entry_path(tmp_path, key)
    path.write_bytes(corrupt(path.read_bytes()))
    cache = KernelCache(tmp_path)
    assert cache.get(key) is None
    assert cache.info().misses == 1
    cache.put(key, PAYLOAD)
    assert path.read_bytes() == header(PAYLOAD) + PAYLOAD
    assert KernelCache(tmp_path).get(key) == PAYLOAD


def test_unreadable_entry_is_a_miss(tmp_path):
    key = cache_key("ir")
    entry_path(tmp_path, key).mkdir(parents=True)  # a folder where the file should be
    assert KernelCache(tmp_path).get(key) is None


def test_info_and_clear(tmp_path):
    cache = KernelCache(tmp_path)
    payloads = {cache_key(str(i)): bytes(i) * 10 for i in range(3)}
    for key, payload in payloads.items():
        cache.put(key, payload)
    info = cache.info()
    assert (info.directory, info.writable, info.entries, info.writes) == (tmp_path, True, 3, 3)
    assert info.size_bytes == sum(HEADER.size + len(p) for p in payloads.values())
    shard = entry_path(tmp_path, next(iter(payloads))).parent
    (shard / ".stale.1234.abcd.tmp").write_bytes(b"left by a killed writer")
    (tmp_path / "README").write_text("not ours")
    cache.clear()
    assert cache.info().entries == 0 and cache.info().memory_entries == 0
    assert all(cache.get(key) is None for key in payloads)
    assert [p.name for p in tmp_path.iterdir()] == ["README"]


# --- folders ----------------------------------------------------------------------------------------


def test_jitorch_cache_dir_is_honoured(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.setenv("JITORCH_CACHE_DIR", str(tmp_path / "chosen"))
    assert cache_dir() == tmp_path / "chosen"
    key = cache_key("ir")
    KernelCache().put(key, PAYLOAD)
    assert entry_path(tmp_path / "chosen", key).is_file()
    assert not (tmp_path / "xdg").exists()


def test_default_cache_is_one_per_process(env, tmp_path):
    env.setenv("JITORCH_CACHE_DIR", str(tmp_path / "chosen"))
    cache_mod.default_cache.cache_clear()
    try:
        assert cache_mod.default_cache() is cache_mod.default_cache()
        assert cache_mod.default_cache().directory == tmp_path / "chosen"
    finally:
        cache_mod.default_cache.cache_clear()


def test_default_folders(env, tmp_path):
    assert cache_dir() == tmp_path / "home" / ".cache" / "jitorch"
    env.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the XDG spec says
    assert cache_dir() == tmp_path / "home" / ".cache" / "jitorch"
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "jitorch"
    env.setenv("JITORCH_CACHE_DIR", "")  # empty means unset
    assert cache_dir() == tmp_path / "xdg" / "jitorch"


def test_folder_is_created_by_the_first_put(tmp_path):
    cache = KernelCache(tmp_path / "a" / "b")
    assert cache.get(cache_key("ir")) is None
    assert not (tmp_path / "a").exists()
    cache.put(cache_key("ir"), PAYLOAD)
    assert (tmp_path / "a" / "b").is_dir()


def _assert_memory_only(cache):
    key = cache_key("ir")
    cache.put(key, PAYLOAD)  # must not raise
    assert cache.get(key) == PAYLOAD
    assert not cache.writable
    cache.put(cache_key("again"), PAYLOAD)
    assert cache.info().writes == 0


def test_home_that_cannot_hold_a_folder_turns_writing_off(env, tmp_path):
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    env.setenv("HOME", str(home))
    cache = KernelCache()
    _assert_memory_only(cache)
    assert KernelCache().get(cache_key("ir")) is None
    assert cache.info().entries == 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes through permissions")
def test_read_only_folder_turns_writing_off(tmp_path):
    tmp_path.chmod(0o500)
    try:
        _assert_memory_only(KernelCache(tmp_path / "cache"))
        _assert_memory_only(KernelCache(tmp_path))
    finally:
        tmp_path.chmod(0o700)


def test_read_only_file_system_keeps_reading(tmp_path, monkeypatch):
    old = cache_key("old")
    KernelCache(tmp_path).put(old, PAYLOAD)
    cache = KernelCache(tmp_path)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    with monkeypatch.context() as m:
        m.setattr(os, "open", read_only)
        _assert_memory_only(cache)
    assert cache.get(old) == PAYLOAD  # entries already on disk are still served
    assert list(tmp_path.rglob("*.tmp")) == []


# --- processes and threads --------------------------------------------------------------------------


def _python(code, cache_directory, *args):
    env = {**os.environ, "JITORCH_CACHE_DIR": str(cache_directory),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process):
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return out


READ = """
import sys
from jitorch.codegen.cache import KernelCache
data = KernelCache().get(sys.argv[1])
print("miss" if data is None else data.hex())
"""
WRITE = """
import sys
from jitorch.codegen.cache import KernelCache
KernelCache().put(sys.argv[1], bytes.fromhex(sys.argv[2]))
"""


def test_another_process_reads_what_this_one_wrote(tmp_path):
    key = cache_key("ir")
    assert _finish(_python(READ, tmp_path, key)).strip() == "miss"
    KernelCache(tmp_path).put(key, PAYLOAD)
    assert bytes.fromhex(_finish(_python(READ, tmp_path, key)).strip()) == PAYLOAD


def test_this_process_reads_what_another_wrote(tmp_path):
    key = cache_key("from a child")
    _finish(_python(WRITE, tmp_path, key, PAYLOAD.hex()))
    assert KernelCache(tmp_path).get(key) == PAYLOAD


# Each writer puts the shared key and keys of its own, re-reading the shared key from disk each round.
WRITERS = """
import os, sys, time
from jitorch.codegen.cache import KernelCache, cache_key
me, rounds, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
shared = cache_key("shared")
while not os.path.exists(go):
    time.sleep(0.001)
for r in range(rounds):
    KernelCache().put(shared, bytes([me]) * 65536)
    KernelCache().put(cache_key("own", str(me), str(r)), bytes([me, r]) * 1000)
    got = KernelCache().get(shared)
    assert got is not None and len(got) == 65536 and len(set(got)) == 1, "torn or missing entry"
"""


def test_concurrent_processes_leave_only_valid_entries(tmp_path):
    directory, go, writers, rounds = tmp_path / "cache", tmp_path / "go", 4, 25
    processes = [_python(WRITERS, directory, me, rounds, go) for me in range(writers)]
    go.touch()
    for process in processes:
        _finish(process)
    assert_only_valid_entries(directory)
    cache = KernelCache(directory)
    assert cache.get(cache_key("shared")) in {bytes([me]) * 65536 for me in range(writers)}
    assert cache.info().entries == 1 + writers * rounds


def test_concurrent_threads_leave_only_valid_entries(tmp_path):
    shared, threads, rounds = cache_key("shared"), 8, 20
    barrier, errors = threading.Barrier(threads), []

    def work(me):
        try:
            barrier.wait()
            for r in range(rounds):
                KernelCache(tmp_path).put(shared, bytes([me]) * 65536)
                KernelCache(tmp_path).put(cache_key("own", str(me), str(r)), bytes([me, r]) * 100)
                got = KernelCache(tmp_path).get(shared)
                assert got is not None and len(got) == 65536 and len(set(got)) == 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    pool = [threading.Thread(target=work, args=(me,)) for me in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    assert_only_valid_entries(tmp_path)
    assert KernelCache(tmp_path).info().entries == 1 + threads * rounds


def test_one_cache_shared_by_threads(tmp_path):
    cache, keys = KernelCache(tmp_path), [cache_key(str(i)) for i in range(50)]

    def work():
        for key in keys:
            if cache.get(key) is None:
                cache.put(key, key.encode())

    pool = [threading.Thread(target=work) for _ in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert all(KernelCache(tmp_path).get(key) == key.encode() for key in keys)
    info = cache.info()
    # a get that misses memory while another thread writes the entry finds it on disk
    assert info.memory_hits + info.disk_hits + info.misses == 4 * len(keys)
