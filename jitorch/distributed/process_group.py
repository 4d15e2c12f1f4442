"""Process groups: which processes take part, who this one is, and the MPI communicator they share.

``init_process_group`` makes the default (world) group. Ranks come from MPI when ``mpiexec`` (or jitorch's
launcher, which runs it) started the processes, or from ``RANK``/``WORLD_SIZE`` for a single process.
"""

from __future__ import annotations

import datetime
import enum
import os

from .mpi_backend import mpi

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)  # torch's default for CPU backends


class ReduceOp(enum.Enum):
    """How a reduction combines the ranks' tensors (``dist.ReduceOp.SUM``, ...)."""

    SUM = "SUM"
    AVG = "AVG"
    PRODUCT = "PRODUCT"
    MIN = "MIN"
    MAX = "MAX"
    BAND = "BAND"
    BOR = "BOR"
    BXOR = "BXOR"


class ProcessGroup:
    """A set of ranks and their communicator: ``ranks`` are global ranks in group-rank order."""

    def __init__(self, comm, ranks, backend, timeout):
        self.id = len(_GROUPS)
        _GROUPS.append(self)
        self.comm = comm
        self.ranks = list(ranks)
        self.backend = backend
        self.timeout = timeout

    def rank(self):
        return self.comm.Get_rank()

    def size(self):
        return self.comm.Get_size()

    def group_rank(self, global_rank):
        """This group's rank of ``global_rank`` (ValueError when it is not a member)."""
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ValueError(f"Global rank {global_rank} is not part of group {self.ranks}") from None

    def __repr__(self):
        return f"ProcessGroup(backend={self.backend!r}, ranks={self.ranks})"


_GROUPS: list = []  # every group made in this process, by id (compiled graphs name groups by id)


def group_by_id(index):
    """The process group of id ``index`` (RuntimeError when it was destroyed)."""
    pg = _GROUPS[index] if 0 <= index < len(_GROUPS) else None
    if pg is None:
        raise RuntimeError(f"process group {index} does not exist (destroyed, or made in another process)")
    return pg


class GroupMember:
    """torch's markers: ``WORLD`` (the default group, set by init_process_group) and ``NON_GROUP_MEMBER``."""

    WORLD = None
    NON_GROUP_MEMBER = object()


class World:
    """torch's ``dist.group`` namespace: ``group.WORLD`` is the default group once it exists."""

    WORLD = None


def _launched_by_mpi():
    return any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))


def _env_int(name, given):
    if given is not None and given >= 0:
        return given
    if name not in os.environ:
        raise ValueError(f"Error initializing jitorch.distributed using env:// rendezvous: environment variable "
                         f"{name} expected, but not set")
    return int(os.environ[name])


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Join the default process group (torch's signature).

    ``backend``: None or "mpi" (CPU tensors through MPI), "gloo" (accepted for torch scripts: the same MPI
    engine), "nccl" (refused: jitorch has no NCCL backend yet). Only ``env://`` initialisation exists: under
    ``mpiexec`` MPI gives the ranks, which ``rank``/``world_size`` must agree with when given; otherwise a
    world of one process (``WORLD_SIZE=1``) is the only one MPI can form without a launcher.
    """
    if World.WORLD is not None:
        raise ValueError("trying to initialize the default process group twice!")
    name = "mpi" if backend is None else str(backend).lower()
    if name == "nccl":
        raise RuntimeError("Distributed package doesn't have NCCL built in: jitorch's collectives run through MPI "
                           "(backend='mpi' or 'gloo')")
    if name not in ("mpi", "gloo"):
        raise ValueError(f"Invalid backend: '{backend}'")
    if init_method not in (None, "env://"):
        raise ValueError(f"jitorch.distributed supports init_method='env://' only, got {init_method!r}")
    if not _launched_by_mpi():
        size = _env_int("WORLD_SIZE", world_size)
        _env_int("RANK", rank)
        if size != 1:
            raise RuntimeError(f"jitorch.distributed: a world of {size} processes needs them started by mpiexec: "
                               f"python -m jitorch.distributed.run --nproc-per-node {size} script.py")
    MPI = mpi()
    comm = MPI.COMM_WORLD if _launched_by_mpi() else MPI.COMM_SELF
    for what, given, actual in (("rank", rank, comm.Get_rank()), ("world_size", world_size, comm.Get_size())):
        if given is not None and given >= 0 and given != actual:
            raise ValueError(f"init_process_group({what}={given}) but MPI started this process as {what} {actual}")
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    world = ProcessGroup(comm.Dup(), range(comm.Get_size()), name, timeout.total_seconds())
    World.WORLD = GroupMember.WORLD = world


def is_available():
    """True: jitorch.distributed is part of the package (its MPI engine loads on init_process_group)."""
    return True


def is_mpi_available():
    """Whether mpi4py and an MPI library can be loaded."""
    try:
        mpi()
    except RuntimeError:
        return False
    return True


def is_nccl_available():
    return False


def is_gloo_available():
    return False


def is_initialized():
    """Whether the default process group exists."""
    return World.WORLD is not None


def resolve(group_arg):
    """The process group a collective runs on: ``group_arg`` or the default one."""
    pg = World.WORLD if group_arg is None else group_arg
    if pg is None:
        raise ValueError("Default process group has not been initialized, please make sure to call "
                         "init_process_group.")
    return pg


def get_rank(group=None):
    """This process's rank in ``group`` (the default group: its global rank); -1 outside ``group``."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return resolve(group).rank()


def get_world_size(group=None):
    """How many processes ``group`` holds."""
    if group is GroupMember.NON_GROUP_MEMBER:
        return -1
    return resolve(group).size()


def get_backend(group=None):
    """The backend's name ("mpi")."""
    return resolve(group).backend


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False):
    """A group of ``ranks`` (every rank when None); every process must call it, members or not. A process
    outside ``ranks`` gets ``GroupMember.NON_GROUP_MEMBER``."""
    world = resolve(None)
    ranks = list(range(world.size())) if ranks is None else sorted(int(r) for r in ranks)
    for r in ranks:
        if not 0 <= r < world.size():
            raise ValueError(f"Invalid rank {r} for a world of {world.size()}")
    MPI = mpi()
    me = world.rank()
    comm = world.comm.Split(0 if me in ranks else MPI.UNDEFINED, me)
    if me not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    seconds = world.timeout if timeout is None else timeout.total_seconds()
    return ProcessGroup(comm, ranks, world.backend if backend is None else backend, seconds)


def destroy_process_group(group=None):
    """Leave ``group`` (the default one: every group)."""
    pg = resolve(group)
    pg.comm.Free()
    _GROUPS[pg.id] = None
    if pg is World.WORLD:
        World.WORLD = GroupMember.WORLD = None
