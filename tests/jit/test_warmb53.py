"""The warm first call of a compiled step (session 53): generated Python's code objects come from the kernel
cache's folder (`codegen.pycode`), not from Python's compiler, in every process after the first."""

import marshal
import weakref
from types import SimpleNamespace

import pytest

import jitorch as jt
from jitorch.codegen import pycode
from jitorch.codegen.cache import KernelCache
from jitorch.ops import registry

SOURCE = "def f(x: int):\n    assert x > 0\n    return x + 1\n"


@pytest.fixture
def store(tmp_path, monkeypatch):
    """`pycode`'s cache over ``tmp_path``, and the names of the texts Python's compiler compiles."""
    compiles = []
    monkeypatch.setattr(pycode, "_store", lambda: KernelCache(tmp_path, suffix=".jitpy"))
    monkeypatch.setattr(pycode, "compile", lambda *a, **k: compiles.append(a[1]) or compile(*a, **k), raising=False)
    return tmp_path, compiles


def _run(code):
    env = {}
    exec(code, env)
    return env["f"]


def test_a_stored_code_object_is_the_one_the_compiler_makes(store):
    folder, compiles = store
    first = pycode.compiled(SOURCE, "<jitorch a>")
    again = pycode.compiled(SOURCE, "<jitorch a>")  # (a new KernelCache: read from the folder)
    assert compiles == ["<jitorch a>"]
    fresh = compile(SOURCE, "<jitorch a>", "exec", flags=pycode.FLAGS, dont_inherit=True)
    assert marshal.dumps(again) == marshal.dumps(first) == marshal.dumps(fresh)
    assert _run(again)(2) == 3 and _run(again).__annotations__ == {"x": "int"}  # (annotations as the generators')
    with pytest.raises(AssertionError):
        _run(again)(0)
    # entries of their own suffix: the kernels' cache counts none of them, and a clear removes them
    assert [p.suffix for p in folder.rglob("*.jit*")] == [".jitpy"]
    assert KernelCache(folder).info().entries == 0 and KernelCache(folder, suffix=".jitpy").info().entries == 1
    KernelCache(folder).clear()
    assert not list(folder.rglob("*.jit*"))


def test_the_key_holds_the_file_name_and_the_interpreter(store, monkeypatch):
    """A code object reports its file name, and its bytecode is the interpreter's: another name, optimisation level
    or bytecode format is another entry."""
    _, compiles = store
    assert pycode.compiled(SOURCE, "<jitorch b>").co_filename == "<jitorch b>"
    assert pycode.compiled(SOURCE, "<jitorch c>").co_filename == "<jitorch c>"
    keys = {pycode.code_key(SOURCE, "<jitorch b>"), pycode.code_key(SOURCE, "<jitorch c>"),
            pycode.code_key(SOURCE + "\n", "<jitorch b>")}
    monkeypatch.setattr(pycode.importlib.util, "MAGIC_NUMBER", b"\0\0\r\n")
    keys.add(pycode.code_key(SOURCE, "<jitorch b>"))
    assert len(keys) == 4 and compiles == ["<jitorch b>", "<jitorch c>"]


def test_an_entry_marshal_cannot_read_is_compiled_again_and_rewritten(store):
    folder, compiles = store
    KernelCache(folder, suffix=".jitpy").put(pycode.code_key(SOURCE, "<jitorch d>"), b"\xffnot a code object", SOURCE)
    assert _run(pycode.compiled(SOURCE, "<jitorch d>"))(1) == 2
    assert _run(pycode.compiled(SOURCE, "<jitorch d>"))(1) == 2
    assert compiles == ["<jitorch d>"]  # (the second read the rewritten entry)


def test_generated_op_functions_come_from_the_cache_in_a_later_process(store, monkeypatch):
    """Once the code generator is loaded, an op function's text is compiled through `pycode`: a process that
    finds it in the folder (here: a fresh `_CODES`, as a new process has) runs no compiler, and the function is
    its op's."""
    _, compiles = store
    assert registry.COMPILE[0] is pycode.compiled
    monkeypatch.setattr(registry, "_CODES", {})
    registry._generate(registry.OPS["exp"], "method")
    monkeypatch.setattr(registry, "_CODES", {})
    exp = registry._generate(registry.OPS["exp"], "method")
    assert compiles == ["<jitorch op exp>"]
    assert exp.__code__.co_filename == "<jitorch op exp>"
    x = jt.rand(5)
    assert exp(x).numpy().tobytes() == x.exp().numpy().tobytes()


def test_a_compiled_graphs_call_comes_from_the_cache(store):
    """The generated call of a compiled graph (`straightline`) is compiled once; a second compile of the same
    graph (the call's text again) reads it, with the same results."""
    _, compiles = store
    x = jt.rand(4, 3)
    first = jt.compile(lambda t: (t * 2).sum(1) + 1)(x)
    calls = [name for name in compiles if not name.startswith(("<jitorch op", "<jitorch convert"))]
    second = jt.compile(lambda t: (t * 2).sum(1) + 1)(x)
    assert calls and [name for name in compiles if not name.startswith(("<jitorch op", "<jitorch convert"))] == calls
    assert first.numpy().tobytes() == second.numpy().tobytes()
    assert abs(first.numpy() - ((x.numpy() * 2).sum(1) + 1)).max() < 1e-5


def test_a_compile_leaves_no_self_referencing_closures_to_the_cyclic_collector():
    """Regression: `substitute`'s, `_nodes_described`'s and `fake_args`'s helpers (and decompose's) were nested
    functions calling themselves, each a reference cycle (function, cell) holding what it closed over: 11,000 of
    the 13,800 objects the collector freed after a GPT training step's compile. Now refcounting frees them."""
    import gc
    from jitorch.codegen.kernel import _nodes_described
    from jitorch.ir.fake import fake_args
    from jitorch.ir.graph import Graph, substitute
    from jitorch.ir.values import TensorType
    g = Graph()
    t = TensorType((2, 3), jt.float32, jt.device("cpu"))
    x, y = g.add_input(t, "x"), g.add_input(t, "y")
    node = g.add_node(registry.OPS["add"], [x, [y, (x, 2.0)]], [t])
    group = SimpleNamespace(inputs=[x, y], nodes=[node])
    described = _nodes_described(group)[2]
    assert described == (("add", (("v", 0), ("list", (("v", 1), ("tuple", (("v", 0), ("float", "2.0")))))), 1),)

    class Resolve(dict):  # (a rewriter's resolver holds its graph)
        def __call__(self, v):
            return self.get(v)
    resolve = Resolve({x: y, y: x})
    held = weakref.ref(resolve)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert substitute(node.args, resolve) == (y, [x, (y, 2.0)])
        del resolve
        assert held() is None  # (freed at once, not by the collector)
        assert _nodes_described(group)[2] == described
        assert [tuple(f.shape) for f in fake_args([x, (y, 1)])[1][:1]] == [(2, 3)]
        gc.collect()
        # (other tests' threads may leave garbage meanwhile; none of it jitorch's functions)
        assert not [f for f in gc.garbage if type(f).__name__ == "function" and f.__module__.startswith("jitorch")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
