"""Train a small CNN for a few steps, export it to ONNX with a dynamic batch axis, and run it in onnxruntime.

    python examples/export_onnx.py                # needs: pip install jitorch[onnx]

The exported file holds the traced graph as ONNX nodes and the weights as initializers named as in the
model's state_dict; onnxruntime runs it at another batch size than the one traced, and its outputs match
jitorch's eager ones.
"""

import os
import tempfile

import numpy as np
import onnx
import onnxruntime

import jitorch as torch
from jitorch import nn
from train_cnn import BarNet, bar_images


def main():
    torch.manual_seed(0)
    model = BarNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images, labels = bar_images(256)
    for step in range(30):  # a short training run, so that BatchNorm's running statistics mean something
        batch = slice(step * 8 % 256, step * 8 % 256 + 64)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(images[batch]), labels[batch])
        loss.backward()
        optimizer.step()
    print(f"trained: loss {loss.item():.4f}")

    path = os.path.join(tempfile.mkdtemp(), "bars.onnx")
    torch.onnx.export(model, (images[:4],), path, input_names=["images"], output_names=["logits"],
                      dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    ops = sorted({node.op_type for node in proto.graph.node})
    print(f"exported {path}: {len(proto.graph.node)} nodes ({', '.join(ops)}), "
          f"{len(proto.graph.initializer)} initializers")
    weights = {i.name for i in proto.graph.initializer} & set(model.state_dict())
    used = {n for n in model.state_dict() if not n.endswith("num_batches_tracked")}  # (a count eval mode never reads)
    print(f"weights named as in state_dict: {weights == used} ({', '.join(sorted(weights)[:4])}, ...)")

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    test_images, test_labels = bar_images(100, generator=torch.Generator().manual_seed(1))
    (logits,) = session.run(None, {"images": test_images.numpy()})
    model.eval()
    with torch.no_grad():
        expected = model(test_images).numpy()
    difference = np.abs(logits - expected).max()
    print(f"batch of {len(test_images)} in onnxruntime: max difference from jitorch {difference:.9f}")
    print(f"onnxruntime accuracy: {(logits.argmax(1) == test_labels.numpy()).mean():.2f}")
    print(f"predictions equal: {bool((logits.argmax(1) == expected.argmax(1)).all())}")


if __name__ == "__main__":
    main()
