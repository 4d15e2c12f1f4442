"""Tracing semantics: what a graph records, and that running it matches eager."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.ir import interpret, verify
from jitorch.jit import TraceError, trace
from jitorch.jit.tracer import trace_with_inputs


def run_both(fn, *args, **kwargs):
    """(traced result, eager result, graph): fn traced and interpreted on copies, and run eagerly."""
    copies = [a.clone() if isinstance(a, jt.Tensor) else a for a in args]
    graph, inputs = trace_with_inputs(fn, tuple(copies), kwargs)
    verify(graph)
    outputs, mutations = interpret(graph, inputs)
    for target, value in mutations:
        inputs[graph.inputs.index(target)]._write(value)
    eager = fn(*args, **kwargs)
    return outputs, eager, graph, copies


def ops_of(graph):
    return [node.op.name for node in graph.nodes]


def test_graph_prints_one_typed_node_per_line():
    g = trace(lambda x, y: (x * y).sum(1), jt.ones(64, 128), jt.ones(128))
    assert str(g).splitlines() == [
        "graph(%x: f32[64, 128], %y: f32[128]):",
        "  %0 : f32[64, 128] = mul(%x, %y)",
        "  %1 : f32[64] = sum(%0, dim=[1])",
        "  return %1",
    ]


def test_closure_tensors_become_named_constants_read_at_call_time():
    w = jt.ones(3)

    def f(x):
        return x * w

    g, inputs = trace_with_inputs(f, (jt.ones(3),), {})
    assert list(g.constants) == ["w"]
    w.add_(1)
    out, _ = interpret(g, inputs)
    assert out.tolist() == [2.0, 2.0, 2.0]



def test_state_an_optimizer_makes_while_traced_is_named_without_walking_the_modules_again():
    """The first step of Adam makes its state a parameter at a time inside the trace: each new state tensor
    is named after the optimizer, and the model's parameters are read once, not again per state tensor."""
    class Counted(jt.nn.Sequential):
        walks = 0

        def named_parameters(self, *args, **kwargs):
            Counted.walks += 1
            return super().named_parameters(*args, **kwargs)

    model = Counted(*[jt.nn.Linear(3, 3) for _ in range(4)])
    opt = jt.optim.Adam(model.parameters(), lr=0.1)
    scale = None  # a name the function sees that holds None, as a module's does: read with the rest

    def step(x):
        loss = model(x).square().mean() * (1.0 if scale is None else scale)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    Counted.walks = 0
    g, _ = trace_with_inputs(step, (jt.ones(2, 3),), {})
    names = set(g.constants)
    assert {"model.0.weight", "model.3.bias"} <= names
    # Adam's buffers of each of the 8 parameters, named by the optimizer's state
    assert {f"opt.{key}_{i}" for key in ("exp_avg", "exp_avg_sq") for i in range(8)} <= names
    # the first name read only: it was a read per parameter, then one more for the captured scalar Adam makes
    # (its learning rate "c"), which is named as it is made (`Tracer.give_name`)
    assert Counted.walks == 1
    assert "c" in names

def test_pytrees_keywords_and_methods():
    def f(pair, scale=1.0, *, extra):
        a, b = pair
        return {"sum": a.add(b).mul(scale), "rest": [extra.t(), b.shape[0]]}

    args = ((jt.arange(6.0).view(2, 3), jt.ones(2, 3)), 2.0)
    out, eager, graph, _ = run_both(f, *args, extra=jt.ones(3, 2))
    assert [v.name for v in graph.inputs] == ["pair_0", "pair_1", "extra"]
    np.testing.assert_array_equal(out["sum"].numpy(), eager["sum"].numpy())
    assert out["rest"][1] == 2 and out["rest"][0].shape == (2, 3)


def test_python_control_flow_on_shapes_is_specialised():
    def f(x):
        if x.shape[0] > 2:
            return x * 2
        return x - 1

    assert ops_of(trace(f, jt.ones(3))) == ["mul"]
    assert ops_of(trace(f, jt.ones(2))) == ["sub"]


