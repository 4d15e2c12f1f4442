"""The package's imports follow its layer order (docs/layers.md): no module imports a module of a higher
layer, not even inside a function, and no modules import each other in a cycle.

Every ``import`` statement of every module is read from its source, wherever it sits; importing
``a.b.c`` also counts as importing the packages ``a.b`` (whose ``__init__`` runs first). The root
``jitorch`` counts only where a module imports it by name: its attributes are the whole library, which
only the libraries may use (as ``torch.nn`` uses ``torch``). For cycles, a module's import of its own
package is no dependency: the package was imported before the module, always."""

import ast
import functools
import pathlib
import re

import networkx as nx

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jitorch"


def layer_table():
    """[(layer name, [module prefixes])], lowest first, from docs/layers.md's table."""
    rows = re.findall(r"^\| *(\w[\w ]*?) *\| *(`.+`) *\|$", (ROOT / "docs/layers.md").read_text(), re.M)
    return [(name, re.findall(r"`([\w.]+)`", modules)) for name, modules in rows]


def modules():
    """{dotted module name: (path, is a package)} of every module under jitorch/."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imported(name, package, node, known):
    """The modules an import statement in module ``name`` runs."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = name.split(".") if package else name.split(".")[:-1]
        if node.level:
            base = base[:len(base) - node.level + 1] + ([node.module] if node.module else [])
            target = ".".join(base)
        else:
            target = node.module or ""
        targets = [target] + [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
    runs = set()
    for target in targets:
        parts = target.split(".")
        runs |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
        if target == "jitorch":
            runs.add(target)
    return {m for m in runs if m in known and m != name}


def statements(tree):
    """Every statement of a parsed module, at any depth. An import is a statement, and statements sit only in
    the statement lists of other statements (and of except and case clauses), never inside an expression:
    walking those lists finds every import that walking every node finds, at a fifth of the nodes."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                stack.extend(children)


@functools.cache
def import_graph():
    """The directed graph of module -> module it imports; each edge has the line of its first import. Built
    once per process (both tests read it: parsing the package is this file's whole cost); do not modify it."""
    known = modules()
    graph = nx.DiGraph()
    for name, (path, package) in known.items():
        graph.add_node(name)
        for node in sorted(statements(ast.parse(path.read_text())), key=lambda n: n.lineno):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(name, package, node, known):
                    if not graph.has_edge(name, target):
                        graph.add_edge(name, target, line=node.lineno)
    return graph


def layer_of(module, table):
    """The index of the layer whose longest prefix matches ``module``."""
    matches = [(len(prefix), i) for i, (_, prefixes) in enumerate(table) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer of docs/layers.md"
    return max(matches)[1]


def test_every_module_has_a_layer():
    table = layer_table()
    assert [name for name, _ in table][:2] == ["runtime", "ops"]
    for module in modules():
        layer_of(module, table)


def test_no_module_imports_a_higher_layer():
    table, graph = layer_table(), import_graph()
    library = next(i for i, (name, _) in enumerate(table) if name == "libraries")
    upward = [f"{a}:{graph.edges[a, b]['line']} imports {b} ({table[layer_of(a, table)][0]} -> "
              f"{table[layer_of(b, table)][0]})" for a, b in graph.edges
              if layer_of(b, table) > layer_of(a, table) and not (b == "jitorch" and layer_of(a, table) >= library)]
    assert not upward, f"{len(upward)} upward imports:\n" + "\n".join(sorted(upward))


def test_no_import_cycles():
    graph = import_graph().copy()
    graph.remove_edges_from([(a, b) for a, b in list(graph.edges) if a.startswith(b + ".")])
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, cycles
