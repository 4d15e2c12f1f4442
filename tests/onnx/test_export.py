"""jitorch.onnx.export: the example models export, pass onnx.checker's full check, and run in onnxruntime with
jitorch's eager outputs (and torch's, for the same weights) at other batch sizes too; names, initializers,
errors, opsets and the file written."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import jitorch
import jitorch.nn as nn
import jitorch.nn.functional as F
from jitorch.onnx import OnnxExporterError, UnsupportedOperatorError
from jitorch.runtime.pytree import tree_flatten
from tests.test_programs import ROOT, program

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

sys.path.insert(0, str(ROOT / "examples"))
import train_cnn  # noqa: E402
import train_mlp  # noqa: E402


def exported(model, args, **kw):
    """(ModelProto, an onnxruntime session of it), checked in full."""
    f = io.BytesIO()
    proto = jitorch.onnx.export(model, args, f, **kw)
    onnx.checker.check_model(proto, full_check=True)
    assert f.getvalue() == proto.SerializeToString()
    return proto, ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])


def run(session, *tensors):
    return session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), tensors)})


def eager(model, *args):
    model.eval()
    with jitorch.no_grad():
        return [t.numpy() for t in tree_flatten(model(*args))[0] if t is not None]


def torch_twin(module, twin):
    """``twin`` (the torch model of the same code) with ``module``'s weights, in evaluation mode."""
    twin.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in module.state_dict().items()})
    return twin.eval()


def torch_outputs(twin, *args):
    with torch.no_grad():
        out = twin(*[torch.from_numpy(a.numpy().copy()) for a in args])
    flat = out if isinstance(out, (tuple, list)) else (out,)
    return [t.numpy() for t in flat if t is not None]


def close(got, want, atol=2e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)


def test_mlp_with_a_dynamic_batch_names_and_initializers():
    jitorch.manual_seed(0)
    model = train_mlp.make_model(hidden=16)
    proto, session = exported(model, (jitorch.randn(4, 2),), input_names=["points"], output_names=["logits"],
                              dynamic_axes={"points": {0: "batch"}, "logits": {0: "batch"}})
    assert [i.name for i in proto.graph.input] == ["points"] and [o.name for o in proto.graph.output] == ["logits"]
    assert {i.name for i in proto.graph.initializer} == set(model.state_dict())
    for value in (proto.graph.input[0], proto.graph.output[0]):
        assert value.type.tensor_type.shape.dim[0].dim_param == "batch"
    twin = torch_twin(model, torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                                                 torch.nn.ReLU(), torch.nn.Linear(16, 3)))
    for batch in (4, 9):  # 9: another batch size than the one traced
        x = jitorch.randn(batch, 2)
        close(run(session, x), eager(model, x))
        close(run(session, x), torch_outputs(twin, x))


def test_cnns_with_a_dynamic_batch():
    jitorch.manual_seed(0)
    bars = train_cnn.BarNet()
    for m in bars.modules():  # running statistics other than 0 and 1, so that eval's BatchNorm shows
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    mnist = program("mnist").Net()
    for model, shape, twin in ((bars, (2, 1, 16, 16), None),
                               (mnist, (2, 1, 28, 28), torch_twin(mnist, program("mnist", "torch").Net()))):
        proto, session = exported(model, (jitorch.randn(*shape),), input_names=["images"],
                                  dynamic_axes={"images": {0: "n"}})
        for batch in (2, 5):
            x = jitorch.randn(batch, *shape[1:])
            close(run(session, x), eager(model, x))
            if twin is not None:
                close(run(session, x), torch_outputs(twin, x))


