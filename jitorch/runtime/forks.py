"""Module locks that a forked child gets back unheld.

A fork copies the parent's memory but only the forking thread. A lock that another thread of the parent held at
that instant stays held in the child, where no thread will ever release it, and the child (a DataLoader worker, a
process of `jitorch.multiprocessing`'s fork context) hangs at its first use of it: CI saw a worker hang at its
first batch's shared storage. The module-level locks on jitorch's CPU path are made by `module_lock`, which puts a
new lock in their place in every forked child.
"""

from __future__ import annotations

import os
import threading

_renewed: list = []  # (module namespace, global name) of every lock made here


def module_lock(namespace, name):
    """A new ``threading.Lock`` stored as ``namespace[name]`` (the calling module's ``globals()``), which a forked
    child finds replaced by an unheld one: code must take it by that global name, not keep the object elsewhere.
    What it guards may be half updated in the child if the parent's holder was midway; the locks made here guard
    caches and registries that a child can read in that state (at worst it rebuilds an entry)."""
    namespace[name] = threading.Lock()
    _renewed.append((namespace, name))
    return namespace[name]


def _renew_in_child():
    for namespace, name in _renewed:
        namespace[name] = threading.Lock()


os.register_at_fork(after_in_child=_renew_in_child)
