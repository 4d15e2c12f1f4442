"""The module paths torch programs import from, and the names in them that jitorch implements."""

import importlib

import pytest
import torch

import jitorch as jt

# torch module path -> the names in it that jitorch implements (all of them found at the same path here).
PATHS = {
    "nn.modules.activation": ["ReLU", "GELU", "MultiheadAttention", "Softmax"],
    "nn.modules.linear": ["Linear", "Identity", "Bilinear"],
    "nn.modules.conv": ["Conv1d", "Conv2d", "ConvTranspose2d"],
    "nn.modules.loss": ["CrossEntropyLoss", "MSELoss", "NLLLoss"],
    "nn.modules.module": ["Module"],
    "nn.modules.batchnorm": ["BatchNorm1d", "BatchNorm2d", "_BatchNorm"],
    "nn.modules.instancenorm": ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"],
    "nn.modules.pixelshuffle": ["PixelShuffle", "PixelUnshuffle"],
    "nn.modules.normalization": ["LayerNorm", "GroupNorm"],
    "nn.modules.container": ["Sequential", "ModuleList", "ModuleDict"],
    "nn.modules.dropout": ["Dropout"],
    "nn.modules.sparse": ["Embedding"],
    "nn.modules.rnn": ["LSTM", "GRU", "RNN"],
    "nn.parameter": ["Parameter"],
    "nn.utils.rnn": ["pad_sequence"],
    "nn.utils.clip_grad": ["clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"],
    "utils.data.dataloader": ["DataLoader", "default_collate"],
    "optim.optimizer": ["Optimizer", "required"],
    "optim.lr_scheduler": ["LRScheduler", "_LRScheduler", "StepLR", "LambdaLR"],
    "optim.adamw": ["AdamW"],
    "autograd.grad_mode": ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode"],
    "random": ["manual_seed", "seed", "initial_seed", "default_generator"],
    "serialization": ["save", "load", "add_safe_globals", "get_safe_globals", "safe_globals"],
    "backends.cudnn": ["is_available", "version", "flags"],
    "backends.mps": ["is_available", "is_built"],
    "backends.cpu": ["get_cpu_capability"],
    "accelerator": ["current_accelerator", "is_available", "device_count", "current_device_index",
                    "set_device_index", "synchronize"],
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_module_path_holds_torchs_names(path):
    theirs = importlib.import_module(f"torch.{path}")
    ours = importlib.import_module(f"jitorch.{path}")
    for name in PATHS[path]:
        assert hasattr(theirs, name), f"torch.{path}.{name}"
        assert hasattr(ours, name), f"jitorch.{path}.{name}"


def test_reexported_classes_are_the_same_objects():
    from jitorch.nn.modules.activation import MultiheadAttention
    from jitorch.nn.modules.batchnorm import BatchNorm2d
    from jitorch.optim.adamw import AdamW
    assert (MultiheadAttention, BatchNorm2d, AdamW) == (jt.nn.MultiheadAttention, jt.nn.BatchNorm2d, jt.optim.AdamW)


def test_old_scheduler_base_still_subclasses():
    from jitorch.optim.lr_scheduler import _LRScheduler

    class Halving(_LRScheduler):
        def get_lr(self):
            return [base * 0.5 ** self.last_epoch for base in self.base_lrs]

    opt = jt.optim.SGD([jt.nn.Parameter(jt.zeros(1))], lr=1.0)
    sched = Halving(opt)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.5


def test_clip_grad_norm_is_the_deprecated_name_as_torch():
    p = jt.nn.Parameter(jt.ones(4))
    p.grad = jt.full((4,), 3.0)
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        total = jt.nn.utils.clip_grad_norm(p, 1.0)
    q = torch.nn.Parameter(torch.ones(4))
    q.grad = torch.full((4,), 3.0)
    with pytest.warns(FutureWarning):
        expected = torch.nn.utils.clip_grad_norm(q, 1.0)
    assert abs(total.item() - expected.item()) < 1e-6 and p.grad.tolist() == pytest.approx(q.grad.tolist())


def test_random_seeds_as_manual_seed():
    jt.random.manual_seed(3)
    a = jt.randn(3)
    jt.manual_seed(3)
    assert jt.equal(a, jt.randn(3)) and jt.random.initial_seed() == 3
