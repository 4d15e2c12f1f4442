"""Smoke calls of the libraries: each torch.nn module constructed and run forward (jitorch's copy loaded
with the torch module's state_dict, so the weights agree), each optimizer stepped three times on one
parameter, each LR scheduler stepped eight times, and torch.autograd's API on small graphs."""

from __future__ import annotations

import numpy as np
import torch

from .compare import torch_to_numpy
from .recipes import x

_RNG = np.random.default_rng(7)


def f(*shape):
    """A float32 input of ``shape`` (fixed random values)."""
    return torch.from_numpy(_RNG.standard_normal(shape).astype(np.float32))


def pos(*shape):
    return torch.from_numpy(_RNG.uniform(0.1, 1.0, shape).astype(np.float32))


def sgn(*shape):
    return torch.from_numpy(_RNG.choice([-1.0, 1.0], shape).astype(np.float32))


def ints(high, *shape):
    return torch.from_numpy(_RNG.integers(0, high, shape))


def logp(*shape):
    return torch.log_softmax(f(*shape), -1)


def _pooled(fn, inp, *args):
    """(pooled values, indices) of a torch max-pool, the input of a MaxUnpool."""
    return fn(inp, *args, return_indices=True)


def _layer(nn):
    return nn.TransformerEncoderLayer(8, 2, 16, 0.0)


