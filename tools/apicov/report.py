"""The coverage report: headline figures, per-area figures, the most-used gaps, every entry's row and the
exclusions with their reasons."""

from __future__ import annotations

import collections
import os
import re

import torch

from .universe import AREAS, FUNCTION_AREAS

# Names the five program styles of issue 18 call (nanoGPT/minGPT with their trainers, and PyTorch's
# examples MNIST, VAE, DCGAN and the word language model), read from those programs by hand. A gap
# among them ranks first; the rest rank by how often torch's own library code calls the name.
PROGRAM_NAMES = {
    "torch." + n for n in (
        "arange cat exp flatten full manual_seed multinomial no_grad ones randint randn randn_like sigmoid sin "
        "cos stack sum topk tril triu zeros from_numpy save load compile tensor softmax where log ones_like "
        "zeros_like isfinite clamp").split()
} | {
    "torch.Tensor." + n for n in (
        "add_ argmax backward contiguous detach div eq exp fill_ float item masked_fill mean narrow new_zeros "
        "numel pin_memory pow size split sum t to transpose unsqueeze view view_as zero_ dim long copy_ "
        "uniform_ normal_ clone tolist max __getitem__ __setitem__ __mul__ __add__ __truediv__ __matmul__").split()
} | {
    "torch.nn.functional." + n for n in (
        "binary_cross_entropy cross_entropy dropout gelu layer_norm log_softmax max_pool2d nll_loss relu "
        "scaled_dot_product_attention softmax leaky_relu").split()
} | {"torch.nn.init." + n for n in "normal_ zeros_ uniform_ constant_ xavier_uniform_".split()} | {
    "torch.nn." + n for n in (
        "BCELoss BatchNorm2d Conv2d ConvTranspose2d Dropout Embedding GELU GRU LSTM LayerNorm LeakyReLU Linear "
        "Module ModuleDict ModuleList NLLLoss RNN ReLU Sequential Sigmoid Tanh TransformerEncoder "
        "TransformerEncoderLayer").split()
} | {"torch.optim." + n for n in "Adadelta Adam AdamW SGD".split()} | {"torch.optim.lr_scheduler.StepLR"}

USAGE_SOURCES = ("nn", "optim", "utils/data", "functional.py", "_tensor.py")
# The name a call's qualifier has in torch's own code, per area; a Tensor method is called on any other name.
QUALIFIERS = {"torch": ("torch",), "nn.functional": ("F", "functional"), "linalg": ("linalg",),
              "special": ("special",), "fft": ("fft",), "nn.init": ("init",), "nn": ("nn",), "optim": ("optim",),
              "lr_scheduler": ("lr_scheduler",), "autograd": ("autograd", "forward_ad", "graph")}


def library_calls():
    """{(qualifier, name): count} of the calls ``qualifier.name(`` in torch's own Python sources (nn, optim,
    utils.data, torch.functional, Tensor), the qualifier being the identifier before the last dot."""
    base = os.path.dirname(torch.__file__)
    counts = collections.Counter()
    for part in USAGE_SOURCES:
        path = os.path.join(base, part)
        files = [path] if path.endswith(".py") else [os.path.join(d, f) for d, _, fs in os.walk(path)
                                                     for f in fs if f.endswith(".py")]
        for name in files:
            with open(name, encoding="utf-8", errors="replace") as src:
                counts.update(re.findall(r"(\w+)\.(\w+)\(", src.read()))
    return counts


def uses(counts, row):
    """How often torch's library code calls ``row``'s entry."""
    name = row["path"].rsplit(".", 1)[1]
    if row["area"] == "Tensor":
        modules = {q for qs in QUALIFIERS.values() for q in qs}
        return sum(n for (q, m), n in counts.items() if m == name and q not in modules)
    return sum(counts[(q, name)] for q in QUALIFIERS[row["area"]])


def ranked_gaps(rows, status, limit):
    """[(row, called by the program styles, library uses)] of the ``limit`` most-used rows of ``status``:
    first the names the program styles call, then by how often torch's library code calls them."""
    counts = library_calls()
    ranked = sorted(((r, r["path"] in PROGRAM_NAMES, uses(counts, r)) for r in rows if r["status"] in status),
                    key=lambda t: (not t[1], -t[2], t[0]["path"]))
    return ranked[:limit]


def figures(rows):
    """(applicable, exist, match) counts of ``rows``."""
    applicable = [r for r in rows if r["status"] != "excluded"]
    exist = [r for r in applicable if r["status"] != "missing"]
    return len(applicable), len(exist), sum(r["status"] == "match" for r in applicable)


def _pct(part, whole):
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def headline(rows):
    """The headline sentence: functions and Tensor methods that exist, and that exist and match."""
    n, exist, match = figures([r for r in rows if r["area"] in FUNCTION_AREAS])
    return (f"{_pct(exist, n)} of torch's {n} applicable functions and Tensor methods exist in jitorch; "
            f"{_pct(match, n)} exist and match torch in smoke calls")


