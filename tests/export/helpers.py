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


def cpu_kernels(path):
    """[(kernel record, object code)] of an export's CPU artifact record, in the manifest's order."""
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        record = next(r for r in manifest["artifacts"] if r["kind"] == "cpu")
        return [(k, z.read(k["member"])) for k in record["kernels"]]


def replace_object_code(src, dst, objects):
    """Copy an export, replacing the object code of CPU kernels (kernel name -> bytes), hashes recomputed:
    what an attacker who edits a file does."""
    members = {k["member"]: objects[k["name"]] for k, _ in cpu_kernels(src) if k["name"] in objects}
    return rewrite(src, dst, members=members)


def object_calling(name, callee):
    """Object code for the selected CPU defining kernel entry ``name``, which calls ``callee(char *)`` with
    the string "touch pwned" (as `system` would run it)."""
    import llvmlite.binding as llvm
    from llvmlite import ir
    from jitorch.codegen.machine import selected
    module = ir.Module()
    i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    text = bytearray(b"touch pwned\0")
    command = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), len(text)), "command")
    command.initializer = ir.Constant(ir.ArrayType(ir.IntType(8), len(text)), text)
    command.global_constant = True
    command.linkage = "internal"
    target = ir.Function(module, ir.FunctionType(ir.IntType(32), [i8p]), callee)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p, i64, i64]), name)  # as cpu.ENTRY
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block())
    b.call(target, [b.bitcast(command, i8p)])
    b.ret_void()
    machine = selected()
    parsed = llvm.parse_assembly(str(module))
    parsed.triple = machine.triple
    return machine.target_machine(opt=0, codemodel="jitdefault").emit_object(parsed)


def round_trip(fn, args, tmp_path):
    """``fn`` exported on ``args``, saved to a file and loaded back."""
    path = tmp_path / "program.jitorch"
    jt.export(fn, args).save(path)
    return jt.load(path)


def shares(a, b):
    """Whether ``a`` and ``b`` lie in one storage."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
