"""Fuzzing jitorch's two file formats: mutants of a valid export and of a valid checkpoint, loaded in
child processes under memory and time limits.

Mutations are structural (manifest JSON fields, graph text, ``.npy`` headers, object code with its
hash recomputed, the zip directory) and raw (flipped, cut, inserted bytes). A child loads a batch of
mutants, one JSON line per mutant on stdout: an export is loaded and then run on inputs built from
its signature (without trust), or loaded with ``trust_object_code=True`` and linked but not run
(trusted machine code is run as it is); a checkpoint is loaded and every tensor in it read. The
parent sorts the outcomes: ``loaded``, ``ExportError``, ``SerializationError``, and the failures
``error:<type>`` (another exception), ``crash:<signal>``, ``timeout``; a crashed or hung child is
replaced and the batch goes on after the mutant it died on. Nothing may be written outside the
target folder: the child's working folder, home and temporary folder are checked empty at the end,
the kernel cache lives in the target folder.

The suite runs a short seeded campaign (tests/export/test_fuzz_files.py); a long one:

    python -m tests.export.fuzz_files --count 10000 [--seed 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import random
import re
import resource
import selectors
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEMORY_LIMIT = 3 << 30          # bytes of address space a child may map
MUTANT_TIMEOUT = 60             # seconds a child may spend on one mutant
BATCH = 150                     # mutants per child
FAILURES = ("error:", "crash:", "timeout")
CLEAN = ("loaded", "ExportError", "SerializationError")

# Seeds ---------------------------------------------------------------------------------------------


def seed_files(folder):
    """Write the valid export (dynamic batch, a bfloat16 constant, three kernels and a matmul, object code)
    and the valid checkpoint (views sharing a storage, a parameter, bfloat16, nested containers) to mutate."""
    import numpy as np
    import jitorch as jt
    w = jt.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    b = jt.tensor([1.0, 2.0, 3.0]).to(jt.bfloat16)

    def f(x, y):
        h = (x @ w).relu() + y * b.float()
        return h * 2, x.exp().sum(dim=1), h.view(h.shape[0] * 3)

    batch = jt.export.Dim("batch", min=1, max=16)
    x, y = jt.tensor(np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)), jt.tensor([0.5, -1.0, 2.0])
    export = os.path.join(folder, "seed.jtx")
    jt.export(f, (x, y), dynamic_shapes={"x": {0: batch}, "y": None}).save(export)
    p = jt.nn.Parameter(jt.randn(4, 3))
    state = {"w": p, "t": p.t(), "row": p[1], "i": jt.arange(6).view(2, 3), "h": jt.ones(5).to(jt.bfloat16),
             "meta": [1, "two", 2.5, float("nan"), (True, None)], "od": collections.OrderedDict(a=jt.zeros(2)),
             "same": p, "size": jt.Size([2, 3]), "dtype": jt.float16, "device": jt.device("cpu"), 7: {1.5: "k"}}
    checkpoint = os.path.join(folder, "seed.pt")
    jt.save(state, checkpoint)
    return {"export": export, "checkpoint": checkpoint}


# Mutations ---------------------------------------------------------------------------------------

EDGE_INTS = [0, 1, -1, 2, 3, 7, 255, 65535, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 63 - 1, 2 ** 63, -2 ** 63, 10 ** 30]
EDGE_VALUES = EDGE_INTS + [None, True, False, 0.5, -0.0, 1e308, float("nan"), float("inf"), "", "x", "0", "cpu",
                           "cuda:0", "cuda:99", "meta", "float32", "bfloat16", "int64", "bool", "complex64",
                           "../../../etc/passwd", "graph.txt", "manifest.json", "constants/0.npy", "a" * 5000,
                           [], {}, [1, 2], {"kind": "leaf"}, {"type": "list", "items": []}, [[[[[]]]]],
                           {"type": "tensor", "storage": "0", "shape": [2 ** 40], "stride": [0], "offset": 0,
                            "requires_grad": False}]
DTYPE_TOKENS = ["f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "b8", "c64", "q"]
NPY_DESCRS = ["'<f4'", "'<f8'", "'|O'", "'>f4'", "'<i8'", "'|b1'", "'<u2'", "'<c8'", "'V8'", "'<f2'",
              "[('a', '<f4')]", "'<f4', 'x': 1", "'<M8[s]'", "'S3'", "'<U1'"]
NPY_SHAPES = ["()", "(0,)", "(-1,)", "(10**12,)", "(1000000000000,)", "(4611686018427387904, 4)", "(3,)",
              "(4, 3)", "(3, 4)", "(12,)", "(1,) * 64", "(" + "1, " * 40 + ")", "[4, 3]", "(4.0, 3)", "((4,), 3)"]


def _rehashed(members, kind):
    """Archive bytes of ``members`` (name -> bytes, the manifest first), an export's member hashes
    recomputed so that the intended damage is what the loader meets."""
    if kind == "export" and "manifest.json" in members:
        try:
            m = json.loads(members["manifest.json"])
            m["members"] = {n: hashlib.sha256(b).hexdigest() for n, b in members.items() if n != "manifest.json"}
            members = dict(members, **{"manifest.json": json.dumps(m).encode()})
        except (ValueError, TypeError, AttributeError, RecursionError):
            pass  # a manifest damaged on purpose: its members are the seed's, whose hashes it holds
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data, compress_type=zipfile.ZIP_STORED if name.endswith(".npy") else
                       zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def _members(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, path + (i,))


def _mutate_json(rng, node):
    """``node`` (parsed JSON) with one value replaced, deleted, duplicated or nested deeper."""
    path = rng.choice(list(_paths(node)))
    if not path:
        return rng.choice(EDGE_VALUES)
    parent = node
    for k in path[:-1]:
        parent = parent[k]
    key, op = path[-1], rng.random()
    if op < 0.6:
        parent[key] = rng.choice(EDGE_VALUES) if rng.random() < 0.8 else _deep(rng.randint(50, 3000))
    elif op < 0.75:
        del parent[key]
    elif op < 0.9 and isinstance(parent, list):
        parent.insert(key, parent[key])
    elif isinstance(parent, dict):
        parent[rng.choice(["extra", "kind", "type", "name", "member", "shape", "dtype", "device"])] = parent[key]
    else:
        parent[key] = [parent[key]]
    return node


def _deep(depth):
    value = []
    for _ in range(min(depth, 900)):  # (json.dumps recurses)
        value = [value]
    return value


def mutate_manifest(rng, members, kind):
    """A field of the manifest changed (hashes recomputed for exports)."""
    m = _mutate_json(rng, json.loads(members["manifest.json"]))
    text = json.dumps(m)
    if rng.random() < 0.05:  # nesting deeper than any Python recursion limit
        text = '{"format": "jitorch.save", "version": 1, "storages": {}, "structure": ' + "[" * 100000 + \
            "]" * 100000 + "}" if kind == "checkpoint" else text.replace('"leaves"', '"leaves": ' + "[" * 100000
                                                                         + "]" * 100000 + ', "x"', 1)
    members["manifest.json"] = text.encode()
    return _rehashed(members, kind)


def mutate_graph(rng, members, kind):
    """The graph text changed at a token or a line (hash recomputed)."""
    lines = members["graph.txt"].decode().split("\n")
    op = rng.random()
    i = rng.randrange(len(lines))
    if op < 0.15:
        del lines[i]
    elif op < 0.25:
        lines.insert(i, lines[rng.randrange(len(lines))])
    elif op < 0.35:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines[i] = _mutate_tokens(rng, lines[i], lines)
    members["graph.txt"] = "\n".join(lines).encode()
    return _rehashed(members, kind)


def _mutate_tokens(rng, line, lines):
    tokens = re.findall(r"%\w+|[A-Za-z_]\w*|-?\d+|\s+|.", line)
    if not tokens:
        return line
    i = rng.randrange(len(tokens))
    t = tokens[i]
    if re.fullmatch(r"-?\d+", t):
        tokens[i] = str(rng.choice(EDGE_INTS + [4300 * "9"]))
    elif t in DTYPE_TOKENS or rng.random() < 0.2:
        tokens[i] = rng.choice(DTYPE_TOKENS + ["matmul", "view", "sum", "relu", "constant", "rand", "empty",
                                               "as_strided", "index_put_", "copy_", "%x", "%w", "return", "graph"])
    elif t.startswith("%"):
        tokens[i] = rng.choice(re.findall(r"%\w+", "\n".join(lines)) + ["%nope"])
    else:
        tokens[i] = rng.choice(["", "(", ")", "[", "]", ",", "=", "'", "\\", "\x00", "é", "[" * 5000, t * 2])
    return "".join(tokens)


def mutate_npy(rng, members, kind):
    """A ``.npy`` member's header (dtype, shape, order, length, version) or data changed."""
    name = rng.choice([n for n in members if n.endswith(".npy")])
    data = members[name]
    n = struct.unpack_from("<H", data, 8)[0]
    header, body = data[10:10 + n].decode("latin1"), data[10 + n:]
    op = rng.random()
    if op < 0.3:
        header = re.sub(r"'descr': [^,]+", "'descr': " + rng.choice(NPY_DESCRS), header)
    elif op < 0.55:
        header = re.sub(r"'shape': \([^)]*\)", "'shape': " + rng.choice(NPY_SHAPES), header)
    elif op < 0.65:
        header = header.replace("False", rng.choice(["True", "1", "'x'", "None"]))
    elif op < 0.75:
        body = body[:rng.randrange(len(body) + 1)] if rng.random() < 0.5 else body + bytes(rng.randrange(1, 64))
    elif op < 0.85:
        header = header[:rng.randrange(len(header))] + rng.choice(["(", "{", "'", "\\", "\x00", "((((", '"""'])
    magic = data[:6] + bytes([rng.choice([0, 2, 3, 9]), 0]) if op >= 0.95 else data[:8]
    length = len(header) if op < 0.9 else rng.choice([0, 1, 65535, len(header) + 10])
    members[name] = magic + struct.pack("<H", length) + header.encode("latin1") + body
    return _rehashed(members, kind)


