"""Op schemas in PyTorch's native_functions.yaml notation.

    add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
    max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
    view(Tensor self, int... size) -> Tensor

Argument types: ``Tensor``, ``Tensor[]``, ``Scalar``, ``int``, ``int[]``,
``int...`` (a size given as varargs or one sequence), ``float``, ``bool``,
``str``, ``ScalarType``, ``Device``, ``Generator``, ``Any``; a ``?`` suffix
allows None (``Tensor?[]``: a list whose items may be None). A parsed schema drives argument binding, the checks of argument
types, and later the IR's printed form.

The Python names of the arguments are torch's: the function form calls ``self`` ``input``, and NumPy's names
are accepted too (`NUMPY_ALIASES`: ``x.sum(axis=0, keepdims=True)``); a method whose only positional argument
besides ``self`` is an ``int[]`` takes it as varargs too (``x.flip(0, 1)``), as torch's argument parser does.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_ARG = re.compile(r"^\s*([A-Za-z]+)(\?(?=\[\]))?(\[\]|\.\.\.)?(\?)?\s+([A-Za-z_][A-Za-z_0-9]*)\s*(?:=\s*(.+?))?\s*$")
_SCHEMA = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)(?:\.([A-Za-z_0-9]+))?\s*\((.*)\)\s*->\s*(.+?)\s*$")
_BASE_TYPES = {"Tensor", "Scalar", "int", "float", "bool", "str", "ScalarType", "Device", "Generator", "Any"}
_NO_DEFAULT = object()

# The other names torch's Python argument parser accepts for an argument (python_arg_parser.cpp's
# numpy_compatibility_arg_names). Its ``x``/``a``/``x1`` for ``input`` and ``x2`` for ``other`` are left
# out: every op has those arguments, and each alias costs every call a test (docs/differences-from-torch.md).
NUMPY_ALIASES = {"dim": ("axis",), "keepdim": ("keepdims",)}


@dataclass(frozen=True)
class Arg:
    name: str
    type: str          # base type, e.g. "Tensor" or "int"
    list: bool = False  # Tensor[] / int[]
    varargs: bool = False  # int...
    optional: bool = False
    elem_optional: bool = False  # Tensor?[]: a list whose items may be None
    kwarg_only: bool = False
    default: object = _NO_DEFAULT

    @property
    def has_default(self):
        return self.default is not _NO_DEFAULT

    def type_str(self):
        return (self.type + "?" * self.elem_optional + ("[]" if self.list else "...") * (self.list or self.varargs)
                + "?" * self.optional)


@dataclass(frozen=True)
class Return:
    type: str
    name: str | None = None
    list: bool = False


@dataclass
class Schema:
    name: str
    overload: str
    args: tuple
    returns: tuple
    text: str = ""
    positional: tuple = field(default=(), repr=False)

    @property
    def full_name(self):
        return f"{self.name}.{self.overload}" if self.overload else self.name

    def arg(self, name):
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    def __str__(self):
        return self.text

    def python_names(self, method):
        """Each argument's Python name, in schema order: ``self`` is ``input`` in the function form (in a
        method it is the tensor the method is bound to)."""
        return tuple("input" if a.name == "self" and not method else a.name for a in self.args)

    def aliases(self, method):
        """``((index, alias), ...)``: the NumPy names (`NUMPY_ALIASES`) the arguments may be given by, in
        torch's lookup order; none for the bound ``self`` of a method, nor where an alias names another
        argument."""
        names = self.python_names(method)
        return tuple((i, alias) for i, name in enumerate(names) if not (method and self.args[i].name == "self")
                     for alias in NUMPY_ALIASES.get(name, ()) if alias not in names)

    def spread_list(self, method, optional=False):
        """The index of the ``int[]`` argument that takes varargs in this form (``x.flip(0, 1)``: torch's
        rule, for a form whose only positional argument, besides a method's ``self``, is an int list; an
        optional one (``int[]?``) only if ``optional``), or None."""
        rest = [i for i, a in enumerate(self.args) if not a.kwarg_only and not (method and a.name == "self")]
        if len(rest) != 1:
            return None
        a = self.args[rest[0]]
        return rest[0] if a.type == "int" and a.list and (optional or not a.optional) else None


def _split_top(text, sep=","):
    """``text`` split at the ``sep`` outside brackets (an empty last part dropped). By pieces between
    separators, not character by character: ``import jitorch`` parses every op's schema."""
    parts, cur, depth = [], [], 0
    for piece in text.split(sep):
        cur.append(piece)
        depth += piece.count("(") + piece.count("[") - piece.count(")") - piece.count("]")
        if depth == 0:
            parts.append(sep.join(cur))
            cur = []
    if cur:
        parts.append(sep.join(cur))
    if parts and not parts[-1].strip():
        parts.pop()
    return parts