# torch.nn module name: (build(nn) -> module, forward inputs, compare mode). Dropout-like modules are random.
MODULES = {
    "AdaptiveAvgPool1d": (lambda nn: nn.AdaptiveAvgPool1d(2), [f(2, 3, 5)]),
    "AdaptiveAvgPool2d": (lambda nn: nn.AdaptiveAvgPool2d((2, 3)), [f(2, 3, 5, 6)]),
    "AdaptiveAvgPool3d": (lambda nn: nn.AdaptiveAvgPool3d(2), [f(1, 2, 4, 4, 5)]),
    "AdaptiveLogSoftmaxWithLoss": (lambda nn: nn.AdaptiveLogSoftmaxWithLoss(8, 10, [4, 8]), [f(3, 8), ints(10, 3)]),
    "AdaptiveMaxPool1d": (lambda nn: nn.AdaptiveMaxPool1d(2), [f(2, 3, 5)]),
    "AdaptiveMaxPool2d": (lambda nn: nn.AdaptiveMaxPool2d((2, 3)), [f(2, 3, 5, 6)]),
    "AdaptiveMaxPool3d": (lambda nn: nn.AdaptiveMaxPool3d(2), [f(1, 2, 4, 4, 5)]),
    "AlphaDropout": (lambda nn: nn.AlphaDropout(0.5), [f(3, 4)], "meta"),
    "AvgPool1d": (lambda nn: nn.AvgPool1d(2), [f(1, 2, 6)]),
    "AvgPool2d": (lambda nn: nn.AvgPool2d(3, stride=2, padding=1), [f(2, 3, 6, 6)]),
    "AvgPool3d": (lambda nn: nn.AvgPool3d(2), [f(1, 2, 4, 4, 4)]),
    "BCELoss": (lambda nn: nn.BCELoss(), [pos(3, 4) * 0.9, pos(3, 4)]),
    "BCEWithLogitsLoss": (lambda nn: nn.BCEWithLogitsLoss(), [f(3, 4), pos(3, 4)]),
    "BatchNorm1d": (lambda nn: nn.BatchNorm1d(3), [f(4, 3, 5)]),
    "BatchNorm2d": (lambda nn: nn.BatchNorm2d(3), [f(4, 3, 5, 5)]),
    "BatchNorm3d": (lambda nn: nn.BatchNorm3d(3), [f(2, 3, 3, 3, 3)]),
    "Bilinear": (lambda nn: nn.Bilinear(4, 5, 6), [f(3, 4), f(3, 5)]),
    "CELU": (lambda nn: nn.CELU(0.5), [f(3, 4)]),
    "CTCLoss": (lambda nn: nn.CTCLoss(), [logp(6, 2, 4), torch.tensor([[1, 2, 2], [3, 1, 0]]), torch.tensor([6, 6]),
                                          torch.tensor([3, 2])]),
    "ChannelShuffle": (lambda nn: nn.ChannelShuffle(2), [f(1, 4, 2, 2)]),
    "CircularPad1d": (lambda nn: nn.CircularPad1d(1), [f(1, 2, 4)]),
    "CircularPad2d": (lambda nn: nn.CircularPad2d((1, 2, 0, 1)), [f(1, 2, 4, 4)]),
    "CircularPad3d": (lambda nn: nn.CircularPad3d(1), [f(1, 1, 3, 3, 3)]),
    "ConstantPad1d": (lambda nn: nn.ConstantPad1d(2, 0.5), [f(1, 2, 4)]),
    "ConstantPad2d": (lambda nn: nn.ConstantPad2d((1, 0, 2, 1), 0.5), [f(1, 2, 4, 4)]),
    "ConstantPad3d": (lambda nn: nn.ConstantPad3d(1, 0.5), [f(1, 1, 2, 2, 2)]),
    "Conv1d": (lambda nn: nn.Conv1d(3, 4, 3), [f(2, 3, 8)]),
    "Conv2d": (lambda nn: nn.Conv2d(3, 4, 3, stride=2, padding=1), [f(2, 3, 8, 8)]),
    "Conv3d": (lambda nn: nn.Conv3d(2, 3, 2), [f(1, 2, 4, 4, 4)]),
    "ConvTranspose1d": (lambda nn: nn.ConvTranspose1d(3, 4, 3, stride=2), [f(2, 3, 5)]),
    "ConvTranspose2d": (lambda nn: nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
                        [f(2, 3, 4, 4)]),
    "ConvTranspose3d": (lambda nn: nn.ConvTranspose3d(2, 3, 2), [f(1, 2, 3, 3, 3)]),
    "CosineEmbeddingLoss": (lambda nn: nn.CosineEmbeddingLoss(), [f(3, 5), f(3, 5), sgn(3)]),
    "CosineSimilarity": (lambda nn: nn.CosineSimilarity(), [f(3, 5), f(3, 5)]),
    "CrossEntropyLoss": (lambda nn: nn.CrossEntropyLoss(label_smoothing=0.1), [f(4, 5), ints(5, 4)]),
    "CrossMapLRN2d": (lambda nn: nn.CrossMapLRN2d(3), [f(2, 4, 5, 5)]),
    "Dropout": (lambda nn: nn.Dropout(0.5), [f(3, 4)], "meta"),
    "Dropout1d": (lambda nn: nn.Dropout1d(0.5), [f(2, 3, 4)], "meta"),
    "Dropout2d": (lambda nn: nn.Dropout2d(0.5), [f(2, 3, 4, 4)], "meta"),
    "Dropout3d": (lambda nn: nn.Dropout3d(0.5), [f(2, 3, 2, 2, 2)], "meta"),
    "ELU": (lambda nn: nn.ELU(), [f(3, 4)]),
    "Embedding": (lambda nn: nn.Embedding(10, 3, padding_idx=0), [ints(10, 2, 4)]),
    "EmbeddingBag": (lambda nn: nn.EmbeddingBag(10, 3, mode="mean"), [ints(10, 2, 4)]),
    "FeatureAlphaDropout": (lambda nn: nn.FeatureAlphaDropout(0.5), [f(2, 3, 4, 4)], "meta"),
    "Flatten": (lambda nn: nn.Flatten(), [f(2, 3, 4)]),
    "Fold": (lambda nn: nn.Fold(output_size=(4, 5), kernel_size=2), [f(1, 12, 12)]),
    "FractionalMaxPool2d": (lambda nn: nn.FractionalMaxPool2d(2, output_size=3), [f(1, 2, 6, 6)], "meta"),
    "FractionalMaxPool3d": (lambda nn: nn.FractionalMaxPool3d(2, output_size=2), [f(1, 1, 4, 4, 4)], "meta"),
    "GELU": (lambda nn: nn.GELU(approximate="tanh"), [f(3, 4)]),
    "GLU": (lambda nn: nn.GLU(), [f(3, 4)]),
    "GRU": (lambda nn: nn.GRU(4, 5, num_layers=2, batch_first=True), [f(2, 3, 4)]),
    "GRUCell": (lambda nn: nn.GRUCell(4, 5), [f(3, 4)]),
    "GaussianNLLLoss": (lambda nn: nn.GaussianNLLLoss(), [f(3, 4), f(3, 4), pos(3, 4)]),
    "GroupNorm": (lambda nn: nn.GroupNorm(2, 4), [f(2, 4, 3, 3)]),
    "Hardshrink": (lambda nn: nn.Hardshrink(), [f(3, 4)]),
    "Hardsigmoid": (lambda nn: nn.Hardsigmoid(), [f(3, 4) * 4]),
    "Hardswish": (lambda nn: nn.Hardswish(), [f(3, 4) * 4]),
    "Hardtanh": (lambda nn: nn.Hardtanh(-0.5, 0.5), [f(3, 4)]),
    "HingeEmbeddingLoss": (lambda nn: nn.HingeEmbeddingLoss(), [f(3, 4), sgn(3, 4)]),
    "HuberLoss": (lambda nn: nn.HuberLoss(delta=0.5), [f(3, 4), f(3, 4)]),
    "Identity": (lambda nn: nn.Identity(), [f(3, 4)]),
    "InstanceNorm1d": (lambda nn: nn.InstanceNorm1d(3), [f(2, 3, 5)]),
    "InstanceNorm2d": (lambda nn: nn.InstanceNorm2d(3, affine=True), [f(2, 3, 4, 4)]),
    "InstanceNorm3d": (lambda nn: nn.InstanceNorm3d(2), [f(1, 2, 3, 3, 3)]),
    "KLDivLoss": (lambda nn: nn.KLDivLoss(reduction="batchmean"), [logp(3, 4), torch.softmax(f(3, 4), -1)]),
    "L1Loss": (lambda nn: nn.L1Loss(), [f(3, 4), f(3, 4)]),
    "LPPool1d": (lambda nn: nn.LPPool1d(2, 2), [f(1, 2, 6)]),
    "LPPool2d": (lambda nn: nn.LPPool2d(2, 2), [f(1, 2, 4, 4)]),
    "LPPool3d": (lambda nn: nn.LPPool3d(2, 2), [f(1, 1, 4, 4, 4)]),
    "LSTM": (lambda nn: nn.LSTM(4, 5, num_layers=2), [f(3, 2, 4)]),
    "LSTMCell": (lambda nn: nn.LSTMCell(4, 5), [f(3, 4)]),
    "LayerNorm": (lambda nn: nn.LayerNorm(4), [f(3, 4)]),
    "LeakyReLU": (lambda nn: nn.LeakyReLU(0.1), [f(3, 4)]),
    "Linear": (lambda nn: nn.Linear(4, 3), [f(2, 4)]),
    "LinearCrossEntropyLoss": (lambda nn: nn.LinearCrossEntropyLoss(4, 5), [f(3, 4), ints(5, 3)]),
    "LocalResponseNorm": (lambda nn: nn.LocalResponseNorm(2), [f(2, 4, 3, 3)]),
    "LogSigmoid": (lambda nn: nn.LogSigmoid(), [f(3, 4)]),
    "LogSoftmax": (lambda nn: nn.LogSoftmax(dim=1), [f(3, 4)]),
    "MSELoss": (lambda nn: nn.MSELoss(), [f(3, 4), f(3, 4)]),
    "MarginRankingLoss": (lambda nn: nn.MarginRankingLoss(0.1), [f(3), f(3), sgn(3)]),
    "MaxPool1d": (lambda nn: nn.MaxPool1d(2), [f(1, 2, 6)]),
    "MaxPool2d": (lambda nn: nn.MaxPool2d(3, stride=2, padding=1), [f(1, 2, 7, 7)]),
    "MaxPool3d": (lambda nn: nn.MaxPool3d(2), [f(1, 1, 4, 4, 4)]),
    "MaxUnpool1d": (lambda nn: nn.MaxUnpool1d(2), list(_pooled(torch.nn.functional.max_pool1d, f(1, 2, 6), 2))),
    "MaxUnpool2d": (lambda nn: nn.MaxUnpool2d(2), list(_pooled(torch.nn.functional.max_pool2d, f(1, 2, 4, 4), 2))),
    "MaxUnpool3d": (lambda nn: nn.MaxUnpool3d(2),
                    list(_pooled(torch.nn.functional.max_pool3d, f(1, 1, 4, 4, 4), 2))),
    "Mish": (lambda nn: nn.Mish(), [f(3, 4)]),
    "MultiLabelMarginLoss": (lambda nn: nn.MultiLabelMarginLoss(), [f(2, 4), torch.tensor([[3, 0, -1, 1],
                                                                                          [0, 1, 2, 3]])]),
    "MultiLabelSoftMarginLoss": (lambda nn: nn.MultiLabelSoftMarginLoss(), [f(3, 4), (sgn(3, 4) > 0).float()]),
    "MultiMarginLoss": (lambda nn: nn.MultiMarginLoss(), [f(3, 4), ints(4, 3)]),
    "MultiheadAttention": (lambda nn: nn.MultiheadAttention(8, 2), [f(3, 2, 8), f(4, 2, 8), f(4, 2, 8)]),
    "NLLLoss": (lambda nn: nn.NLLLoss(), [logp(4, 5), ints(5, 4)]),
    "PReLU": (lambda nn: nn.PReLU(), [f(2, 3)]),
    "PairwiseDistance": (lambda nn: nn.PairwiseDistance(), [f(3, 4), f(3, 4)]),
    "PixelShuffle": (lambda nn: nn.PixelShuffle(2), [f(1, 8, 2, 2)]),
    "PixelUnshuffle": (lambda nn: nn.PixelUnshuffle(2), [f(1, 2, 4, 4)]),
    "PoissonNLLLoss": (lambda nn: nn.PoissonNLLLoss(), [f(3, 4), pos(3, 4)]),
    "RMSNorm": (lambda nn: nn.RMSNorm(4), [f(3, 4)]),
    "RNN": (lambda nn: nn.RNN(4, 5, nonlinearity="relu"), [f(3, 2, 4)]),
    "RNNCell": (lambda nn: nn.RNNCell(4, 5), [f(3, 4)]),
    "RReLU": (lambda nn: nn.RReLU(), [f(3, 4)], "meta"),
    "ReLU": (lambda nn: nn.ReLU(), [f(3, 4)]),
    "ReLU6": (lambda nn: nn.ReLU6(), [f(3, 4) * 5]),
    "ReflectionPad1d": (lambda nn: nn.ReflectionPad1d(2), [f(1, 2, 5)]),
    "ReflectionPad2d": (lambda nn: nn.ReflectionPad2d((1, 2, 0, 1)), [f(1, 2, 4, 4)]),
    "ReflectionPad3d": (lambda nn: nn.ReflectionPad3d(1), [f(1, 1, 3, 3, 3)]),
    "ReplicationPad1d": (lambda nn: nn.ReplicationPad1d(2), [f(1, 2, 5)]),
    "ReplicationPad2d": (lambda nn: nn.ReplicationPad2d((1, 2, 0, 1)), [f(1, 2, 4, 4)]),
    "ReplicationPad3d": (lambda nn: nn.ReplicationPad3d(1), [f(1, 1, 3, 3, 3)]),
    "SELU": (lambda nn: nn.SELU(), [f(3, 4)]),
    "Sequential": (lambda nn: nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)), [f(2, 4)]),
    "SiLU": (lambda nn: nn.SiLU(), [f(3, 4)]),
    "Sigmoid": (lambda nn: nn.Sigmoid(), [f(3, 4)]),
    "SmoothL1Loss": (lambda nn: nn.SmoothL1Loss(), [f(3, 4), f(3, 4)]),
    "SoftMarginLoss": (lambda nn: nn.SoftMarginLoss(), [f(3, 4), sgn(3, 4)]),
    "Softmax": (lambda nn: nn.Softmax(dim=1), [f(3, 4)]),
    "Softmax2d": (lambda nn: nn.Softmax2d(), [f(1, 3, 2, 2)]),
    "Softmin": (lambda nn: nn.Softmin(dim=1), [f(3, 4)]),
    "Softplus": (lambda nn: nn.Softplus(beta=2), [f(3, 4)]),
    "Softshrink": (lambda nn: nn.Softshrink(0.5), [f(3, 4)]),
    "Softsign": (lambda nn: nn.Softsign(), [f(3, 4)]),
    "Tanh": (lambda nn: nn.Tanh(), [f(3, 4)]),
    "Tanhshrink": (lambda nn: nn.Tanhshrink(), [f(3, 4)]),
    "Threshold": (lambda nn: nn.Threshold(0.1, 20.0), [f(3, 4)]),
    "Transformer": (lambda nn: nn.Transformer(8, 2, 1, 1, 16, 0.0), [f(5, 2, 8), f(4, 2, 8)]),
    "TransformerDecoder": (lambda nn: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, 0.0), 2),
                           [f(4, 2, 8), f(5, 2, 8)]),
    "TransformerDecoderLayer": (lambda nn: nn.TransformerDecoderLayer(8, 2, 16, 0.0, norm_first=True),
                                [f(4, 2, 8), f(5, 2, 8)]),
    "TransformerEncoder": (lambda nn: nn.TransformerEncoder(_layer(nn), 2, enable_nested_tensor=False),
                           [f(5, 2, 8)]),
    "TransformerEncoderLayer": (lambda nn: nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True),
                                [f(2, 5, 8)]),
    "TripletMarginLoss": (lambda nn: nn.TripletMarginLoss(), [f(3, 4), f(3, 4), f(3, 4)]),
    "TripletMarginWithDistanceLoss": (lambda nn: nn.TripletMarginWithDistanceLoss(), [f(3, 4), f(3, 4), f(3, 4)]),
    "Unflatten": (lambda nn: nn.Unflatten(1, (2, 2)), [f(3, 4)]),
    "Unfold": (lambda nn: nn.Unfold(kernel_size=2), [f(1, 2, 4, 4)]),
    "Upsample": (lambda nn: nn.Upsample(scale_factor=2, mode="bilinear"), [f(1, 2, 3, 3)]),
    "UpsamplingBilinear2d": (lambda nn: nn.UpsamplingBilinear2d(scale_factor=2), [f(1, 2, 3, 3)]),
    "UpsamplingNearest2d": (lambda nn: nn.UpsamplingNearest2d(scale_factor=2), [f(1, 2, 3, 3)]),
    "ZeroPad1d": (lambda nn: nn.ZeroPad1d(2), [f(1, 2, 4)]),
    "ZeroPad2d": (lambda nn: nn.ZeroPad2d((1, 2, 0, 1)), [f(1, 2, 3, 3)]),
    "ZeroPad3d": (lambda nn: nn.ZeroPad3d(1), [f(1, 1, 2, 2, 2)]),
}