def _elf_fields(obj):
    """(offset, size) of the fields that describe an ELF object's structure."""
    fields = [(16, 2), (18, 2), (20, 4), (32, 8), (40, 8), (58, 2), (60, 2), (62, 2)]
    shoff, = struct.unpack_from("<Q", obj, 40)
    shnum, = struct.unpack_from("<H", obj, 60)
    layout = [(0, 4), (4, 4), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4), (44, 4), (48, 8), (56, 8)]
    for i in range(shnum):
        base = shoff + 64 * i
        fields += [(base + o, s) for o, s in layout if base + o + s <= len(obj)]
        kind, offset, size = (struct.unpack_from(f, obj, base + o)[0] for f, o in (("<I", 4), ("<Q", 24), ("<Q", 32)))
        if kind in (2, 4) and offset + size <= len(obj):  # symbols and relocations: every field of 8 entries
            step = 24
            entries = range(offset, offset + min(size, 8 * step), step)
            parts = [(0, 4), (4, 1), (5, 1), (6, 2), (8, 8), (16, 8)] if kind == 2 else [(0, 8), (8, 4), (12, 4),
                                                                                         (16, 8)]
            fields += [(e + o, s) for e in entries for o, s in parts]
    return fields


def mutate_object_code(rng, members, kind):
    """A structural field or random bytes of a kernel's object code changed, its hash recomputed."""
    name = rng.choice([n for n in members if n.endswith(".o")])
    obj = bytearray(members[name])
    if rng.random() < 0.7:
        fields = _elf_fields(members[name])
        for _ in range(rng.randint(1, 3)):
            offset, size = rng.choice(fields)
            value = rng.choice(EDGE_INTS + [len(obj), len(obj) - 8, rng.randrange(256), rng.randrange(len(obj))])
            obj[offset:offset + size] = (value % (1 << (8 * size))).to_bytes(size, "little")
    else:
        for _ in range(rng.randint(1, 8)):
            obj[rng.randrange(len(obj))] = rng.randrange(256)
    members[name] = bytes(obj)
    return _rehashed(members, kind)


