"""The env:// and tcp:// rendezvous: separate mpiexec jobs (one per node, or per process) joined into one world
through MPI's ports, the TCP side serving only the port's name; and the errors when it cannot form."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import jitorch.distributed as dist
from jitorch.distributed import rendezvous
from jitorch.distributed.run import mpiexec

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, **env):
    """A process in a session of its own (so a timeout can stop it with everything it started)."""
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), **env), start_new_session=True)


def finish(processes, timeout):
    """Every process's (returncode, stdout, stderr); on a timeout every process group is killed first."""
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in processes:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((p.returncode, out, err))
    finally:
        for p in processes:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return results


def test_two_nodes_of_two_ranks_join_through_the_launchers_rendezvous():
    # two launchers, as on two nodes: each runs its own mpiexec of 2 ranks; node 1 starts first, so its first
    # rank waits for rank 0's rendezvous to appear
    port = free_port()
    launchers = [start([sys.executable, "-m", "jitorch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                        "--master-addr", "127.0.0.1", "--master-port", str(port), "--nproc-per-node", "2",
                        "-m", "tests.distributed.joined_check"]) for node in (1, 0)]
    results = finish(launchers, 120)
    for code, out, err in results:
        assert code == 0, err
    # each rank is the one its node's launcher gave it (node 1: ranks 2 and 3), and the world holds all four
    node1, node0 = (sorted(re.findall(r"rank \d of 4, local \d, node \d: sum 6.0, everyone \[0, 1, 2, 3\]", out))
                    for _, out, _ in results)
    assert node0 == ["rank 0 of 4, local 0, node 0: sum 6.0, everyone [0, 1, 2, 3]",
                     "rank 1 of 4, local 1, node 0: sum 6.0, everyone [0, 1, 2, 3]"], node0
    assert node1 == ["rank 2 of 4, local 0, node 1: sum 6.0, everyone [0, 1, 2, 3]",
                     "rank 3 of 4, local 1, node 1: sum 6.0, everyone [0, 1, 2, 3]"], node1


CODE = """
import datetime, os, signal, sys
import jitorch as jt, jitorch.distributed as dist
rank, size = int(sys.argv[1]), int(sys.argv[4]) if len(sys.argv) > 4 else 3
try:
    dist.init_process_group(init_method=sys.argv[2], rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=float(sys.argv[3])))
    t = jt.tensor([float(rank)])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {t.item()}", flush=True)
    if len(sys.argv) > 5 and rank == 1:  # dies; no mpiexec of the other job's knows it
        os.kill(os.getpid(), signal.SIGKILL)
    if len(sys.argv) > 5:
        dist.all_reduce(t)
except RuntimeError as error:
    print(f"rank {rank}: {error}", flush=True)
    raise SystemExit(3)
"""


def test_one_process_jobs_join_through_tcp_init_method_in_any_order():
    # each process its own mpiexec job, as a scheduler that starts processes one by one would; rank 0 last
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    jobs = [start([mpiexec(), "-n", "1", sys.executable, "-c", CODE, str(rank), url, "60"]) for rank in (2, 1, 0)]
    results = finish(jobs, 90)
    for (code, out, err), rank in zip(results, (2, 1, 0)):
        assert code == 0, err
        assert f"rank {rank} of 3: sum 3.0" in out


def test_a_rendezvous_that_never_completes_times_out_and_the_process_ends():
    port = free_port()
    lone = start([mpiexec(), "-n", "1", sys.executable, "-c", CODE, "0", f"tcp://127.0.0.1:{port}", "2"])
    [(code, out, err)] = finish([lone], 60)
    assert "rank 0: jitorch.distributed: the rendezvous timed out after 2 s with 1 of 3 processes joined" in out
    assert code != 0  # MPI aborted at exit instead of finalizing with an accept still pending


