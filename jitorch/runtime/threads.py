"""Process-wide settings torch exposes as functions: thread counts and warn-always.

``set_num_threads`` governs how many threads a compiled CPU kernel splits its work across
(`codegen.cpu`: kernels of at least ``PARALLEL_MIN_WORK`` elements run in chunks through `run_chunks`) and
how many parts a large matrix product splits into (`ops.linalg`: eager and compiled products run their parts
at once, each part a one-thread BLAS call). Both fork and join on a team of ``n - 1`` worker
threads that wait in native code (`_Team`): spinning on a word for ``SPIN_US`` (less where a yield shows
another thread waiting for the core, ``CROWD_US``; ``STEP_SPIN_US`` while a compiled call holds the team, `hold`),
then asleep on a futex. On Linux the workers are kept off the forking thread's CPU while the machine is not
crowded (`PIN_WORKERS`, `_Team.place`). A
kernel's chunks go to the workers and come back without the GIL on either side (`run_chunks`), and so do a
product's parts that are one gemm call each (`run_native_parts`, `runtime.blas_calls`); other parts come back
to Python for NumPy's matmul (`run_parts`). On this project's 2-core machine a pool of ``concurrent.futures`` made a split
kernel slower than a whole one up to 2**17 elements (each part paid a thread's wake-up and the GIL's
hand-over, 20 to 60 µs); the team halves a 2**17-element GELU chain. ``set_num_threads`` also sets NumPy's
BLAS pool (through threadpoolctl, which finds the BLAS library NumPy loaded whichever it is) to one
thread: OpenBLAS's own threads spin-wait at the barriers of each product, so on cores that other work
shares, a product on two of them took 5 to 7 times the CPU time of one thread (a GPT training step: 534 ms
of CPU against 85; the README's demo step under two busy processes 55-104 ms against torch's 1.45), and they
spun against the kernels' threads as well. Without a call, jitorch does the same with ``get_num_threads()``
(``JITORCH_NUM_THREADS``, else the cores) the first time it needs to (`_default`: the first product, the first
fork onto the team), not at import: NumPy's BLAS pool is process-wide, so from then on NumPy's own products in
the process run on one thread too, as torch's thread count sets MKL's (``OPENBLAS_NUM_THREADS`` and the like
count only until then); a later ``threadpoolctl`` limit on it makes every part of a split product a
multi-threaded BLAS call. Large eager pointwise ops, GELU and
optimizer updates run NumPy's own ufunc loops on the team (`runtime.ufunc_parts`, through the native
``jitorch_ufunc_program``, without the GIL), and a recurrence's loop over time runs its kernels as one program
per range of batch rows (`run_row_program`); other eager ops run NumPy on the calling thread. jitorch has no
inter-op pool (torch's, for ``torch.jit.fork``): a compiled call runs independent products at once on the same
team (`run_calls`, see `jit.interop`), which ``set_num_interop_threads(1)`` turns off; that is all its number
(recorded once, under torch's rule) does. ``set_warn_always`` makes the warnings jitorch
gives once per compiled function (the recompile limit) come at each occurrence, as torch's TORCH_WARN_ONCE does.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
import threading
import time
from .forks import module_lock

# "split_products": whether large products split on the team, NumPy's BLAS having one thread; None until
# ``set_num_threads`` or the default (`_default`) decides it
_settings = {"threads": None, "interop": None, "interop_fixed": False, "warn_always": False,
             "split_products": None}
_teams: dict = {}  # thread count -> its team of workers
_teams_lock = module_lock(globals(), "_teams_lock")
_policy_lock = module_lock(globals(), "_policy_lock")


def _after_fork_in_child():
    """A forked child (a DataLoader worker) has none of its parent's worker threads (parts handed to them would
    wait forever), nor its calls that held them (`hold`)."""
    _teams.clear()
    if _native.cache_info().currsize:
        native = _native()
        if native is not None:
            native.held.value = 0
# What `run_parts` did, for tests and benchmarks to see what split: "forks" (calls that ran parts on workers),
# "parts" (parts handed to workers), "inline" (calls whose parts all ran on the calling thread: the team was busy),
# "taken back" (parts no worker had claimed when the forking thread finished its own, which it then ran), "holds"
# (compiled calls that held the team, `hold`)
counters = {"forks": 0, "parts": 0, "inline": 0, "taken back": 0, "holds": 0}


def _positive(name, n):
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise RuntimeError(f"{name} expects a positive integer")
    return n


def get_num_threads() -> int:
    """Threads a compiled CPU kernel may use: what ``set_num_threads`` gave, else ``JITORCH_NUM_THREADS``,
    else the number of cores."""
    if _settings["threads"] is not None:
        return _settings["threads"]
    value = os.environ.get("JITORCH_NUM_THREADS")
    return max(1, int(value)) if value else _cores()


@functools.cache
def _cores():
    """``os.cpu_count()``, read once: it took 6.6 µs a call here, and each eager kernel call asks."""
    return os.cpu_count() or 1


def set_num_threads(n) -> None:
    """Let compiled CPU kernels and large matrix products use ``n`` threads (a positive int), the calling one and
    ``n - 1`` workers; NumPy's BLAS gets one thread, for the whole process (see the module docstring)."""
    _settings["threads"] = _positive("set_num_threads", n)
    _split_products()


def _split_products():
    """Products split on the team from here on, NumPy's BLAS set to one thread: BLAS threads spin against the rest
    of the process (see the module docstring)."""
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1, user_api="blas")
    _settings["split_products"] = True


def _default():
    """Whether products split: where neither ``set_num_threads`` nor an earlier need has decided it, decides it as
    ``set_num_threads(get_num_threads())`` would, leaving the thread count to follow ``JITORCH_NUM_THREADS``."""
    split = _settings["split_products"]
    if split is None:
        with _policy_lock:
            if _settings["split_products"] is None:
                _split_products()
            split = _settings["split_products"]
    return split


def product_parts() -> int:
    """How many parts a large matrix product splits into (`run_parts`): ``get_num_threads()``, NumPy's BLAS having
    one thread (set here at the first call, where ``set_num_threads`` has not set it: `_default`)."""
    return get_num_threads() if _default() else 1


