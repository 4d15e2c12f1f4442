"""Train a small CNN to tell bar orientations apart in synthetic images, with a compiled training step.

    python examples/train_cnn.py                 # defaults finish in a few seconds
    python examples/train_cnn.py --epochs 4 --images 4096
    python examples/train_cnn.py --device cuda   # the default where a GPU is present

Each 16x16 image holds one bright bar, horizontal, vertical or diagonal, at a random place, under noise.
The network (Conv2d, BatchNorm2d, ReLU, MaxPool2d, AdaptiveAvgPool2d, Linear) learns the orientation;
chance is 1/3. The whole training step (forward, loss, backward, SGD with momentum, and BatchNorm's
running statistics) is one compiled graph.
"""

import argparse
import statistics
import time

import jitorch as torch
from jitorch import nn
from jitorch.utils.data import DataLoader, TensorDataset

CLASSES = ("horizontal", "vertical", "diagonal")


def bar_images(n, size=16, noise=0.3, generator=None):
    """`n` images [n, 1, size, size] with one bar each, and their labels (an index into CLASSES)."""
    labels = torch.randint(0, len(CLASSES), (n,), generator=generator)
    offset = torch.randint(2, size - 2, (n, 1, 1), generator=generator)
    rows = torch.arange(size).view(1, size, 1)
    cols = torch.arange(size).view(1, 1, size)
    shape = (n, size, size)
    bars = torch.stack([(rows == offset).expand(shape),              # horizontal: a row lit
                        (cols == offset).expand(shape),              # vertical: a column lit
                        (rows - cols == offset - size // 2)])        # diagonal
    picked = bars[labels, torch.arange(n)].float()          # each image's bar, by its label
    images = picked + noise * torch.randn(n, size, size, generator=generator)
    return images.unsqueeze(1), labels


class BarNet(nn.Module):
    def __init__(self, channels=8, classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, kernel_size=3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, kernel_size=3, padding=1), nn.BatchNorm2d(2 * channels), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def evaluate(model, images, labels):
    """Accuracy over a whole set in one batch, with BatchNorm using its running statistics."""
    model.eval()
    with torch.no_grad():
        correct = (model(images).argmax(dim=1) == labels).float().mean().item()
    model.train()
    return correct


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--images", type=int, default=1024, help="training images")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    train_x, train_y = bar_images(args.images, generator=torch.Generator().manual_seed(1))
    test_x, test_y = bar_images(512, generator=torch.Generator().manual_seed(2))
    loader = DataLoader(TensorDataset(train_x, train_y), batch_size=args.batch_size, shuffle=True,
                        drop_last=True, generator=torch.Generator().manual_seed(3))

    test_x, test_y = test_x.to(args.device), test_y.to(args.device)
    model = BarNet().to(args.device)
    print(model)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    @torch.compile
    def train_step(images, labels):
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss

    print(f"before training: test accuracy {evaluate(model, test_x, test_y):.3f} (chance is {1 / len(CLASSES):.3f})")
    for epoch in range(1, args.epochs + 1):
        losses, times = [], []
        for images, labels in loader:
            start = time.perf_counter()
            images, labels = images.to(args.device), labels.to(args.device)
            losses.append(train_step(images, labels).item())
            times.append(time.perf_counter() - start)
        # the first call of the first epoch traces twice (SGD makes its momentum buffers) and compiles
        print(f"epoch {epoch}: loss {statistics.mean(losses):.4f}  test accuracy "
              f"{evaluate(model, test_x, test_y):.3f}  median step {statistics.median(times) * 1e3:.1f} ms")

    bn = model.features[1]
    print(f"first BatchNorm's running statistics, updated inside the compiled step: mean[:3] "
          f"{[round(m, 3) for m in bn.running_mean[:3].tolist()]}, batches tracked {bn.num_batches_tracked.item()}")
    # jitorch's own: the compiled step's fused kernels (jitorch.explain(train_step, images, labels) says more)
    print(f"kernels in the compiled step: {len(train_step.lower(images, labels).kernels)}")
    print(f"final accuracy: {evaluate(model, test_x, test_y):.3f}")


if __name__ == "__main__":
    main()
