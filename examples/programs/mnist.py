"""An MNIST-style convnet in the style of PyTorch's mnist example, on synthetic 28x28 digits.

    python examples/programs/mnist.py
    python examples/programs/mnist.py --steps 5 --batch-size 8 --compile --amp-dtype float16

Each of the ten classes is a fixed random 7x7 pattern, upsampled to 28x28 and covered in
noise (each set of images shifted by up to two pixels), so that a convnet has something to learn and no data
needs downloading. Conv2d, max pooling, dropout, log_softmax with nll_loss, Adadelta with
StepLR, autocast (bfloat16 by default; float16 with a GradScaler) and gradient clipping.
"""

import argparse
import os
import tempfile

import jitorch as torch
import jitorch.nn as nn
import jitorch.nn.functional as F
from jitorch.optim.lr_scheduler import StepLR
from jitorch.utils.data import DataLoader, TensorDataset


def synthetic_digits(n, templates, generator):
    """n noisy copies of the class templates, all shifted alike, normalised like MNIST, with their labels."""
    labels = torch.randint(0, 10, (n,), generator=generator)
    images = F.interpolate(templates[labels].unsqueeze(1), size=(28, 28), mode="nearest")
    shift = torch.randint(-2, 3, (2,), generator=generator).tolist()
    images = torch.roll(images, shifts=shift, dims=(2, 3))
    images = images + 0.3 * torch.randn(images.shape, generator=generator)
    return (images - 0.1307) / 0.3081, labels


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(2304, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--test-batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--steps-per-epoch", type=int, default=50)
    p.add_argument("--max-norm", type=float, default=5.0)
    p.add_argument("--amp-dtype", choices=["bfloat16", "float16", "none"], default="bfloat16")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compile", action="store_true")
    return p.parse_args(argv)


def test(model, loader, device):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    n = len(loader.dataset)
    return test_loss / n, correct / n


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    data_generator = torch.Generator().manual_seed(args.seed)
    templates = (torch.rand(10, 7, 7, generator=data_generator) > 0.5).float()
    train_set = TensorDataset(*synthetic_digits(args.steps_per_epoch * args.batch_size, templates, data_generator))
    test_set = TensorDataset(*synthetic_digits(args.test_batch_size, templates, data_generator))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)

    model = Net().to(device)
    forward = torch.compile(model) if args.compile else model
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    amp_dtype = None if args.amp_dtype == "none" else getattr(torch, args.amp_dtype)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)

    losses = []
    _, accuracy_before = test(model, test_loader, device)
    while len(losses) < args.steps:
        model.train()
        for data, target in train_loader:
            if len(losses) == args.steps:
                break
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            with torch.autocast(device_type=device.type, dtype=amp_dtype or torch.bfloat16,
                                enabled=amp_dtype is not None):
                output = forward(data)
                loss = F.nll_loss(output, target)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
        scheduler.step()
        print(f"step {len(losses)}: loss {losses[-1]:.4f}, lr {scheduler.get_last_lr()[0]:.3f}")

    test_loss, accuracy = test(model, test_loader, device)
    print(f"test: average loss {test_loss:.4f}, accuracy {accuracy:.3f} (before training {accuracy_before:.3f})")
    with tempfile.TemporaryDirectory() as out_dir:
        path = os.path.join(out_dir, "mnist_cnn.pt")
        torch.save(model.state_dict(), path)
        reloaded = Net().to(device)
        reloaded.load_state_dict(torch.load(path))
    _, reloaded_accuracy = test(reloaded, test_loader, device)
    return {"losses": losses, "test_loss": test_loss, "accuracy": accuracy, "accuracy_before": accuracy_before,
            "reloaded_accuracy": reloaded_accuracy, "scale": scaler.get_scale() if scaler.is_enabled() else None}


if __name__ == "__main__":
    main()
