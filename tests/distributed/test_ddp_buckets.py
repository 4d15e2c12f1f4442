"""DDP's buckets, as torch sizes them: reverse parameter order, the first at most 1 MiB, the rest at most the cap,
one dtype each (no process group needed to plan them)."""

import jitorch as jt
from jitorch.nn.parallel.distributed import FIRST_BUCKET_BYTES, DistributedDataParallel


def test_the_first_bucket_is_small_so_the_last_layers_start_communicating_early():
    params = [jt.zeros(n) for n in (300_000, 300_000, 100_000, 50_000, 50_000)]  # 1.2, 1.2, 0.4, 0.2, 0.2 MB
    buckets = DistributedDataParallel._bucketed(params[::-1], FIRST_BUCKET_BYTES, 3 * 2 ** 20)
    assert [[p.numel() for p in b.params] for b in buckets] == [[50_000, 50_000, 100_000], [300_000, 300_000]]


def test_a_bucket_holds_one_dtype():
    params = [jt.zeros(4), jt.zeros(4, dtype=jt.float64), jt.zeros(4)]
    buckets = DistributedDataParallel._bucketed(params, FIRST_BUCKET_BYTES, 2 ** 20)
    assert [[p.dtype for p in b.params] for b in buckets] == [[jt.float32], [jt.float64], [jt.float32]]
