"""Every registry op that has a batching rule, under vmap, against the loop over its samples.

Two samples of an op (tests/ops/samples.py, seeds 0 and 1, float64) whose tensor arguments have the same
shapes and dtypes are stacked into a batch of two; vmap of the op over those arguments must give the stack of
the op's two results: same dtype and shape, values to 1e-9 (a rule may sum in another order), and the op must
have taken its rule, unless it declined (argmax without a dim). This checks each rule on every primitive it
serves (a composite op's body is its primitives), where test_vmap.py checks rules on chosen functions.
"""

import warnings

import numpy as np

import jitorch as jt
from jitorch.func import batching, rules, vmap
from jitorch.ops import registry
from tests.ops.samples import SAMPLES, VALUES_UNDEFINED, bind, samples

# quantile's meta rule reads q's values (its range check), which a batched q has none of: vmap raises its
# "reading the values" error (torch.func's rule for quantile takes an unbatched q alone too)
READS_VALUES = {"quantile", "nanquantile"}


def _pairs(op):
    """(arguments of sample 0, of sample 1, positions of the tensors to batch) of ``op``'s first samples."""
    for a, b in list(zip(samples(op, jt.float64, 0), samples(op, jt.float64, 1)))[:2]:
        first, second = bind(op, a), bind(op, b)
        positions = [i for i, is_list in op.tensor_args if not is_list and isinstance(first[i], jt.Tensor)
                     and isinstance(second[i], jt.Tensor) and first[i].shape == second[i].shape
                     and first[i].dtype == second[i].dtype]
        if positions:
            yield first, second, positions


def _outputs(result):
    return [result] if isinstance(result, jt.Tensor) else list(result)


def _loop(op, first, second):
    """The stacks of the op's outputs on the two samples, or None where they are not tensors of one shape per
    output (or the op refuses a sample)."""
    try:
        results = [_outputs(registry.call(op, list(args))) for args in (first, second)]
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None
    pairs = list(zip(*results))
    if not all(isinstance(r, jt.Tensor) and r.shape == q.shape for r, q in pairs):
        return None
    return [jt.stack([r, q]) for r, q in pairs]


def test_every_rule_agrees_with_the_loop_on_registry_samples():
    checked, batched, failures = set(), set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, op in sorted(registry.OPS.items()):
            if name not in SAMPLES or op.kind == "random" or op.view is not None or op.composite is not None \
                    or rules.rule_for(op) is None or op.public_name in VALUES_UNDEFINED | READS_VALUES:
                continue
            for first, second, positions in _pairs(op):
                want = _loop(op, first, second)
                if want is None:
                    continue

                def call(*tensors):
                    args = list(first)
                    for i, t in zip(positions, tensors):
                        args[i] = t
                    return registry.call(op, args)

                before = batching.STATS["batched"][op.name]
                got = _outputs(vmap(call)(*[jt.stack([first[i], second[i]]) for i in positions]))
                if batching.STATS["batched"][op.name] != before:
                    batched.add(name)
                for g, w in zip((t.numpy() for t in got), (t.numpy() for t in want)):
                    if g.dtype != w.dtype or g.shape != w.shape or not np.allclose(g, w, rtol=1e-9, atol=1e-9,
                                                                                      equal_nan=True):
                        failures.append((name, "differs"))
                checked.add(name)
    assert not failures, failures
    assert len(checked) > 200 and len(batched) > 200
