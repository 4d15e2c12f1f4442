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

import math
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ... import distributed as dist
from ...compiler import is_compiling
from ...distributed.collectives import started_all_reduce
from ...distributed.mpi_backend import mpi, op_of, wait
from ...distributed.process_group import ProcessGroup, resolve
from ... import Tensor, bfloat16, cat, zeros_like
from ...autograd.engine import when_backward_ends
from ...runtime.grad_mode import is_grad_enabled, no_grad
from ...runtime.threads import get_num_threads
from ..modules.module import Module
from ..parameter import Parameter

__all__ = ["DistributedDataParallel"]

FIRST_BUCKET_BYTES = 2 ** 20  # torch's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES)


@dataclass
class _MixedPrecision:
    """torch's DDP mixed precision (``torch.nn.parallel.distributed._MixedPrecision``): forward and backward
    compute in ``param_dtype`` (copies of the parameters, and the floating point inputs, cast to it; outside
    them the parameters stay as they are), gradients are summed over the ranks in ``reduce_dtype`` (else
    ``param_dtype``, else the parameters' dtype) and divided there by the world's size, then written into
    ``.grad`` in the parameters' dtype; floating point buffers are cast to ``buffer_dtype`` at construction.
    None leaves that part as it is."""

    param_dtype: object = None
    reduce_dtype: object = None
    buffer_dtype: object = None