def test_gpt_logits_and_loss_with_a_dynamic_batch():
    jitorch.manual_seed(0)
    gpt = program("gpt")
    model = gpt.GPT(65, 16, 2, 2, 32, dropout=0.1)
    model.train()
    idx, targets = jitorch.randint(0, 65, (2, 16)), jitorch.randint(0, 65, (2, 16))
    proto, session = exported(model, (idx, targets), input_names=["idx", "targets"],
                              output_names=["logits", "loss"], dynamic_axes={"idx": {0: "b"}, "targets": {0: "b"}})
    assert model.training and all(m.training for m in model.modules())  # restored after the export
    assert "transformer.wte.weight" in {i.name for i in proto.graph.initializer}
    twin = torch_twin(model, program("gpt", "torch").GPT(65, 16, 2, 2, 32, dropout=0.1))
    for batch in (2, 3):
        idx, targets = jitorch.randint(0, 65, (batch, 16)), jitorch.randint(0, 65, (batch, 16))
        got = run(session, idx, targets)
        close(got, eager(model, idx, targets))
        close(got, torch_outputs(twin, idx, targets))


@pytest.mark.parametrize("flash", [True, False])  # the causal mask made by triu, or sliced from a buffer
def test_gpt_with_a_dynamic_batch_and_sequence_length(flash):
    jitorch.manual_seed(0)
    model = program("gpt").GPT(65, 16, 1, 2, 32, dropout=0.0, flash=flash)
    idx = jitorch.randint(0, 65, (2, 16))  # at the block size: the length is traced again at smaller sizes
    proto, session = exported(model, (idx, idx), input_names=["idx", "targets"], output_names=["logits", "loss"],
                              dynamic_axes={"idx": {0: "batch", 1: "length"}, "targets": {0: "batch", 1: "length"},
                                            "logits": {0: "batch", 1: "length"}})
    assert [d.dim_param for d in proto.graph.output[0].type.tensor_type.shape.dim[:2]] == ["batch", "length"]
    for batch, length in ((2, 8), (3, 13), (1, 5)):  # the view of the logits to (batch * length, vocabulary)
        idx, targets = jitorch.randint(0, 65, (batch, length)), jitorch.randint(0, 65, (batch, length))
        close(run(session, idx, targets), eager(model, idx, targets))


def test_lstm_language_model_with_a_dynamic_batch():
    jitorch.manual_seed(0)
    wlm = program("word_language_model")
    model = wlm.RNNModel(50, 16, 16, 2, dropout=0.2)
    names = ["tokens", "h0", "c0"]
    _, session = exported(model, (jitorch.randint(0, 50, (5, 3)), model.init_hidden(3)), input_names=names,
                          output_names=["log_probs", "h", "c"], dynamic_axes={n: {1: "batch"} for n in names})
    twin = torch_twin(model, program("word_language_model", "torch").RNNModel(50, 16, 16, 2, dropout=0.2))
    for batch in (3, 4):
        tokens, (h, c) = jitorch.randint(0, 50, (5, batch)), model.init_hidden(batch)
        h, c = h + 0.1 * jitorch.randn(h.shape), c + 0.1 * jitorch.randn(c.shape)
        got = run(session, tokens, h, c)
        close(got, eager(model, tokens, (h, c)))
        with torch.no_grad():
            out, (th, tc) = twin(*[torch.from_numpy(a.numpy().copy()) for a in (tokens,)],
                                 tuple(torch.from_numpy(a.numpy().copy()) for a in (h, c)))
        close(got, [out.numpy(), th.numpy(), tc.numpy()])


