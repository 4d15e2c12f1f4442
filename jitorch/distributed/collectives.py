"""torch.distributed's collectives and point-to-point ops: CPU tensors run by MPI, CUDA tensors by NCCL
(`nccl_ops`) in groups of backend "nccl".

Each call first checks, with one all-gather of a fixed-size block per rank on the group's MPI communicator
(`Agreement`), that every rank of the group called the same collective with tensors of the same dtype and shape
(and, for a reduction, the same op): RuntimeError on every rank, naming each rank's call, otherwise (MPI and NCCL
would hang or mix data), on CUDA tensors through NCCL too. An all-reduce of a CPU tensor whose bytes fit in the
block (`INLINE`) travels in it, so the check and the data take one message, and is reduced from the gathered
blocks once the check has passed; all-reduces of up to `WIDE_INLINE` bytes given in a row move the group to a
lane of wider blocks, where theirs do too, and larger ones to a lane of blocks little more than the header
(`_Blocks`), or, for sums of up to `FUSED_MAX` bytes of one signature, to a lane where one MPI all-reduce
carries both the check and the data (`_Fused`). The check is every call's, but what an all-reduce's
signature needs is worked out once per group (`_Plan`), and MPI's schedules are built once: the all-gathers are
persistent (`_Lane`), as is the all-reduce of a tensor given again (`_Plan`).
Contiguous tensors are MPI's buffers themselves; others go through a contiguous copy.
"""

from __future__ import annotations

import functools
import inspect
import math
import weakref

import numpy as np

from .. import from_numpy
from . import nccl_ops
from .mpi_backend import check_pairs, is_bfloat16, mpi, op_of, reducible, wait
from .process_group import GroupMember, ReduceOp, World, members_only, outside, resolve

# int64s of a call's description: kind, dtype, ndim, 9 dims, reduce op, numel, later dims' hash, device (1: NCCL's)
_HEADER = 16
# bytes every rank gives a call's agreement: the header, then up to INLINE bytes of data. Every collective's
# agreement exchanges whole blocks, so a smaller one costs them all less, and a larger one carries more
# all-reduces' data: 2 ranks, interleaved, against 4096: 4 B 3.8 -> 3.3 us, 4 KB (then through MPI) 5.6 -> 5.1,
# 64 KB 26.4 -> 23.8, 1 KB (through MPI, was inline) 4.2 -> 4.3 (512 bytes measured as 1024; 2048 between)
BLOCK = 1024
INLINE = BLOCK - 8 * _HEADER
# the wide lane's block (`_Blocks`), which all-reduces of up to 4 KB, given in a row, take: through MPI after the
# agreement (two messages) 4 KB cost 4.9 us where mpi4py's Allreduce took 4.0 (session 50), and an all-gather of
# 4 KB blocks costs less than an all-reduce of 4 KB (2 ranks: 4.9 against 7.8 us, loaded machine, interleaved);
# one of 8 KB blocks took 69 (MPICH's shared-memory eager limit), and every call in the wide lane pays its block,
# a 4 B one 1 us more than in the narrow lane's: so two lanes, and the wide one only for those all-reduces
WIDE_BLOCK = 4096 + 8 * _HEADER
WIDE_INLINE = WIDE_BLOCK - 8 * _HEADER
# the slim lane's block: the header, the readiness byte and up to 7 bytes of data, which all-reduces of more than
# `WIDE_INLINE` bytes, given in a row, take (their data goes through MPI after the agreement whatever the block):
# 2 ranks, a persistent all-gather of the block then MPI's persistent all-reduce of 8 KB, 136 against 1024 bytes
# 8.0 against 8.5 us (session 55, interleaved, loaded machine); a call of another size in that lane pays an MPI
# all-reduce of its own (one of up to 8 bytes travels in the block), and takes the group back to the narrow lane
SLIM_BLOCK = 8 * _HEADER + 8
SLIM_INLINE = SLIM_BLOCK - 8 * _HEADER
WIDEN_AFTER = 2  # all-reduces of one size class in a row that take the group to its lane (wide or slim)
# the largest all-reduce that a fused lane (`_Fused`) carries: its agreement and its data in one MPI all-reduce.
# 2 ranks, interleaved against the slim lane (agreement, then the bound all-reduce), load 8-10: 8 KB alike on two
# cores, better where both ranks share one (102-119% of mpi4py's speed against 64-75%); 16 KB 22.3 against 19.9 us
# and 64 KB 172 against 114 on two cores (the copies in and out of its buffer, where the bound one has none)
FUSED_MAX = 8 << 10
FUSED_RANKS = 64  # groups of more ranks take no fused lane (its check's sums stay exact up to 258 ranks)
FUSED_KEPT = 8  # fused lanes per group (the oldest idle one is freed past it)
_FUSED_DTYPES = tuple(np.dtype(t).str for t in (np.float32, np.float64, np.int32, np.int64))
# an all-reduce's size class (`_Plan.kind`): up to INLINE bytes, up to WIDE_INLINE (the wide lane's), more (slim)
_SMALL, _MID, _BIG = 0, 1, 2
_READINESS = 8 * _HEADER  # where an all-reduce through MPI says whether it can run its bound one (`_Plan`)
# bytes of the largest all-reduce bound to its array (whose array mpi4py then keeps alive until the plan rebinds):
# 2 ranks, persistent against Iallreduce, 64 KB 59 against 67 us, 256 KB 215 against 228, 512 KB and 1 MB alike
BOUND_MAX = 256 << 10
_OPS = tuple(op.value for op in ReduceOp)
_KINDS = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
          "gather", "scatter", "all_to_all_single", "barrier", "object")
_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
           "uint16", "uint32", "uint64")


class Work:
    """A running collective (``async_op=True``): ``wait()`` finishes it, writing the results into the tensors."""

    def __init__(self, requests, finish, timeout, what, result=()):
        self._requests, self._finish, self._timeout, self._what = requests, finish, timeout, what
        self._result = list(result)
        self._done = False

    def wait(self, timeout=None):
        """Block until the collective has finished (RuntimeError after the group's timeout); returns True."""
        if not self._done:
            seconds = self._timeout if timeout is None else _seconds(timeout)
            for request in self._requests:
                wait(request, seconds, self._what)
            if self._finish is not None:
                self._finish()
            self._done = True
        return True

    def is_completed(self):
        """Whether every message has arrived (the results are written by ``wait()``)."""
        return self._done or all(r.Test() for r in self._requests)

    def is_success(self):
        return self.is_completed()

    def result(self):
        """The output tensors."""
        self.wait()
        return self._result


def _seconds(timeout):
    return timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)


def _run(pg, requests, finish, async_op, what, result=(), timeout=None):
    """A `Work` for ``async_op``; else the collective waited for and finished here (no `Work` to make). Either
    raises after ``timeout`` seconds (None: the group's)."""
    seconds = pg.timeout if timeout is None else timeout
    if async_op:
        return Work(requests, finish, seconds, what, result)
    for request in requests:
        wait(request, seconds, what)
    if finish is not None:
        finish()
    return None


def _on_cuda(value):
    """Whether ``value`` is a CUDA tensor, or a list of tensors holding one."""
    if value.__class__ is list or value.__class__ is tuple:
        return any(_on_cuda(v) for v in value)
    device = getattr(value, "device", None)
    return device is not None and device.type == "cuda"


