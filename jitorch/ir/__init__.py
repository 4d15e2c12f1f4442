"""The SSA IR: graphs of registry ops, their text form (print and parse back)."""

from .graph import Graph, Node, TensorType, Value  # noqa: F401
from .parser import ParseError, parse  # noqa: F401
from .printer import print_graph  # noqa: F401
from .interpreter import interpret  # noqa: F401
from .verifier import VerifyError, verify  # noqa: F401
