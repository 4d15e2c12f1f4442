"""Grad mode: whether ops record their derivative graph (thread-local, as torch's)."""

from __future__ import annotations

import functools
import threading

class _State(threading.local):
    enabled = True  # each thread starts in grad mode (a class default: reading it needs no fallback)
    inference = False  # inside inference_mode(True): memory allocated now belongs to inference tensors


_state = _State()

# How many threads have grad mode off now (each one's switch from on to off adds one, back on takes it away):
# while none has, grad mode is on in every thread, and the hot paths that ask (every eager view of a tensor
# without history) skip reading the thread-local flag, which costs several times a list's item.
GRAD_OFF = [0]
_GRAD_OFF_LOCK = threading.Lock()  # (a lost update of the count would let a thread with grad mode off read on)

# How many ``inference_mode(True)`` blocks are open, over all threads: while none is, no memory is allocated
# for inference tensors, and the hot paths that allocate skip reading the thread-local flag.
INFERENCE_OPEN = [0]


def is_grad_enabled() -> bool:
    """Whether ops on tensors that require grad record a backward graph."""
    return _state.enabled


def is_inference_mode_enabled() -> bool:
    """Whether an ``inference_mode()`` (not switched off by ``inference_mode(False)``) is active."""
    return _state.inference


def _set(flag):
    flag = bool(flag)
    if flag is _state.enabled:
        return
    # (counted before the flag goes off and after it comes back on: a reader that finds no thread counted never
    # meets a thread whose flag is off)
    if not flag:
        with _GRAD_OFF_LOCK:
            GRAD_OFF[0] += 1
        _state.enabled = False
    else:
        _state.enabled = True
        with _GRAD_OFF_LOCK:
            GRAD_OFF[0] -= 1


class _Mode:
    """A context manager and decorator that sets grad mode for its extent."""

    flag = True

    def __enter__(self):
        self._prev = is_grad_enabled()
        _set(self.flag)
        return self

    def __exit__(self, *exc):
        _set(self._prev)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapped


class no_grad(_Mode):
    """Ops inside record no backward graph (``with jitorch.no_grad():`` or ``@jitorch.no_grad()``)."""

    flag = False


class enable_grad(_Mode):
    """Ops inside record their backward graph again, even within ``no_grad``."""

    flag = True


class inference_mode(no_grad):
    """Like ``no_grad``; tensors whose memory is allocated inside are inference tensors (``is_inference()``),
    views of them included, as in torch."""

    def __init__(self, mode=True):
        self.flag = not mode
        self.mode = bool(mode)

    def __enter__(self):
        self._prev_inference = _state.inference
        _state.inference = self.mode
        INFERENCE_OPEN[0] += self.mode
        return super().__enter__()

    def __exit__(self, *exc):
        _state.inference = self._prev_inference
        INFERENCE_OPEN[0] -= self.mode
        super().__exit__(*exc)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with inference_mode(self.mode):
                return fn(*args, **kwargs)
        return wrapped


class set_grad_enabled(_Mode):
    """Set grad mode: as a function call, a context manager or a decorator."""

    def __init__(self, mode):
        self.flag = bool(mode)
        self._prev = is_grad_enabled()
        _set(self.flag)

    def __enter__(self):
        return self

    def __call__(self, fn):
        _set(self._prev)

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with set_grad_enabled(self.flag):
                return fn(*args, **kwargs)
        return wrapped