def module_call(build, inputs):
    """The forward of ``build(lib.root.nn)`` on ``inputs``; jitorch's module first loads the torch module's
    state_dict (torch built with seed 0)."""
    def call(lib):
        torch.manual_seed(0)
        reference = build(torch.nn)
        if lib.is_torch:
            module = reference
        else:
            module = build(lib.root.nn)
            module.load_state_dict({k: lib.tensor(torch_to_numpy(v)) for k, v in reference.state_dict().items()})
        return module(*lib.convert(inputs))
    return call


def _containers():
    """Recipes of the container modules and the base classes (not run forward on their own)."""
    def state_keys(lib):
        m = lib.root.nn.Module()
        m.register_buffer("b", lib.root.ones(2))
        m.register_parameter("w", lib.root.nn.Parameter(lib.root.zeros(3)))
        m.child = lib.root.nn.Linear(2, 2)
        return sorted(m.state_dict()), [n for n, _ in m.named_parameters()]

    def module_dict(lib):
        d = lib.root.nn.ModuleDict({"a": lib.root.nn.Identity(), "b": lib.root.nn.ReLU()})
        return list(d.keys()), len(d), d["b"](x(lib))

    def module_list(lib):
        m = lib.root.nn.ModuleList([lib.root.nn.ReLU(), lib.root.nn.Tanh()])
        m.append(lib.root.nn.Identity())
        return len(m), m[1](x(lib)), len(list(m.parameters()))

    def parameter_list(lib):
        p = lib.root.nn.ParameterList([lib.root.nn.Parameter(x(lib)), lib.root.nn.Parameter(lib.root.ones(2))])
        return len(p), [q.shape for q in p], p[0] * 2

    def parameter_dict(lib):
        p = lib.root.nn.ParameterDict({"w": lib.root.nn.Parameter(x(lib))})
        return list(p.keys()), p["w"] + 1

    nn = "torch.nn."
    return {
        nn + "Module": [(state_keys, "values")], nn + "ModuleDict": [(module_dict, "values")],
        nn + "ModuleList": [(module_list, "values")], nn + "ParameterList": [(parameter_list, "values")],
        nn + "ParameterDict": [(parameter_dict, "values")],
        nn + "RNNBase": [(lambda lib: isinstance(lib.root.nn.LSTM(2, 3), lib.root.nn.RNNBase), "values")],
        nn + "RNNCellBase": [(lambda lib: isinstance(lib.root.nn.GRUCell(2, 3), lib.root.nn.RNNCellBase), "values")],
    }