def test_views_and_inplace_on_intermediates_match_eager():
    def f(x):
        y = x * 1
        y[:, 0] = -1.0
        z = y.t()
        z.mul_(2)          # through a view of y: y changes too
        y.add_(1)
        return y, z.sum(0)

    out, eager, graph, _ = run_both(f, jt.arange(6.0).view(2, 3))
    for o, e in zip(out, eager):
        np.testing.assert_array_equal(o.numpy(), e.numpy())
    assert "as_strided_scatter" in ops_of(graph)


def test_inplace_on_inputs_is_written_back():
    def f(x, y):
        x.add_(y)
        x[0] = 5.0
        return x.sum()

    x, y = jt.arange(4.0), jt.ones(4)
    out, eager, graph, copies = run_both(f, x, y)
    assert out.item() == eager.item()
    np.testing.assert_array_equal(copies[0].numpy(), x.numpy())
    assert [t.name for t, _ in graph.mutations] == ["x"]


def test_inplace_through_a_view_of_an_input():
    def f(x):
        x[1:].mul_(10)
        return x

    out, eager, _, copies = run_both(f, jt.arange(3.0))
    assert copies[0].tolist() == eager.tolist() == [0.0, 10.0, 20.0]


def test_masked_assignment_traces_as_index_put():
    def f(x):
        x[x < 0] = 0.0
        return x

    out, eager, graph, copies = run_both(f, jt.tensor([-1.0, 2.0, -3.0]))
    assert copies[0].tolist() == [0.0, 2.0, 0.0]
    assert "index_put" in ops_of(graph)


def test_multi_output_and_namedtuple_results():
    out, eager, graph, _ = run_both(lambda x: x.max(1), jt.tensor([[1.0, 3.0], [4.0, 2.0]]))
    assert out[1].tolist() == eager.indices.tolist() == [1, 0]
    assert len(graph.nodes[0].outputs) == 2


def test_random_and_creation_ops_are_recorded_not_frozen():
    g = trace(lambda x: x + jt.randn(3), jt.zeros(3))
    assert ops_of(g) == ["randn", "add"]


@pytest.mark.parametrize("body, what", [
    (lambda x: bool(x.sum() > 0), "bool()"),
    (lambda x: x.sum().item(), ".item()"),
    (lambda x: x.tolist(), ".tolist()"),
    (lambda x: x.numpy(), ".numpy()"),
    (lambda x: float(x.sum()), "float()"),
    (lambda x: jt.nonzero(x), "nonzero()"),
    (lambda x: x[x > 0], "indexing (in its index op)"),
    (lambda x: jt.equal(x, x), "equal()"),
])
def test_data_dependent_python_raises_trace_error_with_the_users_line(body, what):
    with pytest.raises(TraceError) as info:
        trace(body, jt.ones(3))
    message = str(info.value)
    assert what in message
    assert "test_trace.py:" in message


def test_trace_error_quotes_the_source_line():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(TraceError, match=r"bool\(\) on a traced tensor at .*test_trace.py:\d+: `if x.sum\(\) > 0:`"):
        trace(f, jt.ones(2))


def test_print_inside_a_traced_function_does_not_break_it(capsys):
    def f(x):
        print(x)
        return x + 1

    trace(f, jt.ones(2))
    assert "size=(2,)" in capsys.readouterr().out


def test_returning_an_input_returns_the_same_tensor():
    x = jt.ones(2)
    g, inputs = trace_with_inputs(lambda t: t, (x,), {})
    out, _ = interpret(g, inputs)
    assert out is x


def test_graph_networkx_and_dot():
    g = trace(lambda x, y: (x + y).exp(), jt.ones(2), jt.ones(2))
    nxg = g.to_networkx()
    assert set(nxg.predecessors("0")) == {"x", "y"}
    dot = g.to_dot()
    assert dot.startswith("digraph jitorch {") and '"x" -> "0"' in dot
