"""jitorch/runtime/dtypes.py's lazy bfloat16: ml_dtypes (most of a second to import) is imported the first
time bfloat16's NumPy type is needed, not by `import jitorch` or by work in the other dtypes."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

_WITHOUT_BFLOAT16 = """
import sys
import jitorch as jt

assert "ml_dtypes" not in sys.modules, "import jitorch imported ml_dtypes"
x = jt.randn(3, 4)
str(x + 1.5), x.sort(), x.to(jt.float16) * 2, x.half().bool(), jt.finfo(jt.float16).eps, jt.finfo().tiny
assert "ml_dtypes" not in sys.modules, "float32 and float16 work imported ml_dtypes"

import ml_dtypes
import numpy as np

made_first = jt.from_numpy(np.array([1.5, -2.0, 0.0], dtype=ml_dtypes.bfloat16))
assert made_first.dtype is jt.bfloat16, made_first.dtype
assert made_first.float().tolist() == [1.5, -2.0, 0.0], made_first
assert jt.bfloat16.np == np.dtype(ml_dtypes.bfloat16)
print("ok")
"""


def test_import_and_other_dtypes_leave_ml_dtypes_unimported_and_its_arrays_still_convert():
    """ml_dtypes stays out until bfloat16 is used; a bfloat16 array the user made with ml_dtypes before
    jitorch needed it converts to a jitorch.bfloat16 tensor (its NumPy type was not yet in jitorch's table)."""
    done = subprocess.run([sys.executable, "-c", _WITHOUT_BFLOAT16], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
