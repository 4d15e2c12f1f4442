"""Which of the compiler's newest parts a fuzz program reached: ``with Reach() as reach: ... reach.program()``.

The parts counted (`PARTS`), each by the function that does its work, wrapped while the ``Reach`` is open:

* ``gradient run``: the program had a gradient run (`program` is told);
* ``exported``: the program was exported, saved and loaded back (`program` is told: `oracle.run_exported`);
* ``grad-mode region``, ``autocast region``: the program holds a statement inside a ``no_grad``, ``enable_grad``,
  ``set_grad_enabled`` or ``inference_mode`` region, or an ``autocast`` one (`program` is told: `program_regions`);
* ``sums reshape``, ``sums one-hot``: `ir.passes.sums`' rewrites of a sum through a reshape and of a one-hot's
  sum (a rule that returned a rewrite);
* ``lse``: `ir.passes.lse` kept a log_softmax's log-probs out of memory; ``lse cone``: one whose input is itself
  computed (pointwise, maybe through reshapes), which each reader recomputes (a call of the pass that rewrote
  and met such an input);
* ``recompute across``, ``recompute reductions``: `ir.passes.recompute`'s copies across external nodes and
  reductions, and into a reduction's prologue over a permutation;
* ``tail fold``: the AVX-512 masked tail of a fixed-trip map loop (`codegen.target._tail_folded`; a kernel from
  the cache is not built again, so a process counts each kernel once);
* ``split``, ``split saved``, ``split recomputed``, ``split views``: `jit.partition.split_joint` cut a compiled
  call's joint trace; the forward saved values for the backward; the backward recomputes a chain of cheap ops;
  it remakes views of values;
* ``attention fwd``, ``attention bwd``: the fused attention kernels (`ops.attention.ATTENTION_KERNEL`);
* ``gelu traced``, ``gelu traced grad``: ``nn.functional.gelu`` traced by ``jitorch.compile`` (its result
  requiring grad: the joint trace of a gradient run); ``gelu kernel``, ``gelu kernel bwd``: eager's compiled
  GELU kernel and its gradient's (`nn.functional._gelu_kernel`, past `nn.functional.GELU_KERNEL_MIN` elements);
* ``conv traced``, ``conv channels_last``: a convolution (transposed or not: ``nn.functional._conv``,
  ``_conv_transpose``) traced by ``jitorch.compile``; one whose input is laid out channels-last;
* ``reduction out``: a reduction's ``out=`` call served by `ops.reduction_out`'s fast path (its plans are
  forgotten at each program's start, so that each program's first call makes one);
* the fusion forms of a compiled graph (`plan_cache`'s ``fuse`` and ``fuse_with_plan``, read from the groups they
  give): ``sibling reductions``, two reduction groups over one space reading a common value (what a multi-output
  reduction kernel takes); ``reductions one kernel``, a group holding two reductions; ``prologue out``, a reduction
  group writing a value of its prologue that another group reads; ``column sum``, a sum over leading dims of
  values its prologue computes pointwise (a bias's gradient through an activation's); ``row softmax``, the row
  softmax kernel (`codegen.kernel.row_softmax_of`).

`Reach.program()` ends a program's count: the set of parts reached since the last call.
"""

from __future__ import annotations

import contextlib

import jitorch
import jitorch.nn.functional as F
from jitorch.codegen import kernel, target
from jitorch.ir.lowerable import kind_of
from jitorch.ir.passes import lse, recompute, sums
from jitorch.jit import executor, partition, plan_cache, tracer  # noqa: F401 (executor: the attention kernels)
from jitorch.ops import attention, reduction_out

PARTS = ("gradient run", "exported", "grad-mode region", "autocast region", "sums reshape", "sums one-hot", "lse", "lse cone", "recompute across", "recompute reductions",
         "tail fold", "split", "split saved", "split recomputed", "split views", "attention fwd", "attention bwd",
         "gelu traced", "gelu traced grad", "gelu kernel", "gelu kernel bwd", "conv traced", "conv channels_last",
         "reduction out", "sibling reductions", "reductions one kernel", "prologue out", "column sum", "row softmax")


