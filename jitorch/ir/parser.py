"""Read a graph's text form (what `printer.print_graph` writes) back into a `Graph`.

    graph(%x: f32[64, 128], %b: f32[128] requires_grad):
      %w : f32[128, 10] = constant['w']
      %0 : f32[64, 128] = add(%x, %b)
      %2 : f32[64], %3 : i64[64] = max.dim(%0, dim=1)
      %x <- %0
      return (%2, {'idx': %3})

Arguments are matched to the op's schema: positional ones in schema order,
then ``name=value``; the rest take their defaults. Every literal goes through
the op's argument converter, as eager and traced calls do, so a parsed node
holds the same Python values as a traced one (``int[]`` a tuple, ``ScalarType``
a dtype, ``Device`` a device, ``Tensor[]`` a list of values). A constant's
tensor is not in the text: the parsed graph maps its name to None in
``constant_tensors`` until the caller binds it. ``@g`` names an object the
ops use (a Generator): the parsed graph gets a fresh Generator under that name
in ``objects``, whose state the caller may set. Errors raise `ParseError`
naming the line and column.
"""

from __future__ import annotations

import ast
import math
import re
from numbers import Number

from ..ops import registry
from ..ops.random_ops import Generator
from ..ops.views import channels_last, channels_last_3d, contiguous_format, preserve_format
from ..runtime.device import to_device
from .graph import CODE_DTYPES, Graph, Node, TensorType, Value


class ParseError(ValueError):
    """Text that is not a graph: the message starts ``line L, column C:`` (both from 1)."""

    def __init__(self, message, line, column):
        super().__init__(f"line {line}, column {column}: {message}")
        self.line = line
        self.column = column


