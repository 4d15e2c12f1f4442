"""The fuzzer's loss patterns (``--losses``, `generator.Generator.loss_pattern`), which the sums and lse passes
rewrite, and the failure its first bursts found."""

import warnings

from tests.fuzz.generator import generate
from tests.fuzz.oracle import CPU_MODES, check


def test_loss_patterns_are_drawn_and_accepted():
    """Every kind of loss statement is drawn over a few seeds, and torch runs most of them."""
    attempts, accepted = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(20):
            _, g = generate(seed, losses=0.5)
            for counts, seen in ((g.attempts, attempts), (g.accepted, accepted)):
                for tag, n in counts.items():
                    if tag.startswith("loss "):
                        seen[tag] = seen.get(tag, 0) + n
    kinds = {f"loss {k}" for k in ("ce", "nll", "gather", "pointwise", "one-hot", "reshape sum")}
    assert set(accepted) == kinds, accepted
    assert sum(accepted.values()) >= 0.8 * sum(attempts.values())


def test_without_losses_a_seed_draws_the_program_it_drew_before():
    """``losses=0`` draws nothing more from the seed's generator: the seeds of earlier reports still hold."""
    for seed in (0, 8490215):
        assert generate(seed)[0] == generate(seed, losses=0.0)[0]
        assert not any(tag.startswith("loss ") for tag in generate(seed)[1].attempts)


def test_log_softmax_of_gathered_log_probs_seed_45100340():
    """Fuzz seed 45100340 (``--losses 0.4``): ``log_softmax(x - 1, 1).gather(...)`` then nll of the log_softmax of
    that; the compiled call raised a KeyError in fusion (tests/ir/test_newpass45.py has the pass's test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, _ = generate(45100340, losses=0.4)
        assert any("log_softmax" in line and "gather" in line for s in program.body for line in s.lines)
        assert not check(program, CPU_MODES).mismatches


def test_gather_of_no_rows_by_an_empty_index_seed_45200343():
    """Fuzz seed 45200343 (``--losses 0.4``): a gather of a (0, 1) log-softmax by ``T.tensor([])`` (an empty index
    of one dim) under a gradient run: eager's backward raised an IndexError (gather's gradient; its test is in
    tests/ir/test_newpass45.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, _ = generate(45200343, losses=0.4)
        assert program.grad
        assert not check(program, CPU_MODES).mismatches


def test_fill_in_the_cone_of_picked_log_probs_seeds_45400072_45400187():
    """Fuzz seeds 45400072 and 45400187 (``--losses 0.6``): ``v0[::1] = 1`` then the log-probs of ``v0 + 3`` picked
    by a gather; the compiled call raised fill's error on a 2-d value (the lse pass; its test is in
    tests/ir/test_newpass45.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in (45400072, 45400187):
            program, _ = generate(seed, losses=0.6)
            assert not check(program, CPU_MODES).mismatches, seed
