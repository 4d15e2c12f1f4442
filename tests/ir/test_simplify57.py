"""simplify reads a 0-d value for a pointwise operand that is its expand (a full reduction's gradient, which eager
expands in one step) where the op's result keeps its type, as it reads an expanded value of dims."""

import jitorch as jt
from jitorch.ir.passes import dce, optimize, simplify
from jitorch.jit import trace


def _ops(fn, *args):
    g = trace(fn, *args)
    optimize(g, [simplify.run, dce.run], verify=True)
    return [n.op.name for n in g.nodes]


def test_a_pointwise_op_reads_the_0d_source_of_its_expanded_operand():
    """``x * s.expand(x.shape)`` is ``x * s``: the compiled kernels of a full sum's backward hold no ``expand``
    (tests/codegen/test_gelu45.py, tests/jit/test_scale.py and tests/jit/test_warm44.py count their ops)."""
    assert _ops(lambda x, s: x * s.expand(3, 2), jt.ones(3, 2), jt.tensor(2.0)) == ["mul"]
    assert _ops(lambda x, s: jt.where(x > 0, s.expand(3, 2), x), jt.ones(3, 2), jt.tensor(2.0)) == ["gt", "where.self"]


def test_a_0d_source_that_would_change_the_result_dtype_stays_expanded():
    """A 0-d float32 operand of a float16 op promotes below it (float16), where its expand of dims promotes the
    result to float32: the expand stays; so does one whose op's result it would shrink (not a pointwise op)."""
    assert _ops(lambda x, s: x * s.expand(3, 2), jt.ones(3, 2, dtype=jt.float16), jt.tensor(2.0)) == ["expand", "mul"]
    assert _ops(lambda s: s.expand(3, 2).sum(0), jt.tensor(2.0)) == ["expand", "sum"]
