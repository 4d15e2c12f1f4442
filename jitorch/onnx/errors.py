"""The errors of ONNX export, named as torch.onnx's."""

from __future__ import annotations


class OnnxExporterError(RuntimeError):
    """A model that cannot be exported to ONNX as asked: the message names the op, input or dim."""


class UnsupportedOperatorError(OnnxExporterError):
    """The traced graph holds ops that have no ONNX lowering; ``.ops`` lists them all (name -> count)."""

    def __init__(self, ops):
        self.ops = dict(ops)
        listed = ", ".join(f"{name} (x{n})" if n > 1 else name for name, n in sorted(self.ops.items()))
        super().__init__(f"ONNX export does not support the op{'s' if len(self.ops) > 1 else ''} {listed} "
                         f"that the traced graph uses")


def require_onnx():
    """The ``onnx`` package, or an ImportError saying how to install it."""
    try:
        import onnx
    except ImportError as e:
        raise ImportError("jitorch.onnx needs the onnx package: pip install jitorch[onnx]") from e
    return onnx
