"""DataLoader worker processes: what runs in each, and ``get_worker_info``.

A worker takes ``(task index, sampler indices)`` from its own index queue, fetches and collates the batch, and
puts ``(task index, batch)`` on the loader's result queue: jitorch.multiprocessing sends the batch's tensors as
shared-memory handles, so the loading process maps them without a copy. An exception travels as an
`ExceptionWrapper` and is raised again in the loading process, naming the worker.
"""

from __future__ import annotations

import os
import queue
import random
import sys
import traceback

import numpy as np

from ...multiprocessing.reductions import init_reductions
from ...ops.random_ops import manual_seed
from ...runtime.threads import set_num_threads
from . import worker_info
from .fetch import fetcher

STATUS_CHECK_INTERVAL = 1.0  # seconds between checks that the other side is still alive

class ExceptionWrapper:
    """An exception raised in a worker, carried to the loading process as its type and formatted traceback."""

    def __init__(self, where):
        exc_type, _, _ = sys.exc_info()
        self.exc_type = exc_type
        self.exc_msg = "".join(traceback.format_exception(*sys.exc_info()))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:  # KeyError shows its message's repr: keep the traceback readable
            msg = KeyErrorMessage(msg)
        try:
            exception = self.exc_type(msg)
        except Exception:  # an exception type that takes other arguments
            raise RuntimeError(msg) from None
        raise exception


class KeyErrorMessage(str):
    """A message that prints as itself inside a KeyError."""

    def __repr__(self):
        return self


class IterableDatasetStopIteration:
    """A worker's iterable dataset is exhausted."""

    def __init__(self, worker_id):
        self.worker_id = worker_id


class ResumeIteration:
    """Start a new epoch in a persistent worker (a fresh iterator over an iterable dataset)."""


def seed_worker(base_seed, worker_id):
    """Seed Python's, jitorch's and NumPy's generators as torch's workers do; returns the worker's seed."""
    seed = base_seed + worker_id
    random.seed(seed)
    manual_seed(seed)
    # torch seeds NumPy from a SeedSequence of (worker id, the base seed's two halves, 0)
    np.random.seed(np.random.SeedSequence([worker_id, base_seed & 0xFFFFFFFF, base_seed >> 32, 0]).generate_state(4))
    return seed


def worker_loop(dataset, iterable, index_queue, data_queue, done_event, auto_collation, collate_fn, drop_last,
                base_seed, init_fn, worker_id, num_workers):
    """The body of worker ``worker_id``: serve index-queue tasks until told to stop or the parent dies."""
    init_reductions()  # batches go back as shared-memory handles (a spawned worker starts without them)
    try:
        set_num_threads(1)  # the workers share the machine with the loading process, as in torch
        seed = seed_worker(base_seed, worker_id)
        worker_info.CURRENT = worker_info.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed,
                                                     dataset=dataset)
        where = f"in DataLoader worker process {worker_id}"
        init_error, fetch = None, None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetch = fetcher(dataset, iterable, auto_collation, collate_fn, drop_last)
        except Exception:
            init_error = ExceptionWrapper(where)
        parent, ended = os.getppid(), False
        while os.getppid() == parent:
            try:
                task = index_queue.get(timeout=STATUS_CHECK_INTERVAL)
            except queue.Empty:
                continue
            if isinstance(task, ResumeIteration):
                data_queue.put((task, None))
                ended = False
                fetch = fetcher(dataset, iterable, auto_collation, collate_fn, drop_last)
                continue
            if task is None:
                break
            if done_event.is_set() or ended:
                continue  # drain the tasks sent before the loader learnt this worker is done
            index, indices = task
            if init_error is not None:
                data, init_error = init_error, None
            else:
                try:
                    data = fetch.fetch(indices)
                except StopIteration:
                    if iterable:
                        data, ended = IterableDatasetStopIteration(worker_id), True
                    else:  # a map-style dataset has no end to reach: its StopIteration is an error
                        data = ExceptionWrapper(where)
                except Exception:
                    data = ExceptionWrapper(where)
            data_queue.put((index, data))
            del data, task
    except KeyboardInterrupt:
        pass  # the loading process was interrupted and stops the workers
    if done_event.is_set():
        data_queue.cancel_join_thread()
        data_queue.close()
