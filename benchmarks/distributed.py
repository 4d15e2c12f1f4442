"""jitorch.distributed on this machine: all-reduce bandwidth and DDP training steps, against mpi4py and torch.

    python benchmarks/distributed.py              # about a minute
    python benchmarks/distributed.py --quick      # tiny sizes (the suite runs this)

The script starts itself under jitorch's launcher (1 and 2 ranks) and prints, from rank 0:
1. all-reduce of float32 buffers, 4 B to 64 MB: jitorch's ``dist.all_reduce`` against raw mpi4py ``Allreduce`` on
   the same buffers (jitorch's share of mpi4py's bandwidth; the issue's target is 90%) and torch's gloo backend;
   also the agreement every call makes first, alone, and mpi4py's nonblocking all-reduce waited for as jitorch
   waits.
2. a DDP training step of an MLP, with the same batch per rank (weak scaling): ms per step on 1 and 2 ranks,
   the scaling efficiency (1-rank time / 2-rank time), jitorch eager and compiled against torch's DDP on gloo.
3. overlap on an 8-layer MLP with 4 MB buckets: the share of the gradients' all-reduce time hidden behind
   backward, with the gradient hooks or the progress thread advancing MPI, and torch's DDP.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from timing import median_time  # noqa: E402


def timed(fn, repeat):
    return median_time(fn, repeat)


def interleaved(fns, repeat, barrier, cpu=None, calls=1, low=None):
    """Median seconds per call of each of ``fns``, called in turn ``repeat`` times after a barrier each (so
    every rank starts together, and a change of the machine's load falls on all of them alike), the order of the
    turn rotating each round: in a fixed order two runs of the same code differed by up to 60% by their place
    (session 47). Each turn makes ``calls`` calls back to back, timed together. With a dict ``cpu``, also the
    median CPU seconds of this process per call (all its threads: a progress thread's too) into ``cpu[name]``;
    with a dict ``low``, the 10th percentile of the turns' seconds per call into ``low[name]``."""
    times = {name: [] for name in fns}
    cpus = {name: [] for name in fns}
    names = list(fns)
    for turn in range(repeat + 1):
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            fn = fns[name]
            barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls)
            cpus[name].append((time.process_time() - c0) / calls)
    if cpu is not None:
        cpu.update({name: statistics.median(cs[1:]) for name, cs in cpus.items()})
    if low is not None:
        low.update({name: statistics.quantiles(ts[1:], n=10, method="inclusive")[0] for name, ts in times.items()})
    return {name: statistics.median(ts[1:]) for name, ts in times.items()}


def allreduce_rows(sizes, repeat):
    """Per size: raw mpi4py's blocking Allreduce, jitorch's all_reduce, jitorch's agreement alone (the block every
    call exchanges first, so that ranks giving different collectives, dtypes, shapes or ops raise) and
    "nonblocking": mpi4py's Iallreduce waited for as jitorch waits (`mpi_backend.wait`, which can stop at a
    deadline), the data's own share of jitorch's time above `collectives.INLINE` bytes. Then torch's gloo, whose
    group is made only once those rows are done (`worker`)."""
    from mpi4py import MPI

    import jitorch as jt
    import jitorch.distributed as dist
    from jitorch.distributed import collectives
    from jitorch.distributed.mpi_backend import wait
    from jitorch.distributed.process_group import resolve

    pg = resolve(None)
    rows = []
    for nbytes in sizes:
        t = jt.ones(max(nbytes // 4, 1))
        array = t.numpy()

        def agreement():
            collectives.Agreement(pg, "all_reduce", t.dtype, tuple(t.shape), "all_reduce", "SUM").check()
        low = {}
        row = interleaved({"mpi4py": lambda: MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, array, op=MPI.SUM),
                           "jitorch": lambda: dist.all_reduce(t), "agreement": agreement,
                           "nonblocking": lambda: wait(MPI.COMM_WORLD.Iallreduce(MPI.IN_PLACE, array, MPI.SUM),
                                                       pg.timeout, "all_reduce")},
                          repeat, MPI.COMM_WORLD.Barrier, calls=calls_per_turn(nbytes), low=low)
        rows.append({"bytes": nbytes, **row, "low": low})
    return rows


def torch_allreduce(rows, repeat):
    """torch's gloo all-reduce of each row's size, into the row."""
    import torch
    import torch.distributed as tdist
    from mpi4py import MPI

    for row in rows:
        theirs = torch.ones(max(row["bytes"] // 4, 1))
        row.update(interleaved({"torch": lambda: tdist.all_reduce(theirs)}, repeat, MPI.COMM_WORLD.Barrier,
                               calls=calls_per_turn(row["bytes"])))


def calls_per_turn(nbytes):
    """All-reduces timed together per turn: a call of a few us alone after a barrier timed mostly how soon the
    scheduler ran both ranks (on the loaded 2-core machine, 4 B took 0.01 to 2 ms)."""
    return 50 if nbytes <= 16 << 10 else 10 if nbytes <= 256 << 10 else 1


def mlp(lib, width):
    nn = lib.nn
    return nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def ddp_rows(width, batch, repeat):
    """ms per DDP step of jitorch, eager and compiled (torch's: `torch_ddp_rows`, once gloo's group exists)."""
    import jitorch as jt
    from jitorch.nn.parallel import DistributedDataParallel as DDP

    rows = {}
    x, y = jt.randn(batch, 256), jt.randint(0, 10, (batch,))
    for mode in ("eager", "compiled"):
        model = DDP(mlp(jt, width))
        opt = jt.optim.SGD(model.parameters(), lr=0.01)
        loss_fn = jt.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        run = jt.compile(step) if mode == "compiled" else step
        run()
        rows[f"jitorch {mode}"] = timed(run, repeat)
    return rows


def torch_ddp_rows(width, batch, repeat):
    """ms per DDP step of torch's DDP on gloo."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    tmodel = TorchDDP(mlp(torch, width))
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.01)
    tx, ty = torch.randn(batch, 256), torch.randint(0, 10, (batch,))

    def tstep():
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(tx), ty).backward()
        topt.step()
    return {"torch eager": timed(tstep, repeat)}


def deep_mlp(lib, width, layers):
    nn = lib.nn
    body = [nn.Linear(256, width), nn.ReLU()]
    for _ in range(layers - 2):
        body += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*body, nn.Linear(width, 10))


class Parts:
    """CPU seconds (this thread's) spent in methods of an object, per label, while ``on``."""

    def __init__(self):
        self.seconds, self.on = {}, False

    def wrap(self, obj, name, label):
        method = getattr(obj, name)

        def timed(*args, **kwargs):
            if not self.on:
                return method(*args, **kwargs)
            c0 = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.thread_time() - c0
        setattr(obj, name, timed)


def overlap_rows(width, layers, batch, cap_mb, repeat):
    """What a synced DDP step costs over a step under no_sync, on an MLP deep enough for many buckets, for
    jitorch with the gradient hooks advancing MPI and with the progress thread, and for torch's DDP on gloo
    (same bucket cap, `torch_overlap_rows`); against one all-reduce of every gradient, and (jitorch) against
    that all-reduce plus the bucket copies a synced step makes (each gradient into its bucket, scaled, and the
    average back). Also, for the hooks, where rank 0's main thread spends the difference (CPU time)."""
    from mpi4py import MPI

    import jitorch as jt
    import jitorch.distributed as dist
    from jitorch.nn.parallel import DistributedDataParallel as DDP

    x, y = jt.randn(batch, 256), jt.randint(0, 10, (batch,))
    model = DDP(deep_mlp(jt, width, layers), bucket_cap_mb=cap_mb)
    opt = jt.optim.SGD(model.parameters(), lr=0.001)
    loss_fn = jt.nn.CrossEntropyLoss()
    grads = jt.cat([p.detach().reshape(-1) for p in model.parameters()])

    finished = {False: [], True: []}
    finish = model._finish

    def counting_finish():
        # how many buckets' all-reduces had finished when backward's last hook came: the overlap itself,
        # whatever the machine's load (Get_status only looks; it does not advance MPI)
        works = [b.work for b in model._buckets]
        model._progress.stop()
        finished[model._progress.threaded].append(sum(all(r.Get_status() for r in w._requests) for w in works))
        finish()
    model._finish = counting_finish
    parts = Parts()
    for obj, name, label in ((model, "_fill", "copy in"), (model, "_write_back", "copy out"),
                             (model, "_start", "start"), (model, "_finish", "finish"),
                             (model._progress, "poke", "hooks' MPI tests")):
        parts.wrap(obj, name, label)

    def step(threaded=None):
        default = model._progress.threaded
        model._progress.threaded = default if threaded is None else threaded
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        model._progress.threaded = default

    def hooks():
        parts.on = True
        step(False)
        parts.on = False

    def local():
        with model.no_sync():
            step()

    def copies():
        for bucket in model._buckets:
            model._fill(bucket)
            model._write_back(bucket)
    cpu = {}
    t = interleaved({"hooks": hooks, "thread": lambda: step(True), "local": local,
                     "comm": lambda: dist.all_reduce(grads), "copies": copies}, repeat, MPI.COMM_WORLD.Barrier, cpu)
    steps = repeat + 1
    spent = {label: seconds / steps for label, seconds in parts.seconds.items()}
    # the parts nest: start holds copy in, finish holds copy out and the wait for the all-reduces
    spent["start"] -= spent["copy in"]
    spent["finish"] -= spent["copy out"]
    return {"buckets": len(model._buckets), "default thread": model._progress.threaded, **t,
            "cpu": cpu, "parts": spent,
            **{f"finished {name}": statistics.mean(finished[threaded][1:]) for name, threaded in
               (("hooks", False), ("thread", True))},
            **{f"hidden {name}": 1 - (t[name] - t["local"]) / t["comm"] for name in ("hooks", "thread")},
            **{f"hidden+copies {name}": 1 - (t[name] - t["local"]) / (t["comm"] + t["copies"])
               for name in ("hooks", "thread")}}


def torch_overlap_rows(width, layers, batch, cap_mb, repeat):
    """`overlap_rows`' synced step, no_sync step and all-reduce of every gradient, of torch's DDP on gloo."""
    import torch
    import torch.distributed as tdist
    from mpi4py import MPI
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    tmodel = TorchDDP(deep_mlp(torch, width, layers), bucket_cap_mb=cap_mb)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.001)
    tx, ty = torch.randn(batch, 256), torch.randint(0, 10, (batch,))
    tgrads = torch.cat([p.detach().reshape(-1) for p in tmodel.parameters()])

    def tstep():
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(tx), ty).backward()
        topt.step()

    def tlocal():
        with tmodel.no_sync():
            tstep()
    t = interleaved({"torch": tstep, "torch local": tlocal, "torch comm": lambda: tdist.all_reduce(tgrads)}, repeat,
                    MPI.COMM_WORLD.Barrier)
    return {**t, "hidden torch": 1 - (t["torch"] - t["torch local"]) / t["torch comm"]}


def worker(args):
    import torch
    import torch.distributed as tdist

    import jitorch as jt
    import jitorch.distributed as dist

    jt.set_num_threads(1)
    torch.set_num_threads(1)
    dist.init_process_group()
    # 8 and 16 KB: the smallest all-reduces that take two messages (the agreement, then MPI's all-reduce)
    sizes = args.sizes or ([4, 1 << 16, 1 << 20] if args.quick else [4, 256, 4096, 8192, 16384, 1 << 16, 1 << 18,
                                                                      1 << 20, 1 << 22, 16 << 20, 64 << 20])
    repeat = args.allreduce or (2 if args.quick else 30)
    ddp = (32 if args.quick else 1024, 16 if args.quick else 128, 2 if args.quick else 20)
    overlap = (32 if args.quick else 1024, 8, 16 if args.quick else 64, 0.002 if args.quick else 4,
               2 if args.quick else 12)
    overlapping = dist.get_world_size() > 1 and not args.allreduce
    result = {"allreduce": allreduce_rows(sizes, repeat)}
    if not args.allreduce:
        result["ddp"] = ddp_rows(*ddp)
    if overlapping:
        result["overlap"] = overlap_rows(*overlap)
    # gloo's group only now, every jitorch and mpi4py row measured: on the loaded machine its threads, in the
    # same processes, made every MPI call take about 1 ms (2 ranks, 4 B: 5 us without it, 1.2 ms with it; 4 KB
    # 9 us, 4 ms). torch's rows follow, in the same processes.
    tdist.init_process_group("gloo")
    torch_allreduce(result["allreduce"], repeat)
    if not args.allreduce:
        result["ddp"].update(torch_ddp_rows(*ddp))
    if overlapping:
        result["overlap"].update(torch_overlap_rows(*overlap))
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)
    tdist.barrier()  # every rank done with gloo before any tears it down
    tdist.destroy_process_group()
    dist.destroy_process_group()


def free_port():
    """A TCP port no one listens on now (a fixed one may be another job's: tests run in parallel)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(nproc, quick, allreduce=0, sizes=None):
    cmd = [sys.executable, "-m", "jitorch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-port", str(free_port()), os.path.join(HERE, "distributed.py"), "--worker"]
    cmd += (["--quick"] if quick else []) + (["--allreduce", str(allreduce)] if allreduce else [])
    cmd += ["--sizes", ",".join(map(str, sizes))] if sizes else []
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        # the ranks' own output says why (the launcher names the rank that failed)
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stdout[-4000:]}\n"
                           f"{done.stderr[-8000:]}")
    line = done.stdout[done.stdout.index("RESULT ") + 7:]
    return json.loads(line[:line.index("\n")] if "\n" in line else line)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    p.add_argument("--allreduce", type=int, default=0, metavar="N",
                   help="the all-reduce table alone, on 2 ranks, with N interleaved calls per size and system")
    p.add_argument("--sizes", type=lambda text: [int(n) for n in text.split(",")], default=None, metavar="B,B,...",
                   help="the all-reduce table's sizes in bytes (say 4,8192 for the rows issue 20's target missed)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        # torch's, not jitorch's: a rank aborted at exit about once in 15 runs, "terminate called without an
        # active exception". torch's DDP keeps its gloo group alive after destroy_process_group (its worker
        # threads still run after it and a gc.collect()), so the group is torn down during the interpreter's
        # finalization, when CPython ends any other thread that takes the GIL with pthread_exit; a gloo thread
        # doing so from a C++ destructor unwinds through a noexcept frame, and that message is libstdc++'s.
        # Reproduced with torch alone (two gloo ranks, no jitorch, no MPI): a Python callback on an all-reduce
        # that completes while rank 0 finalizes aborts every run, gdb showing pt_gloo_runloop -> take_gil ->
        # pthread_exit -> std::terminate. jitorch's side has no C++ thread (MPICH, UCX and libfabric link no
        # libstdc++), so the worker leaves without finalizing the interpreter.
        sys.stdout.flush()
        os._exit(0)
    load = os.getloadavg()
    results = {n: launch(n, args.quick, args.allreduce, args.sizes) for n in ((2,) if args.allreduce else (1, 2))}
    print(f"machine load (1-minute average) before and after: {load[0]:.1f} / {os.getloadavg()[0]:.1f}")
    print("\nall-reduce of float32, 2 ranks (us, wall, median of interleaved turns after a barrier, the order rotating, "
          "a turn 50 calls up to 16 KB, 10 up to 256 KB, 1 above; "
          "share of raw mpi4py's bandwidth; nonblocking: mpi4py's Iallreduce waited for as jitorch waits; agreement: "
          "jitorch's block alone; torch gloo: measured after every jitorch row, its group made then; p10: the share "
          "from the 10th percentiles of the same turns, the turns least disturbed by other work: on a loaded machine "
          "mpi4py's blocking Allreduce, which yields the core while it waits, had medians of 10 to 100 times its "
          "10th percentile, and jitorch's share of the medians up to 1000%)")
    print(f"{'size':>9} {'mpi4py':>9} {'jitorch':>9} {'nonblocking':>12} {'torch gloo':>11} {'agreement':>10} "
          f"{'jitorch/mpi4py':>15} {'p10':>5}")
    for row in results[2]["allreduce"]:
        size = f"{row['bytes'] / 2**20:.2f}MB" if row["bytes"] >= 1 << 16 else f"{row['bytes']}B"
        low = row["low"]
        print(f"{size:>9} {row['mpi4py'] * 1e6:>9.1f} {row['jitorch'] * 1e6:>9.1f} {row['nonblocking'] * 1e6:>12.1f} "
              f"{row['torch'] * 1e6:>11.1f} {row['agreement'] * 1e6:>10.1f} {row['mpi4py'] / row['jitorch']:>14.0%} "
              f"{low['mpi4py'] / low['jitorch']:>5.0%}")
    if args.allreduce:
        return
    print("\nDDP training step of an MLP, the same batch per rank (ms; efficiency = 1-rank time / 2-rank time; "
          "torch's measured after jitorch's, once its gloo group was made)")
    print(f"{'system':>17} {'1 rank':>8} {'2 ranks':>8} {'efficiency':>11}")
    for system in ("jitorch eager", "jitorch compiled", "torch eager"):
        one, two = results[1]["ddp"][system], results[2]["ddp"][system]
        print(f"{system:>17} {one * 1e3:>8.2f} {two * 1e3:>8.2f} {one / two:>10.0%}")
    o = results[2]["overlap"]
    print(f"\nOverlap on an 8-layer MLP, {o['buckets']} buckets, 2 ranks (ms per step, wall). hidden: the share of "
          "one all-reduce of every gradient that the synced step does not add to the no_sync step; +copies: of that "
          "all-reduce and the bucket copies together (every gradient into its bucket and the average back); jitorch's "
          "rows interleaved among themselves with no gloo group alive, torch's among themselves after them")
    print(f"{'system':>28} {'synced':>8} {'no_sync':>8} {'all-reduce':>11} {'copies':>7} {'hidden':>7} "
          f"{'+copies':>8} {'done by then':>13}")
    for name, label in (("hooks", "jitorch, hooks advance MPI"), ("thread", "jitorch, progress thread")):
        print(f"{label:>28} {o[name] * 1e3:>8.2f} {o['local'] * 1e3:>8.2f} {o['comm'] * 1e3:>11.2f} "
              f"{o['copies'] * 1e3:>7.2f} {o['hidden ' + name]:>7.0%} {o['hidden+copies ' + name]:>8.0%} "
              f"{o['finished ' + name]:>6.1f} of {o['buckets']}")
    print(f"{'torch DDP on gloo':>28} {o['torch'] * 1e3:>8.2f} {o['torch local'] * 1e3:>8.2f} "
          f"{o['torch comm'] * 1e3:>11.2f} {'':>7} {o['hidden torch']:>7.0%}")
    print(f"(done by then: buckets whose all-reduce had finished when backward ended; jitorch's default here: "
          f"{'the thread' if o['default thread'] else 'the hooks'})")
    c, parts = o["cpu"], o["parts"]
    print(f"CPU of rank 0 per step (ms, process time): synced {c['hooks'] * 1e3:.2f} (progress thread "
          f"{c['thread'] * 1e3:.2f}), no_sync {c['local'] * 1e3:.2f}, all-reduce {c['comm'] * 1e3:.2f}, copies "
          f"{c['copies'] * 1e3:.2f}. Of the synced step (hooks, main thread): "
          + ", ".join(f"{label} {seconds * 1e3:.2f}" for label, seconds in parts.items()))
    print("On 2 cores both ranks compute backward on both cores, and MPICH's shared-memory all-reduce is CPU work "
          "(copies and sums) on those same cores, as are the bucket copies: none of it can hide behind backward "
          "here, so +copies near 0% is the best this machine can show (below: waiting for the other rank, Python "
          "per bucket, or the progress thread taking a core from backward). A positive share needs a core to spare "
          "per rank, or a network that moves the data without the CPU.")


if __name__ == "__main__":
    main()