class Reach:
    """While open, records which of `PARTS` run; `program` returns and clears the record, `counts` sums the
    programs' records."""

    def __init__(self):
        self.now: set = set()
        self.counts = {part: 0 for part in PARTS}
        self.programs = 0
        self._cone = False
        self._stack = contextlib.ExitStack()

    def program(self, grad=False, exported=False, regions=()):
        """The parts reached since the last call (added to `counts`), ``gradient run`` where ``grad`` (the
        program had one), ``exported`` where ``exported`` and the ``regions`` (`program_regions`); forgets the
        reductions' out= plans."""
        told = {part for part, was in (("gradient run", grad), ("exported", exported)) if was} | set(regions)
        reached, self.now = self.now | told, set()
        self.programs += 1
        for part in reached:
            self.counts[part] += 1
        reduction_out.PLANS.clear()
        return reached

    def per_hundred(self):
        """``{part: programs reaching it per 100 programs}``."""
        return {part: 100 * n / max(self.programs, 1) for part, n in self.counts.items()}

    def __enter__(self):
        reduction_out.PLANS.clear()
        wrap = self._wrap
        wrap(sums, "_through_reshape", lambda out, *a: out is not None and "sums reshape")
        wrap(sums, "_one_hot_sum", lambda out, *a: out is not None and "sums one-hot")
        wrap(lse, "run", lambda out, *a: out > 0 and ("lse", self._cone and "lse cone"), before=self._no_cone)
        wrap(lse, "_stats", lambda out, graph, x, *a: self._saw_cone(x))
        wrap(recompute, "apply", lambda out, graph, made: bool(made) and "recompute across")
        wrap(recompute, "into_reductions", lambda out, *a: out > 0 and "recompute reductions")
        wrap(target, "_tail_folded", lambda out, *a: "tail fold")
        wrap(partition, "split_joint", lambda out, *a: ("split", out.saved > 0 and "split saved"))
        wrap(partition, "_recomputed", lambda out, *a: bool(out) and "split recomputed")
        wrap(partition, "_views_remade", lambda out, *a: bool(out) and "split views")
        wrap(reduction_out, "plan_of", lambda out, *a: bool(out) and "reduction out")
        wrap(plan_cache, "fuse", lambda out, *a, **k: fusion_forms(out))
        wrap(plan_cache, "fuse_with_plan", lambda out, *a, **k: fusion_forms(out[0]))
        wrap(attention, "ATTENTION_KERNEL",
             lambda out, direction, *a: out is not None and f"attention {'fwd' if direction == 'forward' else 'bwd'}")
        wrap(F, "gelu", lambda out, *a, **k: tracer.current_tracer() is not None and (
            "gelu traced", bool(out.requires_grad) and "gelu traced grad"))
        for conv in ("_conv", "_conv_transpose"):
            wrap(F, conv, lambda out, input, *a: tracer.current_tracer() is not None and (
                "conv traced", _channels_last(input) and "conv channels_last"))
        wrap(F, "_gelu_kernel", lambda out, form, dtype, backward=False: out is not None and (
            "gelu kernel bwd" if backward else "gelu kernel"))
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def _no_cone(self):
        self._cone = False

    def _saw_cone(self, x):
        """Note a log_softmax input computed in the graph (`lse.run` counts it where it then rewrote)."""
        self._cone = self._cone or _computed(x)

    def _wrap(self, module, name, which, before=None):
        """Replace ``module.name`` by a call of it (after ``before()``, if given) that adds the parts
        ``which(result, *args)`` names (a name, a tuple of them, or false) to the program's record."""
        original = getattr(module, name)

        def counted(*args, **kwargs):
            if before is not None:
                before()
            out = original(*args, **kwargs)
            named = which(out, *args, **kwargs)
            for part in named if isinstance(named, tuple) else (named,):
                if part:
                    self.now.add(part)
            return out

        setattr(module, name, counted)
        self._stack.callback(setattr, module, name, original)


def program_regions(program):
    """The region parts of `PARTS` that ``program``'s statements are in (`generator.Generator.in_region`)."""
    heads = {s.lines[0] for s in program.body if s.lines and s.lines[0].startswith("with T.")}
    return {"autocast region" if head.startswith("with T.autocast") else "grad-mode region" for head in heads}


def _computed(x):
    """Whether a log_softmax input is computed by a pointwise node (maybe through reshapes) in the graph."""
    node = getattr(x, "node", None)
    while node is not None and node.op.name in lse._RESHAPES:
        node = getattr(node.args[0], "node", None)
    return node is not None and kind_of(node) == "pointwise"


def _channels_last(x):
    """Whether ``x`` is a 4-d tensor laid out channels-last (and not also contiguous: one channel or pixel)."""
    return x.ndim == 4 and x.is_contiguous(memory_format=jitorch.channels_last) and not x.is_contiguous()


def fusion_forms(groups):
    """The fusion parts of `PARTS` that a compiled graph's ``groups`` (`ir.passes.fusion.Group`) show."""
    found = set()
    readers = {}  # id(value) -> the reduction groups reading it, by their space
    for group in groups:
        if kind_of_group(group) == "softmax":
            found.add("row softmax")
        if group.kind != "reduction":
            continue
        reductions = [n for n in group.nodes if kind_of(n) == "reduction"]
        if len(reductions) > 1:
            found.add("reductions one kernel")
        prologue = group.nodes[:group.nodes.index(reductions[0])]
        if any(v.node in prologue and kind_of(v.node) == "pointwise" for v in group.outputs):
            found.add("prologue out")
        if _column_sum(reductions[0]) and prologue:
            found.add("column sum")
        for v in group.inputs:
            readers.setdefault(id(v), set()).add((tuple(group.shape), id(group)))
    for seen in readers.values():
        spaces = {}
        for space, group in seen:
            spaces.setdefault(space, set()).add(group)
        if any(len(gs) > 1 for gs in spaces.values()):
            found.add("sibling reductions")
    return tuple(found) or None


def kind_of_group(group):
    """"softmax" for a row softmax group, else the group's kind."""
    return "softmax" if group.kind not in ("pointwise", "reduction", "view") and \
        kernel.row_softmax_of(group) is not None else group.kind


def _column_sum(node):
    """Whether ``node`` sums a value of two dims or more over dims that leave its last one."""
    x, dims = node.args[0], node.args[1] if len(node.args) > 1 else None
    ndim = len(x.type.shape)
    dims = [dims] if isinstance(dims, int) else dims
    return node.op.name == "sum" and ndim >= 2 and bool(dims) and all(d % ndim != ndim - 1 for d in dims)
