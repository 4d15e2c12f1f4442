"""Batches moved to page-locked host memory for the DataLoader's ``pin_memory=True``, as torch's
``torch.utils.data._utils.pin_memory``: in the calling thread without workers, and with workers in a thread of
the main process that pins each batch as it arrives, while the training loop works on the previous one."""

from __future__ import annotations

import collections.abc
import queue
import threading

from ...tensor import Tensor

POLL_SECONDS = 0.1  # how often the pinning thread looks for its stop signal


def pin_memory(data):
    """``data`` with every tensor in it moved to page-locked memory (`Tensor.pin_memory`): through mappings,
    named tuples, sequences, and objects with a ``pin_memory()`` method of their own (torch's custom batches)."""
    if isinstance(data, Tensor):
        return data.pin_memory()
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        pinned = {k: pin_memory(v) for k, v in data.items()}
        try:
            return type(data)(pinned)
        except TypeError:  # a mapping type that cannot be built from a dict
            return pinned
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(pin_memory(v) for v in data))
    if isinstance(data, tuple):
        return tuple(pin_memory(v) for v in data)
    if isinstance(data, collections.abc.Sequence):
        pinned = [pin_memory(v) for v in data]
        try:
            return type(data)(pinned)
        except TypeError:
            return pinned
    if callable(getattr(data, "pin_memory", None)):
        return data.pin_memory()
    return data


class Raised:
    """An exception met by the pinning thread, raised again where the batch would have been taken."""

    def __init__(self, error):
        self.error = error


class PinThread:
    """A daemon thread moving ``(task, batch)`` items from ``source`` (the workers' result queue) to ``out``
    (a ``queue.Queue``), each batch pinned; what it meets on the way (an error reading the queue or pinning)
    goes to ``out`` as a `Raised`."""

    def __init__(self, source):
        self.out = queue.Queue()
        self._source = source
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jitorch pin_memory", daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            try:
                task, data = self._source.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            except Exception as error:  # e.g. a batch whose sender died before it was mapped here
                self.out.put(Raised(error))
                continue
            try:
                self.out.put((task, pin_memory(data)))
            except Exception as error:
                self.out.put(Raised(error))

    def get(self, timeout):
        """The next item (``queue.Empty`` after ``timeout`` seconds), raising what the thread met."""
        item = self.out.get(timeout=timeout)
        if isinstance(item, Raised):
            raise item.error
        return item

    def stop(self):
        """Stop the thread; wait for it unless this is that thread (an iterator collected by a garbage
        collection that ran on it: its loop ends at its next poll)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
