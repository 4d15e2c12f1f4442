"""torch.distributed's collectives on CUDA tensors, run by NCCL (`nccl`) for process groups of backend "nccl".

A group's communicator on a device is made at its first collective there, as torch makes it: rank 0 makes an
``ncclUniqueId``, its 128 bytes go to the other ranks through the group's own communicator (MPI's broadcast, as
raw bytes), and every rank calls ``ncclCommInitRank``. Each collective is queued on the current jitorch CUDA
stream with the tensors' own memory (a non-contiguous tensor goes through a contiguous copy, written back on the
same stream), and the host goes on. `NcclWork` (``async_op=True``) holds a CUDA event recorded after it.

jitorch's caller (`collectives`) has checked the arguments, and compared the ranks' calls (collective, dtype,
shape) with one small all-reduce on the group's MPI communicator, as for CPU tensors; `all_to_all_single` also
compares the byte counts each pair of ranks exchanges. A rank that dies or never calls makes the others raise
after the group's timeout: in that comparison, or (past it) when the watchdog aborts the communicator.

The real library's collectives run only on a GPU machine (``python -m jitorch.cuda.selftest``); the test suite
runs this module's logic against a fake NCCL on its fake CUDA driver.
"""

from __future__ import annotations

import time

import numpy as np

from .. import cuda, empty
from ..runtime import cuda_driver
from . import nccl
from .mpi_backend import check_pairs, wait

_watchdog = nccl.Watchdog(lambda index: cuda_driver.activate(index), lambda: cuda.Event())


class NcclWork:
    """A collective queued on a CUDA stream (``async_op=True``): ``wait()`` blocks until it has finished on the
    device (the event recorded after it), then raises its communicator's error: the one the watchdog aborted it
    for, or an asynchronous error NCCL reports now (the communicator is aborted then)."""

    def __init__(self, pending, result):
        self._pending, self._comm, self._result = pending, pending.comm, list(result)

    def wait(self, timeout=None):
        """Block until the collective has finished (RuntimeError when it failed or timed out); returns True.
        A ``timeout`` shorter than the group's brings the watchdog's deadline for it forward."""
        if timeout is not None:
            seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
            self._pending.deadline = min(self._pending.deadline, time.monotonic() + seconds)
        self._comm.raise_if_broken()
        if not self._pending.done:
            # an abort (error, timeout) makes NCCL's kernels return, and this with them; should the watchdog see
            # the event complete meanwhile and a later collective record it again, this waits for that one too
            self._pending.event.synchronize()
        self._comm.raise_if_broken()
        self._comm.check_async(self._pending.what)
        return True

    def is_completed(self):
        return self._pending.done or self._pending.event.query()

    def is_success(self):
        return self.is_completed() and self._comm.error is None

    def result(self):
        """The output tensors."""
        self.wait()
        return self._result


def communicator(pg, device):
    """``pg``'s communicator on CUDA device ``device``, made by every rank at the group's first collective there."""
    comms = pg.nccl
    comm = comms.get(device)
    if comm is None:
        lib = nccl.library()
        uid = np.zeros(nccl.UNIQUE_ID_BYTES, np.uint8)
        if pg.rank() == 0:
            uid[:] = np.frombuffer(lib.unique_id(), np.uint8)
        if pg.size() > 1:
            wait(pg.comm.Ibcast(uid, root=0), pg.timeout, "NCCL communicator setup (broadcast of the unique id)")
        comm = comms[device] = nccl.init_rank(lib, uid.tobytes(), pg.size(), pg.rank(), device, pg.timeout,
                                              cuda_driver.activate)
    return comm


def destroy(pg):
    """Free ``pg``'s communicators, once their queued work has finished (the watchdog ends it meanwhile, if it
    fails or times out)."""
    for comm in pg.nccl.values():
        for event in _watchdog.events(comm):
            event.synchronize()
        _watchdog.forget(comm)
        comm.destroy()
    pg.nccl.clear()


def _dtype_code(tensor, what, reducing):
    """The ncclDataType_t of ``tensor``'s dtype; None when NCCL has none (moved as bytes, never reduced)."""
    name = str(tensor.dtype).removeprefix("jitorch.")
    code = nccl.DTYPES.get(name)
    if code is None and reducing:
        raise TypeError(f"{what}: NCCL cannot reduce {tensor.dtype} tensors (it has int8, uint8, int32, uint32, "
                        "int64, uint64, float16, bfloat16, float32, float64)")
    return code


def _op_code(op, tensor):
    """The ncclRedOp_t of ReduceOp ``op``; on bool tensors SUM is MAX (or) and PRODUCT is MIN (and), as in torch."""
    if op.value not in nccl.OPS:
        raise ValueError(f"NCCL has no reduction {op.value}")
    if str(tensor.dtype) == "jitorch.bool":
        return nccl.OPS[{"SUM": "MAX", "PRODUCT": "MIN"}.get(op.value, op.value)]
    return nccl.OPS[op.value]


