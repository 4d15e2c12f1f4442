"""Large uniform draws split across the thread team, bit for bit the one-thread stream.

A PCG64 double (``Generator.random``) takes exactly one 64-bit output of the generator, so the draw of elements
``[lo, hi)`` is what a copy of the generator advanced by ``lo`` outputs draws for ``hi - lo`` elements. Each part
runs on one thread of the team (`threads.run_parts`; NumPy's fill lets the GIL go), and the generator is then
left where the whole draw leaves it. A training step's dropout masks (`bernoulli_`, a float64 draw per element)
were its largest stretch on one thread: 0.72 of the cnn step's 3.3 ms of serial CPU at two threads
(benchmarks/two_threads.py --gaps --spans).
"""

from __future__ import annotations

import numpy as np

from ..runtime import threads

# Draws of fewer doubles run whole: each part costs a copy of the generator advanced to its start (13 to 18 µs
# here, numpy 1.26 and 2.x) and a hand-over, against about 2.2 ns a double (a 2**16 draw: 150 µs)
SPLIT_DRAW_MIN = 1 << 16


def random_doubles(generator, shape):
    """``generator.random(shape)`` (float64 in [0, 1)), in parts on the thread team from `SPLIT_DRAW_MIN`
    doubles where ``generator`` is a PCG64 one: the same values, and the generator left in the same state."""
    n = int(np.prod(shape, dtype=np.int64))
    parts = min(threads.get_num_threads(), n // (SPLIT_DRAW_MIN // 2))
    bits = generator.bit_generator
    if parts < 2 or type(bits) is not np.random.PCG64:
        return generator.random(shape)
    out = np.empty(shape)
    flat = out.reshape(-1)
    with bits.lock:  # (one draw at a time from a generator, as NumPy's own draws hold it)
        state = bits.state
        draws = [(_advanced(state, lo), flat[lo:hi]) for lo, hi in threads.bounds(n, parts)]
        threads.run_parts(_fill, draws)
        # where the whole draw leaves it: ``advance`` clears the buffered 32-bit half, which a draw of
        # doubles leaves as it was
        after = _advanced(state, n).bit_generator.state
        after["has_uint32"], after["uinteger"] = state["has_uint32"], state["uinteger"]
        bits.state = after
    return out


def _advanced(state, outputs):
    """A generator on a PCG64 at ``state`` advanced by ``outputs`` 64-bit outputs."""
    bits = np.random.PCG64()
    bits.state = state
    bits.advance(outputs)
    return np.random.Generator(bits)


def _fill(generator, out):
    generator.random(out=out)
