"""Process groups: which processes take part, who this one is, and the MPI communicator they share.

``init_process_group`` makes the default (world) group. Ranks come from MPI when ``mpiexec`` (or jitorch's
launcher, which runs it) started the processes; several mpiexec jobs (one per node) join through the env://
rendezvous (`rendezvous`), ordered by ``RANK``.
"""

from __future__ import annotations

import datetime
import enum
import functools
import os
import urllib.parse
import warnings

from .. import cuda
from . import nccl, nccl_ops, rendezvous
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

    # members are singletons compared by identity: Enum's own hash (of the name, in Python) was a third of the
    # time all_reduce takes to find its plan (`collectives._Plan`)
    __hash__ = object.__hash__


class ProcessGroup:
    """A set of ranks and their communicator: ``ranks`` are global ranks in group-rank order."""

    def __init__(self, comm, ranks, backend, timeout):
        self.id = len(_GROUPS)
        _GROUPS.append(self)
        self.comm = comm
        self.ranks = list(ranks)
        self.backend = backend
        self.timeout = timeout
        self.signatures = None  # the blocks collectives compare their calls in (`collectives.Agreement`)
        self.nccl = {}  # CUDA device index -> `nccl.Communicator` (backend "nccl"), made at its first collective

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


def _env_int(name, given, default=None):
    """``given`` when set (>= 0), else the environment's ``name``, else ``default``; torch's error without any."""
    if given is not None and given >= 0:
        return int(given)
    if name in os.environ:
        try:
            return int(os.environ[name])
        except ValueError:
            raise ValueError(f"Error initializing jitorch.distributed using env:// rendezvous: environment variable "
                             f"{name} must be an integer, got {os.environ[name]!r}") from None
    if default is not None:
        return default
    raise ValueError(f"Error initializing jitorch.distributed using env:// rendezvous: environment variable "
                     f"{name} expected, but not set")


def _master(init_method):
    """(address, port) of rank 0's rendezvous: from ``tcp://host:port``, or MASTER_ADDR/MASTER_PORT."""
    if init_method not in (None, "env://"):
        parsed = urllib.parse.urlsplit(init_method)
        if parsed.hostname is None or parsed.port is None:
            raise ValueError(f"init_method {init_method!r} must name a host and a port: tcp://host:port")
        return parsed.hostname, parsed.port
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise ValueError(f"Error initializing jitorch.distributed using env:// rendezvous: environment "
                             f"variable {name} expected, but not set")
    return os.environ["MASTER_ADDR"], _env_int("MASTER_PORT", None)


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Join the default process group (torch's signature).

    ``backend``: "mpi" (tensors through MPI; CUDA tensors through a copy in host memory), "gloo" (accepted for
    torch scripts: the same MPI engine), "nccl" (CUDA tensors through NCCL, CPU tensors through MPI; RuntimeError
    when NCCL cannot be loaded), or None: "nccl" when CUDA and NCCL are available, else "mpi".

    The world is MPI's: processes started by one ``mpiexec`` form it directly (their ranks are MPI's, which
    ``rank``/``world_size`` or ``RANK``/``WORLD_SIZE`` must agree with when given). When ``WORLD_SIZE`` (or
    ``world_size``) is larger than that mpiexec's job, as when ``jitorchrun --nnodes 2`` starts one job per
    node, the jobs join through the rendezvous at ``MASTER_ADDR:MASTER_PORT`` (``init_method="env://"``) or at
    ``init_method="tcp://host:port"``, with ``RANK`` giving each process's place (`rendezvous`). A process that
    no mpiexec started is alone in its MPI world: ``WORLD_SIZE=1`` works, a larger world raises RuntimeError
    (MPICH cannot join such processes; see `rendezvous`).
    """
    if World.WORLD is not None:
        raise ValueError("trying to initialize the default process group twice!")
    name = _backend_name(backend)
    if init_method not in (None, "env://") and not str(init_method).startswith("tcp://"):
        raise ValueError(f"jitorch.distributed supports init_method 'env://' and 'tcp://host:port', "
                         f"got {init_method!r}")
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    launched = _launched_by_mpi()
    if not launched:
        size = _env_int("WORLD_SIZE", world_size)
        _env_int("RANK", rank)
        if size != 1:
            raise RuntimeError(rendezvous.SINGLETON_ERROR.format(size=size))
    MPI = mpi()
    part = MPI.COMM_WORLD if launched else MPI.COMM_SELF
    size = _env_int("WORLD_SIZE", world_size, part.Get_size())
    if size < part.Get_size():
        raise ValueError(f"WORLD_SIZE (or world_size) is {size}, but mpiexec started {part.Get_size()} processes")
    if size > part.Get_size():
        me = _env_int("RANK", rank)
        if not 0 <= me < size:
            raise ValueError(f"rank {me} is outside a world of {size} processes")
        addr, port = _master(init_method)
        comm = rendezvous.join(part, me, size, addr, port, timeout.total_seconds())
    else:
        comm = part
        for what, given, actual in (("rank", rank, comm.Get_rank()), ("world_size", world_size, comm.Get_size())):
            if given is not None and given >= 0 and given != actual:
                raise ValueError(f"init_process_group({what}={given}) but MPI started this process as {what} "
                                 f"{actual}")
        comm = comm.Dup()
    world = ProcessGroup(comm, range(comm.Get_size()), name, timeout.total_seconds())
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
    """Whether the NCCL library can be loaded (from the nvidia-nccl wheel or the system; loads it)."""
    return nccl.is_available()


def _backend_name(backend):
    """The backend's name: given (checked), or for None "nccl" when CUDA and NCCL are usable, else "mpi"."""
    if backend is None:
        return "nccl" if cuda.is_available() and nccl.is_available() else "mpi"
    name = str(backend).lower()
    if name not in ("mpi", "gloo", "nccl"):
        raise ValueError(f"Invalid backend: '{backend}'")
    if name == "nccl":
        nccl.library()  # RuntimeError "NCCL is not available: ..." before any rank joins
    return name


