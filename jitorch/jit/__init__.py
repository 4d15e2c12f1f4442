"""Tracing functions into graphs, and `compile`: cached graphs under guards."""

from .compile import CompiledFunction, Lowered, compile, config
from .errors import TraceError
from .tracer import trace

__all__ = ["CompiledFunction", "Lowered", "TraceError", "compile", "config", "trace"]