# How long a worker keeps watching for its next part, and the calling thread for the parts' end, before it
# sleeps. Waking a sleeping thread costs 10 to 60 µs (on a virtual machine the idle core must be woken too),
# as much as a kernel's chunk in a training step, whose splits come tens of µs apart; a thread that watches
# a word in memory starts in under a microsecond. torch's OpenMP threads spin for milliseconds; this bound
# catches the gaps between a training step's splits and little more.
SPIN_US = 100
# ... unless the machine has more runnable threads than cores (other processes: a shared machine, a test run
# beside a benchmark). The spin yields the core every 16th turn; a yield that kept the waiter off it this long
# or more means another thread was waiting for the core, and then the waiter sleeps at once: spinning on,
# it would take the core from the thread it waits for, or from this process's other thread (at 2 threads on
# the 2-core machine under a load of 3 to 6, a GPT step's worker spent ~100 ms per step queued for a core and
# ran 6, and the calling thread's own queueing grew from 30 ms at one thread to 44). A yield with no other
# runnable thread takes about a microsecond.
CROWD_US = 20
# ... and while a compiled call that may fork runs (`hold`), this long: a training step's serial stretches between
# forks (its Python, eager steps, kernels too small to split) last 100 µs or more before a quarter to a half of
# its forks (benchmarks/two_threads.py --gaps at load 3-5: cnn 9-10 of 21, gpt-4x128 37-38 of 146; under 1 ms
# but for 1-2 per step), and a worker asleep through each would be
# woken for the next fork. The call wakes the team as it begins, and releases the hold at its end, after which a
# wait's spin is `SPIN_US` again. The crowded rule above still ends a spin at once.
STEP_SPIN_US = 1000
# Where the workers may run (Linux): on the CPUs the forking thread may use other than the one it runs on, set
# when a fork or `hold` finds the forking thread on another CPU than the last one (`_Team.place`). A thread woken
# by a futex is placed by the kernel, which puts it on the waker's CPU when it judges the other cores no better:
# on this project's 2-vCPU machine (a kernel that packs wake-ups onto busy vCPUs) the woken worker waited there
# while the forking thread ran its own part, then found its part taken back (64-86% of the parts of a 16M sum or
# of 4096-wide rows with nothing else running, session 51), so two threads ran as one. Where the forking thread
# may use one CPU (taskset, ``os.sched_setaffinity``), the workers keep their own masks: nothing is pinned.
# "auto": only while the machine is not crowded (`UNCROWDED_LOAD`); True: always; False: never (the workers then
# get their masks back at the next fork). JITORCH_PIN_WORKERS=0, 1 or auto sets it at import.
PIN_WORKERS = {"0": False, "1": True}.get(os.environ.get("JITORCH_PIN_WORKERS", "auto"), "auto")
# ... where the 1-minute load average is under the CPUs the forking thread may use plus this (read at most every
# `LOAD_CHECK_S` seconds). On a crowded machine a worker kept off the forking thread's CPU queues for the other
# one, and when it gets it, it spins there while the forking thread queues (2 threads at load 13-15, the other
# sessions' work on both cores, placed against not, same process, turns: compiled cnn step 1.04-1.19x the wall
# time in 7 of 8 runs (median 1.08), gpt-4x128 0.99-1.15x in 4; process CPU up to 1.15x), where left to the
# kernel both threads share one core and the forking thread takes back the worker's parts as the other threads
# leave it the core.
UNCROWDED_LOAD = 1.0
LOAD_CHECK_S = 1.0

# CLOCK_MONOTONIC in ns, for native code that times itself (the team's spin; benchmarks' recorded parts)
NOW_IR = """
define internal i64 @now() {
  %ts = alloca [2 x i64], align 8
  %p = bitcast [2 x i64]* %ts to i8*
  %r = call i32 @clock_gettime(i32 1, i8* %p)
  %ps = getelementptr [2 x i64], [2 x i64]* %ts, i64 0, i64 0
  %s = load i64, i64* %ps, align 8
  %pn = getelementptr [2 x i64], [2 x i64]* %ts, i64 0, i64 1
  %n = load i64, i64* %pn, align 8
  %sn = mul i64 %s, 1000000000
  %t = add i64 %sn, %n
  ret i64 %t
}
"""

