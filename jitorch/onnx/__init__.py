"""``jitorch.onnx``: export a model or function to ONNX, as ``torch.onnx.export``.

``export(model, args, "model.onnx", input_names=..., output_names=..., dynamic_axes=...)`` traces the call
with jitorch's tracer (the one ``jitorch.compile`` and ``jitorch.export`` use), in evaluation mode, and
lowers each op of the traced graph by its rule in `rules.RULES` to ONNX nodes. Needs the ``onnx`` package
(``pip install jitorch[onnx]``), imported only when a model is exported.
"""

from .errors import OnnxExporterError, UnsupportedOperatorError
from .exporter import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, TrainingMode, export

__all__ = ["DEFAULT_OPSET", "MAX_OPSET", "MIN_OPSET", "OnnxExporterError", "TrainingMode", "UnsupportedOperatorError",
           "export"]
