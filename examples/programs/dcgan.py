"""A DCGAN in the style of PyTorch's dcgan example, on small synthetic images.

    python examples/programs/dcgan.py
    python examples/programs/dcgan.py --steps 3 --batch-size 4 --compile

The "real" images are 16x16 blobs: a bright Gaussian spot at a random place on a dark
background. The generator upsamples noise with ConvTranspose2d, BatchNorm and ReLU; the
discriminator downsamples with Conv2d, BatchNorm and LeakyReLU; both train with Adam on
BCEWithLogitsLoss, each with its own optimizer.
"""

import argparse
import os
import tempfile

import jitorch as torch
import jitorch.nn as nn


def blobs(n, size, generator):
    """n single-channel images in [-1, 1], each a Gaussian spot at a random centre."""
    centres = torch.rand(n, 2, generator=generator) * (size - 6) + 3
    grid = torch.arange(size, dtype=torch.float32)
    dy = (grid.view(1, size, 1) - centres[:, 0].view(n, 1, 1)) ** 2
    dx = (grid.view(1, 1, size) - centres[:, 1].view(n, 1, 1)) ** 2
    return (torch.exp(-(dx + dy) / 8.0) * 2 - 1).unsqueeze(1)


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self, nz, ngf, nc):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),  # 4x4
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),  # 8x8
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),  # 16x16
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ndf, nc):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),  # 8x8
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),  # 4x4
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),  # 1x1 logit
        )

    def forward(self, input):
        return self.main(input).view(-1)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--nz", type=int, default=16)
    p.add_argument("--ngf", type=int, default=16)
    p.add_argument("--ndf", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=999)
    p.add_argument("--compile", action="store_true")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed_all(args.seed)
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    data_generator = torch.Generator().manual_seed(args.seed)

    netG = Generator(args.nz, args.ngf, 1).to(device)
    netG.apply(weights_init)
    netD = Discriminator(args.ndf, 1).to(device)
    netD.apply(weights_init)
    G = torch.compile(netG) if args.compile else netG
    D = torch.compile(netD) if args.compile else netD

    criterion = nn.BCEWithLogitsLoss()
    fixed_noise = torch.randn(8, args.nz, 1, 1, device=device)
    real_label, fake_label = 1.0, 0.0
    optimizerD = torch.optim.Adam(netD.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=args.lr, betas=(args.beta1, 0.999))

    history = {"loss_D": [], "loss_G": [], "D_x": []}
    for step in range(args.steps):
        real = blobs(args.batch_size, 16, data_generator).to(device)
        # (1) update D: maximise log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        label = torch.full((args.batch_size,), real_label, dtype=real.dtype, device=device)
        output = D(real)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = torch.sigmoid(output).mean().item()
        noise = torch.randn(args.batch_size, args.nz, 1, 1, device=device)
        fake = G(noise)
        label.fill_(fake_label)
        errD_fake = criterion(D(fake.detach()), label)
        errD_fake.backward()
        optimizerD.step()
        # (2) update G: maximise log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        errG = criterion(D(fake), label)
        errG.backward()
        optimizerG.step()
        history["loss_D"].append((errD_real + errD_fake).item())
        history["loss_G"].append(errG.item())
        history["D_x"].append(D_x)
        if step % 50 == 0 or step == args.steps - 1:
            print(f"[{step}/{args.steps}] Loss_D: {history['loss_D'][-1]:.4f} Loss_G: {errG.item():.4f} "
                  f"D(x): {D_x:.4f}")

    netG.eval()
    with torch.no_grad():
        samples = netG(fixed_noise)
    with tempfile.TemporaryDirectory() as out_dir:
        torch.save(netG.state_dict(), os.path.join(out_dir, "netG.pth"))
        torch.save(netD.state_dict(), os.path.join(out_dir, "netD.pth"))
        reloaded = Generator(args.nz, args.ngf, 1).to(device)
        reloaded.load_state_dict(torch.load(os.path.join(out_dir, "netG.pth")))
    reloaded.eval()
    with torch.no_grad():
        reloaded_samples = reloaded(fixed_noise)
    print(f"samples {tuple(samples.shape)} in [{samples.min().item():.3f}, {samples.max().item():.3f}]")
    return dict(history, samples=samples, reloaded_samples=reloaded_samples)


if __name__ == "__main__":
    main()