class _Bucket:
    """Parameters of one dtype whose gradients travel together, and the flat buffer they travel in (of
    ``dtype``: theirs, or mixed precision's reduce dtype)."""

    def __init__(self, params, dtype):
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.buffer = params[0].new_zeros(sum(self.sizes), dtype=dtype)
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
    rank. ``skip_all_reduce_unused_params`` (with ``find_unused_parameters``) starts no all-reduce for a bucket
    whose parameters went unused; torch decides from each rank's own unused parameters and hangs when they
    differ between ranks, jitorch from every rank's (the exchange ``find_unused_parameters`` makes), so the
    ranks always decide alike. ``mixed_precision``: a `_MixedPrecision` (torch's, or one with its three
    attributes); in a compiled step its casts are nodes of the graph (`_forward_in`).

    ``device_mesh``: a 1-D `jitorch.distributed.device_mesh.DeviceMesh` whose group is the process group (not
    with ``process_group``). ``delay_all_reduce_named_params`` (``(name, parameter)`` pairs) and
    ``param_to_hook_all_reduce`` (a parameter), as torch's: those parameters leave the buckets, and their
    gradients are averaged in one bucket of their own, started when ``param_to_hook_all_reduce``'s gradient is
    computed (once theirs are all accumulated), else when backward ends, and written into ``.grad`` when
    backward ends (zeros for those no rank used, as torch's). Unlike torch's, they accumulate locally under
    ``no_sync`` as the others do (torch averages them at each backward: the same sum by the synced step).
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None,
                 skip_all_reduce_unused_params=False):
        # torch's arguments in torch's order, and torch's errors for those given wrongly
        if (delay_all_reduce_named_params is None) != (param_to_hook_all_reduce is None):
            raise ValueError("delay_all_reduce_named_params and param_to_hook_all_reduce need to be set at the same "
                             "time.")
        if process_group is not None and device_mesh is not None:
            raise RuntimeError("Cannot specify both process_group and device_mesh arguments.")
        if device_mesh is not None:
            if device_mesh.ndim != 1:
                raise RuntimeError(f"Only 1D device mesh is supported, but got {device_mesh}.")
            process_group = device_mesh.get_group(mesh_dim=0)
        super().__init__()
        self.module = module
        self.device_mesh = device_mesh
        self.process_group = process_group
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.skip_all_reduce_unused_params = skip_all_reduce_unused_params
        self.mixed_precision = mixed_precision
        self.require_backward_grad_sync = True
        self._group = resolve(process_group)
        self._world = self._group.size()
        self._src = self._group.ranks[0]
        seen = set()
        delayed = [p for _, p in delay_all_reduce_named_params or () if p.requires_grad
                   and not (id(p) in seen or seen.add(id(p)))]
        params = [p for p in module.parameters() if p.requires_grad and not (id(p) in seen or seen.add(id(p)))]
        if not params and not delayed:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter "
                               "that requires a gradient.")
        if init_sync:  # (init_sync=False: the caller vouches that every rank starts from the same state)
            if not is_compiling():
                self._verify_same_model(params + delayed)
            with no_grad():
                self._broadcast([*module.parameters(), *module.buffers()])
        if mixed_precision is not None:
            _cast_buffers(module, mixed_precision.buffer_dtype)
        cap = (25 if bucket_cap_mb is None else bucket_cap_mb) * 2 ** 20
        self._buckets = self._bucketed(params[::-1], min(cap, FIRST_BUCKET_BYTES), cap, self._reduce_dtype)
        self._bucket_of = {id(p): b for b in self._buckets for p in b.params}
        # delay_all_reduce_named_params: one bucket (one per dtype) on a communicator of its own, so that it may
        # start between the other buckets at another point on each rank without MPI pairing it with one of them
        self._delayed = self._bucketed(delayed, math.inf, math.inf, self._reduce_dtype)
        self._delayed_ids = {id(p) for p in delayed}
        self._delayed_group = _twin(self._group) if delayed else None
        self._new_delayed_round(False)  # (`_delaying`: a synced backward is to reduce the delayed bucket)
        self._next = 0  # the next bucket to start: they start in order on every rank
        self._progress = _Progress(self._group)
        self._expecting = False
        self._ready = set()  # ids of the parameters whose gradients this backward has counted ready
        self._params = params
        self._used, self._used_request, self._unused = None, None, frozenset()
        self._low = {}  # mixed precision: id of a parameter -> its copy in param_dtype that the last forward used
        for p in params + delayed:
            p.register_post_accumulate_grad_hook(self._grad_ready)
        if param_to_hook_all_reduce is not None:
            param_to_hook_all_reduce.register_hook(self._delay_hook)

    def _reduce_dtype(self, param):
        """The dtype ``param``'s gradient is all-reduced in."""
        mp = self.mixed_precision
        if mp is None or not param.dtype.is_floating_point:
            return param.dtype
        return mp.reduce_dtype or mp.param_dtype or param.dtype

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
    def _bucketed(params, first_cap, cap, dtype_of=None):
        """Buckets of at most ``cap`` bytes, the first of at most ``first_cap`` (as torch: the last layers'
        gradients, ready first, start communicating early), each of one dtype (``dtype_of`` a parameter: by
        default its own)."""
        dtype_of = dtype_of or (lambda p: p.dtype)
        buckets, current, size = [], [], 0
        if not params:
            return buckets
        for p in params:
            limit = first_cap if not buckets else cap
            if current and (size + p.numel() * p.element_size() > limit or dtype_of(p) != dtype_of(current[0])):
                buckets.append(_Bucket(current, dtype_of(current[0])))
                current, size = [], 0
            current.append(p)
            size += p.numel() * p.element_size()
        buckets.append(_Bucket(current, dtype_of(current[0])))
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
        if self.mixed_precision is not None and self.mixed_precision.param_dtype is not None:
            output = self._forward_in(self.mixed_precision.param_dtype, inputs, kwargs)
        else:
            output = self.module(*inputs, **kwargs)
        self._expecting = is_grad_enabled() and self.require_backward_grad_sync
        self._new_delayed_round(self._expecting and bool(self._delayed))
        if self._expecting:
            for bucket in self._buckets:
                bucket.ready, bucket.work = 0, None
            self._next = 0
            self._ready = set()
            if self.find_unused_parameters:
                used = _leaves_reached(output)
                used |= {id(p) for p in self._params if id(self._low.get(id(p))) in used}
                self._exchange_used(used)
                for bucket in self._buckets:
                    for p in bucket.params:
                        if id(p) not in used:
                            self._mark_ready(p)
        return output

    def _forward_in(self, dtype, inputs, kwargs):
        """The module's forward on copies of its floating point parameters and inputs in ``dtype`` (torch's
        mixed precision): each module holds its parameters' copies only during the call. A copy is a leaf whose
        gradient, once accumulated, counts its parameter ready; it starts from the parameter's ``.grad`` cast
        to ``dtype`` (so gradients accumulated without syncing go on accumulating, in ``dtype``, as torch's).

        Inside ``jitorch.compile`` a copy is the parameter's cast instead, a node of the graph like the cast of
        its gradient back in backward, which accumulates into the parameter's ``.grad`` (in its dtype: without
        syncing, gradients accumulate there, more precisely than torch's in ``dtype``); the bucket's
        reduction casts the gradients to the reduce dtype (`_reduce_in_graph`)."""
        self._low = {}
        casts = {}  # (compiling: a graph cannot keep tensors it computes in Python state, such as ``_low``)
        swapped = []
        for module in self.module.modules():
            for name, p in list(module._parameters.items()):
                if p is None or not p.dtype.is_floating_point:
                    continue
                low = (casts if is_compiling() else self._low).get(id(p))
                if low is None and is_compiling():
                    low = casts[id(p)] = p.to(dtype)
                elif low is None:
                    with no_grad():
                        low = self._low[id(p)] = Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
                        if p.grad is not None:
                            low.grad = p.grad.detach().to(dtype)
                    if p.requires_grad and (id(p) in self._bucket_of or id(p) in self._delayed_ids):
                        low.register_post_accumulate_grad_hook(lambda _, p=p: self._copy_ready(p))
                module._parameters[name] = low
                swapped.append((module, name, p))
        try:
            return self.module(*_cast_floating(inputs, dtype), **_cast_floating(kwargs, dtype))
        finally:
            for module, name, p in swapped:
                module._parameters[name] = p

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

    def _copy_ready(self, param):
        """Mixed precision: the gradient of ``param``'s copy is accumulated. Unsynced (``no_sync``), it is the
        parameter's gradient, in the parameter's dtype; else it counts the parameter ready."""
        if self._syncing(param):
            self._grad_ready(param)
        else:
            with no_grad():
                param.grad = self._low[id(param)].grad.to(param.dtype)

    def _syncing(self, param):
        """Whether this backward averages ``param``'s gradient (a delayed parameter's after the others')."""
        return (self._delaying if id(param) in self._delayed_ids else self._expecting) and \
            self.require_backward_grad_sync

    def _grad_ready(self, param):
        if not self._syncing(param):
            return
        self._watch()
        if id(param) in self._delayed_ids:
            self._delayed_seen.add(id(param))
            self._start_delayed_when_due()
            return
        if not self._ready and is_compiling():
            # a compiled step replays its graph without running this again: check when its trace's
            # backward ends instead of at the next forward
            when_backward_ends(lambda: self._expecting and self._unfinished())
        self._mark_ready(param)

    def _new_delayed_round(self, delaying):
        """The delayed bucket's state for a new forward (``delaying``: its backward reduces the bucket)."""
        self._delaying = delaying
        self._delayed_seen, self._hooked, self._delayed_started, self._watching = set(), False, False, False

    def _delay_hook(self, grad):
        """``param_to_hook_all_reduce``'s gradient is computed: the delayed bucket starts, once every delayed
        parameter's gradient has been accumulated (torch starts it here whatever has been; a gradient
        accumulated after it would then go unaveraged)."""
        if self._delaying:
            self._hooked = True
            self._watch()
            self._start_delayed_when_due()

    def _watch(self):
        # the delayed bucket is reduced at the latest when this backward ends, on every rank (also where the
        # hooked parameter got no gradient): a rank that skipped it would leave the others waiting
        if self._delaying and not self._watching:
            self._watching = when_backward_ends(self._end_delayed)

    def _start_delayed_when_due(self):
        if self._hooked and not self._delayed_started and len(self._delayed_seen) == len(self._delayed_ids):
            self._start_delayed()

    def _start_delayed(self):
        self._delayed_started = True
        for bucket in self._delayed:
            self._launch(bucket, self._delayed_group)

    def _end_delayed(self):
        """When a synced backward ends: the delayed bucket started (if its hook did not start it) and waited
        for, and its averages written into ``.grad`` (zeros for a parameter no rank used, as torch's, whose
        ``.grad`` of those parameters are views of a zeroed buffer)."""
        self._watching = False
        if not self._delaying:
            return
        self._delaying = False
        if not self._delayed_started:
            self._start_delayed()
        if is_compiling():
            return  # the graph's reduction wrote the gradients back already
        for bucket in self._delayed:
            bucket.work.wait()
            if self.mixed_precision is not None:
                bucket.buffer.div_(self._world)
            self._write_back(bucket)
        self._low = {}

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

    def _skipped(self, bucket):
        """Whether ``bucket`` starts no all-reduce (``skip_all_reduce_unused_params``): no rank used its
        parameters."""
        if not (self.skip_all_reduce_unused_params and self.find_unused_parameters):
            return False
        unused = self._globally_unused()
        return all(id(p) in unused for p in bucket.params)

    def _start(self, bucket):
        if self._skipped(bucket):
            return
        self._launch(bucket, self._group)
        if bucket.work is not None:
            self._progress.add(bucket.work)

    def _launch(self, bucket, group):
        """Start the sum of ``bucket``'s gradients over ``group`` (inside ``jitorch.compile``: a node of the
        graph, which also writes them back)."""
        if is_compiling():
            self._reduce_in_graph(bucket, group)
            return
        self._fill(bucket)
        if bucket.buffer.dtype == bfloat16:  # MPI reduces it through float32 copies, which all_reduce makes
            bucket.work = dist.all_reduce(bucket.buffer, group=group, async_op=True)
        else:
            bucket.work = started_all_reduce(bucket.buffer, group)

    def _fill(self, bucket):
        """Copy the bucket's gradients into its buffer, each divided by the world's size on its way in, as
        torch's mul_out, in one NumPy pass over the tensors' own memory (the bucket and the gradients are CPU
        tensors: MPI sends CPU tensors)."""
        # mixed precision sums undivided gradients and divides the sum (`_finish`), as torch's hook does
        scale = 1 / self._world if self.mixed_precision is None else 1
        for p, part in bucket.slices():
            grad, flat = self._low.get(id(p), p).grad, part._array()
            if grad is None:
                flat[...] = 0
            elif _is_view_of(grad, part):
                if scale != 1:
                    flat *= scale
            else:
                np.multiply(grad._array().reshape(-1), scale, out=flat, casting="unsafe")
            part._bump_version()

    def _reduce_in_graph(self, bucket, group):
        """The bucket's gradients averaged in its dtype (mixed precision's reduce dtype: cast to it and back, as
        nodes of the graph) and written into ``.grad``."""
        unused = self._globally_unused()  # known when tracing: the graph leaves those gradients alone
        with no_grad():
            flat = cat([(zeros_like(p) if p.grad is None else p.grad).reshape(-1) for p in bucket.params])
            averaged = _graph_ops().all_reduce(flat.to(bucket.buffer.dtype), "AVG", group.id)
            for p, size, start in zip(bucket.params, bucket.sizes, _starts(bucket.sizes)):
                if id(p) in unused:
                    continue
                part = averaged[start:start + size].view(p.shape)
                if p.grad is None:
                    p.grad = part.to(p.dtype, copy=True)
                else:
                    p.grad.copy_(part)

    def _finish(self):
        self._expecting = False
        if is_compiling():
            return  # each bucket's reduction wrote its gradients back already
        self._progress.stop()
        unused = self._globally_unused()
        for bucket in self._buckets:
            if bucket.work is None:  # (skipped: every parameter of it unused)
                continue
            bucket.work.wait()
            if self.mixed_precision is not None:
                bucket.buffer.div_(self._world)
            self._write_back(bucket, unused)
        if not self._delaying:
            self._low = {}  # (the copies' gradients are in .grad now; the delayed bucket's are read later)

    def _write_back(self, bucket, unused=frozenset()):
        """The averaged gradients into ``.grad`` (their own memory, or views of the bucket with
        ``gradient_as_bucket_view``), those of parameters in ``unused`` (ids) left as they are."""
        with no_grad():
            for p, part in bucket.slices():
                if id(p) in unused:
                    continue
                view = part.view(p.shape)
                if self.gradient_as_bucket_view and view.dtype == p.dtype:
                    if p.grad is None or not _is_view_of(p.grad, part):
                        p.grad = view
                elif p.grad is None or p.grad.dtype != p.dtype:
                    p.grad = view.to(p.dtype, copy=True)
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


def _twin(group):
    """A group of ``group``'s ranks on a communicator of its own (every rank of ``group`` makes it)."""
    return ProcessGroup(group.comm.Dup(), group.ranks, group.backend, group.timeout)


def _cast_buffers(module, dtype):
    """Mixed precision's ``buffer_dtype``: every floating point buffer of ``module`` cast to it (None: kept)."""
    if dtype is None:
        return
    for owner in module.modules():
        for name, buffer in list(owner._buffers.items()):
            if buffer is not None and buffer.dtype.is_floating_point:
                owner._buffers[name] = buffer.detach().to(dtype)


def _cast_floating(value, dtype):
    """``value`` (tensors in any nesting of lists, tuples and dicts) with its floating point tensors cast to
    ``dtype``, as torch's mixed precision casts a forward's inputs."""
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_floating(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast_floating(v, dtype) for k, v in value.items()}
    if isinstance(value, Tensor) and value.dtype.is_floating_point and value.dtype != dtype:
        return value.to(dtype)
    return value


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
