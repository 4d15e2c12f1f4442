"""Atomic writes: a save that fails part-way (here: past a file-size limit) leaves the previous file whole."""

import os
import subprocess
import sys
import textwrap

import pytest

from jitorch.runtime.files import atomic_write

# Run in a child, so RLIMIT_FSIZE (and SIGXFSZ ignored, so the write fails with EFBIG) stays there.
_UNDER_A_LIMIT = textwrap.dedent("""
    import resource, signal, sys
    import jitorch as jt
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    kind, path = sys.argv[1], sys.argv[2]
    big = jt.rand(1 << 20)  # 4 MiB of float32 that do not compress, over the 1 MiB limit
    try:
        if kind == "checkpoint":
            jt.save({"w": big}, path)
        else:
            jt.export.export(lambda x: x * 2 + big, (jt.ones(1 << 20),)).save(path)
    except OSError as e:
        print("OSError", e.errno)
""")


def _previous(tmp_path, kind):
    import jitorch as jt
    path = tmp_path / f"old.{kind}"
    if kind == "checkpoint":
        jt.save({"w": jt.arange(3.0)}, path)
    else:
        jt.export.export(lambda x: x * 2 + 1, (jt.arange(3.0),)).save(path)
    return path


def _still_loads(path, kind):
    import jitorch as jt
    if kind == "checkpoint":
        assert jt.load(path)["w"].tolist() == [0.0, 1.0, 2.0]
    else:
        assert jt.export.load(path).module()(jt.arange(3.0)).tolist() == [1.0, 3.0, 5.0]


@pytest.mark.parametrize("kind", ["checkpoint", "export"])
def test_a_save_failing_past_a_file_size_limit_keeps_the_previous_file(tmp_path, kind):
    path = _previous(tmp_path, kind)
    before = path.read_bytes()
    done = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, kind, str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OSError"), done.stdout + done.stderr
    assert path.read_bytes() == before
    _still_loads(path, kind)
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temporary file left behind


def test_atomic_write_replaces_only_on_success(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as f:
            f.write(b"new, half")
            raise RuntimeError("interrupted")
    assert path.read_bytes() == b"old"
    with atomic_write(path) as f:
        f.write(b"new")
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["f"]


def test_atomic_write_refuses_modes_that_do_not_truncate(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        with atomic_write(tmp_path / "f", "ab"):
            pass



def test_only_durable_writes_flush_to_disk(tmp_path, monkeypatch):
    """``durable=False`` (the kernel cache's entries: tests/codegen/test_cache.py) skips the fsync, ~7 ms of
    waiting per file on this machine; the file is still whole and replaced atomically."""
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    for durable in (True, False):
        with atomic_write(tmp_path / f"f{durable}", durable=durable) as f:
            f.write(b"whole")
        assert (tmp_path / f"f{durable}").read_bytes() == b"whole"
    assert len(synced) == 1
    assert sorted(os.listdir(tmp_path)) == ["fFalse", "fTrue"]
