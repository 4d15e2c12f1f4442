"""``ptxas``, NVIDIA's PTX assembler, as a check that needs no GPU: PTX it accepts loads on a device.

ptxas comes with the ``nvidia-cuda-nvcc`` wheel or a CUDA toolkit. A machine
image with a toolkit may have no wheel and a cuda-pathfinder too old to look
for binaries, so `find_ptxas` also searches the PATH and the toolkit folders
itself; it returns None when there is no ptxas at all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

TOOLKIT = "/usr/local/cuda"  # where NVIDIA's installers put the CUDA toolkit, on the PATH or not
# Texts assembled as one module at most: each ptxas start is ~28 ms of CPU, more than assembling a kernel, and
# the suite assembled ~350 kernels one process each; a module ptxas rejects is assembled again text by text.
TEXTS_PER_MODULE = 64
_HEADER = re.compile(r"^\.(version|target|address_size)\b.*$", re.M)
# Names declared at module scope (kernels, functions, global and constant variables), as LLVM writes them.
_DECLARED = re.compile(r"^(?:\.(?:visible|weak)\s+)?(?:\.(?:entry|func)\s+(?:\([^)]*\)\s*)?"
                       r"|\.(?:global|const)\b[^=;{(]*?)([A-Za-z_$%][\w$]*)\s*(?:\[[^\]]*\]\s*)*[(=;]", re.M)
_DIRECTIVES = re.compile(r"(?:^|\s)\.(?:entry|func|global|const)\s")


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

    Texts of one header (``.version``, ``.target``, ``.address_size``) are assembled together, up to
    `TEXTS_PER_MODULE` in one module, each text's module-scope names suffixed with its number so that no two
    texts share one (nor can one text's reference find another's definition); texts declaring anything
    else at module scope (an ``.extern`` function) are assembled alone. A module ptxas rejects is assembled
    again one text per ptxas, for each text's own error. The modules are written to one temporary folder
    and assembled in parallel."""
    ptxas = find_ptxas()
    if ptxas is None:
        raise FileNotFoundError("ptxas not found (no nvidia-cuda-nvcc wheel, none on the PATH, none under "
                                f"CUDA_PATH, CUDA_HOME or {TOOLKIT}): pip install nvidia-cuda-nvcc")
    texts = list(ptx_texts)
    with tempfile.TemporaryDirectory(prefix="jitorch-ptxas-") as tmp:
        def run(name, text):
            src = os.path.join(tmp, f"{name}.ptx")
            with open(src, "w") as f:
                f.write(text)
            done = subprocess.run([ptxas, f"-arch={arch}", src, "-o", os.path.join(tmp, f"{name}.cubin")],
                                  capture_output=True, text=True)
            return None if done.returncode == 0 else (done.stderr or done.stdout or f"exit {done.returncode}")

        def run_module(indices):
            if len(indices) > 1 and run(f"m{indices[0]}", _one_module([texts[i] for i in indices], indices)) is None:
                return [None] * len(indices)
            return [run(f"k{i}", texts[i]) for i in indices]

        with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
            modules = _modules(texts, jobs or os.cpu_count() or 1)
            errors = [None] * len(texts)
            for indices, found in zip(modules, pool.map(run_module, modules)):
                for i, error in zip(indices, found):
                    errors[i] = error
            return errors


def _modules(texts, workers):
    """The texts' numbers grouped into modules: texts of one header together, in as many modules as there are
    workers or more (at most `TEXTS_PER_MODULE` texts each); a text that cannot share a module alone."""
    groups = {}
    for i, text in enumerate(texts):
        header = _header(text)
        groups.setdefault(header if header is not None else ("alone", i), []).append(i)
    modules = []
    for indices in groups.values():
        count = max(min(workers, len(indices)), -(-len(indices) // TEXTS_PER_MODULE))
        modules += [indices[k::count] for k in range(count)]
    return modules


def _header(text):
    """A text's header lines, where it has each once and declares nothing at module scope but what `_DECLARED`
    finds (which `_one_module` renames); else None."""
    lines = _HEADER.findall(text)
    if sorted(lines) != ["address_size", "target", "version"] or re.search(r"^\s*\.extern\b", text, re.M) or \
            len(_DIRECTIVES.findall(text)) != len(_DECLARED.findall(text)):
        return None
    return tuple(m.group(0) for m in _HEADER.finditer(text))


def _one_module(texts, numbers):
    """One PTX module of ``texts`` (of one header): the header once, then each text without it, its
    module-scope names suffixed ``$t`` and the text's number."""
    parts = ["\n".join(m.group(0) for m in _HEADER.finditer(texts[0]))]
    for text, number in zip(texts, numbers):
        body = _HEADER.sub("", text)
        names = set(_DECLARED.findall(body))
        if names:
            pattern = re.compile(r"(?<![\w$%])(" + "|".join(re.escape(n) for n in sorted(names, key=len,
                                                                                      reverse=True)) + r")(?![\w$])")
            body = pattern.sub(lambda m: f"{m.group(1)}$t{number}", body)
        parts.append(body)
    return "\n".join(parts)
