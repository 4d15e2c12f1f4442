"""CompileError, kept apart from the code generator so that importing it loads no LLVM."""


class CompileError(RuntimeError):
    """jitorch cannot compile this op or dtype (it names which); the call may run eagerly instead."""
