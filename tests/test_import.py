"""``import jitorch`` loads only what eager tensors need: the compiler's dependencies and the op variants
come at first use (issue 19). Each test imports jitorch in a fresh interpreter, where nothing ran before."""

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import jitorch

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_fresh(code):
    """Run ``code`` in a new interpreter that imports this checkout's jitorch; returns its stdout."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


# What ``import jitorch`` must not load: each comes at first use. The compiler's and CUDA's bindings, the graph
# library, NumPy's random module (made at the first draw), the code generator beyond its error types, and the
# libraries that the namespace gives as lazy attributes (with the standard modules only they need).
NOT_AT_IMPORT = (
    "llvmlite", "cuda", "networkx", "numpy.random", "zipfile", "json", "socket", "secrets",
    "jitorch.codegen.cache", "jitorch.codegen.cpu", "jitorch.codegen.lower", "jitorch.jit.explain", "jitorch.jit.executor",
    "jitorch.optim", "jitorch.utils", "jitorch.utils.data", "jitorch.onnx", "jitorch.profiler", "jitorch.serialization",
    "jitorch.export", "jitorch.multiprocessing", "jitorch.distributed", "jitorch.safetensors",
    # the tracer, the graph library, nn (its modules and functional), torch.func
    "jitorch.jit", "jitorch.jit.tracer", "jitorch.ir", "jitorch.compiler", "jitorch.func", "jitorch.nn",
    "jitorch.nn.functional", "jitorch.nn.aten_forms", "jitorch.nn.modules", "logging",
    # ctypes.util (with subprocess, shutil, tempfile) comes with the C library's math functions
    "ctypes.util", "subprocess", "tempfile",
)


def test_import_loads_no_compiler_cuda_or_graph_library_until_a_compile():
    out = run_fresh(f"""
        import sys
        import numpy  # what NumPy loads itself is not jitorch's doing (1.26 imports numpy.random and secrets)
        heavy = [m for m in {NOT_AT_IMPORT!r} if m not in sys.modules]
        import jitorch as jt

        print(sorted(m for m in heavy if m in sys.modules))
        x = jt.arange(4.0)
        print((x + 1).tolist())  # eager ops need none of them
        print(sorted(m for m in heavy if m in sys.modules))
        f = jt.compile(lambda a: (a * 2).exp().sum())
        print(jt.allclose(f(x), jt.exp(x * 2).sum()), "llvmlite" in sys.modules)
    """)
    assert out.splitlines() == ["[]", "[1.0, 2.0, 3.0, 4.0]", "[]", "True True"]


def test_op_variants_are_generated_at_first_call_with_their_signature_from_the_start():
    out = run_fresh("""
        import inspect
        import pickle
        import jitorch as jt

        fn = jt.addcmul
        print(fn.__code__.co_name)  # a stub until called
        print(inspect.signature(fn))
        print(fn.__code__.co_name, fn.__doc__.count("Schema"))
        x = jt.ones(2)
        print(fn(x, x, x, value=2).tolist(), fn is jt.addcmul, fn.__code__.co_name)
        print(inspect.signature(jt.Tensor.addcmul_), x.addcmul_(x, x).tolist())
        lazy = inspect.signature(jt.lerp)
        print(lazy.replace() == inspect.signature(jt.lerp), pickle.loads(pickle.dumps(lazy)))
    """)
    assert out.splitlines() == [
        "_stub",
        "(input, tensor1, tensor2, *, value=1, out=None)",
        "addcmul 1",  # asking for the signature generated the variant
        "[3.0, 3.0] True addcmul",
        "(self, tensor1, tensor2, *, value=1) [2.0, 2.0]",
        "True (input, end, weight, *, out=None)",
    ]


def test_lazy_attributes_are_the_modules_and_functions_an_import_gives():
    out = run_fresh("""
        import importlib
        import sys
        import jitorch as jt

        lazy = ["optim", "utils", "onnx", "profiler", "serialization", "export", "multiprocessing", "safetensors"]
        print(all(name in dir(jt) for name in [*lazy, "explain", "save", "load"]))
        print(all(getattr(jt, name) is importlib.import_module(f"jitorch.{name}") for name in lazy))
        from jitorch.jit.explain import explain
        from jitorch.serialization import load, save
        print(jt.explain is explain, jt.load is load, jt.save is save, jt.utils.data.DataLoader.__module__)
        print(callable(jt.export), jt.nn.parallel.__name__, jt.nn.functional.__name__)
        try:
            jt.no_such_name
        except AttributeError as e:
            print(e)
    """)
    assert out.splitlines() == [
        "True", "True", "True True True jitorch.utils.data.dataloader", "True jitorch.nn.parallel jitorch.nn.functional",
        "module 'jitorch' has no attribute 'no_such_name'",
    ]


def test_star_import_binds_the_lazy_functions_and_modules():
    out = run_fresh("""
        import sys
        from jitorch import *
        from jitorch.serialization import save as saver
        print(save is saver, optim.SGD.__name__, callable(explain), "jitorch.distributed" in sys.modules)
    """)
    assert out.split() == ["True", "SGD", "True", "False"]


def test_serialization_imported_directly_loads_exported_programs(tmp_path):
    """jitorch.export registers the exported program's format with `load`: an import of jitorch.serialization
    alone, that never asks the namespace for export, must still read one."""
    import jitorch as jt

    path = tmp_path / "double.pt2"
    jt.export(lambda x: x * 2, (jt.ones(3),)).save(path)
    out = run_fresh(f"""
        import sys
        from jitorch.serialization import load

        print("jitorch.export" in sys.modules)
        import jitorch

        print(load({str(path)!r})(jitorch.arange(3.0)).tolist())
    """)
    assert out.splitlines() == ["True", "[0.0, 2.0, 4.0]"]


def test_every_name_resolves_from_the_start_and_loading_adds_none():
    """``dir(jitorch)`` at import already holds every public name: loading the lazy libraries (all of them,
    but distributed, which starts MPI) binds no name that was not listed, only the submodules they import.
    Every entry docs/api-coverage.md says exists resolves in a fresh process, the lazy ones by attribute."""
    rows = re.findall(r"^\| `torch\.([^`]+)` \| yes \|", (ROOT / "docs" / "api-coverage.md").read_text(), re.M)
    assert len(rows) > 1400
    out = run_fresh(f"""
        import types
        import jitorch as jt

        listed = set(dir(jt))
        missing = []
        for path in {rows!r}:
            owner = jt
            try:
                for part in path.split("."):
                    owner = getattr(owner, part)
            except AttributeError:
                missing.append(path)
        print(missing)
        for name in sorted(listed - {{"distributed"}}):
            getattr(jt, name)
        added = {{name for name in set(dir(jt)) - listed if not isinstance(getattr(jt, name), types.ModuleType)}}
        print(sorted(added), "jitorch.nn.functional" in __import__("sys").modules)
    """)
    assert out.splitlines() == ["[]", "[] True"]


def test_the_aten_forms_the_namespace_lists_are_those_of_nn_aten_forms():
    from jitorch.nn import aten_forms

    assert sorted(jitorch._ATEN_FORMS) == sorted(aten_forms.__all__)
    assert all(getattr(jitorch, name) is getattr(aten_forms, name) for name in aten_forms.__all__)


def test_lazy_names_behave_as_eager_ones_called_first_in_a_fresh_process():
    """A method, an aten form and ``compile`` called before anything loads nn or jit: the method's stub gives the
    method's signature and loads nn.aten_forms, which replaces it; values and gradients are those of nn.functional's forms,
    compiled as eager, every step a generated kernel."""
    out = run_fresh("""
        import inspect
        import sys
        import jitorch as jt

        x = jt.tensor([[-2.0, -0.25, 0.5, 3.0]], requires_grad=True)
        w = jt.tensor([0.25])
        stub = jt.Tensor.prelu
        shown = str(inspect.signature(stub))  # the method's signature: shown, it loads nn
        print(shown, "jitorch.nn" in sys.modules)
        y = x.prelu(w)  # a Tensor method nn installs
        print(y.tolist(), stub is not jt.Tensor.prelu, jt.Tensor.prelu.__module__)
        y.sum().backward()
        print(x.grad.tolist())
        print(jt.layer_norm is sys.modules["jitorch.nn.aten_forms"].layer_norm)
        f = jt.compile(lambda a: jt.layer_norm(a * 2, (4,)).relu())
        low = f.lower(x.detach())
        print(jt.equal(f(x.detach()), jt.nn.functional.layer_norm(x.detach() * 2, (4,)).relu()),
              [n.op.name for n in low.graph.nodes][-1], len(low.kernels) == len(low.steps) > 0)
        print(jt.compile is sys.modules["jitorch.jit.compile"].compile, jt.hardshrink(x, 1.0).tolist())
    """)
    first, *lines = out.splitlines()
    assert first == "(self, weight) True"
    assert lines[0] == "[[-0.5, -0.0625, 0.5, 3.0]] True jitorch.nn.aten_forms"
    assert lines[1] == "[[0.25, 0.25, 1.0, 1.0]]"
    assert lines[2] == "True"
    assert lines[3] == "True relu True"  # the same values, every step a generated kernel
    assert lines[4] == "True [[-2.0, 0.0, 0.0, 3.0]]"
