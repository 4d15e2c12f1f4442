"""Optimizers and learning-rate schedulers, as ``torch.optim``.

    import jitorch.optim as optim
    opt = optim.Adam(model.parameters(), lr=1e-3)
    sched = optim.lr_scheduler.StepLR(opt, step_size=10)

Updates are in-place tensor ops that never read values into Python, so a
function calling ``opt.step()`` can be traced by ``jitorch.compile``. As in
torch, an optimizer creates its per-parameter state on its first step: take
that step eagerly before compiling one, so the state holds real tensors.
"""

from . import lr_scheduler
from .adadelta import Adadelta
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .asgd import ASGD
from .lbfgs import LBFGS
from .muon import Muon
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adadelta",
           "ASGD", "Rprop", "LBFGS", "Adafactor", "Muon", "lr_scheduler"]
