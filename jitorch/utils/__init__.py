"""``torch.utils``: data loading (`jitorch.utils.data`) and the hook names PyTorch code imports (`hooks`).

The submodules load at their first use (``jitorch.utils.data.DataLoader`` needs no import of its own), so that
``import jitorch`` does not load the data loader (issue 19)."""

import importlib

_SUBMODULES = ("data", "dlpack", "hooks")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_SUBMODULES})
