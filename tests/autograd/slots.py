"""Which arguments of a registry call can take a gradient: shared by the rules' tests."""

import jitorch as jt


def floating(v):
    """Whether ``v`` is a floating-point tensor (what can require grad)."""
    return isinstance(v, jt.Tensor) and v.dtype.is_floating_point


def tensor_slots(op, args):
    """(position, list index or None) of every floating tensor among the schema-ordered ``args``."""
    for i, is_list in op.tensor_args:
        v = args[i]
        if is_list and v is not None:
            yield from ((i, j) for j, t in enumerate(v) if floating(t))
        elif floating(v):
            yield i, None
