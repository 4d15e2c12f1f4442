"""The launcher: ``python -m jitorch.distributed.run --nproc-per-node N script.py args`` (also ``jitorchrun``).

It takes torchrun's arguments and starts the N processes with MPI's ``mpiexec`` (MPICH's, installed with the
``distributed`` extra). On several nodes, start the launcher on each, as torchrun:

    jitorchrun --nnodes 2 --node-rank 0 --master-addr HOST0 --master-port 29500 --nproc-per-node 4 train.py  # on HOST0
    jitorchrun --nnodes 2 --node-rank 1 --master-addr HOST0 --master-port 29500 --nproc-per-node 4 train.py  # on HOST1

Each node's launcher runs its own ``mpiexec``, and ``init_process_group`` joins the nodes' jobs into one world
through the env:// rendezvous at the master's address (MPI's ports: `jitorch.distributed.rendezvous`); node k
holds ranks ``k * nproc_per_node`` onwards. With ``--hosts``, one mpiexec started from this node reaches the
others through its own launcher (ssh) instead.

Each process starts in this module's ``--rank-shim`` mode, which sets torchrun's environment (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``GROUP_RANK``) from
MPI's before it runs the script as ``__main__``, so a script written for torchrun reads what it expects. When
one process dies or exits with an error, ``mpiexec`` stops the others; a script that raises aborts the job (with
MPI running, its exit would wait for the other ranks, which would wait for it until the group's timeout).
SIGINT and SIGTERM sent to the launcher go to every process. The launcher exits with the first failure's code
and names the rank that failed first (`Ends`). torchrun's log options (``--log-dir``, ``--redirects``,
``--tee``, ``--local-ranks-filter``) work as torchrun's (`Logs`). Its options for elastic runs are accepted where
they change nothing here (``--rdzv-id``, ``--rdzv-conf``, ``--monitor-interval``, ``--start-method``, ``--role``,
``--run-path``); ``--max-restarts`` other than 0 is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback


def parse_args(argv):
    p = argparse.ArgumentParser(prog="jitorchrun", description=__doc__.splitlines()[0])
    p.add_argument("--nproc-per-node", "--nproc_per_node", default="1",
                   help="processes on this node (a number; 'cpu' or 'auto' for one per core)")
    p.add_argument("--nnodes", default="1", help="nodes (a number; MIN:MAX ranges are not supported)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0)
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1")
    p.add_argument("--master-port", "--master_port", type=int, default=29500)
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint", help="HOST[:PORT] of the rendezvous (torchrun's; the same "
                   "as --master-addr and --master-port)")
    p.add_argument("--rdzv-backend", "--rdzv_backend", default="static", choices=["static", "c10d"],
                   help="accepted for torchrun's command lines: jitorch's rendezvous is MPI's ports")
    p.add_argument("--rdzv-id", "--rdzv_id", help="accepted for torchrun's command lines (the job's id: each "
                   "launch is its own job here)")
    p.add_argument("--rdzv-conf", "--rdzv_conf", default="", help="accepted for torchrun's command lines")
    p.add_argument("--max-restarts", "--max_restarts", type=int, default=0,
                   help="0: a failed rank fails the run (restarts are not supported)")
    p.add_argument("--monitor-interval", "--monitor_interval", type=float, default=0.1,
                   help="accepted for torchrun's command lines (mpiexec watches the ranks)")
    p.add_argument("--start-method", "--start_method", default="spawn", choices=["spawn", "fork", "forkserver"],
                   help="accepted for torchrun's command lines (mpiexec starts every rank as a new process)")
    p.add_argument("--role", default="default", help="accepted for torchrun's command lines")
    p.add_argument("--run-path", "--run_path", action="store_true",
                   help="accepted for torchrun's command lines (each rank runs the script with runpy.run_path)")
    p.add_argument("--log-dir", "--log_dir", help="base folder of the ranks' log files (torchrun's: a folder "
                   "<run id>_<unique>/attempt_0/<local rank>/ holds stdout.log and stderr.log)")
    p.add_argument("-r", "--redirects", default="0", help="streams of the ranks written to their log files instead "
                   "of the console: 0 none, 1 stdout, 2 stderr, 3 both, for every local rank, or per local rank "
                   "as 0:1,1:2")
    p.add_argument("-t", "--tee", default="0", help="streams of the ranks written to their log files and to the "
                   "console, each line headed [<role><local rank>]: (as --redirects)")
    p.add_argument("--local-ranks-filter", "--local_ranks_filter", default="",
                   help="local ranks whose streams reach the console, as 0,1 (log files keep every rank's)")
    p.add_argument("--standalone", action="store_true", help="a single node (the default here)")
    p.add_argument("--hosts", help="comma-separated hosts for a multi-node run (passed to mpiexec -hosts)")
    p.add_argument("-m", "--module", action="store_true", help="run the script argument as a module (python -m)")
    p.add_argument("--no-python", "--no_python", action="store_true", help="run the script as an executable")
    p.add_argument("--rank-shim", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("script")
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.nproc_per_node in ("cpu", "auto"):
        args.nproc_per_node = os.cpu_count() or 1
    else:
        try:
            args.nproc_per_node = int(args.nproc_per_node)
        except ValueError:
            p.error(f"--nproc-per-node must be a number, 'cpu' or 'auto', got {args.nproc_per_node!r}")
    try:
        args.nnodes = int(args.nnodes)
    except ValueError:
        p.error(f"--nnodes must be a number (elastic MIN:MAX ranges are not supported), got {args.nnodes!r}")
    if args.nproc_per_node < 1 or args.nnodes < 1:
        p.error("--nproc-per-node and --nnodes must be at least 1")
    if args.max_restarts != 0:
        p.error(f"--max-restarts {args.max_restarts}: restarting failed ranks is not supported (0 fails the run)")
    if not 0 <= args.node_rank < args.nnodes:
        p.error(f"--node-rank must be in [0, {args.nnodes}), got {args.node_rank}")
    try:
        args.redirects, args.tee = (_streams(spec, args.nproc_per_node) for spec in (args.redirects, args.tee))
    except ValueError as error:
        p.error(str(error))
    try:
        args.local_ranks_filter = {int(r) for r in args.local_ranks_filter.split(",")} \
            if args.local_ranks_filter else None
    except ValueError:
        p.error("--local_ranks_filter must be a comma-separated list of integers e.g. --local_ranks_filter=0,1,2")
    if args.hosts and (args.log_dir or any(args.redirects) or any(args.tee) or args.local_ranks_filter):
        p.error("--log-dir, --redirects, --tee and --local-ranks-filter apply to this node's ranks: with --hosts, "
                "start a launcher on each node instead")
    if args.rdzv_endpoint:
        host, _, port = args.rdzv_endpoint.rpartition(":") if ":" in args.rdzv_endpoint else \
            (args.rdzv_endpoint, "", str(args.master_port))
        if not host or not port.isdigit():
            p.error(f"--rdzv-endpoint must be HOST or HOST:PORT, got {args.rdzv_endpoint!r}")
        args.master_addr, args.master_port = host, int(port)
    return args


OUT, ERR = 1, 2  # torchrun's stream flags (its ``Std``): 3 is both


def _streams(spec, nproc):
    """torchrun's ``--redirects``/``--tee`` value (one flag for every local rank, or ``rank:flag,...``) as a list
    of flags, one per local rank."""
    if re.fullmatch(r"[0123]", spec):
        return [int(spec)] * nproc
    if not re.fullmatch(r"(\d+:[0123],)*\d+:[0123]", spec):
        raise ValueError(f"{spec} does not match: <[0123]> or <local rank:[0123],...>")
    flags = [0] * nproc
    for part in spec.split(","):
        rank, flag = map(int, part.split(":"))
        if rank >= nproc:
            raise ValueError(f"{spec} names local rank {rank}, of {nproc} local ranks")
        flags[rank] = flag
    return flags


class Logs:
    """torchrun's log files and console filter (``--log-dir``, ``--redirects``, ``--tee``,
    ``--local-ranks-filter``), in torchrun's layout: ``<log dir>/<run id>_<unique>/attempt_0/<local
    rank>/{stdout,stderr}.log``, the base a new temporary folder without ``--log-dir``.

    Each rank's shim points its stream at its file (redirected or teed) or, for a rank the filter leaves out, at
    /dev/null (`point_streams`); the launcher copies a teed file's lines to its own stream as they are written,
    each headed ``[<role><local rank>]:`` (a thread per file, which reads the rest once the ranks have
    ended), as torchrun's tail does."""

    def __init__(self, args):
        base = args.log_dir or tempfile.mkdtemp(prefix="torchelastic_")
        os.makedirs(base, exist_ok=True)
        self.folder = os.path.join(tempfile.mkdtemp(prefix=f"{args.rdzv_id or 'none'}_", dir=base), "attempt_0")
        if not args.log_dir:  # (a new temporary folder: say where)
            print(f"jitorchrun: log files in {self.folder}", file=sys.stderr, flush=True)
        self.plan = []  # per local rank: (stdout's, stderr's destination), "" for the console
        self.tails = []
        for rank in range(args.nproc_per_node):
            ranks_folder = os.path.join(self.folder, str(rank))
            os.makedirs(ranks_folder)
            filtered = args.local_ranks_filter is not None and rank not in args.local_ranks_filter
            pair = []
            for flag, name, stream in ((OUT, "stdout.log", sys.stdout), (ERR, "stderr.log", sys.stderr)):
                path = os.path.join(ranks_folder, name)
                if (args.redirects[rank] | args.tee[rank]) & flag:
                    pair.append(path)
                    if args.tee[rank] & flag and not filtered:
                        self.tails.append(_Tail(path, f"[{args.role}{rank}]:", stream))
                else:
                    pair.append(os.devnull if filtered else "")
            self.plan.append(pair)

    def variable(self):
        """The shims' instructions: per local rank, stdout's and stderr's destinations."""
        return json.dumps(self.plan)

    def close(self):
        """Copy the teed files' last lines (every rank has ended)."""
        for tail in self.tails:
            tail.finish()


