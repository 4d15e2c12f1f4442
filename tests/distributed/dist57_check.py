"""Run on 4 ranks under the launcher (session 57's checks); prints "rank R of N: K checks passed".

- ``jitorch.distributed.device_mesh``: a 2x2 mesh named ("dp", "tp") gives torch's answers (torch 2.13 on gloo
  gave these on 4 ranks): its ranks, each slice's ranks, coordinates, local ranks, each dimension's group (an
  all-reduce along it against NumPy), torch's errors; a mesh of two ranks leaves the others out.
- DDP(device_mesh=mesh["dp"]): each "dp" group trains as one process on its two ranks' shards (the two groups
  on different data end apart); a 2-D mesh, or a mesh with a process group, raise torch's errors.
- DDP's ``delay_all_reduce_named_params``/``param_to_hook_all_reduce``: the first layer's parameters leave the
  buckets and are averaged in one bucket on a communicator of their own (counted there), started at the hooked
  parameter's gradient (or at backward's end where that one gets none), eager and compiled (one graph, one
  all-reduce node more), every parameter delayed, a hooked parameter whose gradient comes before the delayed
  ones', parameters no rank used (zeros, as torch's), ``no_sync``, and mixed precision (eager, and compiled:
  one graph with its casts): each trains as one process on the whole batch.
"""

import datetime

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import Counting, check, raises
from jitorch import nn
from jitorch.distributed.device_mesh import DeviceMesh, init_device_mesh
from jitorch.nn.parallel import DistributedDataParallel as DDP
from jitorch.nn.parallel.distributed import _MixedPrecision

dist.init_process_group(timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 4


def mesh_checks():
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh["dp"], mesh["tp"]
    row, col = divmod(rank, 2)
    assert repr(mesh) == "DeviceMesh((dp=2, tp=2), 'cpu', stride=(2, 1))"
    assert repr(dp) == "DeviceMesh((dp=2), 'cpu', stride=(2,))", repr(dp)
    assert mesh.mesh.tolist() == [[0, 1], [2, 3]] and mesh.mesh.dtype == jt.int32
    assert dp.mesh.tolist() == [col, col + 2] and tp.mesh.tolist() == [2 * row, 2 * row + 1]
    assert mesh.get_coordinate() == (row, col) and dp.get_coordinate() == (row,) and tp.get_coordinate() == (col,)
    assert (mesh.get_local_rank("dp"), mesh.get_local_rank(1), dp.get_local_rank()) == (row, col, row)
    assert (mesh.ndim, mesh.shape, mesh.size(), dp.ndim, dp.shape, dp.size(), dp.mesh_dim_names) == \
        (2, (2, 2), 4, 1, (2,), 2, ("dp",))
    assert dp.get_group().ranks == [col, col + 2] and mesh.get_group("tp").ranks == [2 * row, 2 * row + 1]
    assert mesh.get_all_groups() == [dp.get_group(), tp.get_group()] and dp._get_root_mesh() is mesh
    assert dp == mesh["dp"] and dp != mesh and mesh["dp", "tp"] is mesh and mesh.get_rank() == rank
    assert dist.DeviceMesh is DeviceMesh and dist.init_device_mesh is init_device_mesh
    check.passed += 1
    for name, group, peers in (("dp", dp.get_group(), [col, col + 2]), ("tp", tp.get_group(), [2 * row, 2 * row + 1])):
        t = jt.full((3,), float(rank + 1))
        dist.all_reduce(t, group=group)
        check(t, np.full(3, sum(r + 1 for r in peers), np.float32))
        assert dist.get_rank(group) == mesh.get_local_rank(name)
    raises("Found the DeviceMesh have 2 dimensions. Optional kwarg `mesh_dim` needs to be specified when "
           "device_mesh.ndim > 1", mesh.get_group)
    raises("Invalid mesh_dim_names ('xx',) specified. Valid mesh_dim_names are ['dp', 'tp'].",
           lambda: mesh["xx"], KeyError)
    raises("Invalid mesh_dim_names ('tp', 'dp') specified. Mesh dim indices should be in ascending order.",
           lambda: mesh["tp", "dp"], KeyError)
    raises("Mesh dimension 'zz' does not exist.", lambda: mesh.get_group("zz"), KeyError)
    raises("mesh_shape and mesh_dim_names should have same length! Found len(mesh_dim_names): 1 and "
           "len(mesh_shape):2.", lambda: init_device_mesh("cpu", (2, 2), mesh_dim_names=("a",)))
    raises("Mesh should not be bigger than default world size 4, but found 8 ranks!",
           lambda: init_device_mesh("cpu", (8,)))
    line = init_device_mesh("cpu", (4,))
    raises("Cannot slice a DeviceMesh without mesh_dim_names!", lambda: line["a"])
    assert line.get_group().ranks == [0, 1, 2, 3] and line.get_local_rank() == rank
    # two ranks of four, in the order given: the others belong to none of its groups
    pair = DeviceMesh("cpu", [3, 1])
    inside = rank in (1, 3)
    assert pair.get_coordinate() == ((int(rank == 1),) if inside else None)
    assert (pair.get_group().ranks == [3, 1]) if inside else pair.get_group() is dist.GroupMember.NON_GROUP_MEMBER
    check.passed += 1
    return mesh


def batches(steps, seed=7, rows=4):
    gen = jt.Generator().manual_seed(seed)
    return [(jt.randn(rows, 5, generator=gen), jt.randn(rows, 3, generator=gen)) for _ in range(steps)]


def mlp(dtype=jt.float32):
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).to(dtype)


