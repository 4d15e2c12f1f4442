"""DistributedDataParallel: one model replica per rank, gradients averaged over the ranks during backward.

At construction rank 0's parameters and buffers are broadcast, so every replica starts equal. The parameters
are grouped into buckets of about ``bucket_cap_mb``, the first of 1 MiB (in reverse registration order, about
the order backward produces their gradients, as torch does). A post-accumulate-grad hook on each parameter
counts it ready; when a bucket is complete its gradients, divided by the world's size, are copied into one flat
buffer and an asynchronous all-reduce starts, so communication overlaps the rest of backward (MPI advances it
in the later hooks, or, with a core to spare, in a thread while backward computes: `_Progress`).
Buckets start in the same order on every rank (a collective must). When the last bucket has started,
backward's last hook waits for them all and writes the averages back into ``.grad``. The ranks compare their
parameters' dtypes and shapes once, at construction, so the buckets agree and start without a check each.

Inside ``jitorch.compile`` the same hooks run while backward is traced, and each bucket's all-reduce becomes a
node of the graph (`jitorch.distributed.graph_ops`), placed where the bucket's last gradient is computed: the
compiled step stays one graph.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

import numpy as np

from ... import distributed as dist
from ...compiler import is_compiling
from ...distributed.collectives import started_all_reduce
from ...distributed.mpi_backend import mpi, op_of, wait
from ...distributed.process_group import resolve
from ... import bfloat16, cat, zeros_like
from ...autograd.engine import when_backward_ends
from ...runtime.grad_mode import is_grad_enabled, no_grad
from ...runtime.threads import get_num_threads
from ..modules.module import Module

__all__ = ["DistributedDataParallel"]

FIRST_BUCKET_BYTES = 2 ** 20  # torch's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES)


class _Bucket:
    """Parameters of one dtype whose gradients travel together, and the flat buffer they travel in."""

    def __init__(self, params):
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.buffer = params[0].new_zeros(sum(self.sizes))
        self.ready = 0
        self.work = None

    def slices(self):
        for p, n, start in zip(self.params, self.sizes, _starts(self.sizes)):
            yield p, self.buffer[start:start + n]


class DistributedDataParallel(Module):
    """Wrap ``module`` so that ``backward()`` averages its gradients over the process group's ranks.

    ``no_sync()`` skips the averaging (gradients accumulate locally); ``find_unused_parameters`` lets parameters
    that a forward did not use count as ready with zero gradients, and those no rank used keep their ``.grad``
    as it was (None stays None, as in torch); ``gradient_as_bucket_view`` makes ``.grad``
    views of the communication buffers, which saves a copy. ``module`` is the wrapped module. ``init_sync=False``
    skips the construction's check that every rank holds the same parameters and its broadcast from the first
    rank. torch's arguments that jitorch does not implement (``mixed_precision``, ``device_mesh``,
    ``delay_all_reduce_named_params``, ``param_to_hook_all_reduce``, ``skip_all_reduce_unused_params``) raise
    NotImplementedError when given.
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None,
                 skip_all_reduce_unused_params=False):
        # torch's arguments in torch's order; those that would change what is computed or communicated and
        # that jitorch does not implement are refused, never ignored (a mixed_precision run would otherwise
        # train in full precision without a word)
        unsupported = {"delay_all_reduce_named_params": delay_all_reduce_named_params,
                       "param_to_hook_all_reduce": param_to_hook_all_reduce, "mixed_precision": mixed_precision,
                       "device_mesh": device_mesh, "skip_all_reduce_unused_params": skip_all_reduce_unused_params}
        given = [name for name, value in unsupported.items() if value not in (None, False)]
        if given:
            raise NotImplementedError(f"jitorch's DistributedDataParallel does not implement {', '.join(given)}")
        super().__init__()
        self.module = module
        self.process_group = process_group
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True
        self._group = resolve(process_group)
        self._world = self._group.size()
        self._src = self._group.ranks[0]
        seen = set()
        params = [p for p in module.parameters() if p.requires_grad and not (id(p) in seen or seen.add(id(p)))]
        if not params:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter "
                               "that requires a gradient.")
        if init_sync:  # (init_sync=False: the caller vouches that every rank starts from the same state)
            if not is_compiling():
                self._verify_same_model(params)
            with no_grad():
                self._broadcast([*module.parameters(), *module.buffers()])
        cap = (25 if bucket_cap_mb is None else bucket_cap_mb) * 2 ** 20
        self._buckets = self._bucketed(params[::-1], min(cap, FIRST_BUCKET_BYTES), cap)
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}
        self._next = 0  # the next bucket to start: they start in order on every rank
        self._progress = _Progress(self._group)
        self._expecting = False
        self._ready = set()  # ids of the parameters whose gradients this backward has counted ready
        self._params = params
        self._used, self._used_request, self._unused = None, None, frozenset()
        for p in params:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def _verify_same_model(self, params):
        """RuntimeError on every rank unless every rank's parameters have the same dtypes and shapes (torch
        checks this too): buckets then agree, and each starts without a check of its own."""
        mine = [[str(p.dtype), list(p.shape)] for p in params]
        everyone = [None] * self._world
        dist.all_gather_object(everyone, mine, group=self.process_group)
        for rank, theirs in zip(self._group.ranks, everyone):
            if len(theirs) != len(mine):
                raise RuntimeError(f"DDP expects same model across all ranks, but Rank {self._group.ranks[0]} has "
                                   f"{len(everyone[0])} params, while rank {rank} has inconsistent {len(theirs)} "
                                   "params.")
            for index, (a, b) in enumerate(zip(everyone[0], theirs)):
                if a != b:
                    raise RuntimeError(f"DDP expects same model across all ranks: params[{index}] is {a[0]} of "
                                       f"sizes {a[1]} on rank {self._group.ranks[0]}, {b[0]} of sizes {b[1]} on "
                                       f"rank {rank}")

    def _broadcast(self, tensors):
        for t in tensors:
            if is_compiling():
                t.data.copy_(_graph_ops().broadcast(t.data, 0, self._group.id))
            else:
                dist.broadcast(t.data, src=self._src, group=self.process_group)

    @staticmethod
    def _bucketed(params, first_cap, cap):
        """Buckets of at most ``cap`` bytes, the first of at most ``first_cap`` (as torch: the last layers'
        gradients, ready first, start communicating early)."""
        buckets, current, size = [], [], 0
        for p in params:
            limit = first_cap if not buckets else cap
            if current and (size + p.numel() * p.element_size() > limit or p.dtype != current[0].dtype):
                buckets.append(_Bucket(current))
                current, size = [], 0
            current.append(p)
            size += p.numel() * p.element_size()
        buckets.append(_Bucket(current))
        return buckets

    @contextmanager
    def no_sync(self):
        """Within this context backward leaves gradients local (accumulating); the next synced backward averages
        all that accumulated."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def forward(self, *inputs, **kwargs):
        if self._expecting and self._ready:
            self._unfinished()
        if self.broadcast_buffers:
            with no_grad():
                self._broadcast(list(self.module.buffers()))
        output = self.module(*inputs, **kwargs)
        self._expecting = is_grad_enabled() and self.require_backward_grad_sync
        if self._expecting:
            for bucket in self._buckets:
                bucket.ready, bucket.work = 0, None
            self._next = 0
            self._ready = set()
            if self.find_unused_parameters:
                used = _leaves_reached(output)
                self._exchange_used(used)
                for bucket in self._buckets:
                    for p in bucket.params:
                        if id(p) not in used:
                            self._mark_ready(p)
        return output

    def _exchange_used(self, used):
        """Start finding out which parameters no rank's forward used (ids in ``used`` are this rank's): torch
        leaves their gradients as they are (None stays None, so an optimizer skips them), where an average of
        zeros would give them a gradient of zeros. One MAX all-reduce of a flag per parameter, started before
        any bucket (in the same order on every rank) and waited for when the first gradient is written."""
        self._globally_unused()  # the last forward's exchange, when no backward waited for it: its buffers go
        mine = np.array([id(p) in used for p in self._params], np.uint8)
        self._used = mine, np.empty_like(mine)  # both kept: MPI reads and writes them until the request is done
        self._used_request = self._group.comm.Iallreduce(*self._used, op_of("MAX"))

    def _globally_unused(self):
        """ids of the parameters no rank's last forward used (empty without ``find_unused_parameters``)."""
        if self._used_request is not None:
            wait(self._used_request, self._group.timeout, "DistributedDataParallel's used parameters")
            self._used_request = None
            self._unused = frozenset(id(p) for p, u in zip(self._params, self._used[1]) if not u)
        return self._unused

    def _grad_ready(self, param):
        if self._expecting and self.require_backward_grad_sync:
            if not self._ready and is_compiling():
                # a compiled step replays its graph without running this again: check when its trace's
                # backward ends instead of at the next forward
                when_backward_ends(lambda: self._expecting and self._unfinished())
            self._mark_ready(param)

    def _unfinished(self):
        """torch's RuntimeError for a backward that left buckets unreduced: some parameters got no gradient
        (unused by the forward, without ``find_unused_parameters``), so the gradients were not averaged."""
        names = [name for name, p in self.module.named_parameters()
                 if id(p) in self._bucket_of and id(p) not in self._ready]
        raise RuntimeError("Expected to have finished reduction in the prior iteration before starting a new one. "
                           "This error indicates that your module has parameters that were not used in producing "
                           "loss. You can enable unused parameter detection by passing the keyword argument "
                           "`find_unused_parameters=True` to `jitorch.nn.parallel.DistributedDataParallel`, and by "
                           "making sure all `forward` function outputs participate in calculating loss. "
                           f"Parameters that received no gradient: {', '.join(names)}")

    def _mark_ready(self, param):
        self._ready.add(id(param))
        self._progress.poke()
        bucket = self._bucket_of[id(param)]
        bucket.ready += 1
        while self._next < len(self._buckets) and \
                self._buckets[self._next].ready == len(self._buckets[self._next].params):
            self._start(self._buckets[self._next])
            self._next += 1
        if self._next == len(self._buckets):
            self._finish()

    def _start(self, bucket):
        if is_compiling():
            self._reduce_in_graph(bucket)
            return
        self._fill(bucket)
        if bucket.buffer.dtype == bfloat16:  # MPI reduces it through float32 copies, which all_reduce makes
            bucket.work = dist.all_reduce(bucket.buffer, group=self.process_group, async_op=True)
        else:
            bucket.work = started_all_reduce(bucket.buffer, self.process_group)
        self._progress.add(bucket.work)

    def _fill(self, bucket):
        """Copy the bucket's gradients into its buffer, each divided by the world's size on its way in, as
        torch's mul_out, in one NumPy pass over the tensors' own memory (the bucket and the gradients are CPU
        tensors: MPI sends CPU tensors)."""
        scale = 1 / self._world
        for p, part in bucket.slices():
            grad, flat = p.grad, part._array()
            if grad is None:
                flat[...] = 0
            elif _is_view_of(grad, part):
                flat *= scale
            else:
                np.multiply(grad._array().reshape(-1), scale, out=flat, casting="unsafe")
            part._bump_version()

    def _reduce_in_graph(self, bucket):
        unused = self._globally_unused()  # known when tracing: the graph leaves those gradients alone
        with no_grad():
            flat = cat([(zeros_like(p) if p.grad is None else p.grad).reshape(-1) for p in bucket.params])
            averaged = _graph_ops().all_reduce(flat, "AVG", self._group.id)
            for p, size, start in zip(bucket.params, bucket.sizes, _starts(bucket.sizes)):
                if id(p) in unused:
                    continue
                part = averaged[start:start + size].view(p.shape)
                if p.grad is None:
                    p.grad = part.clone()
                else:
                    p.grad.copy_(part)

    def _finish(self):
        self._expecting = False
        if is_compiling():
            return  # each bucket's reduction wrote its gradients back already
        self._progress.stop()
        unused = self._globally_unused()
        for bucket in self._buckets:
            bucket.work.wait()
            self._write_back(bucket, unused)

    def _write_back(self, bucket, unused=frozenset()):
        """The averaged gradients into ``.grad`` (their own memory, or views of the bucket with
        ``gradient_as_bucket_view``), those of parameters in ``unused`` (ids) left as they are."""
        with no_grad():
            for p, part in bucket.slices():
                if id(p) in unused:
                    continue
                view = part.view(p.shape)
                if self.gradient_as_bucket_view:
                    if p.grad is None or not _is_view_of(p.grad, part):
                        p.grad = view
                elif p.grad is None:
                    p.grad = view.clone()
                else:
                    np.copyto(p.grad._array(), view._array(), casting="unsafe")
                    p.grad._bump_version()


