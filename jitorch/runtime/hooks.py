"""Hook handles (torch.utils.hooks): what every ``register_*hook`` returns."""

from __future__ import annotations

import itertools
import os
import sys
import weakref

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RemovableHandle:
    """A handle to a registered hook: ``remove()`` unregisters it (also usable as a context manager)."""

    _next_id = itertools.count()

    def __init__(self, hooks_dict):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = next(RemovableHandle._next_id)

    def remove(self):
        """Unregister the hook (a no-op when it is already gone)."""
        hooks = self.hooks_dict_ref()
        if hooks is not None:
            hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def add_hook(hooks, hook, prepend=False):
    """Register ``hook`` in the OrderedDict ``hooks`` (first with ``prepend``); returns its handle."""
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def _in_jitorch(filename):
    # generated op wrappers are named "<jitorch op ...>"
    return filename.startswith("<jitorch") or os.path.abspath(filename).startswith(_PACKAGE + os.sep)


def user_stacklevel():
    """The ``stacklevel`` that makes a warning issued by the caller point at the user's line (the
    innermost frame outside jitorch), however deep in the package the caller is."""
    frame = sys._getframe(2)
    level = 2
    while frame is not None and _in_jitorch(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level


__all__ = ["RemovableHandle", "add_hook", "user_stacklevel"]