def train(model, data, part=None, compiled=False):
    """SGD steps of ``model`` on ``data``; ``part`` (index, count): on those rows of each batch only."""
    opt = jt.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        nn.MSELoss()(model(x), y).backward()
        opt.step()

    step = jt.compile(step) if compiled else step
    for x, y in data:
        if part is not None:
            x, y = x[part[0]::part[1]], y[part[0]::part[1]]
        step(x, y)
    return step


def same(a, b, atol=1e-6):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), atol=atol, err_msg=name)


def ddp_mesh_checks(mesh):
    """Each "dp" group ({0, 2} and {1, 3}) on data of its own: as one process on its two ranks' shards."""
    dp = mesh["dp"]
    row, col = divmod(rank, 2)
    jt.manual_seed(rank)  # rank-specific weights: the group's broadcast gives each the first rank's (0 or 1)
    ddp = DDP(mlp(), device_mesh=dp, bucket_cap_mb=1e-4)
    assert ddp.device_mesh is dp and ddp.process_group is dp.get_group()
    jt.manual_seed(col)
    whole = mlp()
    same(ddp.module, whole)
    data = batches(3, seed=col)
    train(ddp, data, part=(row, 2))
    train(whole, data)
    same(ddp.module, whole)
    both = [jt.zeros(8, 5), jt.zeros(8, 5)]
    dist.all_gather(both, ddp.module[0].weight.detach(), group=mesh["tp"].get_group())
    assert (both[0] - both[1]).abs().max().item() > 1e-3  # the other group trained apart
    check.passed += 1
    raises("Only 1D device mesh is supported, but got DeviceMesh((dp=2, tp=2), 'cpu', stride=(2, 1)).",
           lambda: DDP(mlp(), device_mesh=mesh))
    raises("Cannot specify both process_group and device_mesh arguments.",
           lambda: DDP(mlp(), device_mesh=dp, process_group=dp.get_group()))


class Spare(nn.Module):
    """An MLP and a layer its forward never uses."""

    def __init__(self):
        super().__init__()
        self.body, self.spare = mlp(), nn.Linear(2, 2)

    def forward(self, x):
        return self.body(x)


def delayed_ddp(model, names, hooked, **kwargs):
    params = dict(model.named_parameters())
    return DDP(model, delay_all_reduce_named_params=[(n, params[n]) for n in names],
               param_to_hook_all_reduce=params[hooked], **kwargs)


def watching(ddp):
    """Record, per start of ``ddp``'s delayed bucket, whether its backward was still running (the hook started
    it) or ending."""
    starts, start = [], ddp._start_delayed

    def recorded():
        starts.append("hook" if ddp._watching else "end")
        start()

    ddp._start_delayed = recorded
    return starts