# Lexing -------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<nl>\n)
  | (?P<space>[ \t\r]+)
  | (?P<value>%[A-Za-z0-9_.]+)
  | (?P<number>-inf\b|-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)
  | (?P<string>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
  | (?P<punct><-|[()\[\]{},:=@])
""", re.VERBOSE)

# Names that stand for literal values.
_NAMED = {"True": True, "False": False, "None": None, "inf": math.inf, "nan": math.nan,
          "contiguous_format": contiguous_format, "preserve_format": preserve_format, "channels_last": channels_last,
          "channels_last_3d": channels_last_3d, **CODE_DTYPES}


class Token:
    __slots__ = ("kind", "text", "line", "column")

    def __init__(self, kind, text, line, column):
        self.kind, self.text, self.line, self.column = kind, text, line, column

    def describe(self):
        if self.kind == "nl":
            return "the end of the line"
        if self.kind == "end":
            return "the end of the text"
        return repr(self.text)


def tokenize(text):
    """The tokens of ``text``, with a ``nl`` token per line break and an ``end`` token last."""
    tokens = []
    line, line_start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        column = pos - line_start + 1
        if m is None:
            quote = text[pos] in "'\""
            raise ParseError("a string with no closing quote" if quote else f"unexpected character {text[pos]!r}",
                             line, column)
        kind = m.lastgroup
        if kind != "space":
            tokens.append(Token(kind, m.group(), line, column))
        pos = m.end()
        if kind == "nl":
            line, line_start = line + 1, pos
    tokens.append(Token("end", "", line, pos - line_start + 1))
    return tokens


# Parsing ------------------------------------------------------------------------------------

class _Parser:
    def __init__(self, text):
        self.tokens = tokenize(text)
        self.pos = 0
        self.graph = Graph()
        self.defined: dict = {}  # value name -> (Value, line of its definition)

    # tokens

    @property
    def tok(self):
        return self.tokens[self.pos]

    def error(self, message, tok=None):
        tok = tok or self.tok
        return ParseError(message, tok.line, tok.column)

    def next(self):
        tok = self.tok
        self.pos += 1
        return tok

    def at(self, kind, text=None):
        tok = self.tok
        return tok.kind == kind and (text is None or tok.text == text)

    def accept(self, kind, text=None):
        if self.at(kind, text):
            return self.next()
        return None

    def expect(self, kind, text=None, what=None):
        if self.at(kind, text):
            return self.next()
        raise self.error(f"expected {what or repr(text)}, found {self.tok.describe()}")

    def skip_blank_lines(self):
        while self.accept("nl"):
            pass

    def end_line(self):
        if not self.at("end"):
            self.expect("nl", what="the end of the line")

    # values

    def define(self, tok, type, node=None, index=0, requires_grad=False):
        name = tok.text[1:]
        if name in self.defined:
            raise self.error(f"value %{name} is defined twice (first on line {self.defined[name][1]})", tok)
        value = Value(name, type, node, index, requires_grad)
        self.defined[name] = (value, tok.line)
        self.graph._names.add(name)
        return value

    def use(self, tok):
        entry = self.defined.get(tok.text[1:])
        if entry is None:
            raise self.error(f"unknown value {tok.text}", tok)
        return entry[0]

    # types: f32[64, 128], i64[], f32[2]@cuda:0

    def type(self):
        tok = self.expect("name", what="a type such as f32[2, 3]")
        dtype = CODE_DTYPES.get(tok.text)
        if dtype is None:
            raise self.error(f"unknown dtype {tok.text!r} (expected one of {', '.join(CODE_DTYPES)})", tok)
        self.expect("punct", "[")
        shape = []
        while not self.accept("punct", "]"):
            if shape:
                self.expect("punct", ",", what="',' or ']' in a shape")
            n = self.expect("number", what="a dimension size")
            if not re.fullmatch(r"\d+", n.text):
                raise self.error(f"a dimension size must be a non-negative integer, not {n.text}", n)
            shape.append(int(n.text))
        device = to_device("cpu")
        if self.accept("punct", "@"):
            device = self.device_name()
        return TensorType(tuple(shape), dtype, device)

    def device_name(self):
        tok = self.expect("name", what="a device such as cuda:0")
        text = tok.text
        if self.accept("punct", ":"):
            text += ":" + self.expect("number", what="a device index").text
        return self.make_device(text, tok)

    def make_device(self, text, tok):
        try:
            return to_device(text)
        except (RuntimeError, TypeError) as e:
            raise self.error(f"bad device {text!r}: {e}", tok) from None

    # the graph

    def parse(self):
        self.skip_blank_lines()
        self.expect("name", "graph", what="'graph('")
        self.expect("punct", "(")
        while not self.accept("punct", ")"):
            if self.graph.inputs:
                self.expect("punct", ",", what="',' or ')' after an input")
            self.input()
        self.expect("punct", ":")
        self.end_line()
        while True:
            self.skip_blank_lines()
            if self.at("end"):
                raise self.error("expected a 'return' line at the end of the graph")
            if self.accept("name", "return"):
                self.graph.outputs = self.literal()
                self.end_line()
                self.skip_blank_lines()
                if not self.at("end"):
                    raise self.error(f"expected the end of the graph after 'return', found {self.tok.describe()}")
                return self.graph
            self.statement()
            self.end_line()

    def input(self):
        tok = self.expect("value", what="an input such as %x")
        self.expect("punct", ":")
        type = self.type()
        requires_grad = bool(self.accept("name", "requires_grad"))
        self.graph.inputs.append(self.define(tok, type, requires_grad=requires_grad))

    def statement(self):
        """A mutation ``%x <- %3``, a constant or an op node."""
        outs = []
        if not (self.at("value") or self.at("punct", "=")):
            raise self.error(f"expected a line such as '%1 : f32[2] = neg(%0)', '%x <- %1' or 'return %1', "
                             f"found {self.tok.describe()}")
        if self.at("value"):
            first = self.next()
            if self.accept("punct", "<-"):
                return self.mutation(first)
            outs.append((first, self.output_type()))
            while self.accept("punct", ","):
                outs.append((self.expect("value", what="an output value"), self.output_type()))
        self.expect("punct", "=", what="'=' or ',' after the outputs")
        op_tok = self.expect("name", what="an op name or 'constant'")
        if op_tok.text == "constant" and self.at("punct", "["):
            return self.constant(outs, op_tok)
        op = registry.OPS.get(op_tok.text)
        if op is None:
            raise self.error(f"unknown op {op_tok.text!r}", op_tok)
        self.check_output_count(op, op_tok, len(outs))
        args = self.arguments(op, op_tok)
        node = Node(op, args)
        node.outputs = [self.define(tok, type, node, i) for i, (tok, type) in enumerate(outs)]
        self.graph.nodes.append(node)

    def output_type(self):
        self.expect("punct", ":", what="':' and the value's type")
        return self.type()

    def mutation(self, target_tok):
        target = self.use(target_tok)
        if target.node is not None:
            raise self.error(f"only inputs and constants can be written back, and {target_tok.text} is neither",
                             target_tok)
        if any(t is target for t, _ in self.graph.mutations):
            raise self.error(f"{target_tok.text} is written back twice", target_tok)
        value = self.use(self.expect("value", what="the value written back, such as %3"))
        self.graph.mutations.append((target, value))

    def constant(self, outs, tok):
        if len(outs) != 1:
            raise self.error(f"a constant defines one value, not {len(outs)}", tok)
        self.expect("punct", "[")
        key_tok = self.expect("string", what="the constant's name as a string")
        key = self.string(key_tok)
        self.expect("punct", "]")
        if key in self.graph.constants:
            raise self.error(f"constant {key!r} is defined twice", key_tok)
        value = self.define(*outs[0])
        self.graph.constants[key] = value
        self.graph.constant_tensors[key] = None
        self.graph._names.add(key)

    def check_output_count(self, op, tok, n):
        returns = op.schema.returns
        if any(r.list or r.type != "Tensor" for r in returns):
            return  # Tensor[]: as many values as the result has
        if n != len(returns):
            raise self.error(f"{op.name} returns {len(returns)} tensor{'s' * (len(returns) != 1)}, "
                             f"but the line defines {n} value{'s' * (n != 1)}", tok)

    # arguments

    def arguments(self, op, op_tok):
        """The node's arguments in schema order: positional, then by name, then defaults."""
        schema_args = op.schema.args
        given: dict = {}  # index -> (value, token where it starts)
        self.expect("punct", "(")
        keyword = False
        while not self.accept("punct", ")"):
            if given:
                self.expect("punct", ",", what="',' or ')' after an argument")
            start = self.tok
            if start.kind == "name" and self.tokens[self.pos + 1].text == "=":
                self.pos += 2
                index = self.argument_index(op, start)
                keyword = True
            elif keyword:
                raise self.error("a positional argument cannot follow a keyword argument")
            else:
                index = len(given)
                n = len(schema_args)
                if index >= n:
                    raise self.error(f"{op.name} takes {n} argument{'s' * (n != 1)}, this is argument {index + 1}")
            if index in given:
                raise self.error(f"argument '{schema_args[index].name}' of {op.name} is given twice", start)
            value_tok = self.tok
            given[index] = (self.literal(), value_tok)
        args = []
        for i, arg in enumerate(schema_args):
            if i in given:
                value, tok = given[i]
            elif arg.has_default:
                value, tok = arg.default, op_tok
            else:
                raise self.error(f"{op.name} needs argument '{arg.name}'", op_tok)
            args.append(self.convert(op, i, value, tok))
        return args

    def argument_index(self, op, tok):
        for i, arg in enumerate(op.schema.args):
            if arg.name == tok.text:
                return i
        names = ", ".join(a.name for a in op.schema.args)
        raise self.error(f"{op.name} has no argument '{tok.text}' (its arguments: {names})", tok)

    def convert(self, op, index, value, tok):
        """``value`` in the form the op's argument converter gives, as in eager and traced calls."""
        arg = op.schema.args[index]
        if arg.type == "Tensor":
            if arg.list or arg.varargs:
                if value is None and arg.optional:
                    return None
                if not isinstance(value, (list, tuple)):
                    raise self.bad_argument(op, arg, value, tok)
                return [self.tensor_item(op, arg, x, tok, arg.elem_optional) for x in value]
            return self.tensor_item(op, arg, value, tok, arg.optional)
        if _has_value(value):
            raise self.bad_argument(op, arg, value, tok)
        converter = op.converters[index][1]
        if converter is None:
            return value
        try:
            return converter(value)
        except (TypeError, ValueError, RuntimeError):
            raise self.bad_argument(op, arg, value, tok) from None

    def tensor_item(self, op, arg, value, tok, none_ok):
        if isinstance(value, Value) or value is None and none_ok:
            return value
        # pointwise ops take Python numbers for tensors, as eager calls do
        if op.kind == "pointwise" and isinstance(value, Number):
            return value
        raise self.bad_argument(op, arg, value, tok)

    def bad_argument(self, op, arg, value, tok):
        got = f"value {value!r}" if isinstance(value, Value) else type(value).__name__
        return self.error(f"argument '{arg.name}' of {op.name} must be {arg.type_str()}, not {got}", tok)

    # literals and output trees

    def string(self, tok):
        try:
            return ast.literal_eval(tok.text)
        except (SyntaxError, ValueError) as e:
            raise self.error(f"bad string {tok.text}: {e.msg if isinstance(e, SyntaxError) else e}", tok) from None

    def literal(self):
        """A value, a literal, or a tuple, list or dict of them."""
        tok = self.next()
        if tok.kind == "value":
            return self.use(tok)
        if tok.kind == "number":
            return float(tok.text) if re.search(r"[.eEn]", tok.text) else int(tok.text)
        if tok.kind == "string":
            return self.string(tok)
        if tok.kind == "name":
            if tok.text == "device" and self.at("punct", "("):
                self.next()
                text = self.string(self.expect("string", what="a device string such as 'cuda:0'"))
                self.expect("punct", ")")
                return self.make_device(text, tok)
            if tok.text in _NAMED:
                return _NAMED[tok.text]
            raise self.error(f"unknown name {tok.text!r} (expected a value, a number, a string, True, False, None, "
                             "a dtype such as f32, or device(...))", tok)
        if tok.text == "@":
            return self.object(self.expect("name", what="an object's name after '@'"))
        if tok.text == "[":
            return self.sequence("]")
        if tok.text == "(":
            items, trailing_comma = self.sequence(")", with_comma=True)
            return items[0] if len(items) == 1 and not trailing_comma else tuple(items)
        if tok.text == "{":
            return self.mapping()
        raise self.error(f"expected a value or a literal, found {tok.describe()}", tok)

    def object(self, tok):
        """The object ``@name`` stands for: a fresh Generator, the same one for each use of the name."""
        obj = self.graph.objects.get(tok.text)
        if obj is None:
            obj = self.graph.objects[tok.text] = Generator()
        return obj

    def sequence(self, close, with_comma=False):
        items = []
        trailing_comma = False
        while not self.accept("punct", close):
            if items and not trailing_comma:
                raise self.error(f"expected ',' or '{close}', found {self.tok.describe()}")
            items.append(self.literal())
            trailing_comma = bool(self.accept("punct", ","))
        return (items, trailing_comma) if with_comma else items

    def mapping(self):
        out = {}
        while not self.accept("punct", "}"):
            if out:
                self.expect("punct", ",", what="',' or '}'")
            key_tok = self.tok
            key = self.literal()
            if _has_value(key) or not _hashable(key):
                raise self.error("a dict key must be a string, a number, True, False, None or a tuple of them",
                                 key_tok)
            if key in out:
                raise self.error(f"key {key!r} appears twice", key_tok)
            self.expect("punct", ":")
            out[key] = self.literal()
        return out


def _has_value(v):
    if isinstance(v, Value):
        return True
    if isinstance(v, (list, tuple)):
        return any(_has_value(x) for x in v)
    if isinstance(v, dict):
        return any(_has_value(x) for x in v.values())
    return False


def _hashable(v):
    try:
        hash(v)
    except TypeError:
        return False
    return True


def parse(text):
    """The `Graph` that ``text`` (as `printer.print_graph` writes it) describes; `ParseError` if it is not one."""
    return _Parser(text).parse()
