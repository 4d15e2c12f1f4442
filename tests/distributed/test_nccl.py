"""The NCCL backend: its logic on a fake NCCL (tests/distributed/fake_nccl.py) over the fake CUDA driver, with
ranks as threads (one fake device each), every collective against NumPy; and the real libnccl's ABI where the
nvidia-nccl wheel is installed (no GPU needed for those calls). The real collectives run only on a GPU machine:
``python -m jitorch.cuda.selftest`` checks them there."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import jitorch as jt
import jitorch.distributed as dist
from jitorch.distributed import collectives, nccl, nccl_ops, threads

from . import fake_nccl

ROOT = Path(__file__).parents[2]
ReduceOp = dist.ReduceOp
NUMPY_OPS = {ReduceOp.SUM: np.sum, ReduceOp.PRODUCT: np.prod, ReduceOp.MIN: np.min, ReduceOp.MAX: np.max,
             ReduceOp.AVG: np.mean}


@pytest.fixture
def fake(monkeypatch):
    _, fake = fake_nccl.install(monkeypatch, devices=4)
    with nccl.use_library(fake.library()):
        yield fake
    assert not fake.errors, fake.errors


def data(rank, shape, dtype=np.float32):
    """Rank ``rank``'s input: small integers, so sums and products are exact in every dtype."""
    return np.random.default_rng(rank).integers(1, 4, shape).astype(dtype)


def cuda(array, rank):
    return jt.from_numpy(np.ascontiguousarray(array)).to(f"cuda:{rank}")


def host(tensor):
    return tensor.cpu().numpy()


def run(size, body, **options):
    """``body(pg, rank, size)`` on ``size`` thread ranks, each on its own fake device."""
    def rank_body(pg):
        jt.cuda.set_device(pg.rank())
        try:
            return body(pg, pg.rank(), size)
        finally:
            dist.destroy_process_group(pg)
    return threads.run(size, rank_body, timeout=120, **options)


def settled(comm):
    """Whether the watchdog has seen this rank's collectives done (within 10 s)."""
    deadline = time.monotonic() + 10
    while nccl_ops._watchdog.events(comm) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not nccl_ops._watchdog.events(comm)


def calls(fake, name, rank=None):
    return [args for thread, n, args in fake.calls if n == name and (rank is None or thread == f"rank-{rank}")]