# torch.optim class: the keyword arguments of each run (every one must match).
OPTIMIZERS = {
    "SGD": [{"lr": 0.1}, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
            {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "maximize": True}],
    "Adam": [{"lr": 0.01}, {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}],
    "AdamW": [{"lr": 0.01}, {"lr": 0.01, "amsgrad": True}],
    "Adadelta": [{}], "Adagrad": [{"lr": 0.1}, {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.1}],
    "Adamax": [{}], "ASGD": [{}], "NAdam": [{}, {"decoupled_weight_decay": True, "weight_decay": 0.1}],
    "RAdam": [{}, {"decoupled_weight_decay": True, "weight_decay": 0.1}],
    "RMSprop": [{}, {"momentum": 0.9, "centered": True}], "Rprop": [{}], "LBFGS": [{"lr": 0.5}],
    "Adafactor": [{}], "Muon": [{"lr": 0.02}],
}
_PARAM = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
_TARGET = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)


def optimizer_call(name, kwargs):
    """The parameter after three steps of optimizer ``name`` on sum((p - target)^2 * weight)."""
    def call(lib):
        p = lib.root.nn.Parameter(lib.tensor(_PARAM))
        target, weight = lib.tensor(_TARGET), lib.tensor(np.arange(1, 13, dtype=np.float32).reshape(3, 4) / 6)
        opt = getattr(lib.root.optim, name)([p], **kwargs)

        def closure():
            opt.zero_grad()
            loss = ((p - target) ** 2 * weight).sum()
            loss.backward()
            return loss
        for _ in range(3):
            if name == "LBFGS":
                opt.step(closure)
            else:
                closure()
                opt.step()
        return p
    return call


