"""tools/api_coverage.py: its verdicts on entries whose truth is known, its crash isolation, and the
consistency of the report it wrote (docs/api-coverage.md) with the README and with torch's API."""

import functools
import json
import pathlib
import re
import sys
import types

import pytest

import jitorch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools")]

from apicov import report, runner, universe  # noqa: E402

DOC = (ROOT / "docs" / "api-coverage.md").read_text()


@functools.cache
def entries():
    return {e.path: e for e in universe.entries()}


def entry(path):
    return entries()[path]


class Patched(types.ModuleType):
    """jitorch with some attributes replaced (a wrong op) or removed, everything else delegated."""

    def __init__(self, missing=(), **replaced):
        super().__init__("jitorch")
        self.__dict__.update(replaced)
        self._missing = missing

    def __getattr__(self, name):
        if name in self._missing:
            raise AttributeError(name)
        return getattr(jitorch, name)


@pytest.mark.parametrize("path", ["torch.zeros", "torch.Tensor.new_zeros", "torch.nn.Linear", "torch.optim.SGD",
                                  "torch.optim.lr_scheduler.StepLR", "torch.autograd.grad"])
def test_check_reports_a_match_for_entries_jitorch_has_right(path):
    verdict = runner.check(entry(path), jitorch, {})
    assert verdict["status"] == "match" and verdict["samples"] >= 1, verdict


def test_check_reports_wrong_values_as_a_mismatch():
    wrong = Patched(zeros=lambda *size, **kw: jitorch.ones(*size, **kw))
    verdict = runner.check(entry("torch.zeros"), wrong, {})
    assert verdict["status"] == "mismatch" and "values differ" in verdict["note"]


def test_check_reports_a_jitorch_error_where_torch_returns_as_a_mismatch():
    def broken(*size, **kw):
        raise ValueError("no zeros today")
    verdict = runner.check(entry("torch.zeros"), Patched(zeros=broken), {})
    assert verdict["status"] == "mismatch" and "ValueError: no zeros today" in verdict["note"]


def test_check_reports_a_missing_path_and_an_excluded_one():
    assert runner.check(entry("torch.zeros"), Patched(missing=("zeros",)), {})["status"] == "missing"
    assert runner.check(entry("torch.quantize_per_tensor"), jitorch, {}) == {
        "status": "excluded", "note": "quantized tensors", "samples": 0}


def test_exclusions_keep_the_predicates_and_ops_real_code_uses():
    assert universe.exclusion("torch.Tensor.is_sparse") is None      # optimizers ask p.grad.is_sparse
    assert universe.exclusion("torch.index_copy") is None            # not a functionalisation *_copy variant
    assert universe.exclusion("torch.nn.init.sparse_") is None       # a dense init
    assert universe.exclusion("torch.view_copy").startswith("functionalisation")
    assert universe.exclusion("torch.view_as_complex") == "complex numbers"


def test_worker_prints_a_verdict_per_entry(capsys):
    entries = [entry("torch.arange"), entry("torch.nn.ReLU")]
    runner.worker(entries, 0, need_opinfos=False)
    lines = [json.loads(ln[len(runner.MARK):]) for ln in capsys.readouterr().out.splitlines()]
    assert [ln.get("begin", ln.get("index")) for ln in lines] == [0, 0, 1, 1]
    assert [ln["status"] for ln in lines if "status" in ln] == ["match", "match"]


def test_a_crashing_entry_is_recorded_and_the_run_goes_on():
    # A stand-in worker: entry 1 kills its process (as a segfault in jitorch would); a new worker resumes at 2.
    script = ("import json, os, signal, sys\nstart = int(sys.argv[1])\nfor i in range(start, 3):\n"
              f"    print({runner.MARK!r} + json.dumps({{'begin': i}}), flush=True)\n"
              "    if i == 1: os.kill(os.getpid(), signal.SIGSEGV)\n"
              f"    print({runner.MARK!r} + json.dumps({{'index': i, 'status': 'match', 'note': '', 'samples': 1}}),"
              " flush=True)\n")
    verdicts = runner.run([entry("torch.zeros")] * 3, [sys.executable, "-c", script])
    assert [v["status"] for v in verdicts] == ["match", "crash", "match"]
    assert "SIGSEGV" in verdicts[1]["note"]


def _doc_rows():
    """(path, exists, matches) of every row of the report's entry tables."""
    return re.findall(r"^\| `(torch\.[\w.]+)` \| (yes|no) \| ([^|]+) \|", DOC, re.M)


def test_report_rows_are_exactly_torchs_applicable_entries():
    applicable = {path for path, e in entries().items() if not e.excluded}
    assert {path for path, _, _ in _doc_rows()} == applicable


def test_report_headline_agrees_with_its_rows_and_the_readme():
    areas = {path: e.area for path, e in entries().items()}
    rows = [{"path": p, "area": areas[p], "status": "missing" if ex == "no" else
             ("match" if m.strip() == "yes" else "mismatch")} for p, ex, m in _doc_rows()]
    sentence = report.headline(rows)
    assert f"**{sentence}.**" in DOC
    figure = re.search(r"([\d.]+%) of torch's (\d+) applicable functions and Tensor methods exist in jitorch; "
                       r"([\d.]+%) exist and match", sentence).groups()
    readme = (ROOT / "README.md").read_text()
    assert all(value in readme.split("## API coverage")[1].split("\n## ")[0] for value in figure)


def test_a_torch_module_argument_reaches_jitorch_as_jitorchs_module():
    """OpInfo's triplet_margin_with_distance_loss samples pass ``distance_function=nn.PairwiseDistance()``, a torch
    module, which reached jitorch as it was (a TypeError in torch's pairwise_distance on jitorch tensors)."""
    import torch
    from apicov.compare import Lib, SkipSample, difference, plain

    own = Lib(jitorch).convert({"distance_function": torch.nn.PairwiseDistance(p=3.0, keepdim=True)})
    module = own["distance_function"]
    assert type(module) is jitorch.nn.PairwiseDistance and (module.norm, module.keepdim) == (3.0, True)
    a, p, n = (torch.randn(4, 3) for _ in range(3))
    want = torch.nn.functional.triplet_margin_with_distance_loss(a, p, n, distance_function=torch.nn.PairwiseDistance(),
                                                                 swap=True)
    j = Lib(jitorch).convert([a, p, n, torch.nn.PairwiseDistance()])
    got = jitorch.nn.functional.triplet_margin_with_distance_loss(*j[:3], distance_function=j[3], swap=True)
    assert difference(plain(want), plain(got)) is None
    with pytest.raises(SkipSample):
        Lib(jitorch).convert(torch.nn.Linear(2, 2))
