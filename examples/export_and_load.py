"""Train a small model, export it with jitorch.export, and run the saved file in a fresh process.

    python examples/export_and_load.py

The exported file holds the traced graph and the weights (no pickle, no Python source), so the
process that loads it needs neither this script nor the model's class. From a shell:

    jitorch inspect classifier.jtx                  # signature, weights, graph and compiled kernels
    jitorch run classifier.jtx --input x=x.npy --output logits.npy
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

import jitorch as torch
from jitorch import nn
from jitorch.export import Dim

CLASSES = 4


class Classifier(nn.Module):
    def __init__(self, features=8, hidden=32, classes=CLASSES):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Dropout(0.1), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


def blobs(n, features=8, generator=None):
    """`n` points around CLASSES random centres, labelled by centre."""
    centres = 3 * torch.randn(CLASSES, features, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    return centres[labels] + torch.randn(n, features, generator=generator), labels


# The fresh process: it imports jitorch and NumPy only, loads the exported file, and runs it.
LOADER = """
import sys
import numpy as np
import jitorch
program = jitorch.load(sys.argv[1])               # an ExportedProgram: jitorch.load tells it by content
x = jitorch.from_numpy(np.load(sys.argv[2]))
np.save(sys.argv[3], program(x).numpy())
print(f"fresh process: loaded {type(program).__name__}, ran it on {list(x.shape)}")
"""


def train(model, steps=60):
    x, y = blobs(512, generator=torch.Generator().manual_seed(1))
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @torch.compile
    def train_step(inputs, targets):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    for step in range(steps):
        batch = slice(step * 64 % 512, step * 64 % 512 + 64)
        loss = train_step(x[batch], y[batch])
    print(f"trained {steps} compiled steps: loss {loss.item():.4f}")


def main():
    torch.manual_seed(0)
    model = Classifier()
    train(model)
    model.eval()  # export what inference runs: BatchNorm's running statistics, no dropout

    test_x, test_y = blobs(200, generator=torch.Generator().manual_seed(2))
    # The batch size stays symbolic: the exported program accepts any batch from 1 to 1024.
    program = torch.export(model, (test_x,), dynamic_shapes={"x": {0: Dim("batch", min=1, max=1024)}})
    print("\n".join(program.signature.describe()))
    print(f"weights copied into the program: {sorted(program.constants)}")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "classifier.jtx")
        program.save(path)
        print(f"saved {os.path.basename(path)}: {os.path.getsize(path)} bytes")

        np.save(os.path.join(tmp, "x.npy"), test_x.numpy())
        # the fresh process imports the same jitorch as this one, whether installed or from a checkout
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
        done = subprocess.run([sys.executable, "-c", LOADER, path, os.path.join(tmp, "x.npy"),
                               os.path.join(tmp, "logits.npy")], capture_output=True, text=True, env=env, check=True)
        print(done.stdout.strip())
        reloaded = torch.from_numpy(np.load(os.path.join(tmp, "logits.npy")))

        # `jitorch inspect FILE`, through the module so it runs without the console script installed
        inspect = subprocess.run([sys.executable, "-m", "jitorch.cli", "inspect", path], capture_output=True,
                                 text=True, env=env, check=True)
        print("jitorch inspect, first lines:\n  " + "\n  ".join(inspect.stdout.splitlines()[:6]))

    with torch.no_grad():
        expected = model(test_x)
    print(f"exported program == model in this process: {torch.allclose(program(test_x), expected)}")
    print(f"fresh process's outputs == model's: {torch.allclose(reloaded, expected)}")
    print(f"a batch of 3 through the same program: {list(program(test_x[:3]).shape)}")
    print(f"final accuracy: {(reloaded.argmax(dim=1) == test_y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