class _Progress:
    """Advances the started buckets' all-reduces while backward computes the next gradients.

    MPICH moves a non-blocking collective forward only inside MPI calls. With a core to spare, a thread polls
    ``MPI_Test`` every ``INTERVAL`` seconds, sleeping in between (backward's kernels release the GIL), from the
    first bucket's start until backward's last hook, which stops it before waiting itself (MPI forbids two
    threads testing one request at once). Without a spare core such a thread only takes the CPU from backward
    and from the copies the all-reduce itself is made of (measured: steps slower), so each gradient hook polls
    instead. A core is spare when this process may run on more cores than the node's ranks use for compute
    (``jitorch.get_num_threads()`` each) and their polling threads; ``JITORCH_DDP_PROGRESS_THREAD=1`` or ``0``
    decides instead. The thread needs MPI_THREAD_MULTIPLE (mpi4py's default)."""

    INTERVAL = 0.0002

    def __init__(self, group):
        self.works, self.thread, self.running, self.done = [], None, False, 0
        self.threaded = False
        if group.size() == 1:
            return
        MPI = mpi()
        node = group.comm.Split_type(MPI.COMM_TYPE_SHARED)  # collective: every rank calls it, whatever it decides
        local_ranks = node.Get_size()
        node.Free()
        forced = os.environ.get("JITORCH_DDP_PROGRESS_THREAD")
        spare = len(os.sched_getaffinity(0)) >= local_ranks * (get_num_threads() + 1)
        self.threaded = MPI.Query_thread() == MPI.THREAD_MULTIPLE and (forced == "1" or spare and forced != "0")

    def add(self, work):
        """Track a started all-reduce (and start the thread with the first one a backward starts). The thread
        stops when that backward ends, also when a later rule or hook raises: left running, it would still be
        inside MPI when the interpreter's exit finalizes MPI (mpi4py's ``Py_AtExit``), or when the group is
        destroyed."""
        self.works.append(work)
        if self.threaded and self.thread is None and when_backward_ends(self.stop):
            self.running = True
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def poke(self):
        """From a gradient hook: advance the started all-reduces, unless the thread does."""
        if not self.threaded:
            self._advance()

    def _advance(self):
        # tests the unfinished all-reduces in start order, stopping at the first still running
        while self.done < len(self.works) and self.works[self.done].is_completed():
            self.done += 1

    def _run(self):
        while self.running:
            self._advance()
            time.sleep(self.INTERVAL)

    def stop(self):
        """Stop the thread (backward's last hook then waits for the all-reduces itself; after a backward that
        raised, the all-reduces are left as they are)."""
        if self.thread is not None:
            self.running = False
            self.thread.join()
            self.thread = None
        self.works, self.done = [], 0


def _graph_ops():
    # the collective ops join the registry only when a compiled step needs them: the registry's other users
    # (op tables, contract tests) never meet ops that only MPI can run
    from ...distributed import graph_ops

    return graph_ops


def _starts(sizes):
    start = 0
    for n in sizes:
        yield start
        start += n


def _is_view_of(grad, part):
    return grad.untyped_storage() is part.untyped_storage() and grad.storage_offset() == part.storage_offset()


def _leaves_reached(output):
    """ids of the leaf tensors whose gradients backward from ``output`` (any nesting of tensors) reaches."""
    roots, stack, seen, leaves = [], [output], set(), set()
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif getattr(item, "grad_fn", None) is not None:
            roots.append(item.grad_fn)
    while roots:
        node = roots.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None:
            leaves.add(id(variable))
        roots.extend(fn for fn, _ in getattr(node, "next_functions", ()))
    return leaves