# The team's native code (Linux: it sleeps on futexes). A team's state is four int32 words: go (raised once
# per fork), go's sleepers flag, done (raised once per part a worker finished), done's sleepers flag; each
# worker has a row of four int64 in the part table: the part's entry (0: a Python part, -1: no part in this
# fork), its argument array, lo, hi. A raiser adds one and, if the flag says a thread may sleep, clears it
# and wakes the sleepers; a waiter spins, then sets the flag, looks again and sleeps (the futex call returns
# at once if the word has moved since). Every 16th turn of the spin yields the core: where the machine has
# more runnable threads than cores, the thread being waited for may be queued behind the spinner, and a
# yield that took `CROWD_US` or more ends the spin.
_TEAM_IR = """
declare i64 @syscall(i64, ...)
declare i32 @clock_gettime(i32, i8*)
{declare_pause}

define internal void @futex(i32* %word, i64 %op, i64 %value) {{
  %a = ptrtoint i32* %word to i64
  %r = call i64 (i64, ...) @syscall(i64 {futex}, i64 %a, i64 %op, i64 %value, i64 0, i64 0, i64 0)
  ret void
}}

define void @jitorch_raise(i32* %word, i32* %flag) {{
  %old = atomicrmw add i32* %word, i32 1 seq_cst
  %f = atomicrmw xchg i32* %flag, i32 0 seq_cst
  %any = icmp ne i32 %f, 0
  br i1 %any, label %wake, label %done
wake:
  call void @futex(i32* %word, i64 129, i64 2147483647)
  br label %done
done:
  ret void
}}

{now}

; A yield that kept the thread off its core this many ns or more (0: no bound) ends the spin (`CROWD_US`);
; how many spins it ended
@jitorch_crowd_ns = global i64 0
@jitorch_crowded = global i64 0
; How many compiled calls hold the teams now (`hold`), how long a wait spins while one does, and how many waits
; spun to their end and slept (their gap was longer than the spin)
@jitorch_held = global i64 0
@jitorch_hold_ns = global i64 0
@jitorch_slept = global i64 0

; A compiled call that may fork begins (``delta`` 1) or ends (-1). The first hold wakes the team's sleeping workers
; (a fork with no parts: every row is -1, see `_Team`), so the call's first fork finds them spinning.
define void @jitorch_hold(i32* %state, i64 %delta) {{
  %old = atomicrmw add i64* @jitorch_held, i64 %delta seq_cst
  %first = icmp eq i64 %old, 0
  %up = icmp sgt i64 %delta, 0
  %wake = and i1 %first, %up
  br i1 %wake, label %raise, label %done
raise:
  %goflag = getelementptr i32, i32* %state, i64 1
  call void @jitorch_raise(i32* %state, i32* %goflag)
  br label %done
done:
  ret void
}}

define i32 @jitorch_wait(i32* %word, i32 %old, i64 %spin_ns, i32* %flag) {{
entry:
  %start = call i64 @now()
  %deadline = add i64 %start, %spin_ns
  %crowd = load atomic i64, i64* @jitorch_crowd_ns monotonic, align 8
  %watch = icmp ne i64 %crowd, 0
  br label %spin
spin:
  %i = phi i64 [0, %entry], [%next, %turn], [%next, %again]
  %v = load atomic i32, i32* %word seq_cst, align 4
  %moved = icmp ne i32 %v, %old
  br i1 %moved, label %seen, label %turn
turn:
  {pause}
  %next = add i64 %i, 1
  %sixteenth = and i64 %next, 15
  %yield = icmp eq i64 %sixteenth, 0
  br i1 %yield, label %give, label %spin
give:
  %t0 = call i64 @now()
  %y = call i64 (i64, ...) @syscall(i64 {sched_yield})
  %t1 = call i64 @now()
  %off = sub i64 %t1, %t0
  %long = icmp sge i64 %off, %crowd
  %crowded = and i1 %watch, %long
  br i1 %crowded, label %count, label %check
count:
  %c = atomicrmw add i64* @jitorch_crowded, i64 1 monotonic
  br label %sleep
check:
  %late = icmp sge i64 %t1, %deadline
  br i1 %late, label %held, label %again
held:
  ; past its spin: while a compiled call holds the team (`hold`), a wait spins on to its step spin
  %h = load atomic i64, i64* @jitorch_held monotonic, align 8
  %isheld = icmp ne i64 %h, 0
  %holdns = load atomic i64, i64* @jitorch_hold_ns monotonic, align 8
  %longer = add i64 %start, %holdns
  %within = icmp slt i64 %t1, %longer
  %stay = and i1 %isheld, %within
  br i1 %stay, label %again, label %expired
expired:
  %e = atomicrmw add i64* @jitorch_slept, i64 1 monotonic
  br label %sleep
again:
  br label %spin
sleep:
  store atomic i32 1, i32* %flag seq_cst, align 4
  %w = load atomic i32, i32* %word seq_cst, align 4
  %moved2 = icmp ne i32 %w, %old
  br i1 %moved2, label %woken, label %block
block:
  %o = zext i32 %old to i64
  call void @futex(i32* %word, i64 128, i64 %o)
  br label %sleep
woken:
  ret i32 %w
seen:
  ret i32 %v
}}

define void @jitorch_wait_for(i32* %word, i32 %target, i64 %spin_ns, i32* %flag) {{
entry:
  br label %loop
loop:
  %v = load atomic i32, i32* %word seq_cst, align 4
  %there = icmp eq i32 %v, %target
  br i1 %there, label %done, label %wait
wait:
  %w = call i32 @jitorch_wait(i32* %word, i32 %v, i64 %spin_ns, i32* %flag)
  br label %loop
done:
  ret void
}}

define i32 @jitorch_work(i32* %state, i64* %row, i32 %seen, i64 %spin_ns, i32 %finished) {{
entry:
  %goflag = getelementptr i32, i32* %state, i64 1
  %done = getelementptr i32, i32* %state, i64 2
  %doneflag = getelementptr i32, i32* %state, i64 3
  %pargs = getelementptr i64, i64* %row, i64 1
  %plo = getelementptr i64, i64* %row, i64 2
  %phi = getelementptr i64, i64* %row, i64 3
  %report = icmp ne i32 %finished, 0
  br i1 %report, label %finish, label %loop
finish:
  call void @jitorch_raise(i32* %done, i32* %doneflag)
  br label %loop
loop:
  %s = phi i32 [%seen, %entry], [%seen, %finish], [%now, %next]
  %now = call i32 @jitorch_wait(i32* %state, i32 %s, i64 %spin_ns, i32* %goflag)
  ; claimed: a native part that the forking thread took back (`jitorch_fork`) is then -1 here, and one
  ; this worker took cannot be taken back
  %entry_ = atomicrmw xchg i64* %row, i64 -1 seq_cst
  %python = icmp eq i64 %entry_, 0
  br i1 %python, label %back, label %check
check:
  %none = icmp eq i64 %entry_, -1
  br i1 %none, label %next, label %run
run:
  %fn = inttoptr i64 %entry_ to void (i8*, i64, i64)*
  %a = load i64, i64* %pargs, align 8
  %args = inttoptr i64 %a to i8*
  %lo = load i64, i64* %plo, align 8
  %hi = load i64, i64* %phi, align 8
  call void %fn(i8* %args, i64 %lo, i64 %hi)
  call void @jitorch_raise(i32* %done, i32* %doneflag)
  br label %next
next:
  br label %loop
back:
  ret i32 %now
}}

; A native part's row, published: its arguments first, then its entry, which a worker claims by exchanging it
; (`jitorch_work`). Since the forking thread takes back unclaimed parts and returns, a worker woken by an earlier
; fork may claim a row the moment its entry is written: the entry must not be seen before the arguments.
define void @jitorch_publish(i64* %row, i64 %entry_, i64 %a, i64 %lo, i64 %hi) {{
  %pa = getelementptr i64, i64* %row, i64 1
  store i64 %a, i64* %pa, align 8
  %plo = getelementptr i64, i64* %row, i64 2
  store i64 %lo, i64* %plo, align 8
  %phi = getelementptr i64, i64* %row, i64 3
  store i64 %hi, i64* %phi, align 8
  store atomic i64 %entry_, i64* %row seq_cst, align 8
  ret void
}}

; A Python part's row taken back by the forking thread (`_Team.fork`): 1 if no worker had claimed it (it is then
; -1, which a worker passes over), else 0.
define i32 @jitorch_claim(i64* %row) {{
  %pair = cmpxchg i64* %row, i64 0, i64 -1 seq_cst seq_cst
  %won = extractvalue {{ i64, i1 }} %pair, 1
  %r = zext i1 %won to i32
  ret i32 %r
}}

; The forking thread runs its own chunk, then takes back every chunk no worker has claimed yet (a worker that is
; asleep, or not on a core: on a machine with more runnable threads than cores it may wait milliseconds for one)
; and runs it itself, raising done for it as the worker would have; then waits for the chunks the workers took.
; Returns how many it took back.
define i64 @jitorch_fork(i32* %state, i32 %target, i64 %entry_, i64 %a, i64 %lo, i64 %hi, i64 %spin_ns, i64* %table, i64 %rows) {{
entry:
  %goflag = getelementptr i32, i32* %state, i64 1
  %done = getelementptr i32, i32* %state, i64 2
  %doneflag = getelementptr i32, i32* %state, i64 3
  call void @jitorch_raise(i32* %state, i32* %goflag)
  %fn = inttoptr i64 %entry_ to void (i8*, i64, i64)*
  %args = inttoptr i64 %a to i8*
  call void %fn(i8* %args, i64 %lo, i64 %hi)
  br label %steal
steal:
  %i = phi i64 [0, %entry], [%inext, %next]
  %taken = phi i64 [0, %entry], [%taken2, %next]
  %more = icmp slt i64 %i, %rows
  br i1 %more, label %try, label %wait
try:
  %off = mul i64 %i, 4
  %prow = getelementptr i64, i64* %table, i64 %off
  %pair = cmpxchg i64* %prow, i64 %entry_, i64 -1 seq_cst seq_cst
  %won = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %won, label %run, label %next
run:
  %pa = getelementptr i64, i64* %prow, i64 1
  %ra = load i64, i64* %pa, align 8
  %rargs = inttoptr i64 %ra to i8*
  %plo = getelementptr i64, i64* %prow, i64 2
  %rlo = load i64, i64* %plo, align 8
  %phi_ = getelementptr i64, i64* %prow, i64 3
  %rhi = load i64, i64* %phi_, align 8
  call void %fn(i8* %rargs, i64 %rlo, i64 %rhi)
  call void @jitorch_raise(i32* %done, i32* %doneflag)
  br label %next
next:
  %won64 = zext i1 %won to i64
  %taken2 = add i64 %taken, %won64
  %inext = add i64 %i, 1
  br label %steal
wait:
  call void @jitorch_wait_for(i32* %done, i32 %target, i64 %spin_ns, i32* %doneflag)
  ret i64 %taken
}}
; A sequence of NumPy strided loops (`runtime.ufunc_parts`) over elements [lo, hi), in chunks. The argument array
; (int64): steps, chunk, then per step: loop, context, auxdata, operand count (at most 4), and per operand:
; address, stride, relative (1: the address is of the chunk's first element, a part's scratch buffer; 0: of
; element 0). A loop is NumPy's ``int (context, char **data, npy_intp *n, npy_intp *strides, auxdata)``.
define void @jitorch_ufunc_program(i8* %a, i64 %lo, i64 %hi) {{
entry:
  %args = bitcast i8* %a to i64*
  %data = alloca [4 x i64], align 8
  %strides = alloca [4 x i64], align 8
  %dims = alloca i64, align 8
  %nsteps = load i64, i64* %args, align 8
  %pchunk = getelementptr i64, i64* %args, i64 1
  %chunk = load i64, i64* %pchunk, align 8
  %data0 = getelementptr [4 x i64], [4 x i64]* %data, i64 0, i64 0
  %strides0 = getelementptr [4 x i64], [4 x i64]* %strides, i64 0, i64 0
  %datap = bitcast i64* %data0 to i8**
  br label %chunks
chunks:
  %c = phi i64 [%lo, %entry], [%cnext, %chunkdone]
  %cmore = icmp slt i64 %c, %hi
  br i1 %cmore, label %chunkbody, label %exit
chunkbody:
  %left = sub i64 %hi, %c
  %small = icmp slt i64 %left, %chunk
  %m = select i1 %small, i64 %left, i64 %chunk
  store i64 %m, i64* %dims, align 8
  br label %steps
steps:
  %s = phi i64 [0, %chunkbody], [%snext, %call]
  %p = phi i64 [2, %chunkbody], [%pnext, %call]
  %smore = icmp slt i64 %s, %nsteps
  br i1 %smore, label %stepbody, label %chunkdone
stepbody:
  %ploop = getelementptr i64, i64* %args, i64 %p
  %loopi = load i64, i64* %ploop, align 8
  %p1 = add i64 %p, 1
  %pctx = getelementptr i64, i64* %args, i64 %p1
  %ctxi = load i64, i64* %pctx, align 8
  %p2 = add i64 %p, 2
  %paux = getelementptr i64, i64* %args, i64 %p2
  %auxi = load i64, i64* %paux, align 8
  %p3 = add i64 %p, 3
  %pnops = getelementptr i64, i64* %args, i64 %p3
  %nops = load i64, i64* %pnops, align 8
  %first = add i64 %p, 4
  br label %ops
ops:
  %k = phi i64 [0, %stepbody], [%knext, %opbody]
  %q = phi i64 [%first, %stepbody], [%qnext, %opbody]
  %kmore = icmp slt i64 %k, %nops
  br i1 %kmore, label %opbody, label %call
opbody:
  %paddr = getelementptr i64, i64* %args, i64 %q
  %addr = load i64, i64* %paddr, align 8
  %q1 = add i64 %q, 1
  %pstride = getelementptr i64, i64* %args, i64 %q1
  %stride = load i64, i64* %pstride, align 8
  %q2 = add i64 %q, 2
  %prel = getelementptr i64, i64* %args, i64 %q2
  %rel = load i64, i64* %prel, align 8
  %isrel = icmp ne i64 %rel, 0
  %index = select i1 %isrel, i64 0, i64 %c
  %off = mul i64 %index, %stride
  %at = add i64 %addr, %off
  %pd = getelementptr i64, i64* %data0, i64 %k
  store i64 %at, i64* %pd, align 8
  %ps = getelementptr i64, i64* %strides0, i64 %k
  store i64 %stride, i64* %ps, align 8
  %knext = add i64 %k, 1
  %qnext = add i64 %q, 3
  br label %ops
call:
  %fn = inttoptr i64 %loopi to i32 (i8*, i8**, i64*, i64*, i8*)*
  %ctx = inttoptr i64 %ctxi to i8*
  %aux = inttoptr i64 %auxi to i8*
  %r = call i32 %fn(i8* %ctx, i8** %datap, i64* %dims, i64* %strides0, i8* %aux)
  %snext = add i64 %s, 1
  %pnext = add i64 %q, 0
  br label %steps
chunkdone:
  %cnext = add i64 %c, %m
  br label %chunks
exit:
  ret void
}}
"""
# A sequence of kernel calls: the argument array (int64) holds the count, then per call the kernel's entry (an
# ``(args, lo, hi)`` function), its argument array and, in a program of ranges, its lo and hi. Two of them, made
# from this one text: the calls over the same rows [lo, hi) that the program itself is called over
# (`run_row_program`, in the team's module), and the calls each over its own range (`STEP_PROGRAM_IR`).
_PROGRAM_IR = """
define void @jitorch_{name}(i8* %a, i64 %lo, i64 %hi) nounwind {{
entry:
  %program = bitcast i8* %a to i64*
  %count = load i64, i64* %program, align 8
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %body]
  %more = icmp slt i64 %i, %count
  br i1 %more, label %body, label %exit
body:
  %scaled = mul i64 %i, {words}
  %base = add i64 %scaled, 1
  %pf = getelementptr i64, i64* %program, i64 %base
  %fni = load i64, i64* %pf, align 8
  %pa = getelementptr i64, i64* %pf, i64 1
  %ai = load i64, i64* %pa, align 8
{ranges}
  %fn = inttoptr i64 %fni to void (i8*, i64, i64)*
  %args = inttoptr i64 %ai to i8*
  call void %fn(i8* %args, i64 %from, i64 %to)
  %next = add i64 %i, 1
  br label %loop
exit:
  ret void
}}
"""
_OWN_RANGES = """  %pl = getelementptr i64, i64* %pf, i64 2
  %from = load i64, i64* %pl, align 8
  %ph = getelementptr i64, i64* %pf, i64 3
  %to = load i64, i64* %ph, align 8"""