def _staged(*outputs, name=None):
    """A collective that only warns on a rank outside the group it names (`outside`, as torch's), and that moves
    CUDA tensors through MPI when their group has no NCCL ("mpi", "gloo"): MPI works on copies of them in host
    memory, and the arguments named ``outputs`` are copied back to the device once it has finished (by
    ``wait()`` for a `Work`). Groups of backend "nccl", and CPU tensors, go straight through. ``name``: the
    collective's, when the function's is not."""
    def wrap(fn):
        signature = inspect.signature(fn)
        what = name or fn.__name__

        @functools.wraps(fn)
        def staged(*args, **kwargs):
            for value in (*args, *kwargs.values()) if kwargs else args:
                if value is GroupMember.NON_GROUP_MEMBER:
                    return outside(what)
                if _on_cuda(value):
                    break
            else:  # no CUDA tensor: the collective itself (a loop, not any(): this runs on every call)
                return fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if bound.arguments["group"] is GroupMember.NON_GROUP_MEMBER:
                return outside(what)
            if resolve(bound.arguments["group"]).backend == "nccl":
                return fn(*args, **kwargs)
            back, originals = [], {}

            def host(name, t):
                if not _on_cuda(t):
                    return t
                copy = t.cpu()
                originals[id(copy)] = t
                if name in outputs:
                    back.append((t, copy))
                return copy
            for name, value in bound.arguments.items():
                if isinstance(value, (list, tuple)):
                    bound.arguments[name] = [host(name, v) for v in value]
                else:
                    bound.arguments[name] = host(name, value)
            waiting = "async_op" in bound.arguments and not bound.arguments["async_op"]
            if "async_op" in bound.arguments:
                bound.arguments["async_op"] = True
            result = fn(*bound.args, **bound.kwargs)

            def copy_back():
                for device, copy in back:
                    device.detach().copy_(copy)
            if not isinstance(result, Work):
                copy_back()
                return result
            finish = result._finish
            result._finish = lambda: (finish and finish(), copy_back())
            result._result = [originals.get(id(t), t) for t in result._result]
            if waiting:
                result.wait()
                return None
            return result
        return staged
    return wrap


def _on_nccl(pg, tensor, what):
    """Whether ``tensor`` goes through NCCL: a CUDA tensor in a group of backend "nccl" (`_staged` has copied
    those of other groups to the host); a CPU tensor goes through MPI, another device's raises RuntimeError."""
    if tensor.device.type == "cpu":
        return False
    if tensor.device.type == "cuda" and pg.backend == "nccl":
        return True
    raise RuntimeError(f"{what}: jitorch.distributed moves CPU and CUDA tensors, got one on {tensor.device}")


def _dtype_name(tensor):
    return str(tensor.dtype).removeprefix("jitorch.")


def _agree(pg, kind, tensor, what, shape=True, op=None):
    """Raise when the ranks called different collectives, gave tensors of different dtypes or shapes, or
    different reduce ops (``op``, a `ReduceOp` of a reduction)."""
    if tensor is None:
        Agreement(pg, kind, None, (), what).check()
    else:
        Agreement(pg, kind, tensor.dtype, tuple(tensor._shape) if shape else (), what,
                  None if op is None else op.value, tensor.device.type == "cuda").check()


def agree(pg, kind, dtype, shape, what):
    """`_agree` on a dtype's name (None: no tensor) and a shape, which NumPy arrays have too."""
    Agreement(pg, kind, dtype, tuple(shape), what).check()


@functools.lru_cache(maxsize=256)
def _header(kind, dtype, shape, op, cuda=False):
    """The bytes describing a call (`_HEADER` int64s): its kind, dtype (a jitorch dtype or its name), shape,
    reduce op (a name, or None) and whether its tensor is CUDA's, through NCCL (``cuda``: a CPU tensor on one
    rank and a CUDA tensor on another agreed, and the CPU rank reduced the other's block, which held no data, as
    its inline data). A shape of more than 9 dims gives its first 9, its element count and a hash of the others
    (Python's hash of a tuple of ints is the same in every process)."""
    row = np.zeros(_HEADER, np.int64)
    row[0] = _KINDS.index(kind)
    if dtype is not None:
        row[1] = 1 + _DTYPES.index(dtype if dtype.__class__ is str else str(dtype).removeprefix("jitorch."))
        row[2] = len(shape)
        row[3:3 + min(len(shape), 9)] = shape[:9]
    row[12] = 0 if op is None else 1 + _OPS.index(op)
    row[13] = math.prod(shape)
    row[14] = hash(tuple(shape[9:])) if len(shape) > 9 else 0
    row[15] = int(cuda)
    return row.tobytes()


class _Lane:
    """One size of agreement block (`BLOCK` or `WIDE_BLOCK` bytes): this rank's block, every rank's (a row each),
    views of their headers, and the all-gather that exchanges them.

    The all-gather is MPI 4's persistent one (``Allgather_init``), started again for every call: MPI builds its
    schedule once, where ``Iallgather`` built one per call (2 ranks, blocks of 4 KB: 1.8 against 2.9 us a call,
    median of interleaved runs). A thread world's communicator (`threads`) has one too, so ranks that are
    threads take the same path; a communicator without one gathers per call."""

    fused = False

    def __init__(self, pg, blocks, nbytes):
        size = pg.size()
        self.pg, self.blocks, self.timeout = pg, blocks, pg.timeout
        self.comm, self.nbytes, self.inline = pg.comm, nbytes, nbytes - 8 * _HEADER
        self.mine = np.zeros(nbytes, np.uint8)
        self.everyone = np.empty((size, nbytes), np.uint8)
        self.writable = memoryview(self.mine)
        flat = memoryview(self.everyone).cast("B")
        self.headers = [flat[r * nbytes:r * nbytes + 8 * _HEADER] for r in range(size)]
        # the others' headers: this rank's row is its own block, copied by MPI, which needs no comparing
        self.others = [h for r, h in enumerate(self.headers) if r != pg.rank()]
        self.ready = flat[_READINESS::nbytes]  # every rank's, of an all-reduce through MPI (`_Plan`)
        # the others' headers and readiness bytes together (`agree`)
        self.others_ready = [flat[r * nbytes:r * nbytes + _READINESS + 1] for r in range(size) if r != pg.rank()]
        # the header in ``mine`` now (a call like the last writes none), or a `_Plan`'s ``ready_header``: its header
        # and its readiness byte 2 (`_Plan.run`)
        self.written = None
        init = getattr(self.comm, "Allgather_init", None)
        self.persistent = None if init is None else init(self.mine, self.everyone)
        self.running = False  # the persistent all-gather was started and not seen finished

    def start(self, header):
        """Write ``header`` into this rank's block (the data of an inline all-reduce is there already) and start
        the all-gather; its request."""
        if self.written is not header:
            self.writable[:8 * _HEADER] = header
            self.written = header
        if self.persistent is None:
            return self.comm.Iallgather(self.mine, self.everyone)
        return _restarted(self)

    def agree(self, header, request, what):
        """Wait for the all-gather of ``header`` (``request``, started by `start`); RuntimeError naming each rank's
        call unless every rank's header is ``header``."""
        wait(request, self.timeout, what)
        self.running = False
        self.compare(header, what)

    def compare(self, header, what):
        """RuntimeError naming each rank's call unless every rank's gathered header is ``header``."""
        for other in self.others:
            if other.tobytes() != header:  # (a memoryview compared with bytes goes byte by byte: 5x slower)
                self.blocks.settle(_SMALL)  # (every rank sees a header unlike its own: all settle alike)
                raise self.disagreement(header, self.pg, what)

    def disagreement(self, header, pg, what):
        """The RuntimeError naming each rank's call, from the gathered headers (which differ from ``header``)."""
        headers = self.everyone[:, :8 * _HEADER].view(np.int64)
        row = np.frombuffer(header, np.int64)
        ops_only = (headers[:, :12] == row[:12]).all() and (headers[:, 13:] == row[13:]).all()
        devices = len(set(headers[:, 15].tolist())) > 1  # (named only where they differ)
        devices_only = devices and (headers[:, :15] == row[:15]).all()
        described = []
        for rank, row in zip(pg.ranks, headers):
            name = _DTYPES[row[1] - 1] if row[1] else "-"
            op = f", {_OPS[row[12] - 1]}" if ops_only and row[12] else ""
            shape = ", ".join(str(int(n)) for n in row[3:3 + min(row[2], 9)])
            if row[2] > 9:  # (the others are hashed)
                shape += f", ... ({row[2]} dims, {row[13]} elements)"
            device = f" on {'cuda' if row[15] else 'cpu'}" if devices else ""
            described.append(f"rank {rank}: {_KINDS[row[0]]}({name}[{shape}]{op}{device})")
        disagree = "the reduce op" if ops_only else "the collective or on the tensors' dtype and shape"
        if devices_only:
            disagree = "the tensors' device (CPU tensors go through MPI, CUDA tensors through NCCL)"
        return RuntimeError(f"{what}: the ranks disagree on {disagree}: " + "; ".join(described))

    def free(self):
        """Release the persistent all-gather, unless it is running (a timed-out call left it: MPI aborts at exit
        then, `mpi_backend.broken`)."""
        if self.persistent is not None and not self.running:
            self.persistent.Free()
        self.persistent = None


