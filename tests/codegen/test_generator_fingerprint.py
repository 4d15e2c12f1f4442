"""The kernel-sources cache key's fingerprint of the code generator (`kernel.generator_fingerprint`): it covers
every module whose source decides the IR a fused group becomes, and an edit to any of them changes it."""

import shutil

import networkx as nx
import pytest

from jitorch.codegen import kernel
from tests.test_layers import PACKAGE, import_graph


def _hashed(module):
    """Whether the dotted module ``module``'s source is one of `kernel.GENERATOR_SOURCES`."""
    parts = module.split(".")[1:]
    return bool(parts) and (parts[0] in kernel.GENERATOR_SOURCES or f"{parts[0]}.py" in kernel.GENERATOR_SOURCES)


def test_every_module_the_code_generator_imports_is_hashed():
    """The code generator and whatever it imports, directly or not (the IR's types and nodes, the runtime's
    dtypes and casts, the ops' meta rules), are in the fingerprint: an edit to one of them may change a lowering.
    (The last stop's fingerprint hashed codegen/ and ops/ alone.)"""
    graph = import_graph()
    codegen = [m for m in graph if m.startswith("jitorch.codegen")]
    reached = set(codegen).union(*(nx.descendants(graph, m) for m in codegen)) - {"jitorch"}
    assert {"jitorch.ir.graph", "jitorch.runtime.dtypes", "jitorch.ops.registry"} <= reached
    assert sorted(m for m in reached if not _hashed(m)) == []


@pytest.mark.parametrize("edited, changes", [
    ("ir/graph.py", True), ("runtime/dtypes.py", True), ("ops/meta.py", True), ("codegen/emitter.py", True),
    ("tensor.py", True), ("nn/functional.py", False), ("autograd/engine.py", False)])
def test_an_edit_to_a_hashed_module_changes_the_fingerprint(tmp_path, edited, changes):
    """A copy of the package's sources with one file edited: the fingerprint changes exactly where that file
    decides generated code; the installed package's fingerprint is its sources'."""
    root = tmp_path / "jitorch"
    for part in (*kernel.GENERATOR_SOURCES, "nn", "autograd"):
        source = PACKAGE / part
        if source.is_dir():
            shutil.copytree(source, root / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / part)
    before = kernel.sources_digest(root)
    assert before == kernel.generator_fingerprint()
    with open(root / edited, "a") as f:
        f.write("\n# an edit\n")
    assert (kernel.sources_digest(root) != before) is changes