class _Tail:
    """A thread copying the lines a rank writes into ``path`` to ``stream``, each headed ``header``."""

    POLL = 0.05

    def __init__(self, path, header, stream):
        self.path, self.header, self.stream = path, header, stream
        self.running = True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not os.path.exists(self.path) and self.running:
            time.sleep(self.POLL)
        if not os.path.exists(self.path):
            return
        with open(self.path, errors="replace") as f:
            partial = ""
            while True:
                running = self.running  # (read before the last read: nothing written after it is missed)
                text = f.read()
                if text:
                    *lines, partial = (partial + text).split("\n")
                    self.stream.write("".join(f"{self.header}{line}\n" for line in lines))
                    self.stream.flush()
                elif not running:
                    break
                else:
                    time.sleep(self.POLL)
            if partial:
                self.stream.write(f"{self.header}{partial}\n")
                self.stream.flush()

    def finish(self):
        self.running = False
        self.thread.join()


def point_streams(plan, local_rank):
    """In a rank's shim: its stdout and stderr to the files or /dev/null that ``plan`` (`Logs.variable`) gives
    its local rank, at the level of file descriptors, so the script's C libraries and child processes write
    there too."""
    for fd, path in zip((1, 2), json.loads(plan)[local_rank]):
        if path:
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(target, fd)
            os.close(target)


