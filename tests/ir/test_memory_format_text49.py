"""Session 49: graphs whose ops take a channels-last memory format print and parse back: the parser knew only
``contiguous_format`` and ``preserve_format``, so the text of a traced ``x.contiguous(memory_format=channels_last)``
did not read back."""

import jitorch as jt
from jitorch.ir import parse, print_graph
from jitorch.jit.tracer import trace


def test_a_graph_of_channels_last_copies_round_trips_through_its_text():
    def fn(x, y):
        return (x.contiguous(memory_format=jt.channels_last) + 1,
                y.clone(memory_format=jt.channels_last_3d),
                jt.zeros_like(x, memory_format=jt.channels_last))

    g = trace(fn, jt.ones(2, 3, 4, 5), jt.ones(2, 3, 2, 2, 2))
    text = print_graph(g)
    assert "channels_last" in text and "channels_last_3d" in text
    parsed = parse(text)
    assert parsed == g and print_graph(parsed) == text
    formats = [a for n in parsed.nodes for a in n.args if isinstance(a, jt.memory_format)]
    assert jt.channels_last in formats and jt.channels_last_3d in formats
