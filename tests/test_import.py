"""``import jitorch`` loads only what eager tensors need: the compiler's dependencies and the op variants
come at first use (issue 19). Each test imports jitorch in a fresh interpreter, where nothing ran before."""

import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_fresh(code):
    """Run ``code`` in a new interpreter that imports this checkout's jitorch; returns its stdout."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_loads_no_compiler_cuda_or_graph_library_until_a_compile():
    out = run_fresh("""
        import sys
        import jitorch as jt

        heavy = ("llvmlite", "cuda", "networkx")
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