def every_collective(pg, r, n):
    """Each collective on CUDA tensors against NumPy, from this rank; returns how many were checked."""
    checks = 0
    for dtype in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.int64, np.uint8, np.int8):
        for op, reduce in NUMPY_OPS.items():
            if op is ReduceOp.AVG and not np.issubdtype(np.dtype(dtype), np.floating) and dtype is not \
                    ml_dtypes.bfloat16:
                continue
            x = cuda(data(r, (3, 5), dtype), r)
            dist.all_reduce(x, op=op, group=pg)
            inputs = np.stack([data(k, (3, 5), np.float64) for k in range(n)])
            want = reduce(inputs, axis=0).astype(dtype).astype(np.float64)  # (NumPy 1.26 compares no bfloat16)
            np.testing.assert_allclose(host(x).astype(np.float64), want, rtol=1e-2)
            checks += 1
    flags = cuda(np.array([r == 0, False, True]), r)
    dist.all_reduce(flags, group=pg)  # SUM of booleans is their or, as in torch
    assert host(flags).tolist() == [True, False, True]
    both = cuda(np.array([True, r == 0]), r)
    dist.all_reduce(both, op=ReduceOp.PRODUCT, group=pg)
    assert host(both).tolist() == [True, n == 1]
    # broadcast, from a rank other than 0, also of a dtype NCCL lacks (moved as bytes)
    for dtype in (np.float32, np.int16):
        x = cuda(data(r, (4,), dtype) * (r + 1), r)
        dist.broadcast(x, src=n - 1, group=pg)
        np.testing.assert_array_equal(host(x), data(n - 1, (4,), dtype) * n)
    # reduce into the last rank; the others keep their tensor
    x = cuda(data(r, (6,)), r)
    dist.reduce(x, dst=n - 1, op=ReduceOp.MAX, group=pg)
    expected = np.max([data(k, (6,)) for k in range(n)], 0) if r == n - 1 else data(r, (6,))
    np.testing.assert_array_equal(host(x), expected)
    # all_gather into a list and into one tensor
    outs = [cuda(np.zeros((2, 3), np.float32), r) for _ in range(n)]
    dist.all_gather(outs, cuda(data(r, (2, 3)), r), group=pg)
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(host(o), data(k, (2, 3)))
    out = cuda(np.zeros((2 * n, 3), np.float32), r)
    dist.all_gather_into_tensor(out, cuda(data(r, (2, 3)), r), group=pg)
    np.testing.assert_array_equal(host(out), np.concatenate([data(k, (2, 3)) for k in range(n)]))
    # reduce_scatter_tensor: rank r gets the r-th chunk of the sum (and of the average)
    for op in (ReduceOp.SUM, ReduceOp.AVG):
        out = cuda(np.zeros(3, np.float32), r)
        dist.reduce_scatter_tensor(out, cuda(data(r, (3 * n,)), r), op=op, group=pg)
        np.testing.assert_allclose(host(out), NUMPY_OPS[op]([data(k, (3 * n,)) for k in range(n)], 0)[3 * r:3 * r + 3])
    # gather into rank 0, scatter from the last rank
    gathered = [cuda(np.zeros(4, np.float32), r) for _ in range(n)] if r == 0 else None
    dist.gather(cuda(data(r, (4,)), r), gathered, dst=0, group=pg)
    if r == 0:
        for k, g in enumerate(gathered):
            np.testing.assert_array_equal(host(g), data(k, (4,)))
    out = cuda(np.zeros(5, np.int64), r)
    pieces = [cuda(np.full(5, 10 * k, np.int64), r) for k in range(n)] if r == n - 1 else None
    dist.scatter(out, pieces, src=n - 1, group=pg)
    np.testing.assert_array_equal(host(out), np.full(5, 10 * r))
    # all_to_all_single: equal chunks, then uneven split sizes (rank r sends k + 1 rows to rank k)
    source = np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3) + 100 * r
    out = cuda(np.zeros((2 * n, 3), np.float32), r)
    dist.all_to_all_single(out, cuda(source, r), group=pg)
    expected = np.concatenate([(np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3) + 100 * k)[2 * r:2 * r + 2]
                               for k in range(n)])
    np.testing.assert_array_equal(host(out), expected)
    sent = [k + 1 for k in range(n)]
    rows = np.arange(sum(sent) * 2, dtype=np.float32).reshape(-1, 2) + 1000 * r
    out = cuda(np.zeros((n * (r + 1), 2), np.float32), r)
    dist.all_to_all_single(out, cuda(rows, r), output_split_sizes=[r + 1] * n, input_split_sizes=sent, group=pg)
    start = sum(sent[:r])
    expected = np.concatenate([(np.arange(sum(sent) * 2, dtype=np.float32).reshape(-1, 2) + 1000 * k)
                               [start:start + r + 1] for k in range(n)])
    np.testing.assert_array_equal(host(out), expected)
    # send and recv around a ring (even ranks send first, odd ones receive first), then isend/irecv
    if n > 1:
        right, left = (r + 1) % n, (r - 1) % n
        got = cuda(np.zeros(3, np.float32), r)
        if r % 2 == 0:
            dist.send(cuda(np.full(3, r, np.float32), r), right, group=pg)
            assert dist.recv(got, left, group=pg) == left
        else:
            assert dist.recv(got, left, group=pg) == left
            dist.send(cuda(np.full(3, r, np.float32), r), right, group=pg)
        np.testing.assert_array_equal(host(got), np.full(3, left))
        got = cuda(np.zeros(2, np.int32), r)
        works = [dist.isend(cuda(np.full(2, 7 * r, np.int32), r), right, group=pg), dist.irecv(got, left, group=pg)]
        for w in works:
            assert w.wait()
        np.testing.assert_array_equal(host(got), np.full(2, 7 * left))
    # async_op: a work handle whose wait() gives the finished result
    x = cuda(data(r, (8,)), r)
    work = dist.all_reduce(x, group=pg, async_op=True)
    assert work.wait() and work.is_completed() and work.is_success()
    np.testing.assert_array_equal(work.result()[0].cpu().numpy(), np.sum([data(k, (8,)) for k in range(n)], 0))
    return checks