def _restarted(lane):
    """``lane``'s persistent collective started again (and marked running, until its wait sees it finished); its
    request. RuntimeError when it is still running: a call timed out or was interrupted in it."""
    if lane.running:
        raise RuntimeError("jitorch.distributed: an earlier collective on this group never finished (it timed out "
                           "or was interrupted): the group cannot be used")
    lane.persistent.Start()
    lane.running = True
    return lane.persistent


class _Blocks:
    """A group's agreement: its three lanes (`_Lane`: blocks of `BLOCK` bytes; of `WIDE_BLOCK` for all-reduces of
    more than `INLINE` and at most `WIDE_INLINE` bytes; of `SLIM_BLOCK` for larger ones), the lane the next call
    takes, and the all-reduce plans (`_Plan`) made so far, by signature.

    Every rank must give a block of the same size, whatever it calls, so the lane is chosen from what every rank
    saw alike: the calls agreed on before (an all-gather of blocks of different sizes is MPI's undefined
    behaviour). After `WIDEN_AFTER` all-reduces in a row of more than `INLINE` and at most `WIDE_INLINE` bytes
    (each through MPI after its agreement: two messages), the group takes the wide lane, where their data travels
    in the block (one message); after `WIDEN_AFTER` in a row of more, the slim lane, whose smaller block is
    gathered sooner; any other call, or a disagreement, takes it back to the narrow one. Every lane's persistent
    all-gather is made at the group's first agreement, the same call on every rank, so each is initialised at
    the same place in every rank's order of collectives, as MPI requires."""

    def __init__(self, pg):
        self.narrow = _Lane(pg, self, BLOCK)
        self.wide = _Lane(pg, self, WIDE_BLOCK)
        self.slim = _Lane(pg, self, SLIM_BLOCK)
        self.lane = self.narrow
        self.kind = _SMALL  # the size class of the all-reduces agreed on in a row (`settle`), and how many
        self.streak = 0
        self.fusing, self.fused_streak = None, 0  # the header of the fusable all-reduces in a row, and how many
        self.fused = {}  # header -> `_Fused` lane, oldest first
        self.plans = {}
        # (weak reference to the array, op, `_Inline` or `_Plan`) of the last all-reduce of a tensor's own array
        # through its plan (`all_reduce`): weak, as a small view's array holds all of its base's memory
        self.hot = _COLD

    @property
    def persistent(self):
        """The current lane's persistent all-gather (None where the communicator has none)."""
        return self.lane.persistent

    def start(self, header):
        """Start the current lane's all-gather of ``header`` (`_Lane.start`); its request."""
        return self.lane.start(header)

    def check(self, request, header, what, kind=_SMALL, plan=None):
        """Wait for every rank's block; RuntimeError naming each rank's call unless every header is ``header``.
        Then the lane of the group's next call (`settle`): ``kind``, the call's size class, `_MID` or `_BIG`
        for an all-reduce of more than `INLINE` bytes (``plan``, its `_Plan`), `_SMALL` for any other call."""
        self.lane.agree(header, request, what)
        self.settle(kind, plan)

    def settle(self, kind, plan=None):
        """Choose the next call's lane after an agreement, the same on every rank (see the class): after
        `WIDEN_AFTER` all-reduces in a row of one signature that a fused lane can carry (``plan``'s), that
        signature's `_Fused` lane, made then (MPI's initialisation of its all-reduce is collective: every rank
        makes it at the same call)."""
        if kind == _SMALL:
            self.streak = self.fused_streak = 0
            lane = self.narrow
        else:
            if kind != self.kind:
                self.kind, self.streak = kind, 0
            self.streak += 1
            lane = self.narrow if self.streak < WIDEN_AFTER else self.wide if kind == _MID else self.slim
            if plan is not None and plan.fusable:
                if plan.header != self.fusing:
                    self.fusing, self.fused_streak = plan.header, 0
                self.fused_streak += 1
                if self.fused_streak >= WIDEN_AFTER:
                    lane = self.fused.get(plan.header) or self.fuse(plan)
            else:
                self.fused_streak = 0
        if self.lane is not lane:
            self.lane, self.hot = lane, _COLD

    def fuse(self, plan):
        """A new `_Fused` lane for ``plan``'s signature (the oldest idle one freed past `FUSED_KEPT`)."""
        if len(self.fused) >= FUSED_KEPT:
            header = next(h for h, lane in self.fused.items() if lane is not self.lane)
            self.fused.pop(header).free()
        lane = self.fused[plan.header] = _Fused(plan, self)
        return lane

    def forget_plans(self):
        """Drop the plans, freeing their bound all-reduces (not running ones, which an async call not waited
        for holds: MPI forbids freeing those, and keeps them to the end)."""
        for plan in self.plans.values():
            if not plan.busy:
                plan.unbind()
        self.plans.clear()
        self.hot = _COLD

    def free(self):
        """Release the persistent all-gathers and all-reduces, before their communicator is freed."""
        self.forget_plans()
        self.narrow.free()
        self.wide.free()
        self.slim.free()
        for lane in self.fused.values():
            lane.free()
        self.fused.clear()