_CALLS_RANGE = "  %from = add i64 %lo, 0\n  %to = add i64 %hi, 0"
# One BLAS gemm call (`runtime.blas_calls`), a part of a product run natively on the team: the argument array
# (int64) holds the cblas function's address, its kind (bit 0: sgemm 0, dgemm 1; bit 1 (`GEMM_ADDS`): beta 1, the
# product added to what C holds, else beta 0), then its arguments after the layout (row-major): transA, transB, M,
# N, K, A, lda, B, ldb, C, ldc (ILP64: 64-bit integers; alpha 1).
GEMM_ADDS = 2
_GEMM_WORDS = 13
_GEMM_IR = """
define void @jitorch_gemm_call(i8* %a, i64 %lo, i64 %hi) nounwind {{
entry:
  %w = bitcast i8* %a to i64*
{loads}
  %ta = trunc i64 %w2 to i32
  %tb = trunc i64 %w3 to i32
  %pa = inttoptr i64 %w7 to i8*
  %pb = inttoptr i64 %w9 to i8*
  %pc = inttoptr i64 %w11 to i8*
  %kind = and i64 %w1, 1
  %double = icmp ne i64 %kind, 0
  %adds = and i64 %w1, 2
  %beta1 = icmp ne i64 %adds, 0
  %bs = select i1 %beta1, float 1.0, float 0.0
  %bd = select i1 %beta1, double 1.0, double 0.0
  br i1 %double, label %d, label %s
s:
  %sf = inttoptr i64 %w0 to void (i32, i32, i32, i64, i64, i64, float, i8*, i64, i8*, i64, float, i8*, i64)*
  call void %sf(i32 101, i32 %ta, i32 %tb, i64 %w4, i64 %w5, i64 %w6, float 1.0, i8* %pa, i64 %w8, i8* %pb,
                i64 %w10, float %bs, i8* %pc, i64 %w12)
  ret void
d:
  %df = inttoptr i64 %w0 to void (i32, i32, i32, i64, i64, i64, double, i8*, i64, i8*, i64, double, i8*, i64)*
  call void %df(i32 101, i32 %ta, i32 %tb, i64 %w4, i64 %w5, i64 %w6, double 1.0, i8* %pa, i64 %w8, i8* %pb,
                i64 %w10, double %bd, i8* %pc, i64 %w12)
  ret void
}}
""".format(loads="\n".join(f"  %p{j} = getelementptr i64, i64* %w, i64 {j}\n  %w{j} = load i64, i64* %p{j}, align 8"
                           for j in range(_GEMM_WORDS)))
