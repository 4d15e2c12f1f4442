"""The README's account of CI holds: its second command is what `.ci/run` runs, and `.ci/variants` reruns the
test files the README says, each of which exists (a renamed file would silently leave a run)."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
VARIANTS = (ROOT / ".ci" / "variants").read_text()


def _paths(name):
    (body,) = re.findall(rf"^{name}=\((.*?)\)", VARIANTS, re.S | re.M)
    return body.split()


def test_the_readmes_second_command_is_what_ci_runs():
    commands = re.findall(r"```bash\n(.*?)```", README, re.S)[0].strip().splitlines()
    run = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python3 ")]
    assert run == [commands[1]]


def test_the_variants_rerun_existing_files_and_the_minimum_versions_run_covers_what_the_readme_says():
    baseline, oldest = _paths("BASELINE"), _paths("OLDEST")
    missing = [p for p in baseline + oldest if not (ROOT / p).exists()]
    assert not missing
    assert {"tests/codegen", "tests/runtime"} <= set(oldest)
    named = {"pointwise-op": "tests/ops/test_pointwise", "reduction": "tests/ops/test_reductions",
             "special-function": "tests/ops/test_special_functions", "linear-algebra": "tests/test_linalg",
             "FFT": "tests/test_fft", "CUDA code": "tests/cuda/test_ptx", "optimizer-step": "tests/optim/"}
    assert all(any(p.startswith(prefix) for p in oldest) for prefix in named.values())
    assert ("code generator, runtime,\npointwise-op, reduction, special-function, linear-algebra, FFT, CUDA code\n"
            "and optimizer-step tests on the oldest") in README