@pytest.mark.parametrize("size", [2, 4])
def test_every_collective_matches_numpy(fake, size):
    assert run(size, every_collective) == [36] * size
    # one communicator per rank, from one unique id that rank 0 made and the group broadcast as bytes
    inits = calls(fake, "ncclCommInitRank")
    assert sorted(args[3] for args in inits) == list(range(size)) and {args[1] for args in inits} == {size}
    uids = calls(fake, "ncclGetUniqueId")
    assert len(uids) == 1 and calls(fake, "ncclGetUniqueId", rank=0) == uids
    assert len({bytes(args[2]) for args in inits}) == 1
    # the communicators were destroyed with their groups
    assert len(calls(fake, "ncclCommDestroy")) == size


def test_arguments_reach_nccl_as_its_c_prototypes_take_them(fake):
    """Pointers, counts and the dtype and op maps, the communicator, and the current stream (not the default one
    when a stream is current), with an event recorded after the call on that stream."""
    streams = {}

    def body(pg, r, n):
        s = jt.cuda.Stream()
        streams[r] = int(s.handle)
        x = cuda(np.ones(6, ml_dtypes.bfloat16), r)
        flags = cuda(np.ones(3, bool), r)
        with jt.cuda.stream(s):
            work = dist.all_reduce(x, op=ReduceOp.AVG, group=pg, async_op=True)
            dist.all_reduce(flags, group=pg)
        work.wait()
        np.testing.assert_array_equal(host(x), np.ones(6, ml_dtypes.bfloat16))
        dist.all_reduce(cuda(np.ones(2, np.int16).view(np.float16), r), group=pg)  # the default stream
        return x.data_ptr(), flags.data_ptr(), int(pg.nccl[r].handle)

    pointers = run(2, body)
    for r, (x_ptr, flags_ptr, comm) in enumerate(pointers):
        bf16, flags, half = calls(fake, "ncclAllReduce", rank=r)
        assert bf16 == (x_ptr, x_ptr, 6, 9, 4, comm, streams[r])  # ncclBfloat16, ncclAvg
        assert flags == (flags_ptr, flags_ptr, 3, 1, 2, comm, streams[r])  # bool as ncclUint8, SUM as ncclMax
        assert half[2:5] == (2, 6, 0) and half[6] is None  # ncclFloat16, ncclSum, the legacy default stream


def test_point_to_point_exchanges_are_one_nccl_group(fake):
    def body(pg, r, n):
        out = cuda(np.zeros((n, 2), np.float32), r)
        dist.all_to_all_single(out, cuda(np.full((n, 2), r, np.float32), r), group=pg)
        np.testing.assert_array_equal(host(out), np.repeat(np.arange(n, dtype=np.float32), 2).reshape(n, 2))
    run(3, body)
    for r in range(3):
        names = [n for t, n, _ in fake.calls if t == f"rank-{r}" and n.startswith(("ncclGroup", "ncclSend", "ncclRecv"))]
        assert names == ["ncclGroupStart"] + ["ncclSend"] * 3 + ["ncclRecv"] * 3 + ["ncclGroupEnd"]
        # each send to peer p is 2 float32 (8 bytes) of this rank's input, as bytes (ncclUint8)
        assert sorted((a[1], a[2], a[3]) for a in calls(fake, "ncclSend", rank=r)) == [(8, 1, p) for p in range(3)]


def test_non_contiguous_tensors_go_through_a_contiguous_copy(fake):
    def body(pg, r, n):
        x = cuda(np.arange(12, dtype=np.float32).reshape(3, 4) + r, r).t()
        dist.all_reduce(x, group=pg)
        np.testing.assert_array_equal(host(x), (2 * np.arange(12, dtype=np.float32).reshape(3, 4) + 1).T)
    run(2, body)


