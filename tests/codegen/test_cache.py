"""The kernel cache: entry format, damaged, swapped and special-file entries, unusable folders, other processes,
concurrent writers, and kernels compiled through it."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import llvmlite
import pytest

import jitorch
from jitorch.codegen import builtins, cache as cache_mod, cpu
from jitorch.codegen.machine import selected
from jitorch.codegen.cache import FORMAT_VERSION, MAGIC, KernelCache, cache_dir, cache_key, source_digest
from jitorch.runtime import version as jitorch_version

ROOT = Path(__file__).resolve().parents[2]
HEADER = struct.Struct("<4sIQ32s32sH")
PAYLOAD = b"\x7fELF object code " * 100
SOURCE = "define void @k() { ret void }"


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


def header(key, payload, version=FORMAT_VERSION, magic=MAGIC, source=SOURCE):
    """An entry's bytes before its payload: the header, then the key."""
    return HEADER.pack(magic, version, len(payload), hashlib.sha256(payload).digest(), source_digest(source),
                       len(key)) + key.encode()


def flip(raw, index):
    return raw[:index] + bytes([raw[index] ^ 0x01]) + raw[index + 1:]


def assert_only_valid_entries(directory):
    """Every file under ``directory`` is a whole entry that reads back, and no temporary file is left."""
    files = [p for p in Path(directory).rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert path.suffix == ".jitk", path
        assert path.parent.name == path.name[:2]
        assert KernelCache(directory).get(path.stem, SOURCE) is not None, path


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


@pytest.mark.parametrize("module", [jitorch_version, llvmlite], ids=["jitorch", "llvmlite"])
def test_cache_key_depends_on_versions(monkeypatch, module):
    before = cache_key("ir")
    cache_mod.toolchain.cache_clear()
    monkeypatch.setattr(module, "__version__", module.__version__ + ".post1")
    try:
        assert cache_key("ir") != before
    finally:
        cache_mod.toolchain.cache_clear()


def test_cache_key_rejects_other_types():
    with pytest.raises(TypeError, match="parts must be str or bytes, got int"):
        cache_key("ir", 3)


@pytest.mark.parametrize("key", ["", "abc", "ABCDEF12", "../../etc/passwd", "ab/cd", 1234])
def test_bad_keys_raise(tmp_path, key):
    cache = KernelCache(tmp_path)
    with pytest.raises(ValueError, match="lowercase hex"):
        cache.put(key, PAYLOAD, SOURCE)
    with pytest.raises(ValueError, match="lowercase hex"):
        cache.get(key, SOURCE)


def test_put_rejects_non_bytes(tmp_path):
    with pytest.raises(TypeError, match="data must be bytes, got str"):
        KernelCache(tmp_path).put(cache_key("k"), "text", SOURCE)


# --- entries ----------------------------------------------------------------------------------------


def test_round_trip_through_disk(tmp_path):
    key = cache_key("ir")
    writer = KernelCache(tmp_path)
    assert writer.get(key, SOURCE) is None
    writer.put(key, bytearray(PAYLOAD), SOURCE)
    assert writer.get(key, SOURCE) == PAYLOAD
    # The entry format and layout are a contract: a sharded file, header, key, then payload.
    assert entry_path(tmp_path, key).read_bytes() == header(key, PAYLOAD) + PAYLOAD
    reader = KernelCache(tmp_path)
    assert reader.get(key, SOURCE) == PAYLOAD
    assert reader.get(cache_key("other"), SOURCE) is None


def test_empty_payload_round_trips(tmp_path):
    key = cache_key("empty")
    KernelCache(tmp_path).put(key, b"", SOURCE)
    assert KernelCache(tmp_path).get(key, SOURCE) == b""


def test_memory_layer_answers_without_the_disk(tmp_path):
    key = cache_key("ir")
    KernelCache(tmp_path).put(key, PAYLOAD, SOURCE)
    cache = KernelCache(tmp_path)
    assert cache.get(key, SOURCE) == PAYLOAD
    entry_path(tmp_path, key).unlink()  # a disk read now would miss
    assert cache.get(key, SOURCE) == PAYLOAD
    info = cache.info()
    assert (info.disk_hits, info.memory_hits, info.misses, info.memory_entries) == (1, 1, 0, 1)


KEY = cache_key("ir")
ENTRY_START = HEADER.size + len(KEY)


def _newer_format(raw):
    payload = raw[ENTRY_START:]
    return header(KEY, payload, version=FORMAT_VERSION + 1) + payload



CORRUPTIONS = {
    "empty": lambda raw: b"",
    "short header": lambda raw: raw[:10],
    "header only": lambda raw: raw[:HEADER.size],
    "truncated payload": lambda raw: raw[:-1],
    "trailing bytes": lambda raw: raw + b"\0",
    "flipped payload byte": lambda raw: flip(raw, len(raw) - 7),
    "flipped checksum byte": lambda raw: flip(raw, 30),
    "flipped source hash byte": lambda raw: flip(raw, 60),
    "flipped key byte": lambda raw: flip(raw, HEADER.size + 5),
    "key length": lambda raw: raw[:HEADER.size - 2] + struct.pack("<H", 63) + raw[HEADER.size:],
    "flipped length byte": lambda raw: flip(raw, 8),
    "foreign": lambda raw: b"\x7fELF" + raw[4:],
    "newer format": _newer_format,
    "huge length": lambda raw: HEADER.pack(MAGIC, FORMAT_VERSION, 2**63, b"\0" * 32, source_digest(SOURCE),
                                           len(KEY)) + raw[HEADER.size:],
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_damaged_entry_is_a_miss_and_put_rebuilds_it(tmp_path, corrupt):
    KernelCache(tmp_path).put(KEY, PAYLOAD, SOURCE)
    path = entry_path(tmp_path, KEY)
    path.write_bytes(corrupt(path.read_bytes()))
    cache = KernelCache(tmp_path)
    assert cache.get(KEY, SOURCE) is None
    assert cache.info().misses == 1
    cache.put(KEY, PAYLOAD, SOURCE)
    assert path.read_bytes() == header(KEY, PAYLOAD) + PAYLOAD
    assert KernelCache(tmp_path).get(KEY, SOURCE) == PAYLOAD


def test_unreadable_entry_is_a_miss(tmp_path):
    key = cache_key("ir")
    entry_path(tmp_path, key).mkdir(parents=True)  # a folder where the file should be
    assert KernelCache(tmp_path).get(key, SOURCE) is None


def test_info_and_clear(tmp_path):
    cache = KernelCache(tmp_path)
    payloads = {cache_key(str(i)): bytes(i) * 10 for i in range(3)}
    for key, payload in payloads.items():
        cache.put(key, payload, SOURCE)
    info = cache.info()
    assert (info.directory, info.entries, info.writes, info.write_failures) == (tmp_path, 3, 3, 0)
    assert info.size_bytes == sum(len(header(k, p)) + len(p) for k, p in payloads.items())
    assert (info.memory_entries, info.memory_bytes) == (3, sum(map(len, payloads.values())))
    shard = entry_path(tmp_path, next(iter(payloads))).parent
    (shard / ".stale.1234.abcd.tmp").write_bytes(b"left by a killed writer")
    (tmp_path / "README").write_text("not ours")
    cache.clear()
    assert cache.info().entries == 0 and cache.info().memory_entries == 0
    assert all(cache.get(key, SOURCE) is None for key in payloads)
    assert [p.name for p in tmp_path.iterdir()] == ["README"]


# --- folders ----------------------------------------------------------------------------------------


def test_jitorch_cache_dir_is_honoured(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env.setenv("JITORCH_CACHE_DIR", str(tmp_path / "chosen"))
    assert cache_dir() == tmp_path / "chosen"
    key = cache_key("ir")
    KernelCache().put(key, PAYLOAD, SOURCE)
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
    assert cache.get(cache_key("ir"), SOURCE) is None
    assert not (tmp_path / "a").exists()
    cache.put(cache_key("ir"), PAYLOAD, SOURCE)
    assert (tmp_path / "a" / "b").is_dir()


def _assert_unwritten_but_served(cache):
    """Puts that cannot reach the disk: no exception, each put counted as a failure, served from memory."""
    keys = [cache_key("ir"), cache_key("again")]
    for key in keys:
        cache.put(key, PAYLOAD, SOURCE)  # must not raise
        assert cache.get(key, SOURCE) == PAYLOAD
    info = cache.info()
    assert (info.writes, info.write_failures) == (0, 2)


def test_home_that_cannot_hold_a_folder_fails_each_write(env, tmp_path):
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    env.setenv("HOME", str(home))
    cache = KernelCache()
    _assert_unwritten_but_served(cache)
    assert KernelCache().get(cache_key("ir"), SOURCE) is None
    assert cache.info().entries == 0


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes through permissions")
def test_read_only_folder_fails_each_write(tmp_path):
    tmp_path.chmod(0o500)
    try:
        _assert_unwritten_but_served(KernelCache(tmp_path / "cache"))
        _assert_unwritten_but_served(KernelCache(tmp_path))
    finally:
        tmp_path.chmod(0o700)


def _read_only(*args, **kwargs):
    raise OSError(errno.EROFS, "Read-only file system")


def test_read_only_file_system_keeps_reading(tmp_path, monkeypatch):
    old = cache_key("old")
    KernelCache(tmp_path).put(old, PAYLOAD, SOURCE)
    cache = KernelCache(tmp_path)
    with monkeypatch.context() as m:
        m.setattr(os, "open", _read_only)
        _assert_unwritten_but_served(cache)
    assert cache.get(old, SOURCE) == PAYLOAD  # entries already on disk are still served
    assert list(tmp_path.rglob("*.tmp")) == []


def test_one_failed_write_skips_that_entry_only(tmp_path, monkeypatch):
    cache, failing, later = KernelCache(tmp_path), cache_key("failing"), cache_key("later")
    with monkeypatch.context() as m:
        m.setattr(os, "open", _read_only)
        cache.put(failing, PAYLOAD, SOURCE)
    cache.put(later, PAYLOAD, SOURCE)
    info = cache.info()
    assert (info.writes, info.write_failures, info.entries) == (1, 1, 1)
    assert KernelCache(tmp_path).get(later, SOURCE) == PAYLOAD
    assert KernelCache(tmp_path).get(failing, SOURCE) is None
    cache.put(failing, PAYLOAD, SOURCE)  # the next put of the failed entry reaches the disk
    assert KernelCache(tmp_path).get(failing, SOURCE) == PAYLOAD


def test_a_write_failing_midway_skips_that_entry_only(tmp_path, monkeypatch):
    cache, calls = KernelCache(tmp_path), []
    real = cache_mod.atomic_write

    def full_disk_once(path, **options):
        calls.append(path)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, **options)

    monkeypatch.setattr(cache_mod, "atomic_write", full_disk_once)
    keys = [cache_key(str(i)) for i in range(3)]
    for key in keys:
        cache.put(key, PAYLOAD, SOURCE)
    assert [KernelCache(tmp_path).get(key, SOURCE) for key in keys] == [None, PAYLOAD, PAYLOAD]
    assert (cache.info().writes, cache.info().write_failures) == (2, 1)


# --- entries that are not what they claim -----------------------------------------------------------


def _in_thread(fn, timeout=10):
    """``fn()``'s result, failing the test (rather than hanging it) if it blocks."""
    result = []
    worker = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), "blocked"
    return result[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_at_an_entry_path_is_a_miss_and_never_blocks(tmp_path):
    entry_path(tmp_path, KEY).parent.mkdir(parents=True)
    os.mkfifo(entry_path(tmp_path, KEY))
    cache = KernelCache(tmp_path)
    assert _in_thread(lambda: cache.get(KEY, SOURCE)) is None
    assert cache.info().misses == 1
    _in_thread(lambda: cache.put(KEY, PAYLOAD, SOURCE))  # the entry replaces the FIFO
    assert entry_path(tmp_path, KEY).is_file()
    assert KernelCache(tmp_path).get(KEY, SOURCE) == PAYLOAD


def test_symbolic_link_to_a_valid_entry_is_a_miss(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    KernelCache(elsewhere).put(KEY, PAYLOAD, SOURCE)
    directory = tmp_path / "cache"
    entry_path(directory, KEY).parent.mkdir(parents=True)
    entry_path(directory, KEY).symlink_to(entry_path(elsewhere, KEY))
    assert KernelCache(directory).get(KEY, SOURCE) is None


def test_symbolic_link_to_a_shard_of_valid_entries_is_a_miss(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    KernelCache(elsewhere).put(KEY, PAYLOAD, SOURCE)
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / KEY[:2]).symlink_to(entry_path(elsewhere, KEY).parent, target_is_directory=True)
    assert KernelCache(directory).get(KEY, SOURCE) is None


def test_a_linked_cache_folder_is_still_read(tmp_path):
    KernelCache(tmp_path / "real").put(KEY, PAYLOAD, SOURCE)
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    assert KernelCache(tmp_path / "link").get(KEY, SOURCE) == PAYLOAD


def test_entry_copied_to_another_keys_path_is_a_miss(tmp_path):
    other = cache_key("other ir")
    KernelCache(tmp_path).put(other, PAYLOAD, SOURCE)
    entry_path(tmp_path, KEY).parent.mkdir(parents=True, exist_ok=True)
    entry_path(tmp_path, KEY).write_bytes(entry_path(tmp_path, other).read_bytes())
    cache = KernelCache(tmp_path)
    assert cache.get(KEY, SOURCE) is None
    assert cache.get(other, SOURCE) == PAYLOAD


def test_entry_compiled_from_another_source_is_a_miss(tmp_path):
    KernelCache(tmp_path).put(KEY, PAYLOAD, SOURCE)
    cache = KernelCache(tmp_path)
    assert cache.get(KEY, SOURCE + " ") is None
    assert cache.get(KEY, SOURCE) == PAYLOAD
    # nor does the memory layer serve it for another source
    assert cache.get(KEY, SOURCE + " ") is None


# --- the memory layer --------------------------------------------------------------------------------


def test_memory_layer_drops_the_least_recently_used_beyond_its_limit(tmp_path):
    cache = KernelCache(tmp_path, memory_limit=3 * len(PAYLOAD))
    keys = [cache_key(str(i)) for i in range(4)]
    for key in keys[:3]:
        cache.put(key, PAYLOAD, SOURCE)
    assert cache.get(keys[0], SOURCE) == PAYLOAD  # now the most recently used
    cache.put(keys[3], PAYLOAD, SOURCE)
    info = cache.info()
    assert (info.memory_entries, info.memory_bytes) == (3, 3 * len(PAYLOAD))
    for key in keys:
        entry_path(tmp_path, key).unlink()  # what memory dropped is gone now
    assert [cache.get(key, SOURCE) is not None for key in keys] == [True, False, True, True]


def test_payload_larger_than_the_memory_limit_is_kept_on_disk_only(tmp_path):
    cache = KernelCache(tmp_path, memory_limit=len(PAYLOAD) - 1)
    cache.put(KEY, PAYLOAD, SOURCE)
    assert cache.info().memory_entries == 0
    assert cache.get(KEY, SOURCE) == PAYLOAD
    assert cache.info().disk_hits == 1


# --- processes and threads --------------------------------------------------------------------------


def _python(code, cache_directory, *args, **env):
    env = {**os.environ, "JITORCH_CACHE_DIR": str(cache_directory),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **env}
    code = f"SOURCE = {SOURCE!r}\n{code}"
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process):
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return out


READ = """
import sys
from jitorch.codegen.cache import KernelCache
data = KernelCache().get(sys.argv[1], SOURCE)
print("miss" if data is None else data.hex())
"""
WRITE = """
import sys
from jitorch.codegen.cache import KernelCache
KernelCache().put(sys.argv[1], bytes.fromhex(sys.argv[2]), SOURCE)
"""


def test_another_process_reads_what_this_one_wrote(tmp_path):
    key = cache_key("ir")
    assert _finish(_python(READ, tmp_path, key)).strip() == "miss"
    KernelCache(tmp_path).put(key, PAYLOAD, SOURCE)
    assert bytes.fromhex(_finish(_python(READ, tmp_path, key)).strip()) == PAYLOAD


def test_this_process_reads_what_another_wrote(tmp_path):
    key = cache_key("from a child")
    _finish(_python(WRITE, tmp_path, key, PAYLOAD.hex()))
    assert KernelCache(tmp_path).get(key, SOURCE) == PAYLOAD


# Each writer puts the shared key and keys of its own, re-reading the shared key from disk each round.
WRITERS = """
import os, sys, time
from jitorch.codegen.cache import KernelCache, cache_key
me, rounds, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
shared = cache_key("shared")
while not os.path.exists(go):
    time.sleep(0.001)
for r in range(rounds):
    KernelCache().put(shared, bytes([me]) * 65536, SOURCE)
    KernelCache().put(cache_key("own", str(me), str(r)), bytes([me, r]) * 1000, SOURCE)
    got = KernelCache().get(shared, SOURCE)
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
    assert cache.get(cache_key("shared"), SOURCE) in {bytes([me]) * 65536 for me in range(writers)}
    assert cache.info().entries == 1 + writers * rounds


def test_concurrent_threads_leave_only_valid_entries(tmp_path):
    shared, threads, rounds = cache_key("shared"), 8, 20
    barrier, errors = threading.Barrier(threads), []

    def work(me):
        try:
            barrier.wait()
            for r in range(rounds):
                KernelCache(tmp_path).put(shared, bytes([me]) * 65536, SOURCE)
                KernelCache(tmp_path).put(cache_key("own", str(me), str(r)), bytes([me, r]) * 100, SOURCE)
                got = KernelCache(tmp_path).get(shared, SOURCE)
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
            if cache.get(key, SOURCE) is None:
                cache.put(key, key.encode(), SOURCE)

    pool = [threading.Thread(target=work) for _ in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert all(KernelCache(tmp_path).get(key, SOURCE) == key.encode() for key in keys)
    info = cache.info()
    # a get that misses memory while another thread writes the entry finds it on disk
    assert info.memory_hits + info.disk_hits + info.misses == 4 * len(keys)


# --- kernels compiled through the cache -------------------------------------------------------------


@pytest.fixture
def fresh_kernels(tmp_path, monkeypatch):
    """Makes this process forget every kernel: a new kernel cache over ``tmp_path / "kernels"`` (nothing in
    memory) and no linked code; returns that cache."""

    def forget():
        cache = KernelCache(tmp_path / "kernels")
        monkeypatch.setattr(cache_mod, "default_cache", lambda: cache)
        monkeypatch.setattr(cpu, "_linked", weakref.WeakValueDictionary())
        return cache

    return forget


def _add(c):
    return jitorch.compile(lambda t: t + c)(jitorch.ones(3)).tolist()


def test_entry_swapped_from_another_kernel_is_recompiled_not_run(fresh_kernels, tmp_path):
    # issue 16: an entry copied over another key's path was linked and run: x + 100 on ones gave 2.
    fresh_kernels()
    assert _add(1.0) == [2.0] * 3
    (plus_one,) = (tmp_path / "kernels").rglob("*.jitk")
    assert _add(100.0) == [101.0] * 3
    (plus_hundred,) = set((tmp_path / "kernels").rglob("*.jitk")) - {plus_one}
    original = plus_hundred.read_bytes()
    plus_hundred.write_bytes(plus_one.read_bytes())
    cache = fresh_kernels()
    assert _add(100.0) == [101.0] * 3
    info = cache.info()
    assert (info.disk_hits, info.misses, info.writes) == (0, 1, 1)
    assert plus_hundred.read_bytes() == original  # rebuilt, byte for byte


def _with_payload(raw, key, payload):
    """The entry ``raw`` with its payload replaced and the payload's length and checksum recomputed."""
    magic, version, _, _, source, key_length = HEADER.unpack_from(raw)
    return HEADER.pack(magic, version, len(payload), hashlib.sha256(payload).digest(), source,
                       key_length) + key.encode() + payload


# Damage to object code that `Linker.check_object` catches: the entry is rebuilt. Before, the kernel ran as eager
# ops in every later process (the entry was never replaced). Damage only `elf.validate` sees (relocations,
# section names: LLVM aborts on those) belongs here too once the linker's check calls it.
OBJECT_DAMAGES = {
    "truncated": lambda obj: obj[:len(obj) // 2],
    "section table past the end": lambda obj: obj[:0x28] + struct.pack("<Q", len(obj)) + obj[0x30:],
    "kernel symbol renamed": lambda obj: obj.replace(b"jitorch_k0_pointwise\0", b"jitorch_k0_pointwisf\0"),
}

PLUS_HUNDRED = """
import jitorch
from jitorch.codegen.cache import default_cache
print(jitorch.compile(lambda t: t + 100.0)(jitorch.ones(3)).tolist())
info = default_cache().info()
print(info.disk_hits, info.misses, info.writes)
"""


def _builtins_key():
    return cache_key("builtins", builtins.fingerprint(), selected().id())


@pytest.fixture(scope="module")
def plus_hundred_cache(tmp_path_factory):
    """A cache folder holding the one kernel of PLUS_HUNDRED, written by another process."""
    directory = tmp_path_factory.mktemp("plus-hundred")
    assert _finish(_python(PLUS_HUNDRED, directory)).split("\n")[:2] == ["[101.0, 101.0, 101.0]", "0 1 1"]
    return directory


@pytest.mark.parametrize("damage", OBJECT_DAMAGES.values(), ids=OBJECT_DAMAGES.keys())
def test_damaged_object_code_with_its_checksum_recomputed_is_recompiled(plus_hundred_cache, tmp_path, damage):
    shutil.copytree(plus_hundred_cache, tmp_path / "cache")
    # (the other entry a new process writes: the builtins its JIT links, see linker.jit_builtins_object)
    (path,) = [p for p in (tmp_path / "cache").rglob("*.jitk") if p.stem != _builtins_key()]
    raw = path.read_bytes()
    start = HEADER.size + len(path.stem)
    damaged = damage(raw[start:])
    assert damaged != raw[start:]
    path.write_bytes(_with_payload(raw, path.stem, damaged))
    # LLVM aborts the process on malformed objects, so the kernel compiles in a child.
    child = _python(PLUS_HUNDRED, tmp_path / "cache", JITORCH_LOGS="codegen")
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-4000:]
    assert out.split("\n")[:2] == ["[101.0, 101.0, 101.0]", "1 0 1"]  # read, rejected, rebuilt
    assert "cached object code of jitorch_k0_pointwise rejected, recompiling: object code is not usable" in err
    assert path.read_bytes() == raw


def test_entries_that_others_could_write_are_misses(tmp_path, monkeypatch):
    """Regression: an entry holds code that runs, and its checksum stops damage, not an attacker. An entry or
    shard folder that another user owns, or that a group or other users may write, is a miss."""
    key = cache_key("ir")
    KernelCache(tmp_path).put(key, PAYLOAD, SOURCE)
    path = entry_path(tmp_path, key)
    assert path.parent.stat().st_mode & 0o077 == 0  # shard folders are made owner-only
    assert KernelCache(tmp_path).get(key, SOURCE) == PAYLOAD
    path.chmod(0o664)
    assert KernelCache(tmp_path).get(key, SOURCE) is None
    path.chmod(0o644)
    path.parent.chmod(0o777)
    assert KernelCache(tmp_path).get(key, SOURCE) is None
    path.parent.chmod(0o700)
    assert KernelCache(tmp_path).get(key, SOURCE) == PAYLOAD
    with monkeypatch.context() as m:  # the same files seen by another user: not theirs
        m.setattr(os, "geteuid", lambda: os.stat(path).st_uid + 1)
        assert KernelCache(tmp_path).get(key, SOURCE) is None


def test_entries_are_written_without_fsync_and_a_damaged_one_is_a_miss(tmp_path, monkeypatch):
    """The cache's entries skip the fsync before their rename (~7 ms of waiting per entry: the suite writes one
    per kernel it compiles): a crash may leave one damaged, which its length and checksum make a miss."""
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    cache = KernelCache(tmp_path)
    cache.put("ab" * 32, b"object code", "source")
    assert synced == []
    assert KernelCache(tmp_path).get("ab" * 32, "source") == b"object code"
    (entry,) = [p for p in tmp_path.rglob("*") if p.is_file()]
    entry.write_bytes(entry.read_bytes()[:-3])  # as a crash before the bytes reached the disk may leave it
    assert KernelCache(tmp_path).get("ab" * 32, "source") is None
