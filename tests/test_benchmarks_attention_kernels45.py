"""benchmarks/attention_kernels.py's options of session 45: another attention.py's kernels timed beside these
(``--baseline``), a GPT step's layout (``--layout gpt``), memory written before each call (``--cold``), two
threads."""

from pathlib import Path

import numpy as np

from tests.support import load_script

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "benchmarks" / "attention_kernels.py"


def test_a_baseline_is_timed_beside_at_a_gpt_layout_cold_on_two_threads(capsys):
    bench = load_script(SCRIPT, "attention_kernels_benchmark45")
    baseline = ROOT / "jitorch" / "codegen" / "attention.py"
    results = bench.main(["--rounds", "1", "--reps", "1", "--baseline", str(baseline), "--layout", "gpt",
                          "--cold", "1", "--threads", "2"])
    assert set(results) == {(name, d) for name, *_ in bench.SHAPES for d in ("forward", "backward")}
    assert all(len(row) == 5 and all(x > 0 for x in row) for row in results.values())
    assert "new/old" in capsys.readouterr().out


def test_the_baselines_kernels_are_its_own_and_compute_the_same_attention():
    """The baseline module is loaded beside jitorch.codegen.attention, leaves that one registered in
    ops.attention, and builds its own kernels (its IR is not taken from the cache entries of this version's):
    at a GPT layout both write the same outputs within float32 rounding."""
    from jitorch.codegen import attention as current
    from jitorch.ops import attention as op
    bench = load_script(SCRIPT, "attention_kernels_benchmark45b")
    old = bench.baseline_kernels(ROOT / "jitorch" / "codegen" / "attention.py")
    assert op.ATTENTION_KERNEL is current.attention_kernel and old is not current.attention_kernel
    assert old.__module__ == "jitorch.codegen._attention_baseline"
    assert old.__globals__["generator_fingerprint"]() != current.generator_fingerprint()
    outputs = []
    for kernel in (current.attention_kernel, old):
        rng = np.random.default_rng(0)
        (q, k, v), (out,) = bench._heads(2, 3, 16, 32, 3, rng), bench._heads(2, 3, 16, 32, 1, rng)
        p = np.empty((2, 3, 16, 16), np.float32)
        layouts = tuple(tuple(n // 4 for n in a.strides[:-1]) for a in (q, k, v, out, p))
        built = kernel("forward", np.float32, 16, 16, 32, True, 0.25, batch=(2, 3), layouts=layouts)
        built.run_tiles([q, k, v, out, p], 6)
        outputs.append(out.copy())
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-6, atol=1e-6)