# Defaults that are plain decimal numbers, read without `ast.literal_eval` (which compiles its text): what
# it reads them as (no leading zeros in an integer, as Python's literals)
_INT_DEFAULT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT_DEFAULT = re.compile(r"-?[0-9]+(?:\.[0-9]*(?:e[-+]?[0-9]+)?|e[-+]?[0-9]+)")


def _parse_default(text, arg_type):
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if arg_type == "str":
        return ast.literal_eval(text) if text[0] in "\"'" else text
    if _INT_DEFAULT.fullmatch(text):
        return int(text)
    if _FLOAT_DEFAULT.fullmatch(text):
        return float(text)
    value = ast.literal_eval(text)
    if isinstance(value, list):
        value = tuple(value)
    return value


# Parsed arguments by (text, keyword-only) and returns by text: ``import jitorch`` parses ~1300 arguments of ~300
# kinds ("Tensor self") and ~500 returns of ~30. Both are frozen, so schemas share them.
_ARGS = {}
_RETURNS = {}


def _parse_arg(piece, kwarg_only, text):
    am = _ARG.match(piece)
    if not am or am.group(1) not in _BASE_TYPES:
        raise ValueError(f"bad argument {piece!r} in schema {text!r}")
    typ, elem_opt, suffix, opt, aname, default = am.groups()
    return Arg(
        name=aname, type=typ, list=suffix == "[]", varargs=suffix == "...",
        optional=bool(opt), elem_optional=bool(elem_opt), kwarg_only=kwarg_only,
        default=_NO_DEFAULT if default is None else _parse_default(default, typ),
    )


def _parse_returns(ret_text):
    if ret_text.startswith("(") and ret_text.endswith(")"):
        ret_pieces = _split_top(ret_text[1:-1])
    else:
        ret_pieces = [ret_text]
    returns = []
    for piece in ret_pieces:
        bits = piece.split()
        typ = bits[0]
        is_list = typ.endswith("[]")
        returns.append(Return(type=typ.rstrip("[]"), name=bits[1] if len(bits) > 1 else None, list=is_list))
    return tuple(returns)


def parse_schema(text: str) -> Schema:
    """Parse one schema line; raise ValueError naming the fragment that is wrong."""
    m = _SCHEMA.match(text)
    if not m:
        raise ValueError(f"bad schema: {text!r}")
    name, overload, arg_text, ret_text = m.groups()
    args = []
    kwarg_only = False
    for piece in _split_top(arg_text):
        piece = piece.strip()
        if piece == "*":
            kwarg_only = True
            continue
        arg = _ARGS.get((piece, kwarg_only))
        if arg is None:
            arg = _ARGS[piece, kwarg_only] = _parse_arg(piece, kwarg_only, text)
        args.append(arg)
    ret_text = ret_text.strip()
    returns = _RETURNS.get(ret_text)
    if returns is None:
        returns = _RETURNS[ret_text] = _parse_returns(ret_text)
    return Schema(name=name, overload=overload or "", args=tuple(args), returns=returns, text=text.strip(),
                  positional=tuple(a for a in args if not a.kwarg_only))
