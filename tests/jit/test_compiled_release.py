"""A compiled function that is dropped takes its graphs and kernels with it: a long-running process (a
notebook, a server) that keeps making compiled functions holds only the live ones. Compiled graphs sit in
reference cycles (their generated code binds their methods), so a collection frees them."""

import gc
import weakref

import jitorch
from jitorch.codegen import cpu


def _kernels(compiled_graph):
    return [weakref.ref(k._code) for k in compiled_graph.kernels]


def _linked_since(before):
    """Weak references to the machine code linked since ``before`` (`cpu._linked`'s keys then)."""
    return [weakref.ref(code) for key, code in list(cpu._linked.items()) if key not in before]


def _assert_freed(refs):
    gc.collect()
    assert [r() is None for r in refs] == [True] * len(refs)


def test_a_dropped_function_with_a_backward_frees_its_graphs_and_kernels():
    before = set(cpu._linked.keys())
    f = jitorch.compile(lambda x: (x.sin() * 1.8125).exp().sum())
    x = jitorch.randn(6, 3, requires_grad=True)
    f(x).backward()
    expected = (x.detach().sin() * 1.8125).exp() * 1.8125 * x.detach().cos()
    assert jitorch.allclose(x.grad, expected, rtol=1e-5)
    (entry,) = f.cache.values()
    kernels = _linked_since(before)
    assert kernels
    refs = [weakref.ref(f), weakref.ref(entry.graph)] + kernels
    del f, entry
    _assert_freed(refs)


def test_a_dropped_compiled_module_frees_the_module_and_its_kernels():
    before = set(cpu._linked.keys())
    model = jitorch.nn.Sequential(jitorch.nn.Linear(4, 8), jitorch.nn.ReLU(), jitorch.nn.Linear(8, 2))
    compiled = jitorch.compile(model)
    x = jitorch.randn(5, 4)
    assert jitorch.allclose(compiled(x), model(x), atol=1e-6)
    kernels = _linked_since(before)
    assert kernels
    refs = [weakref.ref(model), weakref.ref(compiled)] + kernels
    del model, compiled
    _assert_freed(refs)


class _Scaled:
    @jitorch.compile
    def scale(self, x):
        return x.cos() * 2.375


def test_an_instance_dropped_frees_the_compiled_method_bound_to_it():
    obj = _Scaled()
    x = jitorch.randn(7)
    assert jitorch.allclose(obj.scale(x), x.cos() * 2.375)
    bound = obj.scale
    executable = next(iter(bound.cache.values())).executable
    refs = [weakref.ref(obj), weakref.ref(bound)] + _kernels(executable)
    del obj, bound, executable
    _assert_freed(refs)