def test_nccl_errors_abort_the_communicator_and_raise_on_every_later_use(fake):
    def body(pg, r, n):
        x = cuda(np.ones(4, np.float32), r)
        dist.all_reduce(x, group=pg)
        x.cpu()
        assert settled(pg.nccl[r])  # so the error shows with the next collective, whose wait() raises it
        fake.fail(pg.nccl[r].handle, fake_nccl.REMOTE)  # as when the network between the ranks failed
        work = dist.all_reduce(x, group=pg, async_op=True)
        with pytest.raises(RuntimeError, match=f"NCCL all_reduce failed on rank {r}: ncclRemoteError: fake NCCL: "
                                               "ncclRemoteError; the communicator was aborted"):
            work.wait()
        with pytest.raises(RuntimeError, match="ncclRemoteError"):
            dist.all_reduce(x, group=pg)
    run(2, body, group_timeout=30.0)
    assert len(calls(fake, "ncclCommAbort")) == 2 and not calls(fake, "ncclCommDestroy")


def test_a_rank_that_raises_or_dies_times_the_others_out_instead_of_hanging(fake):
    """A rank that raises before a collective leaves the others in the comparison of their calls, which raises
    after the group's timeout; one that dies inside a collective (here: never issues it, past the comparison, as
    DDP's buckets skip it) leaves them in NCCL, where the watchdog aborts the communicator after that timeout."""
    def body(pg, r, n):
        x = cuda(np.ones(4, np.float32), r)
        dist.all_reduce(x, group=pg)  # the communicator, on every rank
        host(x)
        if r == 1:
            with pytest.raises(ValueError):
                raise ValueError("this rank failed before its next collective")
            return None
        waited = []
        for started in (collectives.started_all_reduce, dist.all_reduce):
            start = time.monotonic()
            with pytest.raises(RuntimeError, match="all_reduce timed out after 1 s: a rank died, or did not call"):
                work = started(x, group=pg) if started is collectives.started_all_reduce else \
                    started(x, group=pg, async_op=True)
                work.wait()
            waited.append(time.monotonic() - start)
        assert pg.nccl[r].error is not None and "NCCL all_reduce timed out" in str(pg.nccl[r].error)
        return waited
    waited, _ = run(2, body, group_timeout=1.0)
    assert all(1.0 <= w < 10 for w in waited), waited
    assert len(calls(fake, "ncclCommAbort")) == 1 and len(calls(fake, "ncclAllReduce", rank=0)) == 2


def test_mismatched_calls_raise_on_every_rank_before_nccl_is_called(fake):
    """Shapes, dtypes, collectives and all_to_all_single's split sizes that differ between the ranks raise the
    MPI path's RuntimeError naming each rank's call, on every rank, at once (not after the group's 60 s timeout),
    before NCCL is called and before any output is written; the ranks' next matching call runs."""
    def body(pg, r, n):
        start = time.monotonic()
        x = cuda(np.full(2 + r, 5, np.float32), r)
        with pytest.raises(RuntimeError, match=r"^all_reduce: the ranks disagree on the collective or on the tensors' "
                                               r"dtype and shape: rank 0: all_reduce\(float32\[2\]\); rank 1: "
                                               r"all_reduce\(float32\[3\]\)$"):
            dist.all_reduce(x, group=pg)
        y = cuda(np.full((2, 3), 5, (np.float32, np.float64)[r]), r)
        with pytest.raises(RuntimeError, match=r"rank 0: broadcast\(float32\[2, 3\]\); rank 1: "
                                               r"broadcast\(float64\[2, 3\]\)$"):
            dist.broadcast(y, src=1, group=pg)
        rows = [cuda(np.zeros((2, 3), np.float32), r) for _ in range(n)]
        with pytest.raises(RuntimeError, match=r"rank 0: all_gather\(float32\[2, 3\]\); rank 1: "
                                               r"all_to_all_single\(float64\[\]\)$"):
            if r == 0:
                dist.all_gather(rows, cuda(np.ones((2, 3), np.float32), r), group=pg)
            else:
                dist.all_to_all_single(y, cuda(np.ones((2, 3)), r), group=pg)
        out = cuda(np.zeros((3, 2), np.float32), r)
        with pytest.raises(RuntimeError, match="^all_to_all_single: the ranks' split sizes do not pair up: rank 1 "
                                               "sends 8 bytes to rank 0, which receives 16; rank 1 sends 16 bytes "
                                               "to rank 1, which receives 8$"):
            dist.all_to_all_single(out, cuda(np.ones((3, 2), np.float32), r), output_split_sizes=[1 + r, 2 - r],
                                   input_split_sizes=[1, 2], group=pg)
        elapsed = time.monotonic() - start
        for t, fill in ((x, 5), (y, 5), (out, 0), *((row, 0) for row in rows)):
            assert (host(t) == fill).all()  # no output written
        dist.all_reduce(x[:2], group=pg)
        np.testing.assert_array_equal(host(x)[:2], [10, 10])
        return elapsed
    assert max(run(2, body, group_timeout=60.0)) < 30
    names = {name for _, name, _ in fake.calls}
    assert not names & {"ncclBroadcast", "ncclAllGather", "ncclSend", "ncclRecv"}, names
    assert len(calls(fake, "ncclAllReduce")) == 2  # the matching one only


def test_each_group_has_its_own_communicators(fake):
    def body(pg, r, n):
        for _ in range(3):
            dist.all_reduce(cuda(np.ones(1, np.float32), r), group=pg)
        return pg.nccl[r].handle
    handles = run(2, body) + run(2, body)
    assert len(set(handles)) == 4 and len(calls(fake, "ncclCommInitRank")) == 4
    assert len(calls(fake, "ncclGetUniqueId")) == 2


def test_reductions_nccl_lacks_raise_before_any_call(fake):
    def body(pg, r, n):
        with pytest.raises(TypeError, match="NCCL cannot reduce jitorch.int16 tensors"):
            dist.all_reduce(cuda(np.ones(2, np.int16), r), group=pg)
        with pytest.raises(ValueError, match="NCCL has no reduction BAND"):
            dist.all_reduce(cuda(np.ones(2, np.int32), r), op=ReduceOp.BAND, group=pg)
        # torch's ProcessGroupNCCL: NotImplementedError (a RuntimeError), as NCCL has no receive from any rank
        for receive in (dist.recv, dist.irecv):
            with pytest.raises(NotImplementedError, match="^ProcessGroupNCCL does not support recvAnysource$"):
                receive(cuda(np.ones(2, np.int32), r), group=pg)
    run(2, body)

    def alone(pg, r, n):  # gather's list is the root's alone: its check, before the others are waited for
        with pytest.raises(ValueError, match=r"^gather: Invalid usage of tensors with different dtypes: found "
                                             r"jitorch.float32 and jitorch.float64$"):  # torch's type
            dist.gather(cuda(np.ones(2, np.float32), r), [cuda(np.ones(2), r)], dst=0, group=pg)
    run(1, alone)
    assert not calls(fake, "ncclAllReduce") and not calls(fake, "ncclCommInitRank")