class Losses(nn.Module):
    """A linear classifier and the losses of its outputs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x, labels, target):
        out = self.fc(x)
        return (F.cross_entropy(out, labels), F.nll_loss(F.log_softmax(out, 1), labels, reduction="sum"),
                F.mse_loss(out, target), F.binary_cross_entropy_with_logits(out, target.sigmoid()),
                F.smooth_l1_loss(out, target), F.cross_entropy(out, labels, label_smoothing=0.1))


def test_losses_match_torch():
    jitorch.manual_seed(0)
    model = Losses()
    batch = lambda n: (jitorch.randn(n, 6), jitorch.randint(0, 4, (n,)), jitorch.randn(n, 4))  # noqa: E731
    _, session = exported(model, batch(5), input_names=["x", "labels", "target"],
                          dynamic_axes={"x": {0: "n"}, "labels": {0: "n"}, "target": {0: "n"}})
    fc = torch_twin(model.fc, torch.nn.Linear(6, 4))
    TF = torch.nn.functional
    for n in (5, 8):
        x, labels, target = batch(n)
        got = run(session, x, labels, target)
        close(got, eager(model, x, labels, target))
        tx, tl, tt = (torch.from_numpy(a.numpy().copy()) for a in (x, labels, target))
        with torch.no_grad():
            out = fc(tx)
            want = [TF.cross_entropy(out, tl), TF.nll_loss(TF.log_softmax(out, 1), tl, reduction="sum"),
                    TF.mse_loss(out, tt), TF.binary_cross_entropy_with_logits(out, tt.sigmoid()),
                    TF.smooth_l1_loss(out, tt), TF.cross_entropy(out, tl, label_smoothing=0.1)]
        close(got, [w.numpy() for w in want])


def test_a_graph_with_value_checks_exports_without_them():
    """Regression: the value checks compiled graphs keep (``_check_values``: here cross_entropy's target range)
    stopped every ONNX export of a loss with UnsupportedOperatorError. An ONNX graph cannot raise: the checks are
    left out, and the model computes the loss."""
    loss = lambda x, labels: F.cross_entropy(x, labels)  # noqa: E731
    x, labels = jitorch.randn(5, 4), jitorch.tensor([0, 3, 1, 2, 2])
    proto, session = exported(loss, (x, labels))
    assert not [n for n in proto.graph.node if "check" in n.op_type.lower()]
    close(run(session, x, labels), [loss(x, labels).numpy()])


class Layers(nn.Module):
    """Pools, a strided padded convolution, a transposed one, eval BatchNorm, GELU's two forms, softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.up = nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return (F.avg_pool2d(y, 2), F.max_pool2d(y, 3, stride=1, padding=1), F.adaptive_avg_pool2d(y, (2, 3)),
                F.gelu(y, approximate="tanh"), F.gelu(y), y.softmax(1), self.up(y))


@pytest.mark.parametrize("opset", [16, 17, 20])
def test_layers_in_the_supported_opsets(opset):
    jitorch.manual_seed(0)
    model = Layers()
    x = jitorch.randn(2, 3, 12, 12)
    proto, session = exported(model, (x,), opset_version=opset, input_names=["x"], dynamic_axes={"x": {0: "n"}})
    assert proto.opset_import[0].version == opset
    for batch in (2, 3):
        x = jitorch.randn(batch, 3, 12, 12)
        close(run(session, x), eager(model, x))


def test_the_lowest_opset():
    jitorch.manual_seed(0)
    model = Layers()
    x = jitorch.randn(2, 3, 12, 12)
    # the transposed convolution's accumulation is a ScatterND with reduction="add", which opset 16 brought
    with pytest.raises(OnnxExporterError, match="_as_strided_add .* needs opset 16"):
        jitorch.onnx.export(model, (x,), io.BytesIO(), opset_version=13)
    model.up = nn.Identity()
    _, session = exported(model, (x,), opset_version=13)
    close(run(session, x), eager(model, x))


def test_torch_tutorial_arguments_parameters_as_inputs_and_training_mode(capsys):
    jitorch.manual_seed(0)
    model = train_mlp.make_model(hidden=8)
    x = jitorch.randn(3, 2)
    proto, session = exported(model, x, export_params=False, verbose=True, do_constant_folding=True,
                              input_names=["x"], output_names=["y"], training=jitorch.onnx.TrainingMode.EVAL)
    assert "MatMul" in capsys.readouterr().out
    assert not proto.graph.initializer
    assert [i.name for i in proto.graph.input] == ["x", *model.state_dict()]
    (y,) = session.run(None, {"x": x.numpy(), **{k: v.numpy() for k, v in model.state_dict().items()}})
    close([y], eager(model, x))
    model.train()
    for mode in (jitorch.onnx.TrainingMode.TRAINING, jitorch.onnx.TrainingMode.PRESERVE):
        with pytest.raises(OnnxExporterError, match="evaluation mode only"):
            jitorch.onnx.export(model, x, io.BytesIO(), training=mode)