def delayed_checks():
    first = ["0.weight", "0.bias"]
    for hooked in ("0.weight", "2.weight", "0.bias"):
        # 2.weight's gradient comes before the delayed ones', and 0.bias's before it is accumulated: the bucket
        # waits for them
        jt.manual_seed(3)
        ddp = delayed_ddp(mlp(), first, hooked, bucket_cap_mb=1e-4)
        assert {id(p) for b in ddp._buckets for p in b.params}.isdisjoint(ddp._delayed_ids) and len(ddp._delayed) == 1
        whole = mlp()
        whole.load_state_dict(ddp.module.state_dict())
        counting = ddp._delayed_group.comm = Counting(ddp._delayed_group.comm)
        starts = watching(ddp)
        data = batches(3)
        train(ddp, data, part=(rank, size))
        train(whole, data)
        same(ddp.module, whole)
        assert starts == ["hook"] * 3 and counting.all_reduces == 3, (starts, counting.all_reduces)
        check.passed += 1
    # compiled: one graph, the delayed bucket one all-reduce node more
    jt.manual_seed(4)
    ddp = delayed_ddp(mlp(), first, "0.weight")
    whole = mlp()
    whole.load_state_dict(ddp.module.state_dict())
    data = batches(3)
    step = train(ddp, data, part=(rank, size), compiled=True)
    train(whole, data)
    same(ddp.module, whole)
    x, y = data[0]
    report = str(jt.explain(step, x[rank::size], y[rank::size]))
    assert report.count("eager: _c10d_all_reduce (external)") == len(ddp._buckets) + 1, report
    check.passed += 1
    # every parameter delayed, hooked to one no rank's forward uses: started when backward ends; unused
    # delayed parameters get zeros (eager and compiled)
    for compiled in (False, True):
        jt.manual_seed(5)
        model = Spare()
        ddp = delayed_ddp(model, [n for n, _ in model.named_parameters()], "spare.weight")
        assert ddp._buckets == []
        whole = mlp()
        whole.load_state_dict(model.body.state_dict())
        starts = watching(ddp)
        train(ddp, data, part=(rank, size), compiled=compiled)
        train(whole, data)
        same(model.body, whole)
        assert starts == ["end"] * 3 if not compiled else set(starts) == {"end"}, starts  # (compiled: traced, replayed)
        assert all(bool((p.grad == 0).all()) for p in model.spare.parameters())
        check.passed += 1
    # no_sync: the delayed gradients accumulate locally too; the synced backward averages all that accumulated
    jt.manual_seed(6)
    ddp = delayed_ddp(mlp(), first, "0.weight")
    local = mlp()
    local.load_state_dict(ddp.module.state_dict())
    (x1, y1), (x2, y2) = batches(2, seed=10 + rank)
    with ddp.no_sync():
        nn.MSELoss()(ddp(x1), y1).backward()
    nn.MSELoss()(local(x1), y1).backward()
    for p, q in zip(ddp.parameters(), local.parameters()):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
    nn.MSELoss()(ddp(x2), y2).backward()
    nn.MSELoss()(local(x2), y2).backward()
    for p, q in zip(ddp.parameters(), local.parameters()):
        dist.all_reduce(q.grad, op=dist.ReduceOp.AVG)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)
    check.passed += 1
    # mixed precision, eager (the delayed parameters' float32 copies count them ready) and compiled (one graph:
    # the casts are nodes of it): as one float32 process, .grad in float64
    for compiled in (False, True):
        jt.manual_seed(7)
        wide = mlp(jt.float64)
        single = mlp()
        single.load_state_dict({k: v.float() for k, v in wide.state_dict().items()})
        ddp = delayed_ddp(wide, first, "2.weight", mixed_precision=_MixedPrecision(param_dtype=jt.float32))
        step = train(ddp, [(x.double(), y.double()) for x, y in data], part=(rank, size), compiled=compiled)
        train(single, data)
        assert all(p.grad.dtype == jt.float64 for p in wide.parameters())
        same(wide, single, atol=2e-6)
        if compiled:
            x, y = data[0]
            report = str(jt.explain(step, x[rank::size].double(), y[rank::size].double()))
            assert "runs eagerly" not in report, report
            assert "f32[8, 5] = _to_copy(%model.module.0.weight, dtype=f32" in report, report
            assert report.count("eager: _c10d_all_reduce (external)") == len(ddp._buckets) + 1, report
        check.passed += 1
    raises("delay_all_reduce_named_params and param_to_hook_all_reduce need to be set at the same time.",
           lambda: DDP(mlp(), delay_all_reduce_named_params=[]), ValueError)


mesh = mesh_checks()
ddp_mesh_checks(mesh)
delayed_checks()
print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
dist.destroy_process_group()
