"""The warm first call of a compiled step (session 49): work repeated in every fresh process is done once, and what it
reuses is checked: `Node.input_values` kept with the argument tuple it was read from, generated op functions of one
text compiled once, the code generator's sources digest found in the cache by the files' status."""

import os
import shutil
import traceback

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import kernel
from jitorch.codegen.cache import KernelCache, cache_key
from jitorch.ir.graph import Graph, Node
from jitorch.ir.values import TensorType
from jitorch.ops import registry

# ---- Node.input_values: kept with its tuple, never stale ----


def _graph_of_three():
    g = Graph()
    t = TensorType((2, 3), jt.float32, jt.device("cpu"))
    return g, [g.add_input(t, f"x{i}") for i in range(3)]


def test_input_values_follow_arguments_a_pass_assigns_anew():
    """A node's read values are kept with the argument tuple they were read from: a pass that rewrites the
    arguments (as `Rewriter.update_args` and `substitute` do: a new tuple) gets the new tuple's values."""
    _, (a, b, c) = _graph_of_three()
    node = Node(registry.OPS["add"], (a, b, 1))
    assert node.input_values() == [a, b]
    assert node.input_values() == [a, b]  # (the kept answer)
    node.args = (c, b, 1)
    assert node.input_values() == [c, b]
    node.args = [a, c, 1]  # a list (nothing assigns one today; it is read anew at each call)
    assert node.input_values() == [a, c]
    node.args[1] = b
    assert node.input_values() == [a, b]


def test_input_values_of_a_list_argument_edited_in_place_are_read_anew():
    """A cat's tensors are a list inside the argument tuple, which a pass could edit in place: such a node's values
    are read at each call, never kept (nor those of a list inside a tuple inside the arguments)."""
    _, (a, b, c) = _graph_of_three()
    node = Node(registry.OPS["cat"], ([a, b], 0))
    assert node.input_values() == [a, b]
    node.args[0].append(c)
    assert node.input_values() == [a, b, c]
    node.args[0][0] = c
    assert node.input_values() == [c, b, c]
    nested = Node(registry.OPS["cat"], (([a], [b]), 0))
    assert nested.input_values() == [a, b]
    nested.args[0][1].append(c)
    assert nested.input_values() == [a, b, c]


def test_input_values_hand_out_a_new_list_each_call():
    """A caller may edit the list it gets (the memory plan's and fusion's walks extend theirs): the next call's list
    is untouched, and a nested tuple's values come in argument order."""
    _, (a, b, c) = _graph_of_three()
    node = Node(registry.OPS["add"], ((a, (b, 2)), c))
    first = node.input_values()
    assert first == [a, b, c]
    first.append(a)
    first.remove(b)
    assert node.input_values() == [a, b, c]


def test_a_rewriter_substitutes_replaced_values_wherever_the_arguments_hold_them():
    """`Rewriter.update_args` asks the node's kept values whether it names a replaced value: a plain argument, one in
    a nested tuple and one in a list are substituted; a node naming none keeps its very tuple; a list edited in
    place to name a replaced value after an earlier look is substituted at the next."""
    from jitorch.ir.passes.rewrite import Rewriter
    g, (a, b, c) = _graph_of_three()
    plain = Node(registry.OPS["add"], (a, b, 1))
    nested = Node(registry.OPS["add"], ((c, (b, 2)), a))
    listed = Node(registry.OPS["cat"], ([a, c], 0))
    untouched = Node(registry.OPS["add"], (a, c, 1))
    rw = Rewriter(g)
    rw.replaced[b] = c
    for node in (plain, nested, untouched, listed):
        node.input_tuple()
    kept = untouched.args
    for node in (plain, nested, untouched, listed):
        rw.update_args(node)
    assert plain.args == (a, c, 1) and plain.input_tuple() == (a, c)
    assert nested.args == ((c, (c, 2)), a) and nested.input_values() == [c, c, a]
    assert untouched.args is kept and listed.args == ([a, c], 0)
    listed.args[0].append(b)
    rw.update_args(listed)
    assert listed.args == ([a, c, c], 0) and listed.input_tuple() == (a, c, c)


