"""docs/ops.md is the registry's table of ops and pieces, and pieces attach only to ops the registry holds."""

from pathlib import Path

import pytest

import importlib

import jitorch  # noqa: F401
from jitorch import op_table
from jitorch.ops import registry

for _module in op_table.ATTACHING:  # every piece attached before the tests below attach their own
    importlib.import_module(_module)

ROOT = Path(__file__).resolve().parents[1]


def test_docs_ops_table_is_current():
    assert (ROOT / "docs/ops.md").read_text() == op_table.table(), \
        "docs/ops.md is stale: run python -m jitorch.op_table docs/ops.md"


def test_every_op_has_a_row_naming_its_pieces():
    text = op_table.table()
    assert text.count("\n| `") == len(registry.OPS)
    assert "| `sum` | - | reduction | kernel (cpu) | rule | - | reduction | generated |" in text
    assert "| `var.correction` | - | reduction | kernel (cpu) | rule | yes | - | implementation |" in text


def test_a_misspelt_op_name_fails_when_its_piece_is_attached():
    with pytest.raises(LookupError, match="'ad'"):
        registry.attach("lowering", "ad", object())


def test_an_unknown_piece_is_refused():
    with pytest.raises(ValueError, match="unknown op piece 'lowerin'"):
        registry.attach("lowerin", "add", object())


def test_a_piece_attached_twice_is_refused():
    with pytest.raises(ValueError, match="lowering of op add declared twice"):
        registry.attach("lowering", "add", object())


def test_a_piece_attached_to_an_op_is_attached_to_its_aliases(monkeypatch):
    abs_, absolute = registry.OPS["abs"], registry.OPS["absolute"]
    assert abs_.aliases == absolute.aliases == (abs_, absolute)
    monkeypatch.setattr(abs_, "pieces", {})
    monkeypatch.setattr(absolute, "pieces", {})
    piece = object()
    registry.attach("cuda", "absolute", piece)
    assert abs_.pieces == absolute.pieces == {"cuda": piece}


def test_pieces_is_a_live_view_by_name():
    lowerings = registry.Pieces("lowering")
    assert lowerings["abs"] is registry.OPS["abs"].pieces["lowering"]
    assert "abs" in lowerings and "matmul" not in lowerings
    assert len(lowerings) == sum("lowering" in op.pieces for op in registry.OPS.values())