# The programs (`calls_entry`, `gemm_entry`): modules of one function each that call nothing, so that, as the step
# program below, a code generator can link them from the kernel cache (`set_program_linker`).
ROW_PROGRAM_IR = _PROGRAM_IR.format(name="row_program", words=2, ranges=_CALLS_RANGE)
PROGRAMS = {"jitorch_row_program": ROW_PROGRAM_IR, "jitorch_gemm_call": _GEMM_IR}
# The step program, a module of its own that calls nothing: a compiled call runs its runs of kernels with it
# (`jit.kernel_runs`) at any thread count, so the code generator links it as it links a kernel, its object code
# kept in the kernel cache (`codegen.cpu.step_program`), rather than this module compiling the team's code for it.
STEP_PROGRAM_IR = _PROGRAM_IR.format(name="step_program", words=4, ranges=_OWN_RANGES)
STEP_PROGRAM = "jitorch_step_program"
# the futex and sched_yield system calls' numbers
_FUTEX = {"x86_64": 202, "aarch64": 98}
_SCHED_YIELD = {"x86_64": 24, "aarch64": 124}


class _Native:
    """The team's native functions (ctypes, so each call but ``raise_holding_gil`` releases the GIL), compiled
    once with llvmlite (MCJIT, as `runtime.dlpack` compiles its deleters; the engine lives as long as the process);
    ``spin_ns``: how long a waiter spins (`SPIN_US`); ``crowd_ns``: the native word holding how long a yield
    that ends the spin takes (`CROWD_US`; 0: none does), ``crowded``: how many spins it ended."""

    def __init__(self, arch):
        import llvmlite.binding as llvm

        x86 = arch == "x86_64"
        # x86's pause saves power and lets a hyperthread sibling run while the loop waits
        text = _TEAM_IR.format(now=NOW_IR, futex=_FUTEX[arch], sched_yield=_SCHED_YIELD[arch],
                               pause="call void @llvm.x86.sse2.pause()" if x86 else "",
                               declare_pause="declare void @llvm.x86.sse2.pause()" if x86 else "")
        libc = ctypes.CDLL(None)
        for name in ("syscall", "clock_gettime"):
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
        self.engine = _mcjit(text)
        word, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64

        def fn(name, restype, *argtypes):
            return ctypes.CFUNCTYPE(restype, *argtypes)(self.engine.get_function_address(name))
        # (PYFUNCTYPE: called with the GIL held, see `_Team.fork`)
        self.raise_holding_gil = ctypes.PYFUNCTYPE(None, word, word)(
            self.engine.get_function_address("jitorch_raise"))
        self.wait_for = fn("jitorch_wait_for", None, word, i32, i64, word)
        self.work = fn("jitorch_work", i32, word, word, i32, i64, i32)
        self.fork = fn("jitorch_fork", i64, word, i32, i64, i64, i64, i64, i64, word, i64)
        self.publish = fn("jitorch_publish", None, word, i64, i64, i64, i64)
        # (PYFUNCTYPE: a test and set, called between Python parts with the GIL held)
        self.claim = ctypes.PYFUNCTYPE(i32, word)(self.engine.get_function_address("jitorch_claim"))
        self.ufunc_program = self.engine.get_function_address("jitorch_ufunc_program")
        self.spin_ns = SPIN_US * 1000
        self.crowd_ns = ctypes.c_int64.from_address(self.engine.get_global_value_address("jitorch_crowd_ns"))
        self.crowd_ns.value = CROWD_US * 1000
        self.crowded = ctypes.c_int64.from_address(self.engine.get_global_value_address("jitorch_crowded"))
        self.held = ctypes.c_int64.from_address(self.engine.get_global_value_address("jitorch_held"))
        self.hold_ns = ctypes.c_int64.from_address(self.engine.get_global_value_address("jitorch_hold_ns"))
        self.hold_ns.value = STEP_SPIN_US * 1000
        self.slept = ctypes.c_int64.from_address(self.engine.get_global_value_address("jitorch_slept"))
        # (PYFUNCTYPE: called with the GIL held, as `raise_holding_gil`)
        self.hold = ctypes.PYFUNCTYPE(None, word, i64)(self.engine.get_function_address("jitorch_hold"))