def test_a_compiled_step_reads_each_nodes_arguments_once_per_tuple(monkeypatch):
    """Counts of repeated work: compiling a graph asks its nodes their values several times each (the GPT step:
    26,000 calls for 2,000 nodes, and each pass's `Rewriter.update_args`); the arguments are walked once per node
    and argument tuple, the other calls get the kept answer, which is the walk's. And the compiled function
    computes eager's values."""
    calls, walks = [], []
    method = Node.input_tuple

    def counted(node):
        kept = node._read is not None and node._read[0] is node.args
        calls.append(node)
        if not kept:
            walks.append((node, node.args))
        got = method(node)
        assert list(got) == [v for a in node.args for v in (_values(a))]
        return got
    monkeypatch.setattr(Node, "input_tuple", counted)

    def f(x, y):
        z = x.matmul(y).relu()
        return (z * 2 + x.sum(0)).softmax(-1), jt.cat([z, x], 0).mean()
    x, y = jt.randn(8, 8), jt.randn(8, 8)
    compiled = jt.compile(f)
    for got, want in zip(compiled(x, y), f(x, y)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    frozen = [(id(node), id(args)) for node, args in walks if node._read is not None]
    assert len(calls) > 2 * len(walks) and frozen and len(frozen) == len(set(frozen))


def _values(arg):
    """The Values in an argument, nested lists and tuples included, in order (as `iter_values`)."""
    from jitorch.ir.graph import Value
    if isinstance(arg, Value):
        return [arg]
    if isinstance(arg, (list, tuple)):
        return [v for a in arg for v in _values(a)]
    return []


# ---- generated op functions: one compile per text ----


def _counting_compiles(monkeypatch):
    compiled = []
    monkeypatch.setattr(registry, "_CODES", {})
    monkeypatch.setattr(registry, "COMPILE", [lambda src, filename: compiled.append(filename) or
                                              compile(src, filename, "exec")])
    return compiled


def test_ops_whose_generated_variants_have_one_text_compile_it_once(monkeypatch):
    """exp's and rsqrt's method variants are the same text but for their names: Python compiles it once, and each
    function runs in its own op's globals (exp's computes exp, rsqrt's rsqrt), named and placed in tracebacks
    as its op's."""
    compiled = _counting_compiles(monkeypatch)
    exp = registry._generate(registry.OPS["exp"], "method")
    rsqrt = registry._generate(registry.OPS["rsqrt"], "method")
    assert compiled == ["<jitorch op exp>"]
    assert exp.__code__.co_code == rsqrt.__code__.co_code
    assert (exp.__name__, exp.__qualname__, exp.__code__.co_filename) == ("exp", "exp", "<jitorch op exp>")
    assert (rsqrt.__name__, rsqrt.__code__.co_name, rsqrt.__code__.co_filename) == \
        ("rsqrt", "rsqrt", "<jitorch op rsqrt>")
    x = jt.rand(5) + 0.5
    assert exp(x).numpy().tobytes() == x.exp().numpy().tobytes()
    assert rsqrt(x).numpy().tobytes() == x.rsqrt().numpy().tobytes()


def test_converters_of_one_text_compile_once_and_raise_their_ops_errors(monkeypatch):
    """neg's and logical_not's converters are one text: compiled once, each converts with its own op's rules, and a
    bad argument's TypeError names its op, raised from that op's converter."""
    compiled = _counting_compiles(monkeypatch)
    neg = registry._make_converter(registry.OPS["neg"])
    logical_not = registry._make_converter(registry.OPS["logical_not"])
    assert compiled == ["<jitorch convert neg>"]
    x = jt.ones(2)
    assert neg((x,))[0] is x and logical_not((x,))[0] is x
    for convert, name in ((neg, "neg"), (logical_not, "logical_not")):
        with pytest.raises(TypeError, match=rf"^{name}\(\)") as info:
            convert(("a string",))
        assert f"<jitorch convert {name}>" in [frame.filename for frame in traceback.extract_tb(info.tb)]


def test_variants_of_different_texts_are_compiled_apart(monkeypatch):
    """add's function variant (alpha, out=) and sub's share a text; mul's differs and is compiled itself: a shared
    code object is never handed to an op of another text."""
    compiled = _counting_compiles(monkeypatch)
    add = registry._generate(registry.OPS["add"], "function")
    sub = registry._generate(registry.OPS["sub"], "function")
    mul = registry._generate(registry.OPS["mul"], "function")
    assert compiled == ["<jitorch op add>", "<jitorch op mul>"]
    x, y = jt.randn(4), jt.randn(4)
    assert add(x, y, alpha=2).numpy().tobytes() == (x + 2 * y).numpy().tobytes()
    assert sub(x, y, alpha=2).numpy().tobytes() == (x - 2 * y).numpy().tobytes()
    assert mul(x, y).numpy().tobytes() == (x * y).numpy().tobytes()


# ---- the code generator's sources digest, found by the files' status ----


@pytest.fixture
def sources(tmp_path):
    """A copy of the package's hashed sources (their files' status: new inodes, change times of now)."""
    root = tmp_path / "jitorch"
    package = kernel.Path(kernel.__file__).resolve().parents[1]
    for part in kernel.GENERATOR_SOURCES:
        source = package / part
        if source.is_dir():
            shutil.copytree(source, root / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / part)
    return root


def test_the_sources_digest_comes_from_the_cache_until_a_file_changes(sources, tmp_path, monkeypatch):
    """A second process finds the digest in the cache (reads no source); an edit that keeps the file's size and
    sets its modification time back still changes its change time: the digest is hashed again, and is the
    edited sources'."""
    monkeypatch.setattr(kernel, "RACY_SECONDS", 0)  # (the copy's files are older than now, if only just)
    hashed = kernel.sources_digest(sources)
    store = KernelCache(tmp_path / "cache")
    assert kernel.sources_digest(sources, store=store) == hashed and store.info().writes == 1
    again = KernelCache(tmp_path / "cache")
    monkeypatch.setattr(kernel.Path, "read_bytes", lambda self: pytest.fail(f"{self} read"))
    assert kernel.sources_digest(sources, store=again) == hashed and again.info().disk_hits == 1
    monkeypatch.undo()
    monkeypatch.setattr(kernel, "RACY_SECONDS", 0)
    edited = sources / "ops" / "meta.py"
    status = edited.stat()
    text = edited.read_bytes()
    edited.write_bytes(text.replace(b"def ", b"def_", 1)[:-1] + b"\n")  # (same size)
    os.utime(edited, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert edited.stat().st_size == status.st_size and edited.stat().st_mtime_ns == status.st_mtime_ns
    changed = kernel.sources_digest(sources)
    assert changed != hashed
    assert kernel.sources_digest(sources, store=KernelCache(tmp_path / "cache")) == changed


def test_sources_changed_within_the_racy_window_write_no_digest_entry(sources, tmp_path):
    """Files changed less than `RACY_SECONDS` before they are listed (the copy's: just now) might be changed again
    within their file system's clock tick and keep their status: no entry is written for them."""
    store = KernelCache(tmp_path / "cache")
    assert kernel.sources_digest(sources, store=store) == kernel.sources_digest(sources)
    assert store.info().writes == 0 and store.info().entries == 0


@pytest.mark.parametrize("payload", [b"not hex at all", b"ABCDEF" * 10 + b"0123", b"0" * 63, b"0" * 65,
                                     b"\xff" * 64])
def test_a_damaged_sources_digest_entry_is_hashed_again(sources, tmp_path, monkeypatch, payload):
    """An entry under the listing's key that is no 64 lowercase hex digits (truncated, overlong, not text) is a miss:
    the sources are hashed, and the digest is theirs."""
    monkeypatch.setattr(kernel, "RACY_SECONDS", 0)
    listing, _ = kernel._listing(sources, kernel.source_paths(sources))
    KernelCache(tmp_path / "cache").put(cache_key("generator sources digest", listing), payload, listing)
    store = KernelCache(tmp_path / "cache")
    hashed = kernel.sources_digest(sources)
    assert kernel.sources_digest(sources, store=store) == hashed
    assert store.info().disk_hits == (len(payload) <= 64)  # (read and refused; a longer one is refused unread)
    again = KernelCache(tmp_path / "cache")  # (the good digest took the damaged entry's place)
    assert kernel.sources_digest(sources, store=again) == hashed and again.info().disk_hits == 1


def test_the_fingerprint_is_the_packages_sources_digest():
    """`generator_fingerprint` (the cache's or the hashed digest) is the installed package's sources' digest."""
    package = kernel.Path(kernel.__file__).resolve().parents[1]
    assert kernel.generator_fingerprint() == kernel.sources_digest(package)
