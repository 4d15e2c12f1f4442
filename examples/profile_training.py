"""Profile a compiled CNN training step with jitorch.profiler and write a Chrome/Perfetto trace.

    python examples/profile_training.py                      # writes the trace to a temporary folder
    python examples/profile_training.py --out trace.json     # then open it in https://ui.perfetto.dev

The schedule skips the first steps (the trace and compile of the step, SGD's momentum buffers), warms up
for one and records two: the trace shows each call of the compiled step, every kernel inside it on the
thread that ran it, the BLAS products and other eager steps between them, and the eager ops around it.
"""

import argparse
import os
import tempfile

import jitorch as torch
from jitorch import nn
from jitorch.profiler import ProfilerActivity, profile, record_function, schedule


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "jitorch_profile_training.json"))
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    @torch.compile
    def train_step(images, labels):
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    def save(prof):
        prof.export_chrome_trace(args.out)

    steps = schedule(skip_first=2, wait=0, warmup=1, active=2, repeat=1)  # steps 3 and 4, once
    with profile(activities=[ProfilerActivity.CPU], schedule=steps, on_trace_ready=save, record_shapes=True,
                 profile_memory=True) as prof:
        for _ in range(args.steps):
            with record_function("data"):
                images, labels = torch.randn(32, 1, 16, 16), torch.randint(0, 3, (32,))
            loss = train_step(images, labels)
            prof.step()

    averages = prof.key_averages()
    print(averages.table(sort_by="cpu_time_total", row_limit=12))
    kernels = prof.kernel_times()
    print(f"kernels in the compiled step: {len(train_step.lower(images, labels).kernels)}, "
          f"kernels in the trace: {len(kernels)}")
    slowest = max(kernels, key=kernels.get)
    print(f"slowest kernel: {slowest} ({kernels[slowest]:.1f} us over the recorded steps)")
    print(f"final loss {loss.item():.4f}")
    print(f"trace written to {args.out}")


if __name__ == "__main__":
    main()
