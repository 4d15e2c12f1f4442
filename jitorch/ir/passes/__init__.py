"""Graph optimisation passes: each module's ``run(graph) -> int`` rewrites a graph in place and
says how many rewrites it made; `optimize` runs them until nothing changes."""

from . import cse, dce, decompose, fold, simplify, sink, transpose  # noqa: F401
from .manager import DEFAULT_PASSES, optimize  # noqa: F401
