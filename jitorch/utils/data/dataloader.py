"""DataLoader: batches from a dataset through a sampler and a collate function, in this process or in workers.

With ``num_workers=0`` the calling process fetches each batch. With ``num_workers > 0`` that many worker
processes fetch and collate batches ahead (``prefetch_factor`` each) and send them back through shared memory
(jitorch.multiprocessing); the batches come out in the sampler's order, the same as with no workers. The
sampler always runs in the calling process, so a seeded generator gives the same order either way.
"""

from __future__ import annotations

import itertools
import queue
import warnings

from ... import cuda, empty, int64
from .collate import default_collate, default_convert
from .dataset import IterableDataset
from .fetch import fetcher
from .pin_memory import PinThread, pin_memory
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader"]


def _check_worker_options(num_workers, timeout, prefetch_factor, persistent_workers):
    if num_workers < 0:
        raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to "
                         "enable multiprocessing, otherwise set prefetch_factor to None.")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")


def _check_iterable_options(shuffle, sampler, batch_sampler):
    """An IterableDataset decides its own order: torch refuses ordering options for it."""
    for name, value in (("shuffle", shuffle), ("sampler", sampler), ("batch_sampler", batch_sampler)):
        if value not in (None, False):
            raise ValueError(f"DataLoader with IterableDataset: expected unspecified {name} option, "
                             f"but got {name}={value}")


class DataLoader:
    """Iterate over ``dataset`` in batches, as ``torch.utils.data.DataLoader``.

    ``shuffle=True`` draws a fresh permutation each epoch from ``generator``
    (or from a generator seeded by the default one, so ``jitorch.manual_seed``
    fixes the order). ``batch_size=None`` turns batching off: each sample
    goes through ``default_convert`` instead of ``default_collate``.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        _check_worker_options(num_workers, timeout, prefetch_factor, persistent_workers)
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            _check_iterable_options(shuffle, sampler, batch_sampler)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self.multiprocessing_context = multiprocessing_context
        self._workers = None  # the persistent workers' iterator, kept across epochs
        self._pin = bool(pin_memory) and cuda.is_available()  # torch pins only where an accelerator is present
        if pin_memory and not self._pin:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device pinned "
                          "memory won't be used.", stacklevel=2)
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None or (self._iterable and self.batch_size is not None)

    @property
    def _index_sampler(self):
        """What each fetch is given: index lists (batches), single indices, or placeholders for an iterable
        dataset, whose fetcher draws as many samples as the placeholder list is long."""
        if self._iterable:
            return _Placeholders() if self.batch_size is None else BatchSampler(_Placeholders(), self.batch_size,
                                                                              False)
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def _base_seed(self):
        """The seed the workers' seeds derive from, drawn from ``generator`` at each epoch as torch draws it."""
        return empty((), dtype=int64).random_(generator=self.generator).item()

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessIterator(self)
        if not self.persistent_workers:
            return _WorkerIterator(self)
        if self._workers is None:
            self._workers = _WorkerIterator(self)
        else:
            self._workers.reset(self)
        return self._workers

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)


class _Placeholders(Sampler):
    """An endless stream of ``None``: an iterable dataset's "indices"."""

    def __iter__(self):
        return itertools.repeat(None)


class _SingleProcessIterator:
    """Batches fetched in the calling process."""

    def __init__(self, loader):
        loader._base_seed()  # drawn as with workers, so both consume the generator alike
        self._indices = iter(loader._index_sampler)
        self._fetch = fetcher(loader.dataset, loader._iterable, loader._auto_collation, loader.collate_fn,
                              loader.drop_last).fetch
        self._pin = loader._pin

    def __iter__(self):
        return self

    def __next__(self):
        data = self._fetch(next(self._indices))
        return pin_memory(data) if self._pin else data  # as torch, in the calling thread without workers