def _elements(tensor, code):
    """(count, datatype) moving ``tensor``: its elements, or its bytes when NCCL has no such dtype."""
    return (tensor.numel(), code) if code is not None else (tensor.numel() * tensor.element_size(), nccl.UINT8)


class _Call:
    """The buffers of one collective: `dense` gives a tensor NCCL can use in place (its own memory when
    contiguous), `finish` writes staged outputs back; both on the current stream."""

    def __init__(self):
        self.write_back, self.keep = [], []

    def dense(self, tensor, output):
        buffer = tensor if tensor.is_contiguous() else tensor.contiguous()
        self.keep.append(buffer)
        if output:
            self.write_back.append((tensor, buffer))
        return buffer

    def finish(self):
        for tensor, buffer in self.write_back:
            if buffer is not tensor:
                tensor.detach().copy_(buffer)
            tensor._bump_version()


def _device(tensors, what):
    index = tensors[0].device.index
    for t in tensors[1:]:
        if t.device.type != "cuda" or t.device.index != index:
            raise RuntimeError(f"{what}: NCCL needs every tensor on one CUDA device, got {tensors[0].device} and "
                               f"{t.device}")
    return index


def _issue(pg, tensors, what, queue, call, async_op, result):
    """Queue ``queue(comm, stream)``'s NCCL calls on the current stream of the tensors' device, then `call`'s
    write-backs; the watchdog follows an event recorded after them. Returns an `NcclWork` for ``async_op``."""
    device = _device(tensors, what)
    comm = communicator(pg, device)
    cuda_driver.activate(device)
    stream = cuda.current_stream(device)
    queue(comm, int(stream.handle))
    call.finish()
    event = _watchdog.event(device)
    event.record(stream)
    pending = _watchdog.watch(comm, event, what, call.keep)
    return NcclWork(pending, result) if async_op else None


def _group(comm, calls):
    """NCCL calls fused between ncclGroupStart and ncclGroupEnd (point-to-point exchanges that must not wait
    for each other one by one)."""
    comm.call("ncclGroupStart")
    try:
        for call in calls:
            call()
    finally:
        comm.call("ncclGroupEnd")


def all_reduce(pg, tensor, op, async_op):
    """In-place all-reduce of a CUDA tensor (AVG through ncclAvg)."""
    code = _dtype_code(tensor, "all_reduce", True)
    red = _op_code(op, tensor)
    call = _Call()
    buf = call.dense(tensor, True)

    def queue(comm, stream):
        comm.call("ncclAllReduce", buf.data_ptr(), buf.data_ptr(), buf.numel(), code, red, comm.handle, stream)
    return _issue(pg, [tensor], "all_reduce", queue, call, async_op, [tensor])


def broadcast(pg, tensor, root, async_op):
    """Group rank ``root``'s tensor into every rank's."""
    return _moving(pg, tensor, "broadcast", "ncclBroadcast", True, 2, root, async_op)


def _moving(pg, tensor, what, function, output, pointers, rank, async_op):
    """NCCL ``function`` moving one tensor's data (no reduction, so any dtype, as bytes where NCCL lacks it):
    (its pointer ``pointers`` times, count, datatype, ``rank``, comm, stream)."""
    call = _Call()
    buf = call.dense(tensor, output)
    count, code = _elements(buf, _dtype_code(buf, what, False))

    def queue(comm, stream):
        comm.call(function, *[buf.data_ptr()] * pointers, count, code, rank, comm.handle, stream)
    return _issue(pg, [tensor], what, queue, call, async_op, [tensor])


def reduce(pg, tensor, root, op, async_op):
    """Reduce into group rank ``root``'s tensor (the others' are left as they were)."""
    code = _dtype_code(tensor, "reduce", True)
    red = _op_code(op, tensor)
    call = _Call()
    buf = call.dense(tensor, pg.rank() == root)

    def queue(comm, stream):
        comm.call("ncclReduce", buf.data_ptr(), buf.data_ptr(), buf.numel(), code, red, root, comm.handle, stream)
    return _issue(pg, [tensor], "reduce", queue, call, async_op, [tensor])


def all_gather_into_tensor(pg, output, input, async_op):
    """Every rank's ``input`` in rank order into ``output``."""
    call = _Call()
    return _all_gather(pg, call, call.dense(input, False), call.dense(output, True), "all_gather_into_tensor",
                       [input, output], async_op, [output])