def test_a_rank_of_another_job_that_dies_makes_the_others_fail_within_the_timeout():
    port = free_port()
    jobs = [start([mpiexec(), "-n", "1", sys.executable, "-c", CODE, str(rank), f"tcp://127.0.0.1:{port}", "3", "2",
                   "kill"]) for rank in (0, 1)]
    (code, out, err), (dead, _, _) = finish(jobs, 90)
    assert dead != 0
    assert "rank 0 of 2: sum 1.0" in out
    assert "rank 0: jitorch.distributed: all_reduce timed out after 3 s: a rank died" in out, out + err
    assert code != 0


def test_processes_no_mpiexec_started_get_a_clear_error(monkeypatch):
    for name in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"MPICH cannot connect two such 'singleton' processes .*"
                                           r"pmodels/mpich#7805.*jitorchrun --nnodes N --node-rank K"):
        dist.init_process_group()
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="supports init_method 'env://' and 'tcp://host:port', got 'file:///x'"):
        dist.init_process_group(init_method="file:///x")


def serve_once(payload):
    """A TCP server that sends ``payload`` to its first client: (port, thread)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def run():
        client, _ = listener.accept()
        with client, listener:
            client.sendall(payload)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_the_port_reader_accepts_only_a_jitorch_rendezvous_of_its_world_size():
    name = "tag#0$connentry#0123ABCD$"
    server = rendezvous.PortServer(name, 4, free_port())
    try:
        port = server.listener.getsockname()[1]
        assert rendezvous.fetch_port("127.0.0.1", port, 4, time.monotonic() + 10) == name
        server.next_turn()
        with pytest.raises(RuntimeError, match="rank 0 at 127.0.0.1:.* forms a world of 4 processes, this process "
                                               "was told WORLD_SIZE=2"):
            rendezvous.fetch_port("127.0.0.1", port, 2, time.monotonic() + 10)
    finally:
        server.close()
    for payload in (b"HTTP/1.1 400 Bad Request\r\n\r\n", b"JITORCH-RDZV1 4 9999 short", b"JITORCH-RDZV1 4 3 a\nb"):
        port, thread = serve_once(payload)
        with pytest.raises(RuntimeError, match="is not a jitorch rendezvous"):
            rendezvous.fetch_port("127.0.0.1", port, 4, time.monotonic() + 10)
        thread.join()
    with pytest.raises(RuntimeError, match="no rendezvous at 127.0.0.1:.* before the timeout"):
        rendezvous.fetch_port("127.0.0.1", free_port(), 4, time.monotonic() + 0.3)


def test_the_launchers_multi_node_arguments():
    from jitorch.distributed.run import command, parse_args

    args = parse_args(["--nnodes", "3", "--node-rank", "2", "--rdzv-endpoint", "node0:1234", "--nproc-per-node",
                       "4", "train.py", "--lr", "0.1"])
    assert (args.master_addr, args.master_port) == ("node0", 1234)
    cmd = command(args)
    # this node's own job of 4 ranks, told where it stands among the nodes; the script's arguments untouched
    assert cmd[1:3] == ["-n", "4"] and cmd[-3:] == ["train.py", "--lr", "0.1"]
    pairs = {cmd[i + 1]: cmd[i + 2] for i, word in enumerate(cmd) if word == "-genv"}
    assert pairs == {"JITORCHRUN_NODE_RANK": "2", "JITORCHRUN_NNODES": "3", "MASTER_ADDR": "node0",
                     "MASTER_PORT": "1234", "LOCAL_WORLD_SIZE": "4"}
    hosts = command(parse_args(["--nnodes", "2", "--hosts", "a,b", "--nproc-per-node", "2", "x.py"]))
    assert hosts[1:7] == ["-hosts", "a,b", "-ppn", "2", "-n", "4"] and "JITORCHRUN_NODE_RANK" not in hosts
    for bad in (["--nnodes", "2", "--node-rank", "2"], ["--rdzv-endpoint", "node0:port"]):
        with pytest.raises(SystemExit):
            parse_args([*bad, "x.py"])
