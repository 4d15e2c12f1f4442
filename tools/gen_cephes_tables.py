"""Write jitorch/ops/cephes_tables.py from torch's ATen/native/Math.h (shipped in torch's wheel under
torch/include): the coefficient tables of the special functions jitorch computes as torch does.

    python tools/gen_cephes_tables.py $(python -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'include/ATen/native/Math.h'))") jitorch/ops/cephes_tables.py
"""
import re
import sys

src = open(sys.argv[1]).read()

def body(fn):
    i = src.index(fn)
    j = src.index("\n}", i)
    return src[i:j]

def arrays(text):
    out = {}
    for m in re.finditer(r"static const T (\w+)\[\d*\]\s*=\s*\{(.*?)\};", text, re.S):
        out[m.group(1)] = [float(v) for v in re.findall(r"[+-]?[0-9.]+(?:[eE][+-]?\d+)?", m.group(2))]
    return out

tables = {}
for fn, prefix in [("calc_ndtri(T y0)", "NDTRI"), ("airy_ai_forward(T x) {", "AIRY"),
                   ("bessel_j0_forward(T x) {", "J0"), ("bessel_j1_forward(T x) {", "J1"),
                   ("bessel_y0_forward(T x) {", "Y0"), ("bessel_y1_forward(T x) {", "Y1"),
                   ("modified_bessel_i0_forward(T x) {", "I0"), ("modified_bessel_i1_forward(T x) {", "I1"),
                   ("modified_bessel_k0_forward(T x) {", "K0"), ("modified_bessel_k1_forward(T x) {", "K1"),
                   ("scaled_modified_bessel_k0_forward(T x) {", "K0E"), ("scaled_modified_bessel_k1_forward(T x) {", "K1E")]:
    for name, vals in arrays(body(fn)).items():
        tables[f"{prefix}_{name}"] = vals
for a, b in (("K0", "K0E"), ("K1", "K1E")):
    for t in ("A", "B"):
        assert tables[f"{a}_{t}"] == tables[f"{b}_{t}"], (a, t)
        del tables[f"{b}_{t}"]
# igamma's asymptotic series coefficients d[25][25]
i = src.index("static constexpr scalar_t d[25][25]")
j = src.index("}};", i)
rows = re.findall(r"\{([^{}]*)\}", src[i:j + 2])
d = [[float(v) for v in re.findall(r"[+-]?[0-9.]+(?:[eE][+-]?\d+)?", r)] for r in rows]
assert len(d) == 25 and all(len(r) == 25 for r in d), [len(r) for r in d]
tables["IGAM_D"] = d
# erfcx_y100: case k: t = 2*y100 - (2k+1); c0 + (c1 + (... + c6 * t) * t) * t
i = src.index("erfcx_y100(T y100)")
j = src.index("return 1.0;", i)
cases = re.findall(r"case (\d+): \{\s*T t = 2\*y100 - (\d+);\s*return (.*?);\s*\}", src[i:j], re.S)
assert [int(c[0]) for c in cases] == list(range(100))
erfcx = []
for k, off, expr in cases:
    assert int(off) == 2 * int(k) + 1
    coeffs = [float(v) for v in re.findall(r"[0-9.]+e[+-]?\d+", expr)]
    assert len(coeffs) == 7, (k, expr)
    erfcx.append(coeffs)
tables["ERFCX_Y100"] = erfcx

out = ['"""Coefficient tables of the Cephes special functions (Stephen L. Moshier; 3-clause BSD licence) and of',
       "Steven G. Johnson's erfcx (MIT licence, http://ab-initio.mit.edu/faddeeva), as PyTorch's ATen/native/Math.h",
       "reproduces them: generated from that header (torch 2.13), one name per table, highest degree first.",
       "",
       "``IGAM_D``: the igamma asymptotic series' coefficients (25 by 25, DLMF 8.12); ``ERFCX_Y100``: per hundredth",
       "``k`` of ``y = 4 / (4 + x)``, the coefficients (constant first) of erfcx's polynomial in ``t = 200 y - (2k + 1)``.",
       '"""', ""]
for name, vals in tables.items():
    if name in ("IGAM_D", "ERFCX_Y100"):
        out.append(f"{name} = (")
        for r in vals:
            out.append("    (" + ", ".join(repr(v) for v in r) + "),")
        out.append(")")
    else:
        out.append(f"{name} = (" + ", ".join(repr(v) for v in vals) + ("," if len(vals) == 1 else "") + ")")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print(sorted((k, len(v)) for k, v in tables.items()))