def _mcjit(text):
    """An MCJIT engine (alive as long as it is) holding the machine code of the LLVM module ``text``, made at
    LLVM's -O0: this code waits, forks and calls, and a process compiles it before its first split or product
    (the optimising code generator took 20 ms of CPU for the team's module here, against 4 ms at -O0)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(text)
    module.triple = llvm.get_process_triple()
    module.verify()
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_triple(module.triple).create_target_machine(opt=0))
    engine.finalize_object()
    return engine


@functools.cache
def _arch():
    """The machine's architecture where there is native code for it (Linux on x86-64 or AArch64), else None:
    parts then run one after another on the calling thread."""
    arch = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    return arch if sys.platform == "linux" and arch in _FUTEX else None


@functools.cache
def _native():
    """The `_Native` code (the team's), or None where there is none (`_arch`)."""
    arch = _arch()
    return None if arch is None else _Native(arch)


# What links the `PROGRAMS` where a code generator is loaded (`set_program_linker`), else None
_program_linker = [None]


def set_program_linker(link) -> None:
    """Have ``link(name, text)`` make the programs' machine code from here on: it returns an object whose
    ``address`` is the function ``name`` of the module ``text`` (kept while the process lives), or None where it
    cannot, and MCJIT then compiles that module here. The CPU code generator sets its linker when it is imported
    (`codegen.cpu`), which takes their object code from the kernel cache: a warm process's first product then
    runs LLVM for none of it (MCJIT compiled them with the team's code, 20-25 ms of the GPT step's first call)."""
    _program_linker[0] = link


@functools.cache
def _program(name):
    """(the address of the program ``name`` of `PROGRAMS`, what holds its code), None where there is no native
    code."""
    if _arch() is None:
        return None
    link = _program_linker[0]
    code = link(name, PROGRAMS[name]) if link is not None else None
    if code is not None:
        return code.address, code
    engine = _mcjit(PROGRAMS[name])
    return engine.get_function_address(name), engine


os.register_at_fork(after_in_child=_after_fork_in_child)


@functools.cache
def _getcpu_function():
    """libc's ``sched_getcpu`` (called holding the GIL: it reads the CPU from memory the kernel keeps, without a
    system call where the C library registered rseq, as glibc 2.35 on does)."""
    libc = ctypes.CDLL(None)
    return ctypes.PYFUNCTYPE(ctypes.c_int)(ctypes.cast(libc.sched_getcpu, ctypes.c_void_p).value)


def _getcpu():
    """The CPU the calling thread runs on now."""
    return _getcpu_function()()


def _i32(n):
    """``n`` as the int32 word holds it (the counts wrap)."""
    return (n + (1 << 31)) % (1 << 32) - (1 << 31)


class _Team:
    """``n - 1`` worker threads, the state and part table they watch, and the lock that one fork at a time
    holds while it uses them. A worker spends its life in `_Native.work`, without the GIL, running native
    parts (kernels' chunks); it comes back to Python for a Python part (a product's `np.matmul`)."""

    def __init__(self, n, native):
        self.native = native
        self.busy = threading.Lock()
        self.state = (ctypes.c_int32 * 4)()
        # every row's entry -1 (no part) between forks, from the start: `hold` wakes the workers with no fork
        self.table = (ctypes.c_int64 * (4 * max(n - 1, 1)))(*[-1, 0, 0, 0] * max(n - 1, 1))
        self.python = [None] * (n - 1)  # per worker: (fn, args) of its Python part, then its exception or None
        self.done = 0  # parts finished by the workers, as of the last join
        self.workers = n - 1
        # `place`: the CPU the forking thread ran on when the workers were last pinned off it (None: they are not),
        # the masks the workers had when they started and the ones they have now as far as jitorch knows, how
        # many placements set masks, and why placement stopped (None: it goes on)
        self.placed_on, self.placements, self.hands_off = None, 0, None
        self.load_checked, self.loaded = -LOAD_CHECK_S, False  # (`_crowded`)
        self.placing, self.pinned = threading.Lock(), False
        self.tids = []
        for i in range(n - 1):
            worker = threading.Thread(target=self._loop, args=(i,), name=f"jitorch-{i + 1}", daemon=True)
            worker.start()
            self.tids.append(worker.native_id)  # (set before start returns)
        self.started_masks = self._masks()
        self.masks = list(self.started_masks)

    def _masks(self):
        """The workers' CPU masks now, where the system says (else None each)."""
        if not hasattr(os, "sched_getaffinity"):
            return [None] * len(self.tids)
        masks = []
        for tid in self.tids:
            try:
                masks.append(os.sched_getaffinity(tid))
            except OSError:  # (a sandbox that refuses it: placement then never starts, see `place`)
                masks.append(None)
        return masks

    def place(self):
        """Keep the workers off the forking thread's CPU (`PIN_WORKERS`): when it runs on another CPU than the one
        they were last pinned off, the workers may run on the CPUs the forking thread's mask allows but that one;
        where it allows one CPU, or the machine is crowded (`UNCROWDED_LOAD`), the workers get back the masks they
        started with. A worker between forks spins or sleeps, so moving it costs a system call per worker, and only
        when the forking thread has moved (after a sleep, or the scheduler balancing the cores); the check at each
        fork reads the CPU from memory (0.1 µs). Masks that someone else set (a worker's mask is not the one
        jitorch gave it, or could not be read or set) end placement for good: the user's choice stands."""
        if self.hands_off is not None:
            return
        if not PIN_WORKERS or (PIN_WORKERS == "auto" and self._crowded()):
            self.placed_on = None
            if self.pinned:
                self._locked(self.started_masks)
            return
        cpu = _getcpu()
        if cpu == self.placed_on:
            return
        allowed = os.sched_getaffinity(0)
        others = allowed - {cpu}
        if others and len(allowed) > 1:
            if self._locked([others] * len(self.tids)):
                self.placed_on = cpu
            return
        # (placed_on stays None: each fork reads the mask again, to pin once the forking thread may use more CPUs)
        self.placed_on = None
        if self.pinned:
            self._locked(self.started_masks)

    def _locked(self, masks):
        """`_set_masks` unless another thread sets them now (`hold` places the workers outside the team's lock);
        whether the workers have ``masks`` now."""
        if not self.placing.acquire(blocking=False):
            return False
        try:
            self._set_masks(masks)
        finally:
            self.placing.release()
        return self.masks == masks

    def _crowded(self):
        """Whether the machine had more runnable threads than the forking thread has CPUs, plus `UNCROWDED_LOAD`,
        as of the last look at the load average (at most `LOAD_CHECK_S` seconds ago)."""
        now = time.monotonic()
        if now - self.load_checked >= LOAD_CHECK_S:
            self.load_checked = now
            self.loaded = os.getloadavg()[0] >= len(os.sched_getaffinity(0)) + UNCROWDED_LOAD
        return self.loaded

    def _set_masks(self, masks):
        """Give the workers ``masks``, unless their masks are no longer those jitorch last gave them."""
        if self._masks() != self.masks or None in self.masks:
            self.hands_off = "a worker's CPU mask was set outside jitorch, or cannot be read"
            return
        try:
            for tid, mask in zip(self.tids, masks):
                os.sched_setaffinity(tid, mask)
        except OSError as e:
            self.hands_off = f"setting a worker's CPU mask failed: {e}"
            return
        self.masks = list(masks)
        self.pinned = self.masks != self.started_masks
        self.placements += 1

    def _loop(self, i):
        native, state = self.native, ctypes.addressof(self.state)
        row = ctypes.addressof(self.table) + 32 * i
        seen, finished = 0, 0
        while True:
            # a Python part's end is reported from the native loop, once this thread has let the GIL go: the
            # forking thread, woken by it, takes the GIL at once instead of sleeping until this one drops it
            seen = native.work(state, row, seen, native.spin_ns, finished)
            try:
                fn, args = self.python[i]
                fn(*args)
                self.python[i] = None
            except BaseException as e:  # noqa: BLE001 - re-raised on the thread that forked
                self.python[i] = e
            # the part's arguments must not outlive its fork in this frame while the worker waits: a split copy's
            # source (a dead tensor's buffer) would stay out of the allocator's pool until the next part
            fn = args = None
            finished = 1

    def fork(self, parts, entry=None):
        """Run ``parts`` (the first here): native chunks ``(args_address, lo, hi)`` of the machine code at
        ``entry``, else Python parts ``(fn, args)``."""
        native, table = self.native, self.table
        helpers = len(parts) - 1
        self.place()
        for i in range(self.workers):
            if i >= helpers:
                table[4 * i] = -1
            elif entry is None:  # (the part before the row: the GIL may pass to a late worker in between)
                self.python[i] = parts[i + 1]
                table[4 * i] = 0
            else:
                native.publish(ctypes.addressof(table) + 32 * i, entry, *parts[i + 1])
        self.done += helpers
        target = _i32(self.done)
        state = ctypes.addressof(self.state)
        counters["forks"] += 1
        counters["parts"] += helpers
        if entry is not None:
            counters["taken back"] += native.fork(state, target, entry, *parts[0], native.spin_ns,
                                                    ctypes.addressof(table), helpers)
            return
        # raised holding the GIL: a worker that sees it waits for the GIL until this thread's part lets it go
        # in NumPy's matmul; raised through a call that let the GIL go, a worker could take it in that moment
        # and keep this thread asleep until its own part let it go
        native.raise_holding_gil(state, state + 4)
        error = None
        fn, args = parts[0]
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - raised once the workers are done with the buffers
            error = e
        # then the parts no worker has claimed (asleep, or off the cores where more threads are runnable than
        # there are cores: it might start them milliseconds later), run here as native chunks are
        # (`jitorch_fork`): at worst the time of one thread
        rows = ctypes.addressof(table)
        for i in range(helpers):
            if native.claim(rows + 32 * i):
                counters["taken back"] += 1
                fn, args = self.python[i]
                try:
                    fn(*args)
                    self.python[i] = None
                except BaseException as e:  # noqa: BLE001 - raised below, as a worker's would be
                    self.python[i] = e
                native.raise_holding_gil(state + 8, state + 12)
        native.wait_for(state + 8, target, native.spin_ns, state + 12)
        for i in range(helpers):
            error, self.python[i] = error or self.python[i], None
        if error is not None:
            raise error


def _team(n):
    """The team of ``n`` threads (None where there is no native code)."""
    found = _teams.get(n)
    if found is None:
        native = _native()
        if native is None:
            return None
        _default()  # (OpenBLAS's threads would spin against the team's)
        with _teams_lock:
            found = _teams.get(n)
            if found is None:
                found = _teams[n] = _Team(n, native)
    return found


def _forked(parts, entry):
    """Run ``parts`` on the team if it is free, else one after another here; whether the team ran them."""
    team = _team(get_num_threads()) if len(parts) > 1 else None
    if team is None or len(parts) - 1 > team.workers or not team.busy.acquire(blocking=False):
        if team is not None:
            counters["inline"] += 1
        return False
    try:
        team.fork(parts, entry)
    finally:
        team.busy.release()
    return True


def hold(products_only=False):
    """A compiled call that may fork begins: until `release`, the workers of the team of ``get_num_threads()`` and
    the forking thread spin `STEP_SPIN_US` after a part rather than `SPIN_US` (unless the machine is crowded), and
    workers asleep now are woken, so that the call's forks find them spinning. Returns what `release` takes: the
    team's state word, 0 where there is no team to hold (one thread, no native code, or ``products_only``, the
    call's only forks being products', where products do not split: `product_parts`)."""
    n = get_num_threads()
    team = _team(n) if n > 1 and (not products_only or _default()) else None
    if team is None:
        return 0
    team.place()  # (before the hold wakes the workers: a woken one is placed as it wakes)
    state = ctypes.addressof(team.state)
    team.native.hold(state, 1)
    counters["holds"] += 1
    return state


def release(state):
    """The end of a call that `hold` returned ``state`` to: waits spin `SPIN_US` again once no call holds."""
    if state:
        _native().hold(state, -1)


def run_parts(fn, parts):
    """Run ``fn(*args)`` for each ``args`` of ``parts`` (at most ``get_num_threads()`` of them) as `run_calls`
    runs its calls."""
    run_calls([(fn, args) for args in parts])


def run_calls(calls):
    """Run ``fn(*args)`` for each ``(fn, args)`` of ``calls`` (at most ``get_num_threads()`` of them): the first on
    the calling thread, the others at the same time on the workers (one that no worker has claimed when the
    first is done runs on the calling thread too), and return when all have run; the first
    exception a call raised is raised here, after every call has finished. Each ``fn`` must release the GIL for
    the calls to overlap (NumPy's matmul does). Where another call holds the workers (two threads running
    compiled functions, or a part that splits again), the calls run one after another here: a call never
    waits for a worker, and what it computes does not depend on where it runs."""
    if not _forked(list(calls), None):
        for fn, args in calls:
            fn(*args)


# Inter-op parallelism of compiled calls (`jit.interop`: independent products at once): off where the environment
# sets JITORCH_INTEROP=0 (read at import), or where this is set False
INTEROP = os.environ.get("JITORCH_INTEROP", "1") != "0"


def interop_enabled() -> bool:
    """Whether a compiled call runs its independent products at once, each on one thread (`jit.interop`): where
    products split (`product_parts`: more than one thread), `INTEROP` is on and the inter-op thread
    count is not 1 (``set_num_interop_threads(1)`` turns it off, as it makes torch's inter-op pool one thread)."""
    return INTEROP and get_num_threads() > 1 and _settings["interop"] != 1 and _default()


def run_chunks(entry, args_array, bounds):
    """Run the machine code at address ``entry`` (a kernel's ``(args, lo, hi)`` entry point) over each
    ``(lo, hi)`` of ``bounds`` as `run_parts` does, but without the GIL on either side: the calling thread
    hands the chunks over, runs its own and waits for the others in one native call, and the workers run
    theirs from the native loop they wait in, so neither waits for the other to give the GIL back (a woken
    thread that must take the GIL sleeps again until it gets it, and that wake-up was the cost of a split)."""
    address = ctypes.addressof(args_array)
    if not _forked([(address, lo, hi) for lo, hi in bounds], entry):
        fn = KERNEL_ENTRY(entry)
        for lo, hi in bounds:
            fn(args_array, lo, hi)


def run_native_parts(entry, arrays):
    """Run the machine code at address ``entry`` (an ``(args, lo, hi)`` entry point that reads only its argument
    array) once per argument array of ``arrays`` (ctypes arrays), at once, as `run_chunks` runs chunks: on the team
    and without the GIL on either side; False where there is no native code (nothing has run)."""
    if _arch() is None:
        return False
    parts = [(ctypes.addressof(args), 0, 0) for args in arrays]
    if not _forked(parts, entry):
        fn = KERNEL_ENTRY(entry)
        for address, lo, hi in parts:
            fn(address, lo, hi)
    return True


def gemm_entry():
    """The native entry point of one BLAS gemm call (`_GEMM_IR`, `runtime.blas_calls`), None where there is no
    native code."""
    program = _program("jitorch_gemm_call")
    return None if program is None else program[0]


def calls_entry():
    """The native entry point that makes a program's calls in order (`_PROGRAM_IR`'s ``row_program``: the count,
    then per call an ``(args, lo, hi)`` entry point and its argument array), None where there is no native code."""
    program = _program("jitorch_row_program")
    return None if program is None else program[0]


def run_row_program(program, rows, parts):
    """Run a program of kernel calls (``program``: a C-contiguous int64 array, its count of calls, then per call a
    kernel's ``(args, lo, hi)`` entry point and its argument array's address) over ``rows`` rows, in at most
    ``parts`` near-equal ranges of rows run as `run_chunks` runs chunks, each range's calls in order: for calls
    whose rows are independent of each other's, as a recurrence's batch rows are over all its time steps (one
    fork for the whole loop, rather than one per step). False where there is no native code to run it (the
    caller then makes the calls itself)."""
    entry = calls_entry()
    if entry is None:
        return False
    address = program.__array_interface__["data"][0]
    if parts < 2 or rows < 2 or not _forked([(address, lo, hi) for lo, hi in bounds(rows, parts)], entry):
        KERNEL_ENTRY(entry)(address, 0, rows)
    return True


def bounds(size, parts):
    """``range(size)`` as at most ``parts`` ``(lo, hi)`` ranges of near-equal length, in order."""
    step = -(-size // max(1, min(parts, size)))
    return [(lo, min(lo + step, size)) for lo in range(0, size, step)]


# Row-wise eager passes (softmax, log_softmax, layer_norm) over this many elements or more split their rows
# across the team (`by_rows`). Python parts: a hand-over costs 10 to 60 µs, these passes 2 to 4 ns an element,
# and each part pays NumPy's per-call cost for its 4 to 8 passes again. From 2**16 the eager GPT-4x128 step at
# two threads was no faster on the loaded machine (CPU 0.98x, same run; its layer norms are 98k elements, its
# softmaxes 196k), so only the larger ones split.
ROWS_SPLIT_MIN = 1 << 18


def by_rows(fn, rows, out, *args):
    """``fn(rows, out, *args)`` for 2-D arrays of one row each per row (``out`` written), in parts of the rows on
    the team where they hold `ROWS_SPLIT_MIN` elements or more (`run_parts`): each row's NumPy passes are then
    the whole call's, so are its bits."""
    parts = min(get_num_threads(), rows.size // (ROWS_SPLIT_MIN // 2), rows.shape[0])
    if rows.size < ROWS_SPLIT_MIN or parts < 2:
        fn(rows, out, *args)
        return
    run_parts(fn, [(rows[lo:hi], out[lo:hi], *args) for lo, hi in bounds(rows.shape[0], parts)])


# A CPU kernel's entry point: (argument array, lo, hi) of its outer loop
KERNEL_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def init_num_threads() -> None:
    """torch's per-thread initialisation of its thread pools: jitorch's workers need none."""


def get_num_interop_threads() -> int:
    """The inter-op thread count (torch's default: the number of cores)."""
    return _settings["interop"] or os.cpu_count() or 1


def set_num_interop_threads(n) -> None:
    """Record the inter-op thread count: allowed once (RuntimeError after, as torch)."""
    n = _positive("set_num_interop_threads", n)
    if _settings["interop_fixed"]:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work has started or "
                           "set_num_interop_threads called")
    _settings["interop"], _settings["interop_fixed"] = n, True


def is_warn_always_enabled() -> bool:
    """Whether once-only warnings are given every time."""
    return _settings["warn_always"]


def set_warn_always(b) -> None:
    """Give once-only warnings every time (``b`` True) or once (False)."""
    _settings["warn_always"] = bool(b)
