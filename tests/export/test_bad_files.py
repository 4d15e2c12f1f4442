"""Every kind of bad file gives ExportError saying what is wrong; a fuzz run never crashes or lies."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import jitorch as jt
from jitorch.export import ExportError

from .helpers import rewrite, run_python


def _npy(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def test_truncated_file(saved, tmp_path):
    path = saved[0]
    data = path.read_bytes()
    (tmp_path / "t.jtx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ExportError, match="not a jitorch export file .not a readable zip archive"):
        jt.export.load(tmp_path / "t.jtx")


def test_flipped_byte_in_a_member(saved, tmp_path):
    path = saved[0]
    data = bytearray(path.read_bytes())
    at = data.index(b"graph.txt") + 200  # inside the compressed graph text, past its local header
    data[at] ^= 0xFF
    (tmp_path / "f.jtx").write_bytes(bytes(data))
    with pytest.raises(ExportError, match="damaged"):
        jt.export.load(tmp_path / "f.jtx")


def test_member_hash_mismatch(saved, tmp_path):
    bad = rewrite(saved[0], tmp_path / "h.jtx", members={"constants/0.npy": _npy(np.zeros((4, 3), np.float32))},
                  rehash=False)
    with pytest.raises(ExportError, match="member 'constants/0.npy' is damaged or was changed: its SHA-256"):
        jt.export.load(bad)


def test_newer_format_version(saved, tmp_path):
    bad = rewrite(saved[0], tmp_path / "v.jtx", manifest=lambda m: dict(m, format_version=99))
    with pytest.raises(ExportError, match="format version 99, newer than this jitorch .* can read .up to 1."):
        jt.export.load(bad)


def test_foreign_manifest(saved, tmp_path):
    bad = rewrite(saved[0], tmp_path / "o.jtx", manifest=lambda m: dict(m, format="something.else"))
    with pytest.raises(ExportError, match="gives format 'something.else', not 'jitorch.export'"):
        jt.export.load(bad)


def test_not_a_zip(tmp_path):
    (tmp_path / "n.jtx").write_bytes(b"PK\x03\x04 certainly not a zip")
    with pytest.raises(ExportError, match="not a readable zip archive"):
        jt.export.load(tmp_path / "n.jtx")


def test_graph_that_does_not_verify(saved, tmp_path):
    import zipfile
    with zipfile.ZipFile(saved[0]) as z:
        text = z.read("graph.txt").decode()
    broken = text.replace("%2 : f32[5, 3] = add", "%2 : f32[5, 4] = add")
    bad = rewrite(saved[0], tmp_path / "g.jtx", members={"graph.txt": broken.encode()})
    with pytest.raises(ExportError, match=r"the graph does not verify: .*%2 has type f32\[5, 4\], but the meta rule"):
        jt.export.load(bad)


def test_graph_that_does_not_parse(saved, tmp_path):
    bad = rewrite(saved[0], tmp_path / "p.jtx", members={"graph.txt": b"graph(%x: f32[2]):\n  return %y\n"})
    with pytest.raises(ExportError, match="the graph does not parse: line 2, column 10: unknown value %y"):
        jt.export.load(bad)


def test_constant_of_wrong_shape(saved, tmp_path):
    def grow(m):
        m["constants"][0]["shape"] = [4, 4]
    bad = rewrite(saved[0], tmp_path / "s.jtx", manifest=grow, members={"constants/0.npy": _npy(np.zeros((4, 4),
                                                                                                        np.float32))})
    with pytest.raises(ExportError, match=r"constant 'w' is bound to a tensor of type f32\[4, 4\]"):
        jt.export.load(bad)


def test_constant_stored_with_another_dtype(saved, tmp_path):
    bad = rewrite(saved[0], tmp_path / "d.jtx", members={"constants/0.npy": _npy(np.zeros((4, 3), np.float64))})
    with pytest.raises(ExportError, match=r"constant 'w': member 'constants/0.npy' holds a float64 array of shape "
                                          r"\[4, 3\], not float32"):
        jt.export.load(bad)


def test_constant_with_pickled_objects(saved, tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    bad = rewrite(saved[0], tmp_path / "k.jtx", members={"constants/0.npy": buf.getvalue()})
    with pytest.raises(ExportError, match="constant 'w': member 'constants/0.npy' holds Python objects, which are "
                                          "never loaded"):
        jt.export.load(bad)


def test_signature_that_contradicts_the_graph(saved, tmp_path):
    def lie(m):
        m["signature"]["inputs"]["leaves"][0]["shape"] = [5, 7]
    bad = rewrite(saved[0], tmp_path / "l.jtx", manifest=lie)
    with pytest.raises(ExportError, match=r"input 'x' is \[5, 7\] jitorch.float32 in the signature, but the graph's input %x "
                                          r"is f32\[5, 4\]"):
        jt.export.load(bad)


def test_missing_member(saved, tmp_path):
    bad = rewrite(saved[0], tmp_path / "m.jtx", manifest=lambda m: m["constants"][0].update(member="constants/9.npy"))
    with pytest.raises(ExportError, match="SHA-256 for member 'constants/9.npy'"):
        jt.export.load(bad)


def test_manifest_not_json(saved, tmp_path):
    import zipfile
    with zipfile.ZipFile(saved[0]) as z:
        data = {n: z.read(n) for n in z.namelist()}
    data["manifest.json"] = b"{not json"
    with zipfile.ZipFile(tmp_path / "j.jtx", "w") as z:
        for n, b in data.items():
            z.writestr(n, b)
    with pytest.raises(ExportError, match="manifest.json is not valid JSON"):
        jt.export.load(tmp_path / "j.jtx")


# A fixed number of seeded mutations, about what 3 s gave on a quiet machine (0.76 s of CPU per 400): a time budget
# got one mutation through at a load of 17 (the process's imports took it) and failed the count below.
FUZZ = r"""
import io, json, random, sys
MUTATIONS = 1500
import numpy as np
import jitorch as jt
from jitorch.export import ExportError
data = open(sys.argv[1], "rb").read() if len(sys.argv) > 1 else open("small.jtx", "rb").read()
x = jt.from_numpy(np.load("x.npy")); y = jt.from_numpy(np.load("y.npy"))
expected = [np.load("e0.npy"), np.load("e1.npy")]
rng = random.Random(0)
counts = {"error": 0, "exact": 0}
for _ in range(MUTATIONS):
    b = bytearray(data)
    if rng.random() < 0.3:
        b = b[: rng.randrange(len(b))]
    else:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    try:
        p = jt.export.load(io.BytesIO(bytes(b)))
        out = p(x, y)
    except ExportError:
        counts["error"] += 1
        continue
    assert all(np.array_equal(o.numpy(), e) for o, e in zip(out, expected)), "wrong answer from a damaged file"
    counts["exact"] += 1