_CENTRAL = [(4, 2), (6, 2), (8, 2), (10, 2), (16, 4), (20, 4), (24, 4), (28, 2), (30, 2), (32, 2), (34, 2),
            (42, 4)]
_LOCAL = [(4, 2), (6, 2), (8, 2), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2)]
_END = [(4, 2), (6, 2), (8, 2), (10, 2), (12, 4), (16, 4), (20, 2)]


def mutate_zip(rng, data, kind):
    """A field of the zip directory (central entries, local headers, end record) changed, or members
    duplicated, dropped or renamed, or one added that claims 16 GiB."""
    if rng.random() < 0.25:
        return _mutate_zip_members(rng, _members(data), kind)
    data = bytearray(data)
    signature, fields = rng.choice([(b"PK\x01\x02", _CENTRAL), (b"PK\x03\x04", _LOCAL), (b"PK\x05\x06", _END)])
    starts = [m.start() for m in re.finditer(re.escape(signature), data)]
    if not starts:
        return bytes(data)
    at = rng.choice(starts)
    offset, size = rng.choice(fields)
    value = rng.choice(EDGE_INTS + [rng.randrange(1 << (8 * size)), len(data), 8, 12, 99])
    data[at + offset:at + offset + size] = (value % (1 << (8 * size))).to_bytes(size, "little")
    return bytes(data)