def _base_optimizer(lib):
    opt = lib.root.optim.Optimizer([lib.root.nn.Parameter(x(lib))], {"lr": 0.1})
    return opt.param_groups[0]["lr"], len(opt.param_groups[0]["params"])


SCHEDULERS = {
    "LambdaLR": lambda s, o: s.LambdaLR(o, lambda e: 0.9 ** e),
    "MultiplicativeLR": lambda s, o: s.MultiplicativeLR(o, lambda e: 0.9),
    "StepLR": lambda s, o: s.StepLR(o, step_size=2, gamma=0.5),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, milestones=[2, 5], gamma=0.5),
    "ConstantLR": lambda s, o: s.ConstantLR(o, factor=0.5, total_iters=3),
    "LinearLR": lambda s, o: s.LinearLR(o, start_factor=0.25, total_iters=4),
    "ExponentialLR": lambda s, o: s.ExponentialLR(o, gamma=0.8),
    "SequentialLR": lambda s, o: s.SequentialLR(o, [s.ConstantLR(o, 0.5, total_iters=2), s.ExponentialLR(o, 0.9)],
                                                milestones=[3]),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, T_max=5, eta_min=0.01),
    "ChainedScheduler": lambda s, o: s.ChainedScheduler([s.ConstantLR(o, 0.5, total_iters=2),
                                                         s.ExponentialLR(o, 0.9)]),
    "ReduceLROnPlateau": lambda s, o: s.ReduceLROnPlateau(o, patience=1, factor=0.5),
    "CyclicLR": lambda s, o: s.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3),
    "CosineAnnealingWarmRestarts": lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
    "OneCycleLR": lambda s, o: s.OneCycleLR(o, max_lr=0.1, total_steps=10),
    "PolynomialLR": lambda s, o: s.PolynomialLR(o, total_iters=5, power=2.0),
    "LRScheduler": lambda s, o: _half_scheduler_for(s)(o),
}


