"""The ``jitorch`` command: ``inspect`` and ``run``."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest

from jitorch.cli import main

from .helpers import ROOT


@pytest.mark.parametrize("flags, verdict", [([], "2 kernels, ignored: code from a file runs only with "
                                                 "trust_object_code=True (--trust-object-code); rebuilt from the graph"),
                                            (["--trust-object-code"], "2 kernels, used")], ids=["default", "trusted"])
def test_inspect_prints_signature_graph_and_artifacts(saved, flags, verdict):
    out = io.StringIO()
    assert main(["inspect", *flags, str(saved[0])], out=out) == 0
    text = out.getvalue()
    assert "x: Tensor [5, 4] jitorch.float32 cpu" in text
    assert "%0 : f32[5, 3] = matmul(%x, %w)" in text
    assert verdict in text and "w: [4, 3] jitorch.float32" in text


def test_run_writes_outputs(saved, tmp_path):
    path, args, expected = saved
    np.save(tmp_path / "x.npy", args[0].numpy())
    np.save(tmp_path / "y.npy", args[1].numpy())
    outs = [str(tmp_path / "h.npy"), str(tmp_path / "s.npy")]
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
                 "--output", outs[0], "--output", outs[1]], out=io.StringIO()) == 0
    for o, e in zip(outs, expected):
        np.testing.assert_allclose(np.load(o), e, rtol=1e-6)


def test_run_with_missing_input_fails_with_message(saved, tmp_path, capsys):
    np.save(tmp_path / "x.npy", saved[1][0].numpy())
    assert main(["run", str(saved[0]), "--input", f"x={tmp_path / 'x.npy'}"], out=io.StringIO()) == 1
    assert "the program takes inputs ['x', 'y']; --input gave ['x']" in capsys.readouterr().err


def test_inspect_of_a_bad_file(tmp_path, capsys):
    (tmp_path / "bad.jtx").write_bytes(b"nope")
    assert main(["inspect", str(tmp_path / "bad.jtx")], out=io.StringIO()) == 1
    assert "not a jitorch export file" in capsys.readouterr().err


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2 and "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_module_entry_point(saved, tmp_path):
    done = subprocess.run([sys.executable, "-m", "jitorch.cli", "inspect", str(saved[0])], cwd=tmp_path,
                          capture_output=True, text=True, env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin",
                               "JITORCH_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert "signature:" in done.stdout


def _bad_files(saved, tmp_path):
    from tests.runtime.zip_helpers import bomb, stored, zip_bytes
    data = saved[0].read_bytes()
    deep = b'{"format": "jitorch.export", "format_version": 1, "members": {}, "signature": ' + b"[" * 50000 + \
        b"]" * 50000 + b"}"
    return {"truncated": data[: len(data) // 2], "not-zip": b"nope",
            "bomb": zip_bytes([stored("manifest.json", b"{}"), bomb("graph.txt", b"", 1 << 20, declared=16 << 30)]),
            "deep": zip_bytes([stored("manifest.json", deep)]),
            "unhashable": zip_bytes([stored("manifest.json", b'{"format": [1], "members": {"a": [2]}}')])}


@pytest.mark.parametrize("command", ["inspect", "run"])
def test_a_bad_file_is_one_line_without_traceback(saved, tmp_path, command, capsys):
    """Whatever is wrong with the file, the command says so in one line and exits 1 (an exception escaping
    main would be the traceback the user sees)."""
    for name, data in _bad_files(saved, tmp_path).items():
        (tmp_path / name).write_bytes(data)
        assert main([command, str(tmp_path / name)], out=io.StringIO()) == 1, name
        err = capsys.readouterr().err
        assert err.startswith(f"jitorch {command}: error: ") and err.count("\n") == 1 and len(err) < 2100, (name, err)
