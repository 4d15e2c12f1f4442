"""Inter-op parallelism in a compiled call: two independent products run at once, each on one thread.

At two threads a large product splits into parts run on the team (`linalg.array_product`), and a small one
runs whole on the calling thread while the other core waits. A training step's backward computes, per linear
layer, the gradient of its input and of its weight: two products of equal work, neither of which reads the
other's result. `pair_products` makes each such pair, and pairs of small products, one step that runs the two
at once on the team (`run_products`), each whole on one thread: no product is split in parts and none waits for the
other. A product's elements are the same BLAS dot products on whichever thread it runs, whole or in parts
(`array_product`), so the call's bits do not depend on the pairing nor on the thread count.

The pairing reorders steps: the later product of a pair, with the steps it needs that lie between the two
(views, kernels, other products: steps that compute only their own outputs; an eager step that draws random
numbers keeps its place), moves up to the earlier one. The plan (`executor.Plan`) then sees the pair as one step:
its two results' buffers are taken before either product's operands' buffers are freed.

Off where ``JITORCH_INTEROP=0``, or ``set_num_interop_threads(1)`` (`threads.interop_enabled`); the pairs are
made whatever the setting (it is read at each call) and run one after the other where it is off.
"""

from __future__ import annotations

import functools
import time

from ..ir.passes.fusion import PRODUCT_MIN_WORK
from ..ops.linalg import array_product
from ..runtime import blas_calls, threads
from . import gemm_words

# Products of fewer multiply-adds are not paired: handing one to a worker costs 10 to 60 µs when the worker has
# fallen asleep (`threads.SPIN_US`), as much as such a product takes. (Fusion keeps the larger ones apart.)
PAIR_MIN_WORK = PRODUCT_MIN_WORK
# How many steps apart two products may be to pair (the later moves up; a window keeps the search linear).
PAIR_WINDOW = 24
# A pair of products one of which would split (`linalg.SPLIT_MIN_WORK`) is paired only where the larger has at
# most this many times the smaller's work: split, the two take about half their sum; at once, the larger's time.
PAIR_MAX_RATIO = 1.5


def worth_pairing(a, b, split_min):
    """Whether products of ``a`` and ``b`` multiply-adds gain by running at once rather than each after the other,
    split in parts where they hold ``split_min`` or more."""
    small, large = sorted((a, b))
    return small >= PAIR_MIN_WORK and (large < split_min or large <= PAIR_MAX_RATIO * small)


def pair_products(steps, work, movable, pair, split_min):
    """``steps`` with pairs of independent product steps each replaced by ``pair(first, second)``, placed where the
    first was; ``work(step)``: a product step's multiply-adds, None for any other step; ``movable(step)``: whether a
    step computes only its outputs (it may run earlier than its place, once what it reads is computed). The second
    of a pair lies at most `PAIR_WINDOW` steps after the first, and moves up with the steps between them that it
    reads from (directly or not), all movable and none reading from the first."""
    steps = list(steps)
    # each step's work and reads, asked once: each step is looked at from up to `PAIR_WINDOW` products before it,
    # and an eager step's reads are made anew at each asking (pairing took 89 ms of generate's warm first call, whose
    # 64 sampling steps are traced whole; 57 ms now)
    work, reads = functools.cache(work), functools.cache(lambda s: s.reads())
    made = {}  # value -> the step that writes it
    for step in steps:
        for v in step.writes():
            made[v] = step
    paired = set()
    i = 0
    while i < len(steps):
        first = steps[i]
        a = work(first)
        if a is None or first in paired:
            i += 1
            continue
        for k in range(i + 1, min(len(steps), i + 1 + PAIR_WINDOW)):
            second = steps[k]
            b = work(second)
            if b is None or second in paired or not worth_pairing(a, b, split_min):
                continue
            needed = _needed_between(steps, i, k, made, reads)
            if needed is None or not all(movable(s) for s in needed):
                continue
            both = pair(first, second)
            paired.add(both)
            between = [s for s in steps[i + 1:k] if s not in needed]
            steps[i:k + 1] = [s for s in steps[i + 1:k] if s in needed] + [both] + between
            for v in both.writes():
                made[v] = both
            i += len(needed)
            break
        i += 1
    return steps


def _needed_between(steps, i, k, made, reads):
    """The steps strictly between ``i`` and ``k`` that step ``k`` reads from, directly or through each other; None
    where it reads from step ``i``, or one of them does. ``reads(step)``: the values it reads."""
    inside = {id(s): j for j, s in enumerate(steps[i:k], i)}
    needed, todo = set(), [steps[k]]
    while todo:
        for v in reads(todo.pop()):
            producer = made.get(v)
            j = inside.get(id(producer))
            if j is None:
                continue
            if j == i:
                return None
            if producer not in needed:
                needed.add(producer)
                todo.append(producer)
    return needed


def run_products(products):
    """Compute each ``(a, b, out)`` of ``products`` (arrays: ``out = a @ b``, as `array_product` does): at once on
    the team, each whole on one thread, where inter-op parallelism is on (`threads.interop_enabled`), else one after
    the other here, each split as it would be alone. The first exception raised is raised here, after every product
    has finished."""
    if threads.interop_enabled():
        if not _run_native(products):
            threads.run_calls([(_whole, product) for product in products])
    else:
        for a, b, out in products:
            gemm_words.product(a, b, out)


def _run_native(products):
    """Compute each ``(a, b, out)`` of ``products`` whole at once on the team as the gemm call kept for it
    (`gemm_words.whole_words`: the call `blas_calls.run_gemm_calls` makes of `whole_gemm`'s operands), and return
    True; False where one of them is no such call or there is no native code (nothing has run)."""
    calls = [gemm_words.whole_words(*product) for product in products]
    entry = threads.gemm_entry()
    if None in calls or entry is None:
        return False
    threads.run_native_parts(entry, calls)
    blas_calls.counters["gemm forks"] += 1
    blas_calls.counters["gemm calls"] += len(calls)
    return True


def _whole(a, b, out):
    array_product(a, b, out, whole=True)


def run_products_profiled(recorder, names, products):
    """`run_products` in a profiled call: each product reported to ``recorder`` as a span of kind "external" named as
    ``names`` says, on the thread that ran it."""
    if not threads.interop_enabled():
        for name, product in zip(names, products):
            _timed(recorder, name, array_product, product)
        return
    threads.run_calls([(_timed, (recorder, name, _whole, product)) for name, product in zip(names, products)])


def _timed(recorder, name, fn, args):
    start = time.perf_counter_ns()  # (looked up per call: a benchmark may time spans in CPU time)
    try:
        fn(*args)
    finally:
        recorder.span(name, "external", start, {"reason": "product pair"})