def test_an_opset_outside_the_range_is_refused():
    model = train_mlp.make_model(hidden=4)
    for opset in (12, 21, "17"):
        with pytest.raises(ValueError, match="Unsupported ONNX opset version"):
            jitorch.onnx.export(model, (jitorch.randn(2, 2),), io.BytesIO(), opset_version=opset)
    assert jitorch.onnx.DEFAULT_OPSET == 17


def test_unsupported_ops_are_named_all_at_once(tmp_path):
    def fn(x):
        return jitorch.cumprod(x, 0) + jitorch.linalg.det(x) + x.cumprod(1) + x.exp()
    path = tmp_path / "model.onnx"
    with pytest.raises(UnsupportedOperatorError, match=r"ops cumprod \(x2\), det that") as info:
        jitorch.onnx.export(fn, (jitorch.randn(3, 3),), path)
    assert info.value.ops == {"cumprod": 2, "det": 1}
    assert not path.exists()


def test_a_size_that_cannot_stay_dynamic_is_refused_and_the_old_file_kept(tmp_path):
    def half(x):  # x.shape[0] // 2 is no polynomial of the batch size: 2 at 4 and 5, 3 at 6
        return x[: x.shape[0] // 2] * 2
    model = Layers()
    path = tmp_path / "model.onnx"
    path.write_bytes(b"old")
    with pytest.raises(OnnxExporterError, match="dim 0 of .* changes with the dynamic axes in a way ONNX export "
                                                "cannot express"):
        jitorch.onnx.export(half, (jitorch.randn(4, 3),), path, input_names=["x"], dynamic_axes={"x": [0]})
    assert path.read_bytes() == b"old"
    proto = jitorch.onnx.export(model, (jitorch.randn(2, 3, 12, 12),), str(path))
    assert onnx.load(str(path)) == proto
    assert [p for p in os.listdir(tmp_path)] == ["model.onnx"]  # no temporary file left


def test_bad_names_and_axes_are_refused():
    model = train_mlp.make_model(hidden=4)
    x = jitorch.randn(2, 2)
    with pytest.raises(ValueError, match="input_names has 2 names for 1 tensor inputs"):
        jitorch.onnx.export(model, (x,), io.BytesIO(), input_names=["a", "b"])
    with pytest.raises(ValueError, match="dynamic_axes names \\['y'\\]"):
        jitorch.onnx.export(model, (x,), io.BytesIO(), input_names=["x"], dynamic_axes={"y": [0]})
    with pytest.raises(ValueError, match=r"\['0.weight'\] each name two"):
        jitorch.onnx.export(model, (x,), io.BytesIO(), output_names=["0.weight"])
    with pytest.raises(ValueError, match="names axis 2"):
        jitorch.onnx.export(model, (x,), io.BytesIO(), input_names=["x"], dynamic_axes={"x": [2]})


def test_jitorch_imports_without_onnx():
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import jitorch\n"
            "try:\n"
            "    jitorch.onnx.export(lambda x: x + 1, (jitorch.ones(2),), 'unused.onnx')\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert "pip install jitorch[onnx]" in done.stdout


def _bidirectional_lstm():
    return nn.LSTM(4, 6, num_layers=2, bidirectional=True, proj_size=3)


# (name, model, argument shapes or tensors): nn layers and functions beyond the examples
MORE = [
    ("group_norm", lambda: nn.GroupNorm(2, 4), [(2, 4, 6, 6)]),
    ("interpolate", lambda: lambda x: F.interpolate(x, size=(5, 7), mode="bilinear") + F.interpolate(x, size=(5, 7)),
     [(2, 4, 6, 6)]),
    ("pad_and_shuffle", lambda: lambda x: F.pixel_shuffle(F.pad(x, (1, 2, 1, 0), mode="reflect"), 2), [(2, 4, 6, 5)]),
    ("activations", lambda: lambda x: F.silu(x) + F.hardswish(x) + F.elu(x) + F.softplus(x) + F.leaky_relu(x)
     + F.mish(x) + F.logsigmoid(x) + F.relu6(x) + F.glu(x, -1).sum(), [(3, 6)]),
    ("grouped_dilated_conv1d", lambda: nn.Conv1d(4, 6, 3, padding=2, dilation=2, groups=2), [(2, 4, 9)]),
    ("pools_1d", lambda: lambda x: F.max_pool1d(x, 2) + F.avg_pool1d(x, 3, stride=2, padding=1)[..., :4],
     [(2, 4, 9)]),
    ("gru", lambda: nn.GRU(4, 5, batch_first=True), [(2, 3, 4)]),
    ("lstm_bidirectional_projected", _bidirectional_lstm, [(3, 2, 4)]),
    ("transformer_encoder_layer", lambda: nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), [(2, 5, 16)]),
    ("more_losses", lambda: lambda x, y: (F.binary_cross_entropy(x.sigmoid(), y.sigmoid()), F.huber_loss(x, y),
                                          F.kl_div(x.log_softmax(1), y.softmax(1), reduction="batchmean"),
                                          F.cross_entropy(x, y.softmax(1))), [(3, 6), (3, 6)]),
    ("norms_and_orderings", lambda: lambda x: (x.norm() + x.norm(p=1, dim=1).sum(), x.sort(1, descending=True)[0],
                                               x.topk(2)[1], x.cumsum(0), x.roll((1, -2), (0, 1)).flip(0).repeat(2, 1)),
     [(3, 6)]),
    ("integer_division", lambda: lambda i: ((i - 5) // 3, (i - 5) % 3, i / 4), [jitorch.arange(12)]),
]


@pytest.mark.parametrize("name,make,shapes", MORE, ids=[m[0] for m in MORE])
def test_more_layers_and_functions(name, make, shapes):
    jitorch.manual_seed(0)
    model = make()
    args = tuple(s if isinstance(s, jitorch.Tensor) else jitorch.randn(*s) for s in shapes)
    _, session = exported(model, args)
    close(run(session, *args), eager(model, *args) if isinstance(model, nn.Module) else
          [t.numpy() for t in tree_flatten(model(*args))[0] if t is not None])


def test_a_graph_that_changes_with_a_dynamic_size_is_refused():
    def branchy(x):  # Python control flow on the size: the graph traced at 4 is wrong at 5
        return x * 2 if x.shape[0] <= 4 else x + 1
    with pytest.raises(OnnxExporterError, match="a dynamic axis changes the traced graph"):
        jitorch.onnx.export(branchy, (jitorch.randn(4, 3),), io.BytesIO(), input_names=["x"],
                            dynamic_axes={"x": [0]})


def test_keyword_and_non_tensor_arguments():
    def fn(x, scale, mask=None, *, bias):  # the number and None are fixed at export; tensors become inputs
        y = x * scale + bias
        return y if mask is None else y.masked_fill(mask, 0.0)
    x, bias, mask = jitorch.randn(2, 3), jitorch.randn(3), jitorch.tensor([[True, False, True]] * 2)
    proto, session = exported(fn, (x, 3.0, mask), kwargs={"bias": bias})
    assert [i.name for i in proto.graph.input] == ["x", "mask", "bias"]
    close(run(session, x, mask, bias), [fn(x, 3.0, mask, bias=bias).numpy()])