print(json.dumps(counts))
"""


def test_fuzz_truncations_and_flips(saved, tmp_path):
    path, args, _ = saved
    (tmp_path / "small.jtx").write_bytes(path.read_bytes())
    np.save(tmp_path / "x.npy", args[0].numpy())
    np.save(tmp_path / "y.npy", args[1].numpy())
    p = jt.export.load(path)
    for i, e in enumerate(p(*args)):
        np.save(tmp_path / f"e{i}.npy", e.numpy())
    counts = json.loads(run_python(FUZZ, tmp_path).strip().splitlines()[-1])
    assert counts["error"] > 50, counts


def test_signature_outputs_that_contradict_the_graph(saved, tmp_path):
    """A file could declare [7, 99] int8 and return [5, 3] float32: the outputs are checked at load."""
    def lie(m):
        m["signature"]["outputs"]["leaves"][0].update(shape=[7, 99], dtype="int8")
    bad = rewrite(saved[0], tmp_path / "o.jtx", manifest=lie)
    with pytest.raises(ExportError, match=r"output 'output0' is \[7, 99\] jitorch.int8 cpu in the signature, but the "
                                          r"graph returns f32\[5, 3\] there"):
        jt.export.load(bad)


@pytest.mark.parametrize("dim, message", [("batch", "bad output dim 'batch'"), ("2*", "bad output dim '2\\*'"),
                                          (1.5, "a shape holds non-negative ints and dim names, not \\[1.5, 3\\]")],
                         ids=["unknown", "syntax", "float"])
def test_bad_output_dims(saved, tmp_path, dim, message):
    bad = rewrite(saved[0], tmp_path / "d.jtx", manifest=lambda m: m["signature"]["outputs"]["leaves"][0].update(
        shape=[dim, 3]))
    with pytest.raises(ExportError, match=message):
        jt.export.load(bad)


def test_output_dims_are_affine_expressions_of_the_inputs(tmp_path):
    batch = jt.export.Dim("batch", min=1, max=64)
    program = jt.export(lambda x: jt.cat([x, x, x[:1]]) * 2, (jt.ones(4, 3),), dynamic_shapes={"x": {0: batch}})
    assert program.signature.outputs.leaves[0].shape == ("2*batch+1", 3)
    program.save(tmp_path / "a.jtx")
    assert jt.export.load(tmp_path / "a.jtx")(jt.ones(6, 3)).shape == (13, 3)


def test_two_constants_naming_one_member(tmp_path):
    """Each member is read once: a second record naming it (the issue's repeated reads) is refused."""
    w, v = jt.ones(3), jt.zeros(3)
    jt.export(lambda x: x * w + v, (jt.ones(3),)).save(tmp_path / "p.jtx")
    bad = rewrite(tmp_path / "p.jtx", tmp_path / "b.jtx",
                  manifest=lambda m: m["constants"][1].update(member=m["constants"][0]["member"]))
    with pytest.raises(ExportError, match=r"member 'constants/0.npy' is named twice by the file"):
        jt.export.load(bad)


def test_a_compressible_export_needs_max_bytes(tmp_path):
    """An export whose constant inflates from 130 kB to 128 MiB is over the default budget (files jitorch
    writes store their arrays: they never are); the caller may raise it."""
    import hashlib
    import zipfile
    from tests.runtime.zip_helpers import bomb, deflated, write_zip
    n = 32 << 20
    w = jt.zeros(n)
    jt.export(lambda x: x + w, (jt.ones(n),)).save(tmp_path / "p.jtx", artifacts_for=())
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (n,)})
    entry = bomb("constants/0.npy", header.getvalue(), 4 * n)
    with zipfile.ZipFile(tmp_path / "p.jtx") as z:
        assert z.getinfo("constants/0.npy").compress_type == zipfile.ZIP_STORED
        members = {name: z.read(name) for name in z.namelist() if name != "constants/0.npy"}
    manifest = json.loads(members.pop("manifest.json"))
    manifest["members"]["constants/0.npy"] = hashlib.sha256(header.getvalue() + bytes(4 * n)).hexdigest()
    write_zip(tmp_path / "c.jtx", [deflated("manifest.json", json.dumps(manifest).encode()), entry,
                                   *(deflated(name, data) for name, data in members.items())])
    with pytest.raises(ExportError, match=r"the archive's members declare .*\(pass a larger max_bytes"):
        jt.export.load(tmp_path / "c.jtx")
    program = jt.export.load(tmp_path / "c.jtx", max_bytes=256 << 20)
    assert program(jt.ones(n)).numpy().min() == 1


def test_truncated_export_through_jitorch_load(saved):
    """jitorch.load cannot tell a truncated export from a truncated checkpoint: SerializationError, which
    ExportError subclasses (jitorch.export.load says ExportError)."""
    data = saved[0].read_bytes()
    with pytest.raises(jt.serialization.SerializationError, match="not a readable zip archive"):
        jt.load(io.BytesIO(data[:len(data) // 2]))
    with pytest.raises(ExportError, match="not a readable zip archive"):
        jt.export.load(io.BytesIO(data[:len(data) // 2]))
    assert issubclass(ExportError, jt.serialization.SerializationError)