def all_gather(pg, tensor_list, tensor, async_op):
    """Every rank's ``tensor`` into ``tensor_list``: gathered into one buffer, copied out on the stream."""
    call = _Call()
    rows = empty((pg.size(), *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    call.keep.append(rows)
    call.write_back += [(t, rows[i]) for i, t in enumerate(tensor_list)]
    return _all_gather(pg, call, call.dense(tensor, False), rows, "all_gather", [tensor, *tensor_list], async_op,
                       tensor_list)


def _all_gather(pg, call, src, out, what, tensors, async_op, result):
    count, code = _elements(src, _dtype_code(src, what, False))

    def queue(comm, stream):
        comm.call("ncclAllGather", src.data_ptr(), out.data_ptr(), count, code, comm.handle, stream)
    return _issue(pg, tensors, what, queue, call, async_op, result)


def reduce_scatter_tensor(pg, output, input, op, async_op):
    """Reduce ``input`` over the ranks; rank r gets its r-th chunk in ``output``."""
    code = _dtype_code(input, "reduce_scatter_tensor", True)
    red = _op_code(op, input)
    call = _Call()
    src, out = call.dense(input, False), call.dense(output, True)

    def queue(comm, stream):
        comm.call("ncclReduceScatter", src.data_ptr(), out.data_ptr(), out.numel(), code, red, comm.handle, stream)
    return _issue(pg, [input, output], "reduce_scatter_tensor", queue, call, async_op, [output])


def _bytes_of(tensor):
    """(address, byte count) of a dense tensor."""
    return tensor.data_ptr(), tensor.numel() * tensor.element_size()


def _exchange(pg, what, sends, recvs, tensors, call, async_op, result):
    """Point-to-point transfers in one NCCL group: ``sends``/``recvs`` are (group rank, address, bytes)."""
    def queue(comm, stream):
        calls = [lambda p=p, a=a, n=n: comm.call("ncclSend", a, n, nccl.UINT8, p, comm.handle, stream)
                 for p, a, n in sends]
        calls += [lambda p=p, a=a, n=n: comm.call("ncclRecv", a, n, nccl.UINT8, p, comm.handle, stream)
                  for p, a, n in recvs]
        _group(comm, calls)
    return _issue(pg, tensors, what, queue, call, async_op, result)


def gather(pg, tensor, gather_list, root, async_op):
    """Every rank's ``tensor`` into ``gather_list`` on group rank ``root`` (sends and receives in one group)."""
    call = _Call()
    src = call.dense(tensor, False)
    me = pg.rank()
    if me != root:
        return _exchange(pg, "gather", [(root, *_bytes_of(src))], [], [tensor], call, async_op, [])
    outs = [call.dense(t, True) for t in gather_list]
    recvs = [(r, *_bytes_of(o)) for r, o in enumerate(outs) if r != me]
    sends = [(me, *_bytes_of(src))]
    recvs.append((me, *_bytes_of(outs[me])))
    return _exchange(pg, "gather", sends, recvs, [tensor, *gather_list], call, async_op, gather_list)


def scatter(pg, tensor, scatter_list, root, async_op):
    """``scatter_list[r]`` of group rank ``root`` into rank r's ``tensor``."""
    call = _Call()
    out = call.dense(tensor, True)
    me = pg.rank()
    recvs = [(root, *_bytes_of(out))]
    if me != root:
        return _exchange(pg, "scatter", [], recvs, [tensor], call, async_op, [tensor])
    sends = [(r, *_bytes_of(call.dense(t, False))) for r, t in enumerate(scatter_list)]
    return _exchange(pg, "scatter", sends, recvs, [tensor, *scatter_list], call, async_op, [tensor])


def all_to_all_single(pg, output, input, sent_rows, received_rows, async_op):
    """Rank r's input rows ``sent_rows[j]`` go to rank j, which puts them at its r-th output chunk (rows given as
    counts per rank)."""
    call = _Call()
    src, out = call.dense(input, False), call.dense(output, True)
    row_in = input.numel() // max(input.shape[0], 1) * input.element_size() if input.ndim else input.element_size()
    row_out = output.numel() // max(output.shape[0], 1) * output.element_size() if output.ndim else \
        output.element_size()
    sends, recvs = [], []
    start_in = start_out = 0
    for peer in range(pg.size()):
        sends.append((peer, src.data_ptr() + start_in, sent_rows[peer] * row_in))
        recvs.append((peer, out.data_ptr() + start_out, received_rows[peer] * row_out))
        start_in += sent_rows[peer] * row_in
        start_out += received_rows[peer] * row_out
    check_pairs(pg, [n for _, _, n in sends], [n for _, _, n in recvs], "all_to_all_single")
    return _exchange(pg, "all_to_all_single", sends, recvs, [input, output], call, async_op, [output])


def send(pg, tensor, peer, async_op):
    """``tensor`` to group rank ``peer`` (ncclSend)."""
    return _moving(pg, tensor, "send", "ncclSend", False, 1, peer, async_op)


def recv(pg, tensor, peer, async_op):
    """Into ``tensor`` from group rank ``peer`` (ncclRecv; NCCL has no receive from any rank)."""
    return _moving(pg, tensor, "recv", "ncclRecv", True, 1, peer, async_op)
