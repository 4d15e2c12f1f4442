"""The AOT C library: an exported program as ``lib<name>.so`` and ``<name>.h``.

The example specialisation is compiled as for Python; each kernel's optimised
LLVM IR becomes a position-independent object for this host, and a generated
C file holds the constants (static arrays), the buffers' plan and the entry
point that runs the steps in order. Steps that run eagerly in Python are
written as plain C loops where they are simple: view ops (a strided copy at
the view's static geometry), 2-D ``matmul``/``mm`` in float32/float64, and
``zeros_like``/``ones_like``/``full_like``. Any other eager op, half-precision
values, and programs with symbolic dims (the library is for fixed shapes)
raise ExportError naming the op or the dim. The system C compiler (``cc``)
builds the library; only the ``<name>_*`` symbols are exported.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from math import prod

from ..codegen import cpu
from ..codegen.linker import builtins_object
from ..codegen.machine import selected
from ..runtime.files import atomic_write
from ..ir.fake import fake_of_type
from ..ir.graph import Value
from ..runtime.strided import contiguous_strides
from .errors import ExportError

_C_TYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t", "int16": "int16_t",
            "int8": "int8_t", "uint8": "uint8_t", "bool": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
            "uint64": "uint64_t"}

_RUNTIME = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Copy a tensor of `shape` between two strided layouts (strides in elements). */
static void copy_strided(char *dst, const int64_t *ds, const char *src, const int64_t *ss,
                         const int64_t *shape, int nd, size_t el) {
    int64_t idx[16] = {0}, n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < nd; d++) { so += idx[d] * ss[d]; doff += idx[d] * ds[d]; }
        memcpy(dst + doff * (int64_t)el, src + so * (int64_t)el, el);
        for (int d = nd - 1; d >= 0; d--) { if (++idx[d] < shape[d]) break; idx[d] = 0; }
    }
}
"""


