"""Code objects of jitorch's generated Python, kept in the kernel cache's folder between processes.

jitorch writes Python at run time: each op's argument converter and dispatch function (`ops.registry.define`)
and each compiled graph's call (`straightline.Source.function`). Python's compiler takes ~0.15 ms for a small
function and ~20 microseconds a line: in the warm first call of the gpt-4x128 training step (kernels from the
cache), 83 op functions took 11.5 ms of it, and the call's source more. Their code objects, serialised by
`marshal` (as a ``.pyc`` holds a module's), read back in 0.3 ms together.

What `compile` returns depends on the text, the file name it reports, the compiler flags (here always the
same: ``from __future__ import annotations``, nothing inherited from the caller), the interpreter's bytecode
(importlib's ``MAGIC_NUMBER``, which every bytecode change moves) and its optimisation level (``-O`` drops
asserts): the key holds all of them, and the entry's source check the text, so a stored code object is the one
`compile` would make. An entry is trusted as an entry of object code is (`cache`: this user's folder, the
payload's checksum); one that `marshal` cannot read is compiled again and rewritten.
"""

from __future__ import annotations

import __future__
import functools
import importlib.util
import marshal
import sys

from ..ops import registry
from ..runtime import logs
from .cache import KernelCache, cache_key

FLAGS = __future__.annotations.compiler_flag  # (as the modules that generate the source were compiled with)


@functools.cache
def _store() -> KernelCache:
    """The kernel cache's folder, through a cache of its own, so that `cache.default_cache`'s counts stay the
    kernels', in entries of their own suffix."""
    return KernelCache(suffix=".jitpy")


def code_key(source: str, filename: str) -> str:
    """The cache key of ``source``'s code object compiled as ``filename`` by this interpreter."""
    return cache_key("generated python", importlib.util.MAGIC_NUMBER, str(sys.flags.optimize), str(FLAGS), filename,
                     source)


def compiled(source: str, filename: str):
    """The code object of ``compile(source, filename, "exec")`` (with `FLAGS`), from the cache when it holds it;
    otherwise compiled and stored."""
    key = code_key(source, filename)
    store = _store()
    data = store.get(key, source)
    if data is not None:
        try:
            return marshal.loads(data)
        except (EOFError, ValueError, TypeError) as e:  # (another interpreter's marshal format): compiled anew
            logs.log("codegen", "code object entry %s unreadable, compiled again: %s", key, e)
    code = compile(source, filename, "exec", flags=FLAGS, dont_inherit=True)
    store.put(key, marshal.dumps(code), source)
    return code


# op functions generated from now on come through the cache too (the ops layer cannot import it)
registry.COMPILE[0] = compiled
