"""CUDA code on a machine without a GPU: a compiled training step on CUDA tensors under the kernel emulator.

`jitorch.cuda.emulated()` keeps CUDA tensors in host memory and runs every launched kernel's own code (the
NVPTX IR its PTX is printed from, a thread per CUDA thread), so this script runs anywhere and gets the
numbers a GPU would. It trains the same MLP on the CPU and on "CUDA", checks that the losses agree, and
shows which kernels one compiled step launches and a few lines of the PTX a GPU would load.
"""

import argparse

import numpy as np

import jitorch as torch
import jitorch.nn.functional as F
from jitorch import nn
from jitorch.runtime.cuda_backend import current


def train(device, steps, n_points):
    """Losses of ``steps`` compiled SGD steps on a fixed batch of ``n_points`` points in 3 classes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 3)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    rng = np.random.default_rng(0)
    points = rng.standard_normal((n_points, 2)).astype(np.float32)
    x = torch.tensor(points, device=device)
    y = torch.tensor((np.arctan2(points[:, 1], points[:, 0]) > 0).astype(np.int64) + (points[:, 0] > 1), device=device)

    @torch.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    losses = [step(x, y).item() for _ in range(steps)]
    return losses, step, (x, y)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--points", type=int, default=64, help="the batch: the loss's row kernels run a block of "
                    "256 threads per point, which the emulator runs as OS threads")
options = parser.parse_args()

cpu_losses, _, _ = train("cpu", options.steps, options.points)
with torch.cuda.emulated():
    print("device:", torch.cuda.get_device_name())
    cuda_losses, step, args = train("cuda", options.steps, options.points)
    backend = current()
    backend.launches.clear()
    backend.copies.clear()
    step(*args)
    print(f"one compiled step: {len(backend.launches)} kernel launches, "
          f"{sum(kind == 'dtoh' for kind, _, _ in backend.copies)} copies to the host")
    for launch in backend.launches:
        print(f"  {launch.name:<40} {' '.join(launch.ops)}")

print("losses on the CPU: ", " ".join(f"{v:.5f}" for v in cpu_losses))
print("losses on CUDA:    ", " ".join(f"{v:.5f}" for v in cuda_losses))
assert np.allclose(cpu_losses, cuda_losses, rtol=1e-5), "CUDA and CPU disagree"

kernel = torch.compile(lambda t: t.softmax(-1)).lower(torch.randn(8, 100), device="cuda").kernels[0]
ptx = kernel.asm.splitlines()
print(f"\nthe row-softmax kernel's PTX ({len(ptx)} lines), from its entry:")
start = next(i for i, line in enumerate(ptx) if ".entry" in line)
print("\n".join(ptx[start:start + 8]))