def mpiexec():
    """The ``mpiexec`` next to this Python (the distributed extra's MPICH), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = beside if os.path.exists(beside) else shutil.which("mpiexec")
    if found is None:
        raise SystemExit("jitorchrun: mpiexec not found: pip install 'jitorch[distributed]' (mpi4py with MPICH)")
    return found


def command(args):
    """The mpiexec command line that starts every rank in the shim."""
    cmd = [mpiexec()]
    if args.hosts:  # one job over every node
        cmd += ["-hosts", args.hosts, "-ppn", str(args.nproc_per_node), "-n", str(args.nproc_per_node * args.nnodes)]
    else:  # this node's job; the others join it through the rendezvous
        cmd += ["-n", str(args.nproc_per_node), "-genv", "JITORCHRUN_NODE_RANK", str(args.node_rank),
                "-genv", "JITORCHRUN_NNODES", str(args.nnodes)]
    cmd += ["-genv", "MASTER_ADDR", args.master_addr, "-genv", "MASTER_PORT", str(args.master_port),
            "-genv", "LOCAL_WORLD_SIZE", str(args.nproc_per_node)]
    if getattr(args, "ends", None) is not None:
        cmd += ["-genv", "JITORCHRUN_ENDS", args.ends.folder]
    if getattr(args, "logs", None) is not None:
        cmd += ["-genv", "JITORCHRUN_LOGS", args.logs.variable()]
    shim = [sys.executable, "-m", "jitorch.distributed.run", "--rank-shim"]
    shim += ["-m"] if args.module else []
    shim += ["--no-python"] if args.no_python else []
    return cmd + shim + [args.script, *args.script_args]


def run_rank(args):
    """In one rank's process: torchrun's environment from MPI's, then the script as ``__main__``."""
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    size = int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    local = int(os.environ.get("MPI_LOCALRANKID", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", rank)))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    node = rank // per_node
    if "JITORCHRUN_NODE_RANK" in os.environ:  # this node's own job: its ranks follow the nodes' before it
        node = int(os.environ.pop("JITORCHRUN_NODE_RANK"))
        rank, size = node * per_node + rank, int(os.environ.pop("JITORCHRUN_NNODES")) * per_node
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(local), GROUP_RANK=str(node),
                      LOCAL_WORLD_SIZE=str(per_node), TORCHELASTIC_RUN_ID="jitorchrun")
    plan = os.environ.pop("JITORCHRUN_LOGS", None)
    if plan is not None:
        point_streams(plan, local)
    folder = os.environ.pop("JITORCHRUN_ENDS", None)
    if folder is not None:  # (`Ends`: the launcher names the rank that failed first)
        note(folder, f"{rank}.pid", str(os.getpid()))
    if args.no_python:
        os.execvp(args.script, [args.script, *args.script_args])
    sys.argv = [args.script, *args.script_args]
    try:
        if args.module:
            runpy.run_module(args.script, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
            runpy.run_path(args.script, run_name="__main__")
    except Exception as error:
        what = f"rank {rank} (local rank {local}) raised {type(error).__name__}: {error}"
        print(f"jitorchrun: {what}", file=sys.stderr, flush=True)
        if folder is not None:
            note(folder, f"{rank}.raised", f"{time.monotonic()} {what}")  # (the machine's one monotonic clock)
        # with MPI running, Python's exit would wait in MPI's finalize for the other ranks, which wait for this
        # one in their next collective until the group's timeout (30 minutes by default): abort the job instead,
        # as ``python -m mpi4py`` does, so that mpiexec stops every rank now
        MPI = sys.modules.get("mpi4py.MPI")
        if MPI is None or not MPI.Is_initialized() or MPI.Is_finalized():
            raise
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
    if folder is not None:  # (its process may still fail: MPI aborts at exit after a timed-out collective)
        open(os.path.join(folder, f"{rank}.done"), "w").close()


def note(folder, name, text):
    """Write ``text`` into ``folder``'s file ``name`` whole or not at all: the launcher reads these files while
    the ranks run, and mpiexec may kill a rank in the middle of a write (once another rank aborted the job),
    which left the launcher an empty ``.raised`` file to parse."""
    with open(os.path.join(folder, f"{name}.tmp"), "w") as f:
        f.write(text)
    os.replace(os.path.join(folder, f"{name}.tmp"), os.path.join(folder, name))


class Ends:
    """The order in which this node's ranks end, so that a failed run names the rank that failed first (mpiexec
    kills the others once one has died, and its own message names a process id only). Each rank's shim writes
    its pid into ``folder`` as it starts, in a file named by its global rank; a thread here waits on those
    processes' pidfds (Linux) and notes each rank as its process ends. Where pidfds are missing the list stays
    empty."""

    def __init__(self, nproc):
        self.folder = tempfile.mkdtemp(prefix="jitorchrun-")
        self.nproc = nproc
        self.batches = []  # (time, ranks seen ended at one look), in order
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()

    def watch(self):
        if not hasattr(os, "pidfd_open"):
            return
        watched, known = {}, set()
        while len(known) < self.nproc or watched:
            ended = []
            try:
                names = os.listdir(self.folder)
            except FileNotFoundError:  # (`close`: the launcher is done)
                return
            for name in names:
                if name.endswith(".pid") and int(name[:-4]) not in known:
                    rank = int(name[:-4])
                    known.add(rank)
                    with open(os.path.join(self.folder, name)) as f:
                        pid = int(f.read())
                    try:
                        watched[os.pidfd_open(pid)] = rank
                    except ProcessLookupError:  # (ended before it was seen)
                        ended.append(rank)
            ready = select.select(list(watched), [], [], 0.05)[0] if watched else []
            for fd in ready:
                ended.append(watched.pop(fd))
                os.close(fd)
            if ended:
                self.batches.append((time.monotonic(), sorted(ended)))

    def first(self):
        """What failed first: the first rank to raise out of its script (whose shim wrote when: with MPI it then
        aborts the job, and mpiexec may kill the other ranks before that one), unless a rank's process ended
        before; else the ranks seen ended first (several when one look found them all ended) whose script had
        not returned; None when unknown."""
        raised = []
        for name in os.listdir(self.folder):
            if name.endswith(".raised"):
                with open(os.path.join(self.folder, name)) as f:
                    when, what = f.read().split(" ", 1)
                raised.append((float(when), what))
        # of the ranks seen ended first, those whose script had returned are not named (their process may have
        # failed at exit, or ended first by finishing first: which, only mpiexec knows)
        ended = [(when, [r for r in ranks if not os.path.exists(os.path.join(self.folder, f"{r}.done"))])
                 for when, ranks in self.batches[:1]]
        ended = [(when, f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} ended first")
                 for when, ranks in ended if ranks]
        events = sorted(raised + ended)
        return events[0][1] if events else None

    def close(self):
        shutil.rmtree(self.folder, ignore_errors=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.rank_shim:
        run_rank(args)
        return 0
    # this node's ranks, whose ends the launcher watches (with --hosts, mpiexec starts them on other nodes too)
    args.ends = None if args.hosts else Ends(args.nproc_per_node)
    logged = args.log_dir or any(args.redirects) or any(args.tee) or args.local_ranks_filter is not None
    args.logs = Logs(args) if logged else None
    # mpiexec stays in the launcher's process group: whoever stops that group (a terminal's Ctrl-C, a
    # supervisor) stops every rank with it
    process = subprocess.Popen(command(args))

    def forward(signum, frame):
        process.send_signal(signum)  # mpiexec passes it on to every rank

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    code = process.wait()
    if args.logs is not None:
        args.logs.close()
    if code != 0:
        first = None
        if args.ends is not None:
            args.ends.thread.join(timeout=1.0)  # (every rank has ended: mpiexec waits for them)
            first = args.ends.first()
        print(f"jitorchrun: a rank failed{f' ({first})' if first else ''} (mpiexec exited with {code}); the other "
              f"ranks were stopped", file=sys.stderr)
    if args.ends is not None:
        args.ends.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
