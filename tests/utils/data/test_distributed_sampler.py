"""DistributedSampler: torch's shares of the indices, padding and dropping, and epochs."""

import pytest
from torch.utils.data.distributed import DistributedSampler as TorchSampler

import jitorch as jt
from jitorch.utils.data import DistributedSampler


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (2, 4, False), (12, 4, True),
                                                  (11, 4, False)])
def test_unshuffled_shares_are_torchs(n, replicas, drop_last):
    for rank in range(replicas):
        ours = DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        theirs = TorchSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True)])
def test_shuffled_shares_split_one_seeded_permutation(n, replicas, drop_last):
    def shares(epoch):
        samplers = [DistributedSampler(range(n), replicas, r, seed=7, drop_last=drop_last) for r in range(replicas)]
        for s in samplers:
            s.set_epoch(epoch)
        return [list(s) for s in samplers]

    order = jt.randperm(n, generator=jt.Generator().manual_seed(7)).tolist()
    total = len(shares(0)[0]) * replicas
    padded = (order + order)[:total]
    assert shares(0) == [padded[r:total:replicas] for r in range(replicas)]
    assert shares(0) == shares(0) and shares(1) != shares(0)


def test_rank_errors_and_the_default_group():
    with pytest.raises(ValueError, match=r"Invalid rank 3, rank should be in the interval \[0, 2\]"):
        DistributedSampler(range(5), num_replicas=3, rank=3)
    with pytest.raises(RuntimeError, match="Requires distributed package to be available"):
        DistributedSampler(range(5))
