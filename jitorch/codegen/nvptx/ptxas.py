"""``ptxas``, NVIDIA's PTX assembler, as a check that needs no GPU: PTX it accepts loads on a device.

ptxas comes with the ``nvidia-cuda-nvcc`` wheel (or a CUDA toolkit);
`find_ptxas` returns None when neither is installed.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor


def find_ptxas():
    """The path of ptxas, or None."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError:
        return None
    try:
        return find_nvidia_binary_utility("ptxas")
    except Exception:  # pathfinder raises its own error types for a missing or foreign toolkit
        return None


def assemble(ptx_texts, arch="sm_80", jobs=None):
    """Assemble each PTX text for ``arch``: a list of None (accepted) or ptxas's error text.

    The texts are written to one temporary folder and assembled in parallel, one ptxas per text
    (ptxas takes one input file)."""
    ptxas = find_ptxas()
    if ptxas is None:
        raise FileNotFoundError("ptxas not found: pip install nvidia-cuda-nvcc")
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