def build_c_library(program, out_dir, name):
    """Write ``lib<name>.so`` and ``<name>.h`` into ``out_dir``; returns the library's path."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise ValueError(f"a C library name must be a C identifier, got {name!r}")
    if program.signature.dims:
        raise ExportError(f"the C library is built for fixed shapes, but dims {sorted(program.signature.dims)} "
                          "are symbolic; export again without dynamic_shapes")
    devices = sorted({str(leaf.device) for leaf in program.signature.tensor_inputs()} - {"cpu"})
    if devices:
        raise ExportError(f"the C library runs on the CPU, but the program takes inputs on {', '.join(devices)}; "
                          "export it with CPU tensors")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise ExportError("no C compiler (cc, gcc or clang) on PATH to build the library")
    compiled = program.specialise()
    writer = _CWriter(compiled, name)
    source = writer.source()
    os.makedirs(out_dir, exist_ok=True)
    header_path = os.path.join(out_dir, f"{name}.h")
    with atomic_write(header_path, "w") as f:
        f.write(writer.header())
    lib_path = os.path.join(out_dir, f"lib{name}.so")
    with tempfile.TemporaryDirectory() as tmp:
        objects = []
        for k in writer.kernels:
            path = os.path.join(tmp, f"{k.name}.o")
            with open(path, "wb") as f:
                f.write(_pic_object(k.source.llvm_ir))
            objects.append(path)
        # the compiler-rt functions the kernels may call, so the library needs no particular libgcc
        objects.append(os.path.join(tmp, "jitorch_builtins.o"))
        with open(objects[-1], "wb") as f:
            f.write(builtins_object(selected(), reloc="pic"))
        c_path = os.path.join(tmp, f"{name}.c")
        with open(c_path, "w") as f:
            f.write(source)
        script = os.path.join(tmp, "exports.map")
        with open(script, "w") as f:
            f.write(f"{{ global: {name}_*; local: *; }};\n")
        built = os.path.join(tmp, os.path.basename(lib_path))
        cmd = [cc, "-shared", "-fPIC", "-O2", "-I", out_dir, c_path, *objects, "-o", built,
               f"-Wl,--version-script={script}", "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ExportError(f"the C compiler failed ({' '.join(cmd)}):\n{done.stderr}")
        with open(built, "rb") as src, atomic_write(lib_path) as dst:  # never a half-written library in out_dir
            shutil.copyfileobj(src, dst)
        os.chmod(lib_path, 0o755)
    return lib_path


def _pic_object(llvm_ir):
    """Position-independent object code of a kernel module for the selected CPU."""
    module = cpu.optimise(llvm_ir)
    return selected().target_machine(opt=3, reloc="pic").emit_object(module)


def _c_type(t):
    c = _C_TYPES.get(t.dtype.name)
    if c is None:
        raise ExportError(f"the C library has no {t.dtype.name} values (a value of type {t})")
    return c


def _ints(xs):
    return "{" + ", ".join(str(int(x)) for x in xs) + "}" if xs else "{0}"


class _CWriter:
    """The C source of one compiled graph."""

    def __init__(self, compiled, name):
        self.g = compiled.graph
        self.name = name
        self.kernels = []
        self.lines = []       # the body of <name>_run, after the inputs are bound
        self.buf = {}         # Value -> C expression of its compact buffer
        self.owned = []       # malloc'ed buffers to free
        for i, v in enumerate(self.g.inputs):
            self.buf[v] = f"in[{i}]"
        for i, v in enumerate(self.g.constants.values()):
            self.buf[v] = f"(char *){name}_c{i}"
        self.geometry = compiled.view_geometry
        for step in compiled.steps:
            if getattr(step, "checks", None):
                # (the executor checks a gather's indices in Python before its kernel reads through them)
                raise ExportError("the C library cannot check the indices of "
                                  f"{', '.join(sorted({check[1] for _, check in step.checks}))} in a kernel")
            if hasattr(step, "kernel"):
                self.kernel_step(step.kernel, getattr(step, "views", {}))
            else:
                for node in step.nodes:
                    self.eager(node)
        self.outputs = [v for v in self.g.output_values()]

    # values

    def alloc(self, v):
        _c_type(v.type)
        var = f"b{len(self.owned)}"
        self.owned.append(var)
        nbytes = max(1, prod(v.type.shape) * v.type.dtype.itemsize)
        self.lines.append(f"{var} = malloc({nbytes}); if (!{var}) {{ status = 2; goto done; }}")
        self.buf[v] = var
        return var

    # steps

    def kernel_step(self, kernel, views):
        """A kernel's call. An input in ``views`` (an eager view the kernel reads through its strides) is read
        where it lies in its root's compact buffer, not from the view's compact copy."""
        src = kernel.source
        self.kernels.append(kernel)
        for v in src.inputs + src.outputs:
            _c_type(v.type)
        ins = [f"((char *){self.buf[self.geometry[v][0]]} + {views[v][1] * v.type.dtype.itemsize})" if v in views
               else self.buf[v] for v in src.inputs]
        if src.split is None:
            outs = [self.alloc(v) for v in src.outputs]
            args = ", ".join(f"(void *){b}" for b in ins + outs)
            self.lines.append(f"{{ void *a[] = {{{args}}}; {src.name}(a, 0, {src.outer}); }}")
            return
        parts, reduction, count, acc = src.split
        acc_c = _C_TYPES[acc.name]
        (out,) = src.outputs
        dst = self.alloc(out)
        combine = {"sum": "t += p[i];", "mean": "t += p[i];", "prod": "t *= p[i];",
                   "amax": "if (p[i] > t || p[i] != p[i]) t = p[i];", "max": "if (p[i] > t || p[i] != p[i]) t = p[i];",
                   "amin": "if (p[i] < t || p[i] != p[i]) t = p[i];", "min": "if (p[i] < t || p[i] != p[i]) t = p[i];"}
        args = ", ".join(f"(void *){b}" for b in ins + ["p"])
        finish = f" t = t / ({acc_c}){count};" if reduction == "mean" else ""
        self.lines.append(
            f"{{ {acc_c} p[{parts}]; void *a[] = {{{args}}}; {src.name}(a, 0, {src.outer}); "
            f"{acc_c} t = p[0]; for (int i = 1; i < {parts}; i++) {{ {combine[reduction]} }}{finish} "
            f"*({_c_type(out.type)} *){dst} = ({_c_type(out.type)})t; }}")

    def eager(self, node):
        op = node.op
        if op.view is not None:
            return self.view(node)
        writer = _EAGER.get(op.name)
        if writer is None:
            raise ExportError(f"the C library cannot run {op.name} (it runs with the eager NumPy kernels in Python); "
                              f"ops written in C: views, {', '.join(sorted(_EAGER))}")
        writer(self, node)

    def view(self, node):
        fakes = [fake_of_type(a.type) if isinstance(a, Value) else a for a in node.args]
        geos = node.op.view(*node.op.convert(fakes))
        geos = geos if isinstance(geos, list) else [geos]
        src = self.buf[node.args[0]]
        el = node.args[0].type.dtype.itemsize
        for v, (shape, strides, offset) in zip(node.outputs, geos):
            dst = self.alloc(v)
            self.lines.append(
                f"{{ int64_t sh[] = {_ints(shape)}, ss[] = {_ints(strides)}, ds[] = {_ints(contiguous_strides(shape))}; "
                f"copy_strided({dst}, ds, {src} + {offset * el}, ss, sh, {len(shape)}, {el}); }}")

    def matmul(self, node):
        a, b = node.args[:2]
        (out,) = node.outputs
        if not (isinstance(a, Value) and isinstance(b, Value) and a.type.ndim == b.type.ndim == 2
                and out.type.dtype.name in ("float32", "float64") and a.type.dtype == b.type.dtype == out.type.dtype):
            raise ExportError(f"the C library runs {node.op.name} on two float32 or float64 matrices only, "
                              f"not {a.type if isinstance(a, Value) else a} @ {b.type if isinstance(b, Value) else b}")
        t = _c_type(out.type)
        (n, k), m = a.type.shape, b.type.shape[1]
        dst = self.alloc(out)
        A, B = self.buf[a], self.buf[b]
        self.lines.append(
            f"for (int64_t i = 0; i < {n}; i++) for (int64_t j = 0; j < {m}; j++) {{ {t} s = 0; "
            f"for (int64_t q = 0; q < {k}; q++) s += (({t} *){A})[i * {k} + q] * (({t} *){B})[q * {m} + j]; "
            f"(({t} *){dst})[i * {m} + j] = s; }}")

    def fill(self, node, value):
        (out,) = node.outputs
        t = _c_type(out.type)
        dst = self.alloc(out)
        self.lines.append(f"for (int64_t i = 0; i < {prod(out.type.shape)}; i++) (({t} *){dst})[i] = ({t})({value!r});")

    # the files

    def header(self):
        n = self.name
        return f"""/* {n}: a jitorch exported program as a C library (see docs/export-format.md). */
