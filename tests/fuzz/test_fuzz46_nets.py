"""The fuzzer's network patterns (``--nets``, `generator.Generator.net_pattern`) and its count of the compiler parts
a program reaches (``--reach``, `reach.Reach`): fixed seeds of the new kinds, checked in every CPU mode and their
gradient runs, with the parts each reaches."""

import warnings

import pytest

import jitorch
from tests.fuzz.generator import generate
from tests.fuzz.oracle import CPU_MODES, check
from tests.fuzz.reach import PARTS, Reach

KINDS = ("gelu mlp", "attention", "wide ce", "norm", "wide map", "reduction out")


def test_network_patterns_are_drawn_and_accepted():
    """Every kind of network statement is drawn over a few seeds, and torch runs most of them."""
    attempts, accepted = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(12):
            _, g = generate(seed, nets=0.5)
            for counts, seen in ((g.attempts, attempts), (g.accepted, accepted)):
                for tag, n in counts.items():
                    if tag.startswith("net "):
                        seen[tag] = seen.get(tag, 0) + n
    assert set(accepted) == {f"net {k}" for k in KINDS}, accepted
    assert sum(accepted.values()) >= 0.8 * sum(attempts.values())


def test_without_nets_a_seed_draws_the_program_it_drew_before():
    """``nets=0`` draws nothing more from the seed's generator: the seeds of earlier reports still hold."""
    for seed, options in ((0, {}), (8490215, {}), (45100340, {"losses": 0.4}), (8670237, {"chains": 0.3})):
        program, g = generate(seed, **options)
        assert program == generate(seed, nets=0.0, **options)[0]
        assert not any(tag.startswith("net ") for tag in g.attempts)


def test_reach_counts_the_parts_a_compiled_cross_entropy_gradient_reaches():
    """A compiled cross-entropy of computed logits, differentiated: the lse pass keeps the log-probs out of memory
    (its input computed pointwise), the sums pass rewrites the one-hot's row sum of nll's gradient, and the call is
    cut into a forward saving values for its backward; no other part is counted, and each program's record is
    cleared."""
    def loss(x, b, target):
        return jitorch.nn.functional.cross_entropy(x * 2 + b, target)

    leaves = [jitorch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], requires_grad=True),
              jitorch.tensor([0.25, -0.5, 1.0], requires_grad=True)]
    target = jitorch.tensor([2, 0])
    with Reach() as reach:
        jitorch.compile(loss)(*leaves, target).backward()
        reached = reach.program()
        assert reach.program() == set()
    assert {"lse", "lse cone", "sums one-hot", "split", "split saved"} <= reached <= set(PARTS)
    assert not reached & {"attention fwd", "attention bwd", "gelu traced", "reduction out"}
    assert reach.counts["lse"] == 1 and reach.programs == 2
    eager = [t.detach().clone().requires_grad_() for t in leaves]
    loss(*eager, target).backward()
    for got, want in zip(leaves, eager):
        assert jitorch.allclose(got.grad, want.grad, rtol=1e-6, atol=1e-7)


# (seed, ``--nets`` share, most statements, the parts its check reaches, the network statements it holds). The
# AVX-512 tail folding is not asserted: a kernel another test built first comes from the cache, unbuilt.
SPLIT = {"gradient run", "split", "split saved", "split views"}
SEEDS = [
    (9670011, 0.9, 6, SPLIT | {"attention fwd", "attention bwd", "gelu traced grad", "recompute across",
                               "split recomputed"}, ("attention", "gelu mlp", "norm")),
    (9680011, 0.5, 14, SPLIT | {"gelu kernel", "gelu kernel bwd", "attention fwd", "reduction out", "split recomputed"},
     ("attention", "gelu mlp", "reduction out")),
    (9680017, 0.5, 14, SPLIT | {"lse", "sums one-hot", "recompute across", "gelu traced grad"},
     ("wide ce", "wide map", "gelu mlp")),
    (9680022, 0.5, 14, {"gradient run", "lse", "lse cone"}, ("wide ce",)),
]


@pytest.mark.parametrize("seed, nets, statements, parts, kinds", SEEDS)
def test_network_pattern_seeds_run_alike_and_reach_their_parts(seed, nets, statements, parts, kinds):
    """Fixed seeds of ``--nets``: torch, eager, compiled and the interpreter agree, forward and gradients, and the
    check reaches the parts listed."""
    program, _ = generate(seed, statements, nets=nets)
    assert {s.tag for s in program.body} >= {f"net {k}" for k in kinds}
    with warnings.catch_warnings(), Reach() as reach:
        warnings.simplefilter("ignore")
        found = check(program, CPU_MODES).mismatches
        reached = reach.program(program.grad)
    assert not found, "\n".join(str(m) for m in found)
    assert parts <= reached, parts - reached


def test_an_out_call_among_ties_is_no_gradient_oracle_seed_9720115():
    """Fuzz seed 9720115 (``--nets 0.3``): ``T.nanquantile(v5, 0.5, out=v11)`` of values with tied zeros at the rank
    read, in a gradient run (torch differentiates its composite out= call): torch's gradient went to one of the tied
    elements, jitorch's to another. The out= form dropped the ties' marker from its statement's tag; now it keeps it,
    and the program has no gradient run against torch (its values are still compared)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, _ = generate(9720115, nets=0.3)
        tags = [s.tag for s in program.body if s.tag.startswith("nanquantile")]
        assert tags == ["nanquantile(out) among ties"] and not program.grad
        assert not check(program, CPU_MODES).mismatches


def test_no_computed_exponent_of_a_zero_base_seed_9750373():
    """Fuzz seed 9750373 (``--nets 0.3 --losses 0.2 --out-views 0.3``): ``T.pow(v3, v4, out=v8)`` with ``v3`` holding
    a tanh of 0 and ``v4`` a normalised row, rounding noise about 0: ``0 ** v4`` was 0 in torch, inf in eager and 1
    compiled, each library's rounding right. The generator now draws no inexact exponent of a base holding zeros
    (`generator._hint_pow`), and the seed's program runs alike."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, g = generate(9750373, out_views=0.3, losses=0.2, nets=0.3)
        assert g.attempts.get("pow(out)", 0) == 0 and not any("pow" in s.tag for s in program.body)
        assert not check(program, CPU_MODES).mismatches