def _mutate_zip_members(rng, members, kind):
    names = list(members)
    op = rng.random()
    if op < 0.3:
        del members[rng.choice(names)]
    elif op < 0.6:
        old = rng.choice(names)
        members[rng.choice(["../evil.npy", "/abs/path", "data/0.npy", "constants/0.npy", "graph.txt", old + "x"])] = \
            members.pop(old)
    elif op < 0.8:
        from tests.runtime.zip_helpers import bomb, stored, zip_bytes
        entries = [stored(n, d) for n, d in members.items()]
        return zip_bytes(entries + [bomb(rng.choice(names), b"", 1 << 20, declared=16 << 30)])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, d in members.items():
            z.writestr(name, d)
        if op >= 0.8:
            dup = rng.choice(names)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Duplicate name": the point
                z.writestr(dup, members[dup][: len(members[dup]) // 2])
    return buf.getvalue()


def mutate_raw(rng, data, kind):
    """Bytes flipped, cut off, inserted, duplicated or zeroed anywhere in the file."""
    data = bytearray(data)
    op = rng.random()
    if op < 0.4:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif op < 0.6:
        data = data[:rng.randrange(len(data))]
    elif op < 0.75:
        at = rng.randrange(len(data))
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif op < 0.9:
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 512))
        data[a:a] = data[a:b]
    else:
        a = rng.randrange(len(data))
        data[a:a + rng.randint(1, 256)] = bytes(min(256, len(data) - a))
    return bytes(data)


def _structural(mutator):
    def mutate(rng, data, kind):
        return mutator(rng, _members(data), kind)
    mutate.__name__ = mutator.__name__
    return mutate


MUTATORS = {
    "export": [_structural(mutate_manifest), _structural(mutate_graph), _structural(mutate_npy),
               _structural(mutate_object_code), mutate_zip, mutate_raw],
    "checkpoint": [_structural(mutate_manifest), _structural(mutate_npy), mutate_zip, mutate_raw],
}


def mutants(kind, seed_bytes, count, seed):
    """``count`` (mutator name, bytes, trust_object_code) mutants of ``seed_bytes``, reproducibly."""
    rng = random.Random(f"{kind}:{seed}")
    for _ in range(count):
        mutate = rng.choice(MUTATORS[kind])
        trust = kind == "export" and (mutate.__name__ == "mutate_object_code" or rng.random() < 0.1)
        yield mutate.__name__, mutate(rng, seed_bytes, kind), trust


# The child: loads a batch of mutants -------------------------------------------------------------

def _export_inputs(program):
    """Call arguments built from an exported program's signature (ones of each input's type at the example
    sizes), or None where they would be large."""
    import math
    import jitorch as jt
    from jitorch.runtime.pytree import tree_unflatten
    sig = program.signature
    leaves = []
    for leaf in sig.inputs.leaves:
        if leaf.kind != "tensor":
            leaves.append(leaf.value)
            continue
        shape = [sig.dims[n].example if isinstance(n, str) else n for n in leaf.shape]
        if math.prod(shape) > 1 << 16 or leaf.device.type != "cpu":
            return None
        leaves.append(jt.ones(shape, dtype=leaf.dtype))
    return tree_unflatten(leaves, sig.inputs.tree)