#ifndef {n.upper()}_H
#define {n.upper()}_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {{
#endif

enum {{ {n.upper()}_OK = 0, {n.upper()}_BAD_SHAPE = 1, {n.upper()}_NO_MEMORY = 2, {n.upper()}_BAD_ARGUMENT = 3 }};

/* Run the program. For input i: inputs[i] points at its data, input_shapes[i] at its ndim sizes
   and input_strides[i] at its strides in elements (NULL: contiguous). Output i is written to
   outputs[i], with output_strides (NULL, or NULL entries: contiguous). Inputs the program updates
   in place (a training step) are written through their pointers. Returns a status code. */
int {n}_run(void *const *inputs, const int64_t *const *input_shapes, const int64_t *const *input_strides,
            void *const *outputs, const int64_t *const *output_strides);
int {n}_num_inputs(void);
int {n}_num_outputs(void);
/* The ndim of output i (or -1), and its sizes written to shape; returns a status code. */
int {n}_output_ndim(int i);
int {n}_output_shape(int i, int64_t *shape);
const char *{n}_status_string(int status);

#ifdef __cplusplus
}}
#endif
#endif
"""

    def source(self):
        n, g = self.name, self.g
        out = [f'#include "{n}.h"', _RUNTIME]
        out += [f"void {k.name}(void **buffers, int64_t start, int64_t end);" for k in self.kernels]
        for i, (cname, v) in enumerate(g.constants.items()):
            data = g.constant_tensors[cname].contiguous().numpy().tobytes()
            data += b"\0" * (-len(data) % 8)
            words = [int.from_bytes(data[j:j + 8], "little") for j in range(0, len(data), 8)] or [0]
            out.append(f"static uint64_t {n}_c{i}[] = {{" + ",".join(f"0x{w:x}u" for w in words) + "};")
        ins, outs = g.inputs, self.outputs
        out.append(f"static const int IN_NDIM[] = {_ints([v.type.ndim for v in ins])};")
        out.append(f"static const int OUT_NDIM[] = {_ints([v.type.ndim for v in outs])};")
        for kind, vals in (("IN", ins), ("OUT", outs)):
            for i, v in enumerate(vals):
                out.append(f"static const int64_t {kind}_SHAPE{i}[] = {_ints(v.type.shape)};")
                out.append(f"static const int64_t {kind}_CSTRIDES{i}[] = {_ints(contiguous_strides(v.type.shape))};")
        out.append(f"""
int {n}_num_inputs(void) {{ return {len(ins)}; }}
int {n}_num_outputs(void) {{ return {len(outs)}; }}
int {n}_output_ndim(int i) {{ return i >= 0 && i < {len(outs)} ? OUT_NDIM[i] : -1; }}
int {n}_output_shape(int i, int64_t *shape) {{
    static const int64_t *shapes[] = {{{", ".join(f"OUT_SHAPE{i}" for i in range(len(outs))) or "0"}}};
    if (i < 0 || i >= {len(outs)} || !shape) return 3;
    for (int d = 0; d < OUT_NDIM[i]; d++) shape[d] = shapes[i][d];
    return 0;
}}
const char *{n}_status_string(int s) {{
    switch (s) {{ case 0: return "ok"; case 1: return "an input's shape does not match the program";
    case 2: return "out of memory"; case 3: return "a NULL or out-of-range argument"; }}
    return "unknown status";
}}
""")
        body = [f"int {n}_run(void *const *inputs, const int64_t *const *input_shapes, "
                "const int64_t *const *input_strides, void *const *outputs, const int64_t *const *output_strides) {",
                "    int status = 0;",
                f"    char *in[{max(1, len(ins))}] = {{0}};",
                f"    int in_owned[{max(1, len(ins))}] = {{0}};"]
        if self.owned:
            body.append(f"    char *{', *'.join(self.owned)};")
            body.append(f"    {' = '.join(self.owned)} = 0;")
        body.append("    if (!inputs || !input_shapes || !outputs) return 3;")
        for i, v in enumerate(ins):
            el, nd = v.type.dtype.itemsize, v.type.ndim
            body += [
                f"    if (!inputs[{i}] || !input_shapes[{i}]) {{ status = 3; goto done; }}",
                f"    for (int d = 0; d < {nd}; d++) if (input_shapes[{i}][d] != IN_SHAPE{i}[d]) {{ status = 1; goto done; }}",
                f"    if (input_strides && input_strides[{i}] && memcmp(input_strides[{i}], IN_CSTRIDES{i}, {nd * 8})) {{",
                f"        in[{i}] = malloc({max(1, prod(v.type.shape) * el)}); if (!in[{i}]) {{ status = 2; goto done; }}",
                f"        in_owned[{i}] = 1;",
                f"        copy_strided(in[{i}], IN_CSTRIDES{i}, (const char *)inputs[{i}], input_strides[{i}], IN_SHAPE{i}, {nd}, {el});",
                f"    }} else in[{i}] = (char *)inputs[{i}];"]
        body += ["    " + line for line in self.lines]
        for i, v in enumerate(outs):
            el, nd = v.type.dtype.itemsize, v.type.ndim
            body += [f"    if (!outputs[{i}]) {{ status = 3; goto done; }}",
                     f"    copy_strided((char *)outputs[{i}], output_strides && output_strides[{i}] ? output_strides[{i}] : "
                     f"OUT_CSTRIDES{i}, {self.buf[v]}, OUT_CSTRIDES{i}, OUT_SHAPE{i}, {nd}, {el});"]
        for target, v in g.mutations:
            el, nbytes = v.type.dtype.itemsize, prod(v.type.shape) * v.type.dtype.itemsize
            if target in ins:
                i = ins.index(target)
                body.append(f"    copy_strided((char *)inputs[{i}], input_strides && input_strides[{i}] ? "
                            f"input_strides[{i}] : IN_CSTRIDES{i}, {self.buf[v]}, IN_CSTRIDES{i}, IN_SHAPE{i}, "
                            f"{target.type.ndim}, {el});")
            else:
                body.append(f"    memmove({self.buf[target]}, {self.buf[v]}, {nbytes});")
        body.append("done:")
        body += [f"    free({b});" for b in self.owned]
        body.append(f"    for (int i = 0; i < {len(ins)}; i++) if (in_owned[i]) free(in[i]);")
        body += ["    return status;", "}"]
        return "\n".join(out + body) + "\n"


_EAGER = {
    "matmul": _CWriter.matmul,
    "mm": _CWriter.matmul,
    "zeros_like": lambda w, node: w.fill(node, 0),
    "ones_like": lambda w, node: w.fill(node, 1),
    "full_like": lambda w, node: w.fill(node, node.args[1]),
}
