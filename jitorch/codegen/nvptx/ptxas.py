"""``ptxas``, NVIDIA's PTX assembler, as a check that needs no GPU: PTX it accepts loads on a device.

ptxas comes with the ``nvidia-cuda-nvcc`` wheel or a CUDA toolkit. A machine
image with a toolkit may have no wheel and a cuda-pathfinder too old to look
for binaries, so `find_ptxas` also searches the PATH and the toolkit folders
itself; it returns None when there is no ptxas at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

TOOLKIT = "/usr/local/cuda"  # where NVIDIA's installers put the CUDA toolkit, on the PATH or not


def _pathfinder_ptxas():
    """ptxas as cuda-pathfinder finds it (NVIDIA wheels, conda, ``CUDA_PATH``/``CUDA_HOME``), or None."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError:  # no cuda-pathfinder, or one from before it looked for binaries (1.3.4)
        return None
    try:
        return find_nvidia_binary_utility("ptxas")
    except Exception:  # pathfinder raises its own error types for a missing or foreign toolkit
        return None


def find_ptxas():
    """The path of ptxas, or None: cuda-pathfinder's, else the first on the PATH, else ``bin/ptxas`` under
    ``CUDA_PATH``, ``CUDA_HOME`` or `TOOLKIT`."""
    found = _pathfinder_ptxas() or shutil.which("ptxas")
    if found:
        return found
    roots = (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), TOOLKIT)
    for candidate in (os.path.join(root, "bin", "ptxas") for root in roots if root):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def assemble(ptx_texts, arch="sm_80", jobs=None):
    """Assemble each PTX text for ``arch``: a list of None (accepted) or ptxas's error text.

    The texts are written to one temporary folder and assembled in parallel, one ptxas per text
    (ptxas takes one input file)."""
    ptxas = find_ptxas()
    if ptxas is None:
        raise FileNotFoundError("ptxas not found (no nvidia-cuda-nvcc wheel, none on the PATH, none under "
                                f"CUDA_PATH, CUDA_HOME or {TOOLKIT}): pip install nvidia-cuda-nvcc")
    with tempfile.TemporaryDirectory(prefix="jitorch-ptxas-") as tmp:
        def run(item):
            i, text = item
            src = os.path.join(tmp, f"k{i}.ptx")
            with open(src, "w") as f:
                f.write(text)
            done = subprocess.run([ptxas, f"-arch={arch}", src, "-o", os.path.join(tmp, f"k{i}.cubin")],
                                  capture_output=True, text=True)
            return None if done.returncode == 0 else (done.stderr or done.stdout or f"exit {done.returncode}")
        with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
            return list(pool.map(run, enumerate(ptx_texts)))