def _half_scheduler_for(scheduler_module):
    class Half(scheduler_module.LRScheduler):
        def get_lr(self):
            return [group["lr"] * 0.5 for group in self.optimizer.param_groups]
    return Half


def scheduler_call(build):
    """The learning rates over eight epochs of the scheduler ``build`` makes for SGD(lr=0.1)."""
    def call(lib):
        opt = lib.root.optim.SGD([lib.root.nn.Parameter(x(lib))], lr=0.1, momentum=0.9)
        sched = build(lib.root.optim.lr_scheduler, opt)
        rates = []
        for _ in range(8):
            opt.step()
            sched.step(1.0) if type(sched).__name__ == "ReduceLROnPlateau" else sched.step()
            rates.append(opt.param_groups[0]["lr"])
        return rates
    return call


def _custom_function(lib):
    """A user-defined autograd.Function (exp with a saved result), forward and backward."""
    class Exp(lib.root.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            out = t.exp()
            ctx.save_for_backward(out)
            return out

        @staticmethod
        def backward(ctx, grad):
            (out,) = ctx.saved_tensors
            return grad * out
    w = x(lib, True)
    y = Exp.apply(w)
    y.sum().backward()
    return y, w.grad


def _grad_of(lib, context=None):
    """The gradient of sum(sin(w) * w) inside ``context(lib)`` (a context manager factory), or outside any."""
    w = x(lib, True)
    if context is None:
        (w.sin() * w).sum().backward()
    else:
        with context(lib):
            (w.sin() * w).sum().backward()
    return w.grad


def _requires_grad_inside(context):
    def recipe(lib):
        w = x(lib, True)
        with context(lib):
            return (w * 2).requires_grad
    return recipe


def _second_order(lib):
    w = x(lib, True)
    (g,) = lib.root.autograd.grad((w ** 3).sum(), w, create_graph=True)
    return g, lib.root.autograd.grad(g.sum(), w)[0]


def _forward_ad(lib, explicit_levels=False):
    fwad = lib.root.autograd.forward_ad
    if explicit_levels:
        fwad.enter_dual_level()
        try:
            return fwad.unpack_dual(fwad.make_dual(x(lib), lib.root.ones(3, 4)).sin()).tangent
        finally:
            fwad.exit_dual_level()
    with fwad.dual_level():
        unpacked = fwad.unpack_dual(fwad.make_dual(x(lib), lib.root.ones(3, 4)).sin())
        return unpacked.tangent, isinstance(unpacked, fwad.UnpackedDualTensor)


def _multi_grad_hook(lib):
    seen = []
    a, b = x(lib, True), x(lib, True)
    lib.root.autograd.graph.register_multi_grad_hook((a, b), lambda grads: seen.append(len(grads)))
    (a * b).sum().backward()
    return seen


def _functional(name, *args):
    fns = {"jacobian": lambda t: t ** 2, "hessian": lambda t: (t ** 3).sum(), "vjp": lambda t: t.sin() * 2,
           "jvp": lambda t: t.sin() * 2, "hvp": lambda t: (t ** 3).sum(), "vhp": lambda t: (t ** 3).sum()}

    def recipe(lib):
        small = lib.tensor(np.array([0.5, -1.0, 2.0], np.float32))
        extra = [lib.tensor(np.array([1.0, 2.0, 3.0], np.float32))] if args else []
        return getattr(lib.root.autograd.functional, name)(fns[name], small, *extra)
    return recipe


def _autograd():
    """Recipes of torch.autograd."""
    a, g = "torch.autograd.", "torch.autograd.graph."
    double = lambda lib: lib.tensor(np.array([0.3, -0.7], np.float64), True)  # noqa: E731
    return {
        a + "Function": [(_custom_function, "values")],
        a + "Variable": [(lambda lib: lib.root.autograd.Variable(x(lib)) * 2, "values")],
        a + "backward": [(lambda lib: (lambda w: (lib.root.autograd.backward([(w ** 2).sum()]), w.grad)[1])(
            x(lib, True)), "values")],
        a + "grad": [(_second_order, "values")],
        a + "detect_anomaly": [(lambda lib: _grad_of(lib, lambda L: L.root.autograd.detect_anomaly()), "values")],
        a + "set_detect_anomaly": [(lambda lib: _grad_of(lib, lambda L: L.root.autograd.set_detect_anomaly(False)),
                                    "values")],
        a + "set_multithreading_enabled": [(lambda lib: _grad_of(
            lib, lambda L: L.root.autograd.set_multithreading_enabled(False)), "values")],
        a + "enforce_grad_layout_policy": [(lambda lib: _grad_of(
            lib, lambda L: L.root.autograd.enforce_grad_layout_policy(True)), "values")],
        a + "enable_grad": [(_requires_grad_inside(lambda L: L.root.autograd.enable_grad()), "values")],
        a + "no_grad": [(_requires_grad_inside(lambda L: L.root.autograd.no_grad()), "values")],
        a + "inference_mode": [(_requires_grad_inside(lambda L: L.root.autograd.inference_mode()), "values")],
        a + "set_grad_enabled": [(_requires_grad_inside(lambda L: L.root.autograd.set_grad_enabled(False)), "values")],
        a + "gradcheck": [(lambda lib: lib.root.autograd.gradcheck(lambda t: (t * t.sin()).sum(), (double(lib),)),
                           "values")],
        a + "gradgradcheck": [(lambda lib: lib.root.autograd.gradgradcheck(lambda t: (t ** 3).sum(), (double(lib),)),
                               "values")],
        a + "functional.jacobian": [(_functional("jacobian"), "values")],
        a + "functional.hessian": [(_functional("hessian"), "values")],
        a + "functional.vjp": [(_functional("vjp", True), "values")],
        a + "functional.jvp": [(_functional("jvp", True), "values")],
        a + "functional.hvp": [(_functional("hvp", True), "values")],
        a + "functional.vhp": [(_functional("vhp", True), "values")],
        a + "forward_ad.dual_level": [(_forward_ad, "values")],
        a + "forward_ad.make_dual": [(_forward_ad, "values")],
        a + "forward_ad.unpack_dual": [(_forward_ad, "values")],
        a + "forward_ad.UnpackedDualTensor": [(_forward_ad, "values")],
        a + "forward_ad.enter_dual_level": [(lambda lib: _forward_ad(lib, True), "values")],
        a + "forward_ad.exit_dual_level": [(lambda lib: _forward_ad(lib, True), "values")],
        g + "saved_tensors_hooks": [(lambda lib: _grad_of(
            lib, lambda L: L.root.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t)), "values")],
        g + "save_on_cpu": [(lambda lib: _grad_of(lib, lambda L: L.root.autograd.graph.save_on_cpu()), "values")],
        g + "disable_saved_tensors_hooks": [(lambda lib: _grad_of(
            lib, lambda L: L.root.autograd.graph.disable_saved_tensors_hooks("no hooks")), "values")],
        g + "allow_mutation_on_saved_tensors": [(lambda lib: _grad_of(
            lib, lambda L: L.root.autograd.graph.allow_mutation_on_saved_tensors()), "values")],
        g + "register_multi_grad_hook": [(_multi_grad_hook, "values")],
        g + "get_gradient_edge": [(lambda lib: isinstance(lib.root.autograd.graph.get_gradient_edge(
            x(lib, True) * 2), lib.root.autograd.graph.GradientEdge), "values")],
        g + "GradientEdge": [(lambda lib: isinstance(lib.root.autograd.graph.get_gradient_edge(
            x(lib, True) * 2), lib.root.autograd.graph.GradientEdge), "values")],
        g + "Node": [(lambda lib: isinstance((x(lib, True) * 2).grad_fn, lib.root.autograd.graph.Node), "values")],
        g + "increment_version": [(lambda lib: (lambda t: (lib.root.autograd.graph.increment_version(t),
                                                            t._version)[1])(x(lib)), "values")],
    }


def library_samples(entry):
    """[(label, call(lib), mode)] for a module, optimizer, scheduler or autograd entry."""
    short = entry.short
    if entry.kind == "module" and short in MODULES:
        build, inputs, *mode = MODULES[short]
        return [("forward", module_call(build, inputs), mode[0] if mode else "values")]
    if entry.kind == "optimizer":
        if short == "Optimizer":
            return [("param_groups", _base_optimizer, "values")]
        return [(f"3 steps {kwargs}", optimizer_call(short, kwargs), "values") for kwargs in OPTIMIZERS.get(short, ())]
    if entry.kind == "scheduler" and short in SCHEDULERS:
        return [("8 epochs", scheduler_call(SCHEDULERS[short]), "values")]
    recipes = {**_containers(), **_autograd()}.get(entry.path, ())
    return [(f"recipe #{i}", fn, mode) for i, (fn, mode) in enumerate(recipes)]
