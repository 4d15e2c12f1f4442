"""``torch.utils``: data loading (`jitorch.utils.data`) and the hook names PyTorch code imports (`hooks`)."""
