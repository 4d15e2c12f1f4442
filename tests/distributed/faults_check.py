"""Run under the launcher with one argument, the fault to cause: each rank prints what it saw."""

import datetime
import os
import signal
import sys
import time

import jitorch as jt
import jitorch.distributed as dist

fault = sys.argv[1]
dist.init_process_group(timeout=datetime.timedelta(seconds=2))
rank = dist.get_rank()
t = jt.ones(4)
for step in range(3):
    dist.all_reduce(t)
print(f"rank {rank}: trained 3 steps", flush=True)
if fault in ("kill", "raise"):
    dist.barrier()  # every rank has reported before one dies and mpiexec stops the others
if fault == "mismatch":
    for t in (jt.ones(2 + rank), jt.ones(2, dtype=jt.float64 if rank else jt.float32)):
        try:
            dist.all_reduce(t)
        except RuntimeError as error:
            print(f"rank {rank}: {error}", flush=True)
elif fault == "silent":  # rank 1 stays alive but never joins: the others time out
    if rank == 1:
        time.sleep(3.5)
    else:
        try:
            dist.all_reduce(t)
        except RuntimeError as error:
            print(f"rank {rank}: {error}", flush=True)
elif fault == "kill" and rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
elif fault == "raise" and rank == 1:
    raise ValueError("rank 1 gave up")
if fault in ("kill", "raise"):
    dist.all_reduce(t)  # the surviving ranks wait here until the launcher stops them
    time.sleep(30)
if fault == "wait":  # the launcher's signal test: report this rank's pid, then wait to be stopped
    path = os.path.join(sys.argv[2], f"rank{rank}.pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)  # the test reads it the moment it appears
    time.sleep(60)
