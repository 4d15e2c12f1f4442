"""A variational autoencoder in the style of PyTorch's vae example, on small synthetic images.

    python examples/programs/vae.py
    python examples/programs/vae.py --steps 5 --batch-size 8 --compile

The images are 28x28 strokes with values in [0, 1]: a soft line through the centre at one
of a few angles. The encoder maps an image to the mean and log-variance of a Gaussian; a
sample drawn with the reparameterisation trick is decoded back; the loss is the binary
cross-entropy of the reconstruction plus the KL divergence from the unit Gaussian.
"""

import argparse
import math
import os
import tempfile

import jitorch as torch
import jitorch.nn as nn
import jitorch.nn.functional as F
from jitorch.utils.data import DataLoader, TensorDataset


def strokes(n, generator):
    """n flattened 28x28 images: a soft line through the centre at a random multiple of 22.5 degrees."""
    angles = torch.randint(0, 8, (n,), generator=generator).float() * (math.pi / 8)
    grid = torch.arange(28, dtype=torch.float32) - 13.5
    ys, xs = grid.view(1, 28, 1), grid.view(1, 1, 28)
    distance = (xs * torch.sin(angles).view(n, 1, 1) - ys * torch.cos(angles).view(n, 1, 1)).abs()
    return torch.exp(-distance ** 2 / 2.0).view(n, 784)


class VAE(nn.Module):
    def __init__(self, hidden, latent):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    """Reconstruction + KL divergence, summed over elements and the batch."""
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--train-size", type=int, default=512)
    p.add_argument("--hidden", type=int, default=200)
    p.add_argument("--latent", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compile", action="store_true")
    return p.parse_args(argv)


def test(model, loader, device):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for (data,) in loader:
            data = data.to(device)
            recon, mu, logvar = model(data)
            total += loss_function(recon, data, mu, logvar).item()
    return total / len(loader.dataset)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data_generator = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(TensorDataset(strokes(args.train_size, data_generator)), batch_size=args.batch_size,
                              shuffle=True, drop_last=True)
    test_loader = DataLoader(TensorDataset(strokes(args.batch_size, data_generator)), batch_size=args.batch_size)

    model = VAE(args.hidden, args.latent).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def train_step(data):
        optimizer.zero_grad()
        recon, mu, logvar = model(data)
        loss = loss_function(recon, data, mu, logvar)
        loss.backward()
        optimizer.step()
        return loss

    step_fn = torch.compile(train_step) if args.compile else train_step
    losses = []
    model.train()
    while len(losses) < args.steps:
        for (data,) in train_loader:
            if len(losses) == args.steps:
                break
            loss = step_fn(data.to(device))
            losses.append(loss.item() / len(data))
        print(f"step {len(losses)}: average loss {losses[-1]:.4f}")

    test_loss = test(model, test_loader, device)
    with tempfile.TemporaryDirectory() as out_dir:
        path = os.path.join(out_dir, "vae.pt")
        torch.save(model.state_dict(), path)
        reloaded = VAE(args.hidden, args.latent).to(device)
        reloaded.load_state_dict(torch.load(path))
    reloaded.eval()
    with torch.no_grad():
        z = torch.randn(16, args.latent, device=device)
        sample, reloaded_sample = model.decode(z), reloaded.decode(z)
    print(f"test loss {test_loss:.4f}; samples {tuple(sample.view(16, 1, 28, 28).shape)}")
    return {"losses": losses, "test_loss": test_loss, "sample": sample, "reloaded_sample": reloaded_sample}


if __name__ == "__main__":
    main()
