"""vmap failures the transform fuzzer found (tests/fuzz/transforms.py), each against the per-sample loop and
torch.func.vmap, with the path that ran (`batching.STATS`)."""

import torch

import jitorch
from jitorch.func import batching


def test_a_dim_of_a_zero_dim_sample_is_not_the_batch_dim_seed_7840825():
    """Seed 7840825: ``log_softmax(x, -1)`` of 0-d samples ran over the batch dimension (-1 of the physical
    [B] tensor): -2.14 where each sample's is 0. A 0-d sample with a ``dim`` now runs per sample."""
    xs = [0.5, -1.0, 2.0]
    want = torch.func.vmap(lambda x: x.log_softmax(-1))(torch.tensor(xs))
    before = batching.STATS["per_sample"]["log_softmax"]
    got = jitorch.func.vmap(lambda x: x.log_softmax(-1))(jitorch.tensor(xs))
    assert got.tolist() == want.tolist() == [0.0, 0.0, 0.0]
    assert [jitorch.tensor(x).log_softmax(-1).item() for x in xs] == got.tolist()
    assert batching.STATS["per_sample"]["log_softmax"] == before + 1


def test_stacking_zero_dim_samples_stays_batched():
    """The fix above keeps ops whose ``dim`` counts the result's dimensions batched: ``stack`` and
    ``unsqueeze`` of 0-d samples at 0 and -1."""
    xs = [0.5, -1.0, 2.0]
    for dim in (0, -1):
        f = lambda x: jitorch.stack([x, x * 2], dim).unsqueeze(dim)
        want = torch.func.vmap(lambda x: torch.stack([x, x * 2], dim).unsqueeze(dim))(torch.tensor(xs))
        before = dict(batching.STATS["per_sample"])
        got = jitorch.func.vmap(f)(jitorch.tensor(xs))
        assert got.tolist() == want.tolist()
        assert batching.STATS["per_sample"]["stack"] == before.get("stack", 0)
        assert batching.STATS["per_sample"]["unsqueeze"] == before.get("unsqueeze", 0)