def summary(rows):
    """A few lines for the terminal."""
    counts = collections.Counter(r["status"] for r in rows)
    crashes = [r["path"] for r in rows if r["status"] == "crash"]
    return "\n".join([headline(rows), ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))]
                     + ([f"crashes: {', '.join(crashes)}"] if crashes else []))


def _area_table(rows):
    lines = ["| area | applicable | exist | exist and match | mismatch | crash | not smoke-called | excluded |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    groups = [(AREAS[a], [r for r in rows if r["area"] == a]) for a in AREAS]
    groups += [("**functions + Tensor methods**", [r for r in rows if r["area"] in FUNCTION_AREAS]),
               ("**all areas**", rows)]
    for label, group in groups:
        if not group:
            continue
        n, exist, match = figures(group)
        c = collections.Counter(r["status"] for r in group)
        lines.append(f"| {label} | {n} | {exist} ({_pct(exist, n)}) | {match} ({_pct(match, n)}) | "
                     f"{c['mismatch']} | {c['crash']} | {c['untested']} | {c['excluded']} |")
    return lines


def _cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def _gap_list(rows, status, limit):
    lines = []
    for r, in_programs, calls in ranked_gaps(rows, status, limit):
        why = "program styles" if in_programs else f"{calls} calls in torch's library code"
        note = f": {_cell(r['note'])}" if r["note"] else ""
        lines.append(f"1. `{r['path']}` ({why}){note}")
    return lines


def _entry_rows(rows):
    lines = []
    for area in AREAS:
        group = [r for r in rows if r["area"] == area and r["status"] != "excluded"]
        if not group:
            continue
        lines += ["", f"### {AREAS[area]}", "", "| name | exists | matches | note |", "|---|---|---|---|"]
        for r in group:
            exists = "no" if r["status"] == "missing" else "yes"
            matches = {"match": "yes", "mismatch": "**no**", "crash": "**CRASH**", "untested": "—",
                       "missing": "no"}[r["status"]]
            lines.append(f"| `{r['path']}` | {exists} | {matches} | {_cell(r['note'])} |")
    return lines


def _exclusions(rows):
    by_reason = collections.defaultdict(list)
    for r in rows:
        if r["status"] == "excluded":
            by_reason[r["note"]].append(r["path"])
    lines = ["| reason | count | names |", "|---|---:|---|"]
    for reason, paths in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        names = ", ".join(f"`{p}`" for p in paths) if reason != "private name" else "(every `_` name)"
        lines.append(f"| {reason} | {len(paths)} | {names} |")
    return lines


def markdown(rows, seconds):
    """The whole report, as Markdown."""
    return "\n".join([
        "# jitorch API coverage, measured against torch",
        "",
        f"Generated by `python tools/api_coverage.py` against torch {torch.__version__} "
        f"({seconds:.0f} s); do not edit by hand.",
        "",
        f"**{headline(rows)}.**",
        "",
        "How it is measured: the entries are torch's public API: the functions and Tensor methods of "
        "`torch.overrides` (`get_testing_overrides()` and `get_ignored_functions()`, which holds the factories), "
        "every function of `torch.nn.functional`, `torch.linalg`, `torch.special`, `torch.fft` and `torch.nn.init`, "
        "the `torch.nn` modules, `torch.optim` with its LR schedulers, and `torch.autograd`. An entry *exists* "
        "when the same dotted path resolves under `jitorch`. It *matches* when every smoke call gives torch's "
        "result: same types, shapes and dtypes, values within rtol 1e-4 / atol 1e-5 (1e-2 for 16-bit floats; "
        "random results by shape and dtype only; SVD/QR/eigh up to sign). Smoke calls are torch's own OpInfo "
        "samples (`common_methods_invocations.op_db`, up to 3 per OpInfo, converted through NumPy), recipes "
        "in `tools/apicov/recipes.py` and `libraries.py` (each module run forward with torch's weights, each "
        "optimizer stepped 3 times, each scheduler 8 epochs), or else the first simple call torch accepts. "
        "A sample torch rejects is dropped; an error from jitorch where torch returns is a mismatch. "
        "*Not smoke-called* entries exist but no sample reached them; they do not count as matching.",
        "",
        "## Per area",
        "",
        *_area_table(rows),
        "",
        "## Most-used gaps",
        "",
        "Ranked first by whether the five program styles of issue 18 call them (a fixed list in "
        "`tools/apicov/report.py`), then by how often torch's own library code (`torch/nn`, `optim`, "
        "`utils/data`, `functional.py`, `_tensor.py`) calls the name (as `torch.name(`, `F.name(`, "
        "`linalg.name(`, ...; a Tensor method as `anything.name(`).",
        "",
        "### Missing",
        "",
        *_gap_list(rows, ("missing",), 40),
        "",
        "### Present but not matching torch (or crashing)",
        "",
        *_gap_list(rows, ("mismatch", "crash"), 40),
        "",
        "## Every entry",
        *_entry_rows(rows),
        "",
        "## Exclusions",
        "",
        *_exclusions(rows),
        "",
    ])
