"""Helpers of the export tests: a small program, archive rewriting, fresh processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import jitorch as jt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def small_program(device="cpu"):
    """A function with a captured weight, its example inputs and the program exported from it, all
    on ``device``; two kernels (relu + add, exp + sum) besides the matmul."""
    w = jt.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, device=device)

    def f(x, y):
        return (x @ w).relu() + y, x.exp().sum(dim=1)

    x = jt.tensor(np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4), device=device)
    y = jt.tensor(np.array([0.5, -1.0, 2.0], dtype=np.float32), device=device)
    return f, (x, y), jt.export(f, (x, y))


def rewrite(src, dst, manifest=None, members=None, rehash=True):
    """Copy an export archive, changing the manifest (a function of it) and members (name -> bytes),
    with the member hashes recomputed (``rehash``) so only the intended damage remains."""
    with zipfile.ZipFile(src) as z:
        data = {n: z.read(n) for n in z.namelist()}
    data.update(members or {})
    m = json.loads(data["manifest.json"])
    if rehash:
        m["members"] = {n: hashlib.sha256(b).hexdigest() for n, b in data.items() if n != "manifest.json"}
    if manifest is not None:
        m = manifest(m) or m
    data["manifest.json"] = json.dumps(m).encode()
    with zipfile.ZipFile(dst, "w") as z:
        for n, b in data.items():
            z.writestr(n, b)
    return dst


def run_python(code, tmp_path, env=None, timeout=120):
    """Run ``code`` in a fresh interpreter (in ``tmp_path``, so no test source is importable); returns
    its stdout, failing the test with its stderr on a non-zero exit."""
    full_env = dict(os.environ, PYTHONPATH=ROOT, JITORCH_CACHE_DIR=str(tmp_path / "kernel-cache"), **(env or {}))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout
