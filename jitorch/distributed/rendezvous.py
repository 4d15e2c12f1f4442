"""The env:// and tcp:// rendezvous: several MPI jobs (one per node, or one per process) join into one world.

MPI itself connects the jobs, through its dynamic process management: the job holding rank 0 opens an MPI
port (``MPI.Open_port``) and accepts the other jobs one at a time (``Comm.Accept``); each of them connects
(``Comm.Connect``), and the two sides merge into one communicator (``Intercomm.Merge``), which accepts the next.
The merged world is finally ordered by each process's ``RANK``.

The only thing that travels outside MPI is the port's name: rank 0 serves it over TCP at
``MASTER_ADDR:MASTER_PORT`` (as torch's TCPStore serves its keys), and each job's first process reads it. The
server sends, and reads nothing; a reader accepts only this module's header and a short printable name.

Each job must have been started by ``mpiexec`` (``jitorchrun`` starts one per node). Processes started any
other way are MPI "singletons", and MPICH cannot connect two of them: every singleton calls its world
"singinit", so MPICH takes the second for a process it already has ("Local and remote groups in
MPI_Intercomm_create must not contain the same processes", pmodels/mpich#7805, measured with MPICH 5.0.2).
"""

from __future__ import annotations

import socket
import threading
import time

from .mpi_backend import broken, mpi

MAGIC = b"JITORCH-RDZV1"
MAX_NAME = 4096  # bytes of an MPI port name a reader accepts (MPI_MAX_PORT_NAME is 1024 in MPICH)
SINGLETON_ERROR = (
    "jitorch.distributed: a world of {size} processes cannot be formed from processes that mpiexec did not "
    "start: MPICH cannot connect two such 'singleton' processes (both name their world 'singinit', "
    "pmodels/mpich#7805). Start the processes with the launcher, which runs one mpiexec per node and joins them "
    "through env:// (jitorchrun --nnodes N --node-rank K --master-addr HOST --nproc-per-node P script.py), or "
    "start each process with 'mpiexec -n 1 python script.py' and RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set.")


class PortServer:
    """Serves ``name`` (an MPI port) and the world's size to TCP clients at ``port``, one per `next_turn`: MPICH
    mixes up connections that reach one port together, so each job connects only once the one before it has
    joined (the others wait in the listening queue)."""

    def __init__(self, name, world_size, port):
        self.payload = b"%s %d %d " % (MAGIC, world_size, len(name)) + name.encode("ascii")
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind(("", port))  # every interface, as torch's TCPStore listens
        except OSError as error:
            self.listener.close()
            raise RuntimeError(f"jitorch.distributed: rank 0 cannot serve the rendezvous at port {port}: {error} "
                               "(choose another MASTER_PORT)") from None
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.closed = False
        self.turn = threading.Semaphore(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.closed:
            if not self.turn.acquire(timeout=0.2):
                continue
            client = None
            while client is None and not self.closed:
                try:
                    client, _ = self.listener.accept()
                except (socket.timeout, OSError):
                    continue
            if client is None:
                return
            with client:
                try:
                    client.sendall(self.payload)
                except OSError:
                    self.turn.release()  # that reader retries; the next may go

    def next_turn(self):
        """Let the next job read the port: the one before has joined."""
        self.turn.release()

    def close(self):
        self.closed = True
        self.thread.join()
        self.listener.close()


def fetch_port(addr, port, world_size, deadline):
    """The MPI port name rank 0 serves at ``addr:port``, retried until ``deadline`` (rank 0 may start later)."""
    last = None
    while time.monotonic() < deadline:
        try:
            # the server answers when this job's turn comes: wait for it until the deadline
            with socket.create_connection((addr, port), timeout=max(0.1, deadline - time.monotonic())) as conn:
                data = _read_all(conn, len(MAGIC) + 2 * 21 + MAX_NAME)
            return _parse(data, world_size, addr, port)
        except OSError as error:
            last = error
            time.sleep(0.1)
    raise RuntimeError(f"jitorch.distributed: no rendezvous at {addr}:{port} before the timeout (rank 0 serves it; "
                       f"is MASTER_ADDR/MASTER_PORT right, and did rank 0 start?): {last}")


def _read_all(conn, limit):
    chunks, size = [], 0
    while size <= limit:
        chunk = conn.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _parse(data, world_size, addr, port):
    parts = data.split(b" ", 3)
    bad = RuntimeError(f"jitorch.distributed: {addr}:{port} is not a jitorch rendezvous (another service at "
                       "MASTER_PORT?)")
    if len(parts) != 4 or parts[0] != MAGIC or not parts[1].isdigit() or not parts[2].isdigit():
        raise bad
    size, length, name = int(parts[1]), int(parts[2]), parts[3]
    if length > MAX_NAME or len(name) != length or not name.isascii() or not name.decode().isprintable():
        raise bad
    if size != world_size:
        raise RuntimeError(f"jitorch.distributed: rank 0 at {addr}:{port} forms a world of {size} processes, this "
                           f"process was told WORLD_SIZE={world_size}")
    return name.decode()


def join(part, rank, world_size, addr, port, timeout):
    """One intracommunicator of ``world_size`` processes ordered by ``rank``, from MPI jobs each calling this
    with its own communicator ``part`` (MPI_COMM_WORLD of its mpiexec); RuntimeError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    ranks = part.allgather(rank)
    part = part.Split(0, rank)  # the job's lowest rank leads it; in rank 0's job, rank 0 does
    holds_zero = 0 in ranks
    server, name = None, ""
    try:
        if holds_zero:
            if part.Get_rank() == 0:
                name = mpi().Open_port()
                server = PortServer(name, world_size, port)
            comm = part
        else:
            if part.Get_rank() == 0:
                name = fetch_port(addr, port, world_size, deadline)
            comm = _within(deadline, timeout, lambda: part.Connect(name, root=0), world_size, part.Get_size())
            comm = _merged(comm, high=True)
        while comm.Get_size() < world_size:
            inter = _within(deadline, timeout, lambda: comm.Accept(name, root=0), world_size, comm.Get_size())
            comm = _merged(inter, high=False)
            if server is not None:
                server.next_turn()
        if comm.Get_size() > world_size:
            raise RuntimeError(f"jitorch.distributed: {comm.Get_size()} processes joined a world of {world_size}")
        everyone = sorted(comm.allgather(rank))
        if everyone != list(range(world_size)):
            raise RuntimeError(f"jitorch.distributed: the joined processes' RANKs are {everyone}, not each of "
                               f"0..{world_size - 1} once")
        return comm.Split(0, rank)
    finally:
        if server is not None:
            server.close()
            mpi().Close_port(name)


def _merged(inter, high):
    comm = inter.Merge(high=high)
    inter.Free()
    return comm


def _within(deadline, timeout, call, world_size, joined):
    """``call()`` (a blocking MPI connect or accept) in a helper thread, RuntimeError past ``deadline``: MPI's
    accept has no timeout of its own. After a timeout the helper stays blocked, the group is not formed, and
    MPI aborts at exit."""
    result, done = [], threading.Event()

    def run():
        try:
            result.append(call())
        except Exception as error:  # raised again by the waiting thread
            result.append(error)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        broken()
        raise RuntimeError(f"jitorch.distributed: the rendezvous timed out after {timeout:.0f} s with {joined} of "
                           f"{world_size} processes joined")
    if isinstance(result[0], Exception):
        raise RuntimeError(f"jitorch.distributed: the rendezvous failed in MPI: {result[0]}") from result[0]
    return result[0]