def _use_checkpoint(obj):
    """Read every tensor a loaded checkpoint holds (where small), as a user would."""
    import jitorch as jt
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, jt.Tensor):
            if 0 < x.numel() <= 1 << 16 and x.device.type != "meta":  # (meta tensors have no data, as in torch)
                x.detach().double().sum().item()
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)


def _load_one(kind, path, trust):
    import jitorch as jt
    if kind == "checkpoint":
        _use_checkpoint(jt.load(path))
        return
    program = jt.export.load(path, trust_object_code=trust)
    if trust:
        program.specialise()  # links the file's object code; trusted machine code is not run here
        return
    args = _export_inputs(program)
    if args is not None:
        program(*args[0], **args[1])


def _outcome(e):
    from jitorch.export import ExportError
    from jitorch.serialization import SerializationError
    name = type(e).__name__
    if isinstance(e, (ExportError, SerializationError)):
        text = str(e)
        if text.startswith("the file is malformed:") or text.startswith("jitorch.load: bad manifest ("):
            return f"boundary:{text.split(':')[1].split('(')[-1].strip()}"  # caught by the last-resort clause
        return "ExportError" if isinstance(e, ExportError) else "SerializationError"
    return f"error:{name}"


def child(listing):
    """Load each mutant named in the file ``listing`` (kind, path, trust per line); print a JSON line each."""
    warnings.simplefilter("ignore")
    import jitorch  # noqa: F401  (imported before the first mutant's clock starts)
    with open(listing) as f:
        jobs = [json.loads(line) for line in f]
    for index, (kind, path, trust) in enumerate(jobs):
        start = time.perf_counter()
        try:
            _load_one(kind, path, trust)
            outcome, message = "loaded", ""
        except Exception as e:  # the outcome to report, whatever it is
            outcome, message = _outcome(e), f"{type(e).__name__}: {str(e)[:300]}"
        print(json.dumps({"index": index, "outcome": outcome, "message": message,
                          "seconds": round(time.perf_counter() - start, 3)}), flush=True)


# The parent ------------------------------------------------------------------------------------

def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _environment(target):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT, "PYTHONDONTWRITEBYTECODE": "1",
           "JITORCH_CACHE_DIR": os.path.join(target, "cache"), "HOME": os.path.join(target, "home"),
           "TMPDIR": os.path.join(target, "tmp"), "JITORCH_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    for name in ("home", "tmp", "cwd", "cache"):
        os.makedirs(os.path.join(target, name), exist_ok=True)
    return env


def _run_child(jobs, target, env):
    """Results for ``jobs`` [(kind, path, trust)] from one child, or up to where it crashed or hung (then the
    result of the mutant it died on, marked crash or timeout)."""
    listing = os.path.join(target, "listing.jsonl")
    with open(listing, "w") as f:
        f.writelines(json.dumps(job) + "\n" for job in jobs)
    proc = subprocess.Popen([sys.executable, "-m", "tests.export.fuzz_files", "--child", listing],
                            cwd=os.path.join(target, "cwd"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_limits, text=True)
    results = []
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + MUTANT_TIMEOUT + 30  # (the first mutant also pays for imports)
    while len(results) < len(jobs):
        if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
            proc.kill()
            proc.wait()
            results.append({"outcome": "timeout", "message": f"no answer in {MUTANT_TIMEOUT} s"})
            break
        line = proc.stdout.readline()
        if not line:
            code = proc.wait()
            tail = proc.stderr.read()[-1500:]
            results.append({"outcome": f"crash:{code}" if code < 0 else f"error:exit{code}", "message": tail})
            break
        results.append(json.loads(line))
        deadline = time.monotonic() + MUTANT_TIMEOUT
    else:
        proc.wait()
    selector.close()
    proc.stdout.close()
    proc.stderr.close()
    return results


def campaign(count, seed=0, target=None, kinds=("export", "checkpoint"), keep=None, progress=None):
    """Fuzz each file kind with ``count`` mutants; returns {kind: Counter of outcomes} and the mutants that
    did not end cleanly [(kind, mutator, outcome, message, saved path or None)]: failures, and bad files
    caught only by a loader's last-resort clause ("boundary:<type>"). ``keep``: a folder to copy them to."""
    own = target is None
    target = target or tempfile.mkdtemp(prefix="jitorch-fuzz-")
    env = _environment(target)
    seeds = seed_files(target)
    counts, findings = {}, []
    for kind in kinds:
        with open(seeds[kind], "rb") as f:
            seed_bytes = f.read()
        counts[kind] = collections.Counter()
        numbered = list(enumerate(mutants(kind, seed_bytes, count, seed)))
        # A process memoises the kernels it links, file code included (codegen.cpu), and serves them to later
        # programs with the same kernel IR: a trusted mutant's damaged machine code would then run in an
        # untrusted one. So a child loads trusted or untrusted mutants, never both.
        for trusted in (False, True):
            group = [(i, m) for i, m in numbered if m[2] is trusted]
            for start in range(0, len(group), BATCH):
                _run_batch(kind, group[start:start + BATCH], target, env, counts[kind], findings, keep)
                if progress:
                    progress(kind, sum(v for k, v in counts[kind].items() if " -> " not in k), counts[kind])
    _check_untouched(target)
    if own:
        shutil.rmtree(target, ignore_errors=True)
    return counts, findings


def _run_batch(kind, batch, target, env, counts, findings, keep):
    """Load ``batch`` [(number, (mutator, bytes, trust))] in children (a new one after each crash or hang),
    counting the outcomes and collecting the findings."""
    while batch:
        jobs = []
        for i, (_, (_, data, trust)) in enumerate(batch):
            path = os.path.join(target, f"mutant-{i}")
            with open(path, "wb") as f:
                f.write(data)
            jobs.append((kind, path, trust))
        results = _run_child(jobs, target, env)
        for (number, (name, data, trust)), result in zip(batch, results):
            counts[result["outcome"]] += 1
            counts[f"{name} -> {result['outcome']}"] += 1
            if result["outcome"] not in CLEAN:
                findings.append((kind, name, result["outcome"], result["message"],
                                 _keep(keep, kind, number, data, trust)))
        batch = batch[len(results):]


def _keep(folder, kind, index, data, trust):
    if folder is None:
        return None
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{kind}-{index}{'-trusted' if trust else ''}.{'jtx' if kind == 'export' else 'pt'}")
    with open(path, "wb") as f:
        f.write(data)
    return path


def _check_untouched(target):
    """The children wrote nothing but kernel-cache entries: their working folder, home and temporary folder
    are empty, and the target folder holds only what the parent put there."""
    for name in ("cwd", "home", "tmp"):
        left = os.listdir(os.path.join(target, name))
        assert not left, f"a child wrote {left} into its {name} folder"
    expected = {"cwd", "home", "tmp", "cache", "listing.jsonl", "seed.jtx", "seed.pt"}
    stray = [n for n in os.listdir(target) if n not in expected and not n.startswith("mutant-")]
    assert not stray, f"a child wrote {stray} into the target folder"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=1000, help="mutants per file kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default="export,checkpoint")
    p.add_argument("--keep", help="a folder to copy failing mutants to")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child)
    start = time.time()

    def progress(kind, done, counts):
        print(f"{kind}: {done} mutants, {time.time() - start:.0f} s", file=sys.stderr, flush=True)

    counts, findings = campaign(args.count, args.seed, kinds=args.kinds.split(","), keep=args.keep,
                                progress=progress)
    for kind, c in counts.items():
        print(f"{kind}: {sum(v for k, v in c.items() if ' -> ' not in k)} mutants: "
              + ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if " -> " not in k))
        for k, v in sorted(c.items()):
            if " -> " in k:
                print(f"  {k}: {v}")
    for kind, name, outcome, message, path in findings:
        print(f"{'FAIL' if outcome.startswith(FAILURES) else 'NOTE'} {kind} {name} {outcome} {path}: {message[:500]}")
    return 1 if any(f[2].startswith(FAILURES) for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
