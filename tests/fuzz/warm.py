"""The fuzz programs compiled again in a fresh process that finds their kernels in the cache a first one wrote:
``python -m tests.fuzz --warm`` (`check_warm`).

A second process compiling a program the first compiled links the kernels' object code from the kernel cache's
folder (``*.jitk``) and reads the generated Python's code objects (``*.jitpy``, `codegen.pycode`) instead of
running LLVM and Python's compiler. `check_warm` runs a batch of programs' compiled mode (three calls, and the
gradient run) in a child process on the parent's ``JITORCH_CACHE_DIR`` and compares its records with eager's, as
the compiled mode's own are: a cache entry that gives another kernel or code than the source asked for, or a
kernel whose object code reads state the process that built it set (a constant's address, a table), shows there.
The child reports the cache's disk hits, so a batch whose kernels were compiled again (a miss) is counted, not
passed off as warm. Run as ``python -m tests.fuzz.warm FILE``: reads the batch (pickled) from ``FILE`` and writes
the records back to it.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import warnings

from .generator import generate, op_table
from .oracle import _guarded, _guarded_grad, compare_calls, compare_grads, run_mode

WARM = "compiled-warm"


def check_warm(batch, options):
    """``batch``: [(seed, statements)] drawn with the generator's ``options`` (a dict of `generate`'s keywords,
    ``namespaced`` for the op table) and already checked in this process (whose compiled mode filled the cache).
    Returns ({seed: mismatches of the warm compiled mode against eager}, the child's disk hits in all: kernels'
    and code objects')."""
    with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as f:
        pickle.dump((list(batch), dict(options)), f)
    try:
        done = subprocess.run([sys.executable, "-m", "tests.fuzz.warm", f.name], capture_output=True, text=True,
                              env=dict(os.environ), cwd=os.getcwd(), timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"the warm process failed ({done.returncode}):\n{done.stderr[-4000:]}")
        with open(f.name, "rb") as r:
            warm, hits = pickle.load(r)
    finally:
        os.unlink(f.name)
    found = {}
    table = op_table(options.get("namespaced", False))
    for seed, statements in batch:
        program = _program(seed, statements, options, table)
        records, grads = warm[seed]
        mismatches = compare_calls(records, _guarded(run_mode, program, "eager"), WARM, "eager", program=program)
        if grads is not None:
            mismatches += compare_grads(grads, _guarded_grad(program, "eager"), WARM, "eager", program=program)
        if mismatches:
            found[seed] = mismatches
    return found, hits


def _program(seed, statements, options, table):
    keywords = {k: v for k, v in options.items() if k != "namespaced"}
    return generate(seed, statements, table=table, **keywords)[0]


def _child(path):
    """The child's side: the batch's compiled runs, and the cache's disk hits."""
    from jitorch.codegen import pycode
    from jitorch.codegen.cache import default_cache
    warnings.simplefilter("ignore")
    with open(path, "rb") as f:
        batch, options = pickle.load(f)
    table = op_table(options.get("namespaced", False))
    out = {}
    for seed, statements in batch:
        program = _program(seed, statements, options, table)
        out[seed] = (_guarded(run_mode, program, "compiled"),
                     _guarded_grad(program, "compiled") if program.grad else None)
    hits = default_cache().info().disk_hits + pycode._store().info().disk_hits
    with open(path, "wb") as f:
        pickle.dump((out, hits), f)


if __name__ == "__main__":
    _child(sys.argv[1])