class _WorkerIterator:
    """Batches fetched by ``num_workers`` worker processes and given out in the sampler's order.

    Tasks go to the workers round-robin, at most ``prefetch_factor`` per worker ahead of the consumer; a batch
    that arrives before its turn waits in ``_arrived`` (``in_order=False`` hands batches out as they come).
    """

    def __init__(self, loader):
        # loaded with the first workers: multiprocessing's modules would cost every `import jitorch`
        from ...multiprocessing import get_context
        from . import worker

        self._worker = worker
        self._shut, self._workers, self._index_queues, self._pinning = False, [], [], None
        context = loader.multiprocessing_context
        if context is None or isinstance(context, str):
            context = get_context(context)
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self._prefetch = 2 if loader.prefetch_factor is None else loader.prefetch_factor
        self._in_order = loader.in_order
        self._results = context.Queue()
        self._done = context.Event()
        base_seed = loader._base_seed()
        for worker_id in range(loader.num_workers):
            index_queue = context.Queue()
            index_queue.cancel_join_thread()  # tasks left for a dead worker must not block this process's exit
            process = context.Process(
                target=worker.worker_loop, daemon=True,
                args=(loader.dataset, loader._iterable, index_queue, self._results, self._done,
                      loader._auto_collation, loader.collate_fn, loader.drop_last, base_seed,
                      loader.worker_init_fn, worker_id, loader.num_workers))
            process.start()
            self._index_queues.append(index_queue)
            self._workers.append(process)
        # batches are pinned by a thread of this process as they arrive (torch's pin_memory thread)
        self._pinning = PinThread(self._results) if loader._pin else None
        self._start_epoch(loader)

    def _start_epoch(self, loader):
        self._indices = iter(loader._index_sampler)
        self._sent = self._received = 0
        self._tasks = {}      # task index -> the worker serving it, until its batch is handed out
        self._arrived = {}    # task index -> its batch, come before its turn
        self._active = [True] * len(self._workers)
        self._turns = itertools.cycle(range(len(self._workers)))
        for _ in range(self._prefetch * len(self._workers)):
            self._send_task()

    def reset(self, loader):
        """A new epoch on the same (persistent) workers."""
        for index_queue in self._index_queues:
            index_queue.put(self._worker.ResumeIteration())
        resumed = 0
        while resumed < len(self._workers):  # drop what the last epoch left in flight
            task, _ = self._get()
            resumed += isinstance(task, self._worker.ResumeIteration)
        self._start_epoch(loader)

    def _send_task(self):
        try:
            indices = next(self._indices)
        except StopIteration:
            return
        for _ in range(len(self._workers)):
            worker_id = next(self._turns)
            if self._active[worker_id]:
                break
        else:
            return
        self._index_queues[worker_id].put((self._sent, indices))
        self._tasks[self._sent] = worker_id
        self._sent += 1

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            self._skip_settled()
            if self._received >= self._sent:
                if not self._persistent:
                    self._shutdown()
                raise StopIteration
            if self._received in self._arrived:
                return self._hand_out(self._received, self._arrived.pop(self._received))
            index, data = self._get()
            if isinstance(data, self._worker.IterableDatasetStopIteration):
                self._active[data.worker_id] = False
                self._send_task()
            elif index == self._received or not self._in_order:
                return self._hand_out(index, data)
            else:
                self._arrived[index] = data

    def _skip_settled(self):
        """Move past tasks handed out early (``in_order=False``), and past tasks that will never be served:
        their worker's iterable dataset ran out (its batches before that have all arrived: one queue)."""
        while self._received < self._sent and self._received not in self._arrived and (
                self._received not in self._tasks or not self._active[self._tasks[self._received]]):
            self._tasks.pop(self._received, None)
            self._received += 1

    def _hand_out(self, index, data):
        del self._tasks[index]
        self._send_task()
        if isinstance(data, self._worker.ExceptionWrapper):
            data.reraise()
        return data

    def _get(self):
        """The next ``(task index, batch)`` from any worker; errors when one died or ``timeout`` passed."""
        wait = self._timeout if self._timeout > 0 else self._worker.STATUS_CHECK_INTERVAL
        while True:
            try:
                return (self._pinning or self._results).get(timeout=wait)
            except Exception as error:  # also a batch whose sender died before this process mapped its memory
                dead = self._dead_workers()
                if not dead and isinstance(error, (OSError, EOFError)):
                    # a sender that dropped the connection is exiting: give it the time that takes under load
                    # (seconds on a busy machine), watching only the active workers: an exhausted one's sentinel
                    # is ready already and cut the wait short. (Not for other errors, such as one the pinning
                    # thread met pinning a batch: raised at once, not after this wait.)
                    ended = self._exits([w.sentinel for w, active in zip(self._workers, self._active) if active])
                    for w in self._workers:
                        if w.sentinel in ended:  # (its sentinel closes before the process can be reaped: a
                            w.join(5.0)          # poll at once still found it alive and re-raised the reset)
                    dead = self._dead_workers()
                if dead:
                    self._shutdown()
                    raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(str(w.pid) for w in dead)}) exited "
                                       "unexpectedly") from error
                if not isinstance(error, queue.Empty):
                    raise
                if self._timeout > 0:
                    self._shutdown()
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") from None

    def _exits(self, sentinels):
        """Those of the workers' ``sentinels`` that are ready within the time a worker whose connection dropped
        may take to exit."""
        from multiprocessing import connection

        return connection.wait(sentinels, max(30.0, self._worker.STATUS_CHECK_INTERVAL))

    def _dead_workers(self):
        return [w for w, active in zip(self._workers, self._active) if active and not w.is_alive()]

    def _shutdown(self):
        if self._shut:
            return
        self._shut = True
        self._done.set()
        if self._pinning is not None:  # before the queue it reads is closed
            self._pinning.stop()
        for index_queue in self._index_queues:
            index_queue.put(None)
        for process in self._workers:
            process.join(self._worker.STATUS_CHECK_INTERVAL)
        for index_queue in self._index_queues:
            index_queue.close()
        for process in self._workers:
            if process.is_alive():
                process.terminate()
        self._results.cancel_join_thread()
        self._results.close()

    def __del__(self):
        self._shutdown()
