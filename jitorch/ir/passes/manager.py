"""The pass manager: runs the optimisation passes over a graph until nothing changes."""

from __future__ import annotations

import os

from ...runtime import logs
from ...runtime.autocast_mode import excluded as autocast_excluded
from ..verifier import VerifyError, verify as verify_graph
from . import cse, dce, decompose, fold, simplify, sink, sums, transpose

# decompose first, so the other passes clean up after it (the variance's mean merges with var_mean's);
# sums takes the sums of a reshape or a one-hot to their sources (fusion then puts them where those are made);
# sink runs a convolution's batch-last layout through the ops after it (simplify then drops the permutes that
# undo each other); simplify, fold and transpose expose duplicates and dead nodes, which cse and dce then remove
DEFAULT_PASSES = (decompose.run, simplify.run, sums.run, fold.run, transpose.run, sink.run, cse.run, dce.run)
MAX_ROUNDS = 4


def debug_enabled():
    """Whether ``JITORCH_DEBUG`` is set to something other than empty, 0, false, no or off."""
    return os.environ.get("JITORCH_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def _describe(run_pass, count):
    name = getattr(run_pass, "pass_name", run_pass.__name__)
    return f"{name}: {getattr(run_pass, 'message', '%d rewrites') % count}"


def optimize(graph, passes=DEFAULT_PASSES, verify=None, settled=None):
    """Optimise ``graph`` in place and return it.

    Runs ``passes`` (functions ``run(graph) -> number of rewrites``) in order,
    and the whole sequence again while any pass rewrote something (at most
    `MAX_ROUNDS` times). With ``verify`` (default: the ``JITORCH_DEBUG``
    environment variable) the graph is verified after each pass, so a broken
    rewrite raises `jitorch.ir.VerifyError` naming it. Each pass that changed
    something logs one line under ``JITORCH_LOGS=passes``.

    ``settled(graph, confirmed)``, when given, is told after the first round, if it rewrote something
    (``confirmed=False``): returning True ends the passes there, the caller knowing that the second
    round would rewrite nothing (it saw that round confirm it before: the round costs a third of the
    passes' time). When the second round does rewrite nothing, it is told again (``confirmed=True``).
    """
    if verify is None:
        verify = debug_enabled()
    # the passes' eager evaluations (folding) and traces (decompositions) run the ops as the graph has them:
    # its casts were recorded when it was traced, and autocast around the compilation must not add others
    with autocast_excluded():
        _run_passes(graph, passes, verify, settled)
    return graph


def _run_passes(graph, passes, verify, settled=None):
    for round_number in range(MAX_ROUNDS):
        changed = False
        for run_pass in passes:
            count = run_pass(graph)
            if verify:
                try:
                    verify_graph(graph)
                except VerifyError as e:
                    raise VerifyError(f"after {_describe(run_pass, count)}: {e}") from e
            if count:
                changed = True
                logs.log("passes", "%s", _describe(run_pass, count))
        if not changed:
            if round_number == 1 and settled is not None:
                settled(graph, True)
            break
        if round_number == 0 and settled is not None and settled(graph, False):
            break