REAL_LIBRARY = """
import json
import importlib.metadata
import jitorch, jitorch.distributed
from jitorch.runtime import cuda_driver
loaded_at_import = "libnccl" in open("/proc/self/maps").read()
from jitorch.distributed import nccl
report = {"loaded_at_import": loaded_at_import}
try:
    lib = nccl.library()
except RuntimeError as error:
    report["unavailable"] = str(error)
else:
    wheels = [d.version for d in importlib.metadata.distributions()
              if (d.metadata["Name"] or "").startswith("nvidia-nccl-cu")]
    uids = [lib.unique_id() for _ in range(2)]
    report.update(origin=lib.origin, version=lib.version_string(), wheels=wheels, gpu=cuda_driver.available(),
                  errors=[lib.error_string(code) for code in range(9)], uids=[u.hex() for u in uids],
                  loaded="libnccl.so.2" in open("/proc/self/maps").read())
    try:
        comm = nccl.init_rank(lib, uids[0], 1, 0, 0, 60,
                              lambda d: cuda_driver.activate(d) if cuda_driver.available() else None)
        comm.destroy()
        report["init"] = "ok"
    except nccl.NcclError as error:
        report["init"] = [error.code, str(error)]
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def one_process():
    """The output of `REAL_LIBRARY` then `WORLD_OF_ONE`, run by one new process (its imports take seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "MPI_", "NCCL_"))}
    done = subprocess.run([sys.executable, "-c", REAL_LIBRARY + WORLD_OF_ONE], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(env, PYTHONPATH=str(ROOT), RANK="0", WORLD_SIZE="1"))
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_real_library_loads_at_first_use_and_answers_without_a_gpu(one_process):
    """The calls libnccl answers on any machine, through jitorch's prototypes: its version (the wheel's), the
    error strings, unique ids (128 bytes, new each time), and ncclCommInitRank's failure without a GPU."""
    report = json.loads(one_process[0])
    assert report["loaded_at_import"] is False
    if "unavailable" in report:  # no nvidia-nccl wheel here, nor a system libnccl: the error says so
        assert report["unavailable"].startswith("NCCL is not available: no libnccl.so.2 in an nvidia-nccl-cu12/cu13 "
                                                "wheel or on the system's library path")
        return
    assert report["loaded"]
    if "site-packages" in report["origin"]:
        assert report["origin"].endswith("nvidia/nccl/lib/libnccl.so.2") and report["version"] in report["wheels"]
    assert report["errors"][0] == "no error" and report["errors"][8] == "timeout"
    assert report["errors"][6] == "remote process exited or there was a network error"
    first, second = (bytes.fromhex(u) for u in report["uids"])
    assert len(first) == len(second) == 128 and first != second
    if report["gpu"]:
        assert report["init"] == "ok"
    else:  # NCCL's own check of the CUDA driver, reported with ncclGetLastError's message
        code, message = report["init"]
        assert code == 1 and message.startswith("NCCL error in ncclCommInitRank(rank 0 of 1, cuda:0): "
                                                "ncclUnhandledCudaError: unhandled cuda error"), message
        assert "Cuda failure" in message


def test_without_the_library_nccl_is_unavailable_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(nccl, "_loaded", {})
    monkeypatch.setattr(nccl, "candidates", lambda: [str(tmp_path / "libnccl.so.2")])
    assert not dist.is_nccl_available()
    with pytest.raises(RuntimeError, match="NCCL is not available: no libnccl.so.2 in an nvidia-nccl-cu12/cu13 "
                                           "wheel or on the system's library path"):
        dist.init_process_group("nccl")
    assert not dist.is_initialized()
    (tmp_path / "libnccl.so.2").write_bytes(b"not a library")
    monkeypatch.setattr(nccl, "_loaded", {})
    with pytest.raises(RuntimeError, match="NCCL is not available: libnccl.so.2 cannot be loaded: .*libnccl.so.2: file too short"):
        nccl.library()


def test_an_old_or_incomplete_library_is_refused(fake):
    functions = {name: getattr(fake, "_" + name) for name in nccl.SIGNATURES}
    fake.version = 20907
    with pytest.raises(RuntimeError, match="NCCL is not available: old is NCCL 2.9.7, jitorch needs 2.10 or newer"):
        nccl.Library.from_python(functions, "old")
    del functions["ncclReduceScatter"]
    with pytest.raises(RuntimeError, match="NCCL is not available: partial lacks ncclReduceScatter"):
        nccl.Library.from_python(functions, "partial")


