"""Anomaly detection (torch.autograd.detect_anomaly): while it is on, each backward node keeps the stack
of the forward call that made it, a backward step that fails warns with that stack, and (with
``check_nan``) a step whose gradients hold a NaN raises. Like torch's, the mode is global."""

from __future__ import annotations

import functools
import traceback
import warnings

_STATE = {"enabled": False, "check_nan": True}


def is_anomaly_enabled():
    """Whether anomaly detection is on."""
    return _STATE["enabled"]


def is_anomaly_check_nan_enabled():
    """Whether anomaly detection checks backward results for NaN."""
    return _STATE["check_nan"]


def _set(enabled, check_nan):
    previous = (_STATE["enabled"], _STATE["check_nan"])
    _STATE["enabled"], _STATE["check_nan"] = bool(enabled), bool(check_nan)
    return previous


class _Mode:
    def __call__(self, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with self.__class__(*self._arguments):
                return fn(*args, **kwargs)
        return run

    def __exit__(self, *exc):
        _set(*self._previous)
        return False


class detect_anomaly(_Mode):
    """Context manager (or decorator) turning anomaly detection on, with torch's warning."""

    def __init__(self, check_nan=True):
        self._arguments = (check_nan,)
        self.check_nan = check_nan

    def __enter__(self):
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only "
                      "be enabled for debugging.", stacklevel=2)
        self._previous = _set(True, self.check_nan)
        return self


class set_detect_anomaly(_Mode):
    """Turn anomaly detection on or off: at once when called, back when used as a context manager exits."""

    def __init__(self, mode, check_nan=True):
        self._arguments = (mode, check_nan)
        self._previous = _set(mode, check_nan)

    def __enter__(self):
        return self


def forward_trace(inner=0):
    """The stack of the forward call recording a node, kept while anomaly detection is on (else None): up to
    the caller of the function that made the node, or ``inner`` frames further out."""
    if not _STATE["enabled"]:
        return None
    return "".join(traceback.format_stack()[:-3 - inner])


def check_backward(node, grads):
    """Raise torch's error where anomaly detection checks NaN and ``node``'s backward gave one."""
    if not (_STATE["enabled"] and _STATE["check_nan"]):
        return
    for i, g in enumerate(grads):
        if g is not None and g.dtype.is_floating_point and bool(g.isnan().any()):
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th output.")


def warn_failure(node):
    """torch's warning naming the node whose backward failed and the forward call that made it."""
    trace = getattr(node, "trace", None)
    if _STATE["enabled"] and trace:
        warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n{trace}",
                      stacklevel=2)


def set_anomaly_enabled(enabled, check_nan=True):
    """``torch.set_anomaly_enabled``: turn anomaly detection on or off."""
    _set(enabled, check_nan)
