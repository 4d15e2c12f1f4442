"""Guards on the Python variables a traced function reads from outside: its closure cells and the
globals its code names (and those of the plain Python functions it reaches through them).

A graph bakes in what they held when it was traced (a number as a literal, a tensor as a constant), so
a call after one of them is rebound must trace again, as torch.compile's guards on closures and
globals make it. Numbers, strings and None are guarded by value; anything else (a tensor, a module, a
function) by identity, so an in-place change of a captured tensor still needs no new trace.
"""

from __future__ import annotations

import types

_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_MISSING = object()


def captured_variable_guards(fn):
    """Checks, one per variable ``fn`` reads from outside, that it still holds what it holds now;
    each check's ``__doc__`` says which variable and what it held."""
    guards, seen = [], set()
    function = _python_function(fn)
    if function is not None and not _is_library_code(function):
        _collect(function, guards, seen)
    return guards


def _python_function(fn):
    """The Python function whose code runs when ``fn`` is called: a bound method's, a wrapped
    function's, a module's ``forward``, a callable object's ``__call__``; None for builtins."""
    while True:
        if isinstance(fn, types.FunctionType):
            return fn
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        elif callable(getattr(type(fn), "forward", None)):
            fn = type(fn).forward
        elif isinstance(getattr(type(fn), "__call__", None), types.FunctionType):
            fn = type(fn).__call__
        else:
            return None


def _collect(function, guards, seen):
    code = function.__code__
    if code in seen:
        return
    seen.add(code)
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        _guard(f"closure variable {name}", lambda cell=cell: _cell_contents(cell), guards, seen)
    module_globals = function.__globals__
    for name in sorted(_global_names(code)):
        if name in module_globals:
            _guard(f"global {name}", lambda name=name: module_globals.get(name, _MISSING), guards, seen)


def _guard(what, read, guards, seen):
    value = read()
    if value is _MISSING or isinstance(value, types.ModuleType):
        return  # an empty cell; an imported module
    if type(value) in _SCALARS:
        def check():
            now = read()
            return now is value or (type(now) is type(value) and now == value)
        check.__doc__ = f"{what} == {value!r}"
    else:
        def check():
            return read() is value
        check.__doc__ = f"{what} is the same {type(value).__name__}"
    guards.append(check)
    if isinstance(value, types.FunctionType) and not _is_library_code(value):
        _collect(value, guards, seen)  # a helper the function calls reads variables of its own


def _is_library_code(function):
    """jitorch's own functions (a built-in module's ``forward``, ``F.relu``) read no user state."""
    return (function.__module__ or "").partition(".")[0] == "jitorch"


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a variable deleted, or not yet assigned)
        return _MISSING


def _global_names(code):
    """The names ``code`` and the code nested in it (lambdas, comprehensions) may read as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names