def is_gloo_available():
    return False


def is_torchelastic_launched():
    """Whether a torchrun-style launcher started this process (``TORCHELASTIC_RUN_ID`` is set, as jitorch's
    launcher sets it)."""
    return os.getenv("TORCHELASTIC_RUN_ID") is not None


def get_node_local_rank(fallback_rank=None):
    """This process's rank on its node (``LOCAL_RANK``, which the launcher sets), else ``fallback_rank``;
    torch's RuntimeError without either."""
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not in the environment. Consider passing fallback_rank to allow "
                       "`get_node_local_rank` to work, assuming you are not running in a multi-device context and "
                       "want the code to run locally instead.")


def is_initialized():
    """Whether the default process group exists."""
    return World.WORLD is not None


def outside(what):
    """torch's answer to a call naming a group this rank is not in (``GroupMember.NON_GROUP_MEMBER``, which
    ``new_group`` gives it): a warning, and nothing done (None)."""
    warnings.warn(f"Running {what} on global rank {resolve(None).rank()} which does not belong to the given group.",
                  stacklevel=3)


def members_only(fn):
    """``fn`` (a collective taking ``group``) that only `outside` runs when ``group`` is
    ``GroupMember.NON_GROUP_MEMBER``."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs.get("group") is GroupMember.NON_GROUP_MEMBER or any(a is GroupMember.NON_GROUP_MEMBER for a in args):
            return outside(fn.__name__)
        return fn(*args, **kwargs)
    return call


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
    """The backend's name ("mpi", "gloo" or "nccl")."""
    return resolve(group).backend


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None, sort_ranks=True):
    """A group of ``ranks`` (every rank when None); every process must call it, members or not. A process
    outside ``ranks`` gets ``GroupMember.NON_GROUP_MEMBER``. Group ranks follow the global ranks' order, or with
    ``sort_ranks=False`` the order of ``ranks`` (as torch's). ``group_desc`` and ``device_id`` are accepted
    for torch's scripts (NCCL's communicators are made at a group's first collective on a device)."""
    world = resolve(None)
    ranks = list(range(world.size())) if ranks is None else [int(r) for r in ranks]
    if sort_ranks:
        ranks.sort()
    for r in ranks:
        if not 0 <= r < world.size():
            raise ValueError(f"Invalid rank {r} for a world of {world.size()}")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"new_group: ranks {ranks} name a rank twice")
    MPI = mpi()
    me = world.rank()
    comm = world.comm.Split(0 if me in ranks else MPI.UNDEFINED, ranks.index(me) if me in ranks else me)
    if me not in ranks:
        return GroupMember.NON_GROUP_MEMBER
    seconds = world.timeout if timeout is None else timeout.total_seconds()
    return ProcessGroup(comm, ranks, world.backend if backend is None else _backend_name(backend), seconds)


def destroy_process_group(group=None):
    """Leave ``group``; the default group (``group=None``) takes every group this process made with it, the
    newest first, as torch's does: no communicator, MPI's or NCCL's, outlives the world it was split from."""
    pg = resolve(group)
    doomed = [g for g in reversed(_GROUPS) if g is not None and g is not pg] if pg is World.WORLD else []
    for g in [*doomed, pg]:
        nccl_ops.destroy(g)
        if g.signatures is not None:
            g.signatures.free()
        g.comm.Free()
        _GROUPS[g.id] = None
    if pg is World.WORLD:
        World.WORLD = GroupMember.WORLD = None