WORLD_OF_ONE = """
import jitorch as jt, jitorch.distributed as dist
from tests.cuda import fake_driver
from tests.distributed.fake_nccl import FakeNccl
fake = FakeNccl(fake_driver.install_in_process())
with nccl.use_library(fake.library()):
    dist.init_process_group()
    x = jt.ones(3).to("cuda")  # uploads: no kernel to build
    dist.all_reduce(x)
    cpu = jt.ones(2)
    dist.all_reduce(cpu, op=dist.ReduceOp.MAX)
    print(dist.get_backend(), x.cpu().tolist(), cpu.tolist(), [n for _, n, _ in fake.calls if n != "ncclCommGetAsyncError"])
    dist.destroy_process_group()
    print([n for _, n, _ in fake.calls][-1], fake.errors)
    calls = len(fake.calls)
    dist.init_process_group("mpi")  # CUDA tensors through MPI, by copies in host memory
    x = jt.arange(4, dtype=jt.float32).to("cuda")
    work = dist.all_reduce(x, op=dist.ReduceOp.AVG, async_op=True)
    rows = [jt.zeros(2).to("cuda")]
    dist.all_gather(rows, jt.full((2,), 5.0).to("cuda"))
    work.wait()
    print(work.result()[0] is x, x.device, x.cpu().tolist(), rows[0].device, rows[0].cpu().tolist(),
          len(fake.calls) == calls)
"""


def test_a_world_of_one_picks_nccl_for_cuda_and_keeps_mpi_for_cpu_tensors_and_mpi_stages_cuda_tensors(one_process):
    lines = one_process[1:]
    # the CPU tensor went through MPI; the CUDA one through NCCL, after the communicator was made
    assert lines[0] == ("nccl [1.0, 1.0, 1.0] [1.0, 1.0] ['ncclGetVersion', 'ncclGetUniqueId', 'ncclCommInitRank', "
                        "'ncclAllReduce']"), lines
    assert lines[1] == "ncclCommDestroy []"
    assert lines[2] == "True cuda:0 [0.0, 1.0, 2.0, 3.0] cuda:0 [5.0, 5.0] True"


@pytest.mark.parametrize("ranks", [1, 2])
def test_the_gpu_selftests_nccl_check_on_the_fake(fake, ranks):
    from jitorch.cuda import selftest
    ok, detail = selftest.check_nccl(ranks, n=1 << 8)
    expected = 10 if ranks == 1 else 2 * 11
    assert ok, detail
    assert detail.startswith(f"NCCL 2.32.3, {ranks} rank(s): {expected}/{expected} collectives match NumPy; "
                             "all_reduce of 0.000977 MiB "), detail
    assert len(calls(fake, "ncclCommInitRank")) == ranks


def test_events_are_recorded_again_once_the_watchdog_saw_them_complete(fake):
    def body(pg, r, n):
        x = cuda(np.ones(4, np.float32), r)
        for _ in range(5):
            dist.all_reduce(x, group=pg)
            host(x)
            assert settled(pg.nccl[r])
        work = dist.all_reduce(x, group=pg, async_op=True)
        work.wait()
        assert work.is_completed() and settled(pg.nccl[r]) and work.is_completed()
        np.testing.assert_array_equal(host(x), np.full(4, 2.0 ** 6))
    run(2, body)
    # one event per rank served all six collectives (another may be made while the first is not yet seen done)
    assert fake.driver.calls.count("cuEventCreate") <= 4


def test_an_event_whose_communicator_is_forgotten_while_the_watchdog_queries_it_is_not_offered_again():
    """Regression (stop 33's CI): the watchdog put a destroyed communicator's event back in its free list when
    `forget` came while it queried the event outside its lock; a later collective recorded that stale event."""
    class Comm:
        device, error, handle, timeout = 0, None, 1, 30.0

        def check_async(self, what):
            pass

    class Event:
        def query(self):
            watchdog.forget(comm)  # the communicator is destroyed between the query and the bookkeeping
            return True

    watchdog = nccl.Watchdog(lambda index: None, lambda: "new event")
    comm = Comm()
    watchdog.watch(comm, Event(), "all_reduce", [])
    deadline = time.monotonic() + 10
    while watchdog.thread is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watchdog.thread is None and not watchdog.pending
    assert watchdog.free == {} and watchdog.event(0) == "new event"