class _Fused:
    """A lane whose agreement and data take one message: one MPI all-reduce (persistent, MPI 4's
    ``Allreduce_init``) of a buffer holding a check of the call's header, then the data of one all-reduce
    signature (a `_Plan` that is `fusable`), which the group takes after `WIDEN_AFTER` such all-reduces in a row
    (`_Blocks.settle`). In other lanes such an all-reduce takes two messages, the agreement's all-gather and then
    MPI's all-reduce: on a loaded machine each waits for both ranks to be scheduled, so it took two scheduling
    rounds where mpi4py's Allreduce took one (2 ranks, load 7-8, 8 KB: 36-47% of mpi4py's speed in one run of
    three; benchmarks/distributed.py).

    The check is every header byte ``d`` and its square, as numbers of the data's dtype, summed over the ranks:
    a rank whose sums are ``n * d`` and ``n * d * d`` for its own bytes knows that the bytes' mean is its ``d``
    and their variance 0, so every rank's header is its own; where any two ranks' headers differ, every rank
    sees it. The sums are of integers below 2**24 for up to `FUSED_RANKS` ranks, exact in every dtype taken
    (float32 and float64, int32 and int64, whose sums of small integers are exact). The check is as strict as
    the all-gather's comparison of the headers; a call that disagrees then all-gathers the headers in the
    narrow lane, every rank alike, to name each rank's call, and raises as there. Any other call (another
    collective, another all-reduce) agrees through this lane's all-reduce, its data part unused, and takes the
    group back to another lane."""

    fused = True
    inline = -1  # (`_Plan.inline_on`: no all-reduce's data travels in a block here)

    def __init__(self, plan, blocks):
        pg = plan.pg
        self.pg, self.blocks, self.plan, self.header, self.timeout = pg, blocks, plan, plan.header, pg.timeout
        self.size, self.dtype = pg.size(), plan.array_dtype
        self.buffer = np.zeros(2 * 8 * _HEADER + plan.nbytes // self.dtype.itemsize, self.dtype)
        self.check = memoryview(self.buffer).cast("B")[:2 * 8 * _HEADER * self.dtype.itemsize]
        # NumPy's copy in and out of 8 KB took 0.85 us, memoryviews' 1.2
        self.data = self.buffer[2 * 8 * _HEADER:].reshape(plan.shape)
        self.checks = {}  # header -> (this rank's check, every rank's sums when all agree), as bytes
        self.mine, self.summed = self.checked(self.header)
        self.persistent = pg.comm.Allreduce_init(mpi().IN_PLACE, self.buffer, op_of("SUM", self.dtype))
        self.running = False

    def checked(self, header):
        """(this rank's check of ``header``, the sums every rank reads when all gave it), as bytes."""
        found = self.checks.get(header)
        if found is None:
            if len(self.checks) > 256:
                self.checks.clear()
            d = np.frombuffer(header, np.uint8).astype(self.dtype)
            values = np.concatenate([d, d * d])
            found = self.checks[header] = values.tobytes(), (values * self.size).astype(self.dtype).tobytes()
        return found

    def start(self, header):
        """Write ``header``'s check and start the all-reduce; its request (`_Lane.start`'s part)."""
        self.check[:] = self.checked(header)[0]
        return _restarted(self)

    def agree(self, header, request, what):
        """Wait for the all-reduce of ``header``'s check (started by `start`); RuntimeError naming each rank's
        call unless every rank gave ``header``."""
        wait(request, self.timeout, what)
        self.running = False
        if self.check.tobytes() != self.checked(header)[1]:
            self.disagree(header, what)

    def disagree(self, header, what):
        """Every rank saw that the headers differ: the narrow lane's all-gather of them names each rank's call
        (`_Lane.compare` raises, and settles the group there)."""
        self.blocks.settle(_SMALL)
        narrow = self.blocks.narrow
        narrow.agree(header, narrow.start(header), what)
        raise RuntimeError(f"{what}: the ranks disagree on the collective or on the tensors' dtype and shape")

    def reduce(self, plan, array, what):
        """`_Plan.start` in this lane: ``array`` (contiguous, ``plan``'s) reduced in place over the ranks by this
        lane's all-reduce when ``plan`` is its signature (AVG summed: the caller divides), returning None; else
        the call agreed on here, the group settled in another lane, and MPI's all-reduce of ``array`` started
        and returned."""
        if plan.header != self.header:
            self.agree(plan.header, self.start(plan.header), what)
            self.blocks.settle(plan.kind, plan)
            return self.pg.comm.Iallreduce(mpi().IN_PLACE, array, op_of(plan.op.value, array.dtype))
        self.check[:] = self.mine
        self.data[...] = array
        wait(_restarted(self), self.timeout, what)
        self.running = False
        if self.check.tobytes() != self.summed:  # (a memoryview compared with bytes: 20x slower)
            self.disagree(self.header, what)
        array[...] = self.data
        return None

    def run(self, tensor, array, async_op):
        """The all-reduce of this lane's signature on ``tensor``'s own ``array``, finished (AVG divides; the
        version moves): `all_reduce` takes it as the group's hot all-reduce, without its plan's steps."""
        return self.run_plan(self.plan, tensor, array, async_op)

    def run_plan(self, plan, tensor, array, async_op):
        """`_Plan.run` in this lane: `reduce`, then ``plan``'s finish."""
        request = self.reduce(plan, array, "all_reduce")
        if request is None:
            plan.finish(tensor, array)
            return Work([], None, self.timeout, "all_reduce", [tensor]) if async_op else None
        if async_op:
            return Work([request], lambda: plan.finish(tensor, array), self.timeout, "all_reduce", [tensor])
        wait(request, self.timeout, "all_reduce")
        plan.finish(tensor, array)
        return None

    def free(self):
        """Release the persistent all-reduce, unless it is running (as `_Lane.free`)."""
        if self.persistent is not None and not self.running:
            self.persistent.Free()
        self.persistent = None


_COLD = (lambda: None, None, None)  # `_Blocks.hot` when no all-reduce is (`all_reduce` takes no None array)


def _blocks(pg):
    blocks = pg.signatures
    if blocks is None:  # one agreement at a time per group: each is checked before its call ends
        blocks = pg.signatures = _Blocks(pg)
    return blocks


class Agreement:
    """Whether every rank describes its call alike: one non-blocking all-gather of a block of bytes per rank (the
    group's lane's, `_Blocks`), its header (kind, dtype, shape, numel, op) and, for an all-reduce that fits in
    the block (`_Plan`), its data, so that the check and the data take one message. The block's size is the same
    on every rank whatever it calls, so ranks that called different collectives, or gave different sizes, still
    exchange whole blocks and each sees every other's header: all raise, naming each rank's call, and no rank's
    output is written.

    Every call needs it, and before its data moves: a rank that skipped it (say, for a signature the ranks
    agreed on before) while another called with a new one would pair one rank's data with the other's
    agreement in MPI's order of collectives, and MPI's result for collectives of different sizes is undefined
    (a hang, or memory written past a buffer)."""

    def __init__(self, pg, kind, dtype, shape, what, op=None, cuda=False):
        self.what = what
        self.header = _header(kind, dtype, shape, op, cuda)
        self.blocks = _blocks(pg)
        self.request = self.blocks.start(self.header)

    def check(self):
        """Wait for the other ranks' blocks; RuntimeError naming each rank's call when they differ."""
        self.blocks.check(self.request, self.header, self.what)


def _contiguous_strides(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class _Plan:
    """An all-reduce of one signature (dtype, shape, reduce op) on one group, of contiguous arrays of NumPy
    ``array_dtype``, worked out at its first call: its header, and per lane (`_Blocks`) whether its data travels
    in the agreement's block (`_Inline`, made at its first call there), else MPI's reduce op. Later calls with
    that signature do only what moves their data (`all_reduce`'s first lines).

    Through MPI, an all-reduce of at most `BOUND_MAX` bytes that a tensor makes again with the array it gave last
    time runs a persistent all-reduce (MPI 4's ``Allreduce_init``) bound to that array, started again while
    every rank gives its bound array: MPI builds its schedule once, where ``Iallreduce`` built one per call
    (2 ranks: 8 KB 4.5 -> 3.1 us, 64 KB 23 -> 20.5 us). Each rank says in its block, beside the header, whether it
    can (`readiness`), and every rank reads every rank's word after the agreement, so all make the same choice:
    start the bound ones, bind new ones (MPI's initialisation is collective: every rank then makes one, at the
    same place in its order of collectives), or all-reduce as before."""

    def __init__(self, pg, blocks, dtype, shape, op, array_dtype):
        self.pg, self.blocks, self.shape, self.array_dtype, self.op = pg, blocks, shape, array_dtype, op
        self.header = _header("all_reduce", dtype, shape, op.value)
        self.strides = _contiguous_strides(shape, array_dtype.itemsize)
        self.divisor = pg.size() if op is ReduceOp.AVG else None  # (AVG sums: the caller divides)
        self.timeout = pg.timeout
        self.in_place = mpi().IN_PLACE
        self.nbytes = math.prod(shape) * array_dtype.itemsize
        self.kind = _SMALL if self.nbytes <= INLINE else _MID if self.nbytes <= WIDE_INLINE else _BIG
        # the lane the group is in after a call of this plan's when its streak is long enough (`_Blocks.settle`)
        self.home = (blocks.narrow, blocks.wide, blocks.slim)[self.kind]
        self.inlines = {}  # lane -> `_Inline`
        self.bound = self.bound_array = None  # the persistent all-reduce, and a weak reference to its array
        self.busy = False  # the bound all-reduce was started and its call has not finished
        if self.nbytes > SLIM_INLINE:  # (through MPI in some lane: in the slim one past its 8 bytes)
            self.mpi_op = op_of(op.value, array_dtype)
            # only where the communicator has persistent all-reduces (a thread world's has its all-gather alone)
            self.bindable = self.nbytes <= BOUND_MAX and hasattr(pg.comm, "Allreduce_init")
            self.last = None  # a weak reference to the array of this rank's last call (`run`)
            self.ready_header = self.header + bytes([2])  # (`run`: every rank's bound one idle)
        # whether a fused lane (`_Fused`) can carry it: a sum (AVG sums) of a dtype whose sums of small integers
        # are exact, as its check needs, on a communicator with persistent all-reduces
        self.fusable = self.kind == _BIG and self.nbytes <= FUSED_MAX and op.value in ("SUM", "AVG") and \
            array_dtype.str in _FUSED_DTYPES and pg.size() <= FUSED_RANKS and hasattr(pg.comm, "Allreduce_init")

    def inline_on(self, lane):
        """The `_Inline` all-reduce of this signature in ``lane``'s block; None when its data does not fit."""
        inline = self.inlines.get(lane)
        if inline is None and self.nbytes <= lane.inline:
            inline = self.inlines[lane] = _Inline(self, lane)
        return inline

    def start(self, array, what, reuse=False):
        """Agree on this all-reduce and reduce ``array`` (contiguous, of the plan's shape and dtype) in place
        over the ranks: here, from the gathered blocks, when its data travels in them (every rank computes the
        same values), returning None; else returning MPI's started all-reduce, once the agreement has passed.
        ``reuse``: ``array`` is a tensor's own (cached) array, which may run the bound all-reduce; the caller
        then calls `finish` when the returned request has completed."""
        blocks = self.blocks
        lane = blocks.lane
        if lane.fused:
            return lane.reduce(self, array, what)
        inline = self.inline_on(lane)
        if inline is not None:
            inline.mine[...] = array
        else:
            lane.writable[_READINESS] = self.readiness(array) if reuse and self.bindable else 0
        blocks.check(lane.start(self.header), self.header, what, self.kind, self)
        if inline is not None:
            inline.reduce(array)
            return None
        return self.started(lane, array, reuse)

    def started(self, lane, array, reuse):
        """MPI's all-reduce of ``array``, started once the ranks have agreed in ``lane``: the bound one when every
        rank's block said it can start its own (`readiness`), a new bound one when every rank gave its last
        call's array again, else a non-blocking one."""
        everyone = min(lane.ready)  # (the same on every rank)
        if everyone == 0:
            if reuse and self.bindable:
                self.last = weakref.ref(array)
                if not self.busy and self.bound is not None and self.bound_array() is not array:
                    self.unbind()  # (its array, which mpi4py keeps alive, is freed now)
            return self.pg.comm.Iallreduce(self.in_place, array, self.mpi_op)
        if everyone == 1:
            self.unbind()
            self.bound = self.pg.comm.Allreduce_init(self.in_place, array, self.mpi_op)
            self.bound_array = weakref.ref(array)
        self.bound.Start()
        self.busy = True
        return self.bound

    def readiness(self, array):
        """2: this rank's bound all-reduce is ``array``'s and idle; 1: ``array`` was its last call's too, and no
        bound all-reduce is running; 0: neither."""
        if self.busy:  # (an async call not waited for yet: its request cannot be started or freed)
            return 0
        if self.bound is not None and self.bound_array() is array:
            return 2
        return 1 if self.last is not None and self.last() is array else 0

    def unbind(self):
        """Free the bound all-reduce, if any: an idle one (freeing a running one is MPI's undefined behaviour,
        and crashed MPICH), which `readiness` and the callers make sure of."""
        if self.bound is not None:
            self.bound.Free()
            self.bound = self.bound_array = None

    def run(self, tensor, array, async_op):
        """`start` on ``array``, ``tensor``'s own memory, then finish (AVG divides; the version moves): now, or
        by the `Work`'s ``wait()`` for ``async_op``. A tensor all-reduced again whose bound all-reduce is idle
        (a loop's every call after its second) takes `start`'s steps for that case alone, written out here as
        `_Inline.run` writes out its own: the lane's persistent all-gather started again when the block holds
        this plan's header and readiness byte already (`_Lane.written` is ``ready_header``), then every rank's
        header and readiness byte compared at once; the headers alone (`_Lane.compare`) only when those differ.
        With `all_reduce` taking such a plan as the group's hot all-reduce, 1 rank, 8 KB (where MPI's calls
        return at once): 16,947 -> 15,891 instructions a call (valgrind, 100,000 calls), CPU time 1.55-1.63 ->
        1.37-1.47 us against 0.80-0.88 for MPI's two persistent collectives waited for alone (session 55, loaded
        machine); before, through `_Lane.agree`, 2.35 -> 1.45 us. On 2 ranks of the 2-core machine Python's cost
        counts about twice: jitorch 8.0-8.4 us a call against 6.1-6.2 for the bare collectives and 6.8-7.0 for
        mpi4py's blocking Allreduce (session 55, before this change)."""
        blocks = self.blocks
        lane = blocks.lane
        if self.nbytes <= lane.inline:
            return self.inline_on(lane).run(tensor, array, async_op)
        if lane.fused:
            return lane.run_plan(self, tensor, array, async_op)
        timeout = self.timeout
        bound = self.bound_array
        if bound is not None and not self.busy and bound() is array:
            ready = self.ready_header
            request = lane.persistent
            if lane.written is ready and not lane.running:  # (header and readiness byte in the block already)
                request.Start()
                lane.running = True
            else:
                lane.writable[_READINESS] = 2
                request = lane.start(self.header)
                lane.written = ready
            wait(request, timeout, "all_reduce")
            lane.running = False
            for other in lane.others_ready:
                if other.tobytes() != ready:
                    lane.compare(self.header, "all_reduce")
                    request = self.started(lane, array, True)
                    break
            else:  # (every rank can start its bound one: `started`'s first case, without its steps)
                request = self.bound
                request.Start()
                self.busy = True
            if lane is not self.home or self.kind == _SMALL and blocks.streak or self.fusable:
                blocks.settle(self.kind, self)  # (else `settle` changes nothing)
        else:
            request = self.start(array, "all_reduce", reuse=True)
        if async_op:
            return Work([request], lambda: self.finish(tensor, array), timeout, "all_reduce", [tensor])
        wait(request, timeout, "all_reduce")
        self.finish(tensor, array)
        return None

    def finish(self, tensor, array):
        self.busy = False
        if self.divisor is not None:
            np.divide(array, self.divisor, out=array)  # in place: ``array / size`` made a second buffer
        tensor._storage._version += 1  # (`Tensor._bump_version`)


class _Inline:
    """A `_Plan`'s all-reduce whose data travels in a lane's block: the views of that data in this rank's block
    and in every rank's, and their reduction."""

    def __init__(self, plan, lane):
        size, array_dtype, shape = plan.pg.size(), plan.array_dtype, plan.shape
        self.plan, self.lane, self.blocks, self.header = plan, lane, plan.blocks, plan.header
        self.divisor, self.timeout = plan.divisor, plan.pg.timeout
        self.settles = plan.kind != _MID  # after the call the group's lane is the narrow one (`_Blocks.settle`)
        self.mine = np.ndarray(shape, array_dtype, buffer=lane.mine, offset=8 * _HEADER)
        rows = np.ndarray((size, *shape), array_dtype, buffer=lane.everyone, offset=8 * _HEADER,
                          strides=(lane.nbytes, *plan.strides))
        # booleans as logic, numbers as arithmetic (integers wrapping), MIN and MAX keeping a NaN of any rank, the
        # rows reduced first to last: as MPI's all-reduce (`op_of`) reduces them
        ufunc = (_LOGICAL_UFUNCS if array_dtype.kind == "b" else _UFUNCS)[plan.op.value]
        # 2 ranks: one binary call, a third of reduce's time, the same values (reduce adds row after row).
        # `binary` is it with ``out`` positional, which `run` calls without the lambda's frame: at 4 B a keyword
        # ``out`` cost 100 ns more of NumPy's 500 (NumPy deprecates a positional one for minimum and maximum)
        self.binary = None
        if size == 2:
            first, second = rows[0, ...], rows[1, ...]
            if ufunc is not np.minimum and ufunc is not np.maximum:
                self.binary = functools.partial(ufunc, first, second)
            self.reduce = lambda out: ufunc(first, second, out=out)
        else:
            self.reduce = lambda out: ufunc.reduce(rows, axis=0, out=out, dtype=array_dtype)
        self.scalar = None
        if plan.nbytes == array_dtype.itemsize and array_dtype.str in _SCALARS and plan.op.value in _SCALAR_OPS:
            self.scalar = _Scalar(plan, lane, array_dtype, len(shape))

    def run(self, tensor, array, async_op):
        """`_Plan.start`'s and `_Plan.finish`'s steps written out: at 4 bytes the Python around MPI's all-gather
        was more than the all-gather itself (2 ranks, session 48: 4.5 us a call against mpi4py's blocking
        Allreduce's 3.1). Each call less (the all-gather's start, the reduction's lambda, the tensor's version)
        took 30 to 100 ns of it: so `_Lane.agree`'s steps are written out here too (calling it, 1 rank, 4 B:
        1.13 against 1.10 us; 2 ranks, loaded machine, 10th percentile 2.50-2.65 against 2.45-2.47)."""
        lane, header, scalar = self.lane, self.header, self.scalar
        if scalar is None:
            self.mine[...] = array
        else:
            scalar.mine[0] = array.item()
        request = lane.persistent
        if lane.written is header and not lane.running and request is not None:
            request.Start()  # (`_Lane.start`'s common case, a call less)
            lane.running = True
        else:
            request = lane.start(header)
        wait(request, self.timeout, "all_reduce")
        lane.running = False
        blocks = self.blocks
        for other in lane.others:
            if other.tobytes() != header:
                blocks.settle(_SMALL)
                raise lane.disagreement(header, self.plan.pg, "all_reduce")
        # (a mid-sized all-reduce in the wide lane keeps the group there: nothing to settle)
        if self.settles and (blocks.streak or blocks.lane is not blocks.narrow):
            blocks.settle(_SMALL)
        if scalar is not None:
            scalar.reduce(array)
        else:
            binary = self.binary
            if binary is None:
                self.reduce(array)
            else:
                binary(array)
            if self.divisor is not None:
                np.divide(array, self.divisor, out=array)
        tensor._storage._version += 1  # (`Tensor._bump_version`)
        return Work([], None, self.timeout, "all_reduce", [tensor]) if async_op else None


# one-element all-reduces that `_Scalar` reduces in Python's floats: float32 and float64 (of this machine's byte
# order) by SUM, AVG and PRODUCT
_SCALARS = (np.dtype(np.float32).str, np.dtype(np.float64).str)
_SCALAR_OPS = ("SUM", "AVG", "PRODUCT")


class _Scalar:
    """An `_Inline` all-reduce of one float32 or float64 element by SUM, AVG or PRODUCT, reduced in Python's
    floats: NumPy's calls on a one-element array are most of its cost (2 ranks, loaded machine: copying the
    element in 301 ns and adding the two rows 740 ns, against 145 and 221 ns here).

    The values are NumPy's, bit for bit: each step adds or multiplies two float32 values exactly as doubles
    hold them and rounds the double to float32 when it is stored into the tensor (float32's sum, product or
    quotient by an int, rounded once to double and then to float32, is the correctly rounded float32 result: a
    double has more than twice float32's 24 bits, plus 2), so, as NumPy's reduction, every step is rounded to
    the tensor's dtype, in rank order. Infinities, NaN and overflow to infinity come out as NumPy's do (an
    overflow warns, as NumPy's add does)."""

    def __init__(self, plan, lane, array_dtype, ndim):
        fmt = "f" if array_dtype.itemsize == 4 else "d"
        start, end = 8 * _HEADER, 8 * _HEADER + array_dtype.itemsize
        self.mine = memoryview(lane.mine)[start:end].cast(fmt)
        flat = memoryview(lane.everyone).cast("B")
        cells = [flat[r * lane.nbytes + start:r * lane.nbytes + end].cast(fmt) for r in range(plan.pg.size())]
        self.index = index = (0,) * ndim  # the element's index in the tensor's array (() for a 0-d one)
        self.first, self.middle, self.last = cells[0], cells[1:-1], cells[-1] if len(cells) > 1 else None
        self.product = plan.op is ReduceOp.PRODUCT
        self.divisor = plan.divisor
        if len(cells) == 2:  # two ranks: one step, written out (the general loop's lookups were 200 ns of 580)
            first, last = cells
            if plan.op is ReduceOp.SUM:
                def reduce(array):
                    array[index] = first[0] + last[0]
            elif plan.op is ReduceOp.PRODUCT:
                def reduce(array):
                    array[index] = first[0] * last[0]
            else:  # AVG: the sum rounded to the dtype, then divided
                def reduce(array):
                    array[index] = first[0] + last[0]
                    array[index] = array.item() / 2
            self.reduce = reduce

    def reduce(self, array):
        """Write the ranks' elements, reduced in rank order (each step rounded to ``array``'s dtype), into
        ``array``; then divide it by the group's size for AVG. (Two ranks' instances replace it with one step
        written out for their op.)"""
        index, value, product = self.index, self.first[0], self.product
        for cell in self.middle:
            array[index] = value * cell[0] if product else value + cell[0]
            value = array.item()
        last = self.last
        if last is None:  # (a group of one rank)
            array[index] = value
        else:
            array[index] = value * last[0] if product else value + last[0]
        if self.divisor is not None:
            array[index] = array.item() / self.divisor


_PLANS_KEPT = 1024  # signatures per group (a program of ever new shapes starts over past it)


def _plan(pg, dtype, shape, op, array_dtype):
    """The group's `_Plan` of an all-reduce of ``dtype`` (a jitorch dtype or a name), ``shape`` and ``op`` (a
    `ReduceOp`) on arrays of NumPy ``array_dtype``, made at its first call."""
    blocks = _blocks(pg)
    key = (dtype, shape, op)
    plan = blocks.plans.get(key)
    if plan is None or plan.array_dtype != array_dtype:
        if len(blocks.plans) >= _PLANS_KEPT:
            blocks.forget_plans()
        plan = blocks.plans[key] = _Plan(pg, blocks, dtype, shape, op, array_dtype)
    return plan


def _buffer(tensor, reducing):
    """(array MPI reads and writes, function writing it back into ``tensor``): the tensor's own memory when it is
    contiguous; bfloat16 moves as its bits, and reduces through float32."""
    array = tensor._array()  # the tensor's cached NumPy view (detach().numpy() makes a new one per call)
    bf16 = is_bfloat16(array.dtype)
    if array.flags.c_contiguous and not bf16:
        return array, tensor._bump_version
    if bf16 and not reducing:
        bits = np.ascontiguousarray(array).view(np.uint16)
        return bits, lambda: _write(tensor, bits.view(array.dtype))
    staged = np.ascontiguousarray(reducible(array))
    return staged, lambda: _write(tensor, staged)


def _write(tensor, array):
    tensor.detach().copy_(from_numpy(np.asarray(array).reshape(tuple(tensor.shape))))


def _averaging(op, tensor, what):
    if op.__class__ is not ReduceOp:
        op = ReduceOp(op.value if isinstance(op, ReduceOp) else op)
    if op is ReduceOp.AVG and not tensor.dtype.is_floating_point:
        raise RuntimeError(f"{what}: ReduceOp.AVG needs floating point tensors, got {tensor.dtype}")
    return op


def _finisher(op, array, size, write_back):
    if op is not ReduceOp.AVG:
        return write_back

    def finish():
        np.divide(array, size, out=array)  # in place: ``array / size`` made a second buffer and copied it back
        write_back()
    return finish


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` over the group's ranks with ``op``; every rank gets the result, in place."""
    # a CPU tensor that is its own buffer, of a signature the group has all-reduced before: its plan (made once
    # the checks of `_all_reduce` passed), so only what moves the data runs
    blocks = getattr(World.WORLD if group is None else group, "signatures", None)  # (None: not a group's member)
    if blocks is not None:
        # the group's last all-reduce through a plan, of the same array: a tensor's cached array is dropped
        # whenever its memory, shape or strides change, so the same array object is the same signature and the
        # same memory (2 ranks, 4 B: 0.5 us of the lookup below against 0.1)
        hot, array = blocks.hot, tensor._arr
        if array is hot[0]() and op is hot[1] and array is not None:
            return hot[2].run(tensor, array, async_op)
        if tensor.device.type == "cpu":
            plan = blocks.plans.get((tensor.dtype, tensor._shape, op))
            if plan is not None:
                array = tensor._array()
                if array.dtype is plan.array_dtype and array.strides == plan.strides:
                    lane = blocks.lane
                    inline = plan.inline_on(lane)
                    run = plan if inline is None else inline
                    if lane.fused and lane.header == plan.header:
                        run = lane
                    blocks.hot = (weakref.ref(array), op, run)
                    return run.run(tensor, array, async_op)
    return _all_reduce(tensor, op, group, async_op)


@_staged("tensor", name="all_reduce")
def _all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    what = "all_reduce"
    pg = resolve(group)
    op = _averaging(op, tensor, what)
    if _on_nccl(pg, tensor, what):
        _agree(pg, what, tensor, what, op=op)
        return nccl_ops.all_reduce(pg, tensor, op, async_op)
    array, write_back = _buffer(tensor, reducing=True)
    plan = _plan(pg, tensor.dtype, tuple(tensor._shape), op, array.dtype)
    if array is tensor._array():  # the tensor's own memory
        return plan.run(tensor, array, async_op)
    request = plan.start(array.reshape(plan.shape), what)  # (a 0-d tensor's copy is 1-d: a view of it)
    return _run(pg, [] if request is None else [request], _finisher(op, array, pg.size(), write_back), async_op,
                what, [tensor])


def all_reduce_started(pg, array, op, dtype, shape, what):
    """Agree on an all-reduce of ``dtype`` and ``shape`` with ``op`` (a `ReduceOp`; AVG sums, the caller divides)
    and reduce ``array`` (contiguous, MPI-reducible) in place over the ranks: here, from the agreement's blocks in
    rank order (every rank computes the same values) when it fits in one (`INLINE`), returning None; else
    returning MPI's started all-reduce, once the agreement has passed."""
    plan = _plan(pg, dtype, tuple(shape), op, array.dtype)
    return plan.start(array.reshape(plan.shape), what)  # (a view: a 0-d tensor's contiguous copy is 1-d)


_UFUNCS = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
           "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}
_LOGICAL_UFUNCS = {"SUM": np.logical_or, "MAX": np.logical_or, "BOR": np.logical_or, "PRODUCT": np.logical_and,
                   "MIN": np.logical_and, "BAND": np.logical_and, "BXOR": np.logical_xor}


def started_all_reduce(tensor, group=None):
    """An asynchronous SUM all-reduce of a contiguous CPU ``tensor`` (not bfloat16), as a `Work`, without the
    per-call agreement: for callers that made sure once that every rank's tensors agree (DDP's buckets, whose
    parameters it compares at construction), so a bucket starts without waiting for the other ranks."""
    pg = resolve(group)
    if tensor.device.type == "cuda" and pg.backend == "nccl":
        return nccl_ops.all_reduce(pg, tensor, ReduceOp.SUM, True)
    array = tensor._array()
    request = pg.comm.Iallreduce(mpi().IN_PLACE, array, op_of("SUM"))
    return Work([request], tensor._bump_version, pg.timeout, "all_reduce", [tensor])


@_staged("tensor")
def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Copy rank ``src``'s ``tensor`` into every rank's ``tensor``."""
    what = "broadcast"
    pg = resolve(group)
    root = _root(pg, src, group_src)
    nccl = _on_nccl(pg, tensor, what)
    _agree(pg, what, tensor, what)
    if nccl:
        return nccl_ops.broadcast(pg, tensor, root, async_op)
    array, write_back = _buffer(tensor, reducing=False)
    return _run(pg, [pg.comm.Ibcast(array, root=root)], write_back, async_op, what, [tensor])


@_staged("tensor")
def reduce(tensor, dst=None, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    """Reduce ``tensor`` over the ranks into rank ``dst``'s ``tensor`` (the others' are left as they were)."""
    what = "reduce"
    op = _averaging(op, tensor, what)
    pg = resolve(group)
    root = _root(pg, dst, group_dst)
    nccl = _on_nccl(pg, tensor, what)
    _agree(pg, what, tensor, what, op=op)
    if nccl:
        return nccl_ops.reduce(pg, tensor, root, op, async_op)
    array, write_back = _buffer(tensor, reducing=True)
    if pg.rank() == root:
        request = pg.comm.Ireduce(mpi().IN_PLACE, array, op_of(op.value, array.dtype), root=root)
        finish = _finisher(op, array, pg.size(), write_back)
    else:
        request = pg.comm.Ireduce(array, None, op_of(op.value, array.dtype), root=root)
        finish = None
    return _run(pg, [request], finish, async_op, what, [tensor])


def _root(pg, global_rank, group_rank):
    """The group rank a rooted collective names, as a global rank or (``group_src``/``group_dst``) a group one."""
    return group_rank if group_rank is not None else pg.group_rank(0 if global_rank is None else global_rank)


def _check_root_list(pg, root, tensors, what, role, arg):
    """The list only the root gives: one tensor per rank there, none elsewhere (torch's error)."""
    if pg.rank() == root:
        if tensors is None or len(tensors) != pg.size():
            raise ValueError(f"{what}: the {role} rank needs a {arg} of {pg.size()} tensors")
    elif tensors:
        raise ValueError(f"Argument ``{arg}`` must NOT be specified on non-{role} ranks.")


def _gathered(pg, tensor):
    array, _ = _buffer(tensor, reducing=False)
    return array, np.empty((pg.size(), *array.shape), array.dtype)


def _write_rows(tensors, rows, dtype):
    for t, row in zip(tensors, rows):
        _write(t, row.view(dtype) if row.dtype != dtype else row)


def _like(tensors, tensor, what, arg, role="input"):
    """ValueError unless every tensor of ``tensors`` (a list of one rank's parts) has ``tensor``'s dtype, and
    RuntimeError unless each has its shape."""
    _one_dtype([tensor, *tensors], what)
    for t in tensors:
        if tuple(t.shape) != tuple(tensor.shape):
            raise RuntimeError(f"{what}: {arg}'s tensors must match the {role} ({tensor.dtype}"
                               f"{list(tensor.shape)}), got {t.dtype}{list(t.shape)}")


def _one_dtype(tensors, what, error=ValueError):
    """``error`` (torch's: ValueError where its Python checks, RuntimeError where its backend does) unless the
    tensors one collective moves are all of one dtype, before anything moves: MPI would move the bytes as they
    are, and the receiver read them as another dtype."""
    first = tensors[0].dtype
    for t in tensors[1:]:
        if t.dtype != first:
            raise error(f"{what}: Invalid usage of tensors with different dtypes: found {first} and {t.dtype}")


@_staged("tensor_list")
def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Every rank's ``tensor``, into ``tensor_list[rank]`` on every rank."""
    what = "all_gather"
    pg = resolve(group)
    nccl = _on_nccl(pg, tensor, what)
    if len(tensor_list) != pg.size():
        raise ValueError(f"{what}: tensor_list holds {len(tensor_list)} tensors for a group of {pg.size()} ranks")
    _like(tensor_list, tensor, what, "tensor_list")
    _agree(pg, what, tensor, what)
    if nccl:
        return nccl_ops.all_gather(pg, tensor_list, tensor, async_op)
    array, rows = _gathered(pg, tensor)
    dtype = tensor.detach().numpy().dtype
    return _run(pg, [pg.comm.Iallgather(array, rows)], lambda: _write_rows(tensor_list, rows, dtype), async_op,
                what, tensor_list)


def _whole(tensor, numel, what, role):
    if tensor.numel() != numel:
        raise ValueError(f"{what}: {role} has {tensor.numel()} elements, {numel} expected")


@_staged("output_tensor")
def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Every rank's ``input_tensor``, concatenated (or stacked) in rank order into ``output_tensor``."""
    what = "all_gather_into_tensor"
    pg = resolve(group)
    _whole(output_tensor, pg.size() * input_tensor.numel(), what, "output_tensor")
    _one_dtype([input_tensor, output_tensor], what, RuntimeError)
    nccl = _on_nccl(pg, input_tensor, what)
    _agree(pg, what, input_tensor, what)
    if nccl:
        return nccl_ops.all_gather_into_tensor(pg, output_tensor, input_tensor, async_op)
    array, _ = _buffer(input_tensor, reducing=False)
    out, write_back = _buffer(output_tensor, reducing=False)
    return _run(pg, [pg.comm.Iallgather(array, out)], write_back, async_op, what, [output_tensor])


@_staged("output")
def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``input`` over the ranks and give rank r the r-th of its ``size`` equal chunks, in ``output``."""
    what = "reduce_scatter_tensor"
    op = _averaging(op, input, what)
    pg = resolve(group)
    _whole(input, pg.size() * output.numel(), what, "input")
    _one_dtype([input, output], what, RuntimeError)
    nccl = _on_nccl(pg, input, what)
    _agree(pg, what, input, what, op=op)
    if nccl:
        return nccl_ops.reduce_scatter_tensor(pg, output, input, op, async_op)
    array, _ = _buffer(input, reducing=True)
    out, write_back = _buffer(output, reducing=True)
    request = pg.comm.Ireduce_scatter_block(array, out, op_of(op.value, array.dtype))
    return _run(pg, [request], _finisher(op, out, pg.size(), write_back), async_op, what, [output])


@_staged("gather_list")
def gather(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None):
    """Every rank's ``tensor`` into ``gather_list`` on rank ``dst`` (which alone gives a list)."""
    what = "gather"
    pg = resolve(group)
    root = _root(pg, dst, group_dst)
    _check_root_list(pg, root, gather_list, what, "destination", "gather_list")
    if pg.rank() == root:
        _like(gather_list, tensor, what, "gather_list")
    nccl = _on_nccl(pg, tensor, what)
    _agree(pg, what, tensor, what)
    if nccl:
        return nccl_ops.gather(pg, tensor, gather_list, root, async_op)
    array, rows = _gathered(pg, tensor)
    dtype = tensor.detach().numpy().dtype
    if pg.rank() != root:
        return _run(pg, [pg.comm.Igather(array, None, root=root)], None, async_op, what)
    return _run(pg, [pg.comm.Igather(array, rows, root=root)], lambda: _write_rows(gather_list, rows, dtype),
                async_op, what, gather_list)


@_staged("tensor")
def scatter(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None):
    """``scatter_list[r]`` of rank ``src`` into rank r's ``tensor``."""
    what = "scatter"
    pg = resolve(group)
    root = _root(pg, src, group_src)
    _check_root_list(pg, root, scatter_list, what, "source", "scatter_list")
    if pg.rank() == root:
        _like(scatter_list, tensor, what, "scatter_list", "output")
    nccl = _on_nccl(pg, tensor, what)
    _agree(pg, what, tensor, what)
    if nccl:
        return nccl_ops.scatter(pg, tensor, scatter_list, root, async_op)
    array, write_back = _buffer(tensor, reducing=False)
    send = np.stack([_buffer(t, reducing=False)[0] for t in scatter_list]) if pg.rank() == root else None
    return _run(pg, [pg.comm.Iscatter(send, array, root=root)], write_back, async_op, what, [tensor])


@_staged("output")
def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False):
    """Rank r sends its input's j-th chunk (of dim 0) to rank j, which puts it at its output's r-th chunk.

    Without split sizes the chunks are equal; otherwise they are ``input_split_sizes`` rows (sent) and
    ``output_split_sizes`` rows (received). The ranks check that they agree on the dtype and that each sends every
    other as many bytes as that one expects (`check_pairs`), RuntimeError otherwise: MPI would leave part of an
    output unwritten, or write past it."""
    what = "all_to_all_single"
    pg = resolve(group)
    size = pg.size()
    sent = list(input_split_sizes) if input_split_sizes else [input.shape[0] // size] * size
    received = list(output_split_sizes) if output_split_sizes else [output.shape[0] // size] * size
    _one_dtype([output, input], what)
    if sum(sent) != input.shape[0] or sum(received) != output.shape[0] or \
            input.numel() * output.shape[0] != output.numel() * input.shape[0]:
        raise ValueError(f"{what}: split sizes must add up to dim 0 of the input ({input.shape[0]}) and of the "
                         f"output ({output.shape[0]}), whose rows must be alike (input {list(input.shape)}, output "
                         f"{list(output.shape)}, sending {sent} rows, receiving {received})")
    if _on_nccl(pg, input, what):
        _agree(pg, what, input, what, shape=False)
        return nccl_ops.all_to_all_single(pg, output, input, sent, received, async_op)
    _agree(pg, what, input, what, shape=False)
    row = input.numel() // max(input.shape[0], 1) if input.ndim else 1
    sent, received = [n * row for n in sent], [n * row for n in received]
    check_pairs(pg, [n * input.element_size() for n in sent], [n * input.element_size() for n in received], what)
    array, _ = _buffer(input, reducing=False)
    out, write_back = _buffer(output, reducing=False)
    request = pg.comm.Ialltoallv([array.reshape(-1), (sent, _offsets(sent))],
                                 [out.reshape(-1), (received, _offsets(received))])
    return _run(pg, [request], write_back, async_op, what, [output])


def _offsets(counts):
    return [int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]])]


@members_only
def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    """Wait until every rank of the group has called barrier; RuntimeError after ``timeout`` (a timedelta or
    seconds; None: the group's timeout)."""
    pg = resolve(group)
    seconds = None if timeout is None else _seconds(timeout)
    return _run(pg, [pg.comm.Ibarrier()], None, async_op, "barrier", timeout=seconds)


def _p2p(tensor, peer, group, tag, what, sending):
    pg = resolve(group)
    array, write_back = _buffer(tensor, reducing=False)
    if sending:
        return pg, pg.comm.Isend(array, dest=pg.group_rank(peer), tag=tag), None
    source = mpi().ANY_SOURCE if peer is None else pg.group_rank(peer)
    return pg, pg.comm.Irecv(array, source=source, tag=tag), write_back


def _nccl_p2p(tensor, peer, group, what, sending, async_op):
    """A point-to-point op through NCCL when ``tensor`` goes there (else None): queued on the stream, with a
    `nccl_ops.NcclWork` for ``async_op``; (work, group rank of the peer)."""
    pg = resolve(group)
    if not _on_nccl(pg, tensor, what):
        return None
    if peer is None:  # NCCL has no receive from any rank: torch's ProcessGroupNCCL raises this
        raise NotImplementedError("ProcessGroupNCCL does not support recvAnysource")
    peer = pg.group_rank(peer)
    return (nccl_ops.send if sending else nccl_ops.recv)(pg, tensor, peer, async_op), pg.ranks[peer]


@_staged()
def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Send ``tensor`` to rank ``dst`` (which calls ``recv``). Through NCCL (CUDA tensors) it is queued on the
    current stream; ``tag`` is ignored there, as in torch."""
    if _nccl_p2p(tensor, dst, group, "send", True, False) is not None:
        return
    pg, request, _ = _p2p(tensor, dst, group, tag, "send", True)
    wait(request, pg.timeout, "send")


@_staged("tensor")
def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receive into ``tensor`` from rank ``src`` (any rank when None: not through NCCL, which raises
    NotImplementedError as torch's does); returns the sender's rank."""
    done = _nccl_p2p(tensor, src, group, "recv", False, False)
    if done is not None:
        return done[1]
    pg, request, write_back = _p2p(tensor, src, group, tag, "recv", False)
    status = mpi().Status()
    wait(_StatusRequest(request, status), pg.timeout, "recv")
    _check_received(tensor, status)
    write_back()
    return pg.ranks[status.Get_source()]


class _StatusRequest:
    """A request whose Test fills ``status``, so recv can learn the sender and the message size."""

    def __init__(self, request, status):
        self.request, self.status = request, status

    def Test(self):  # noqa: N802  (mpi4py's names, which mpi_backend.wait calls)
        return self.request.Test(self.status)

    def Wait(self):  # noqa: N802
        return self.request.Wait(self.status)


def _check_received(tensor, status):
    got = status.Get_count(mpi().BYTE)
    expected = tensor.numel() * tensor.element_size()
    if got != expected:
        raise RuntimeError(f"recv: a message of {got} bytes arrived for a tensor of {expected} bytes "
                           f"({tensor.dtype}{list(tensor.shape)})")


@_staged()
def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """``send`` without waiting: returns a `Work`."""
    done = _nccl_p2p(tensor, dst, group, "isend", True, True)
    if done is not None:
        return done[0]
    pg, request, _ = _p2p(tensor, dst, group, tag, "isend", True)
    return Work([request], None, pg.timeout, "isend", [tensor])


@_staged("tensor")
def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """``recv`` without waiting: returns a `Work` (its ``wait()`` writes the tensor)."""
    done = _nccl_p2p(tensor, src, group, "irecv", False, True)
    if done is not None:
        return done[0]
    pg, request, write_back = _p2p(tensor, src, group, tag, "irecv", False)
    status = mpi().Status()
    return Work([_StatusRequest(request, status)], lambda: (_check_received(tensor, status), write_back()),
                pg.timeout, "irecv", [tensor])
