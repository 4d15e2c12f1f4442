"""`jitorch.explain(fn, *args, html=path)`: the HTML report's structure, read back with html.parser."""

import importlib.util
import math
import os
import pathlib
from html.parser import HTMLParser

import pytest

import jitorch as jt
import jitorch.nn as nn
from jitorch.jit.report import node_key

ROOT = pathlib.Path(__file__).resolve().parents[2]


class Element:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children, self.text = tag, dict(attrs), parent, [], []

    @property
    def classes(self):
        return (self.attrs.get("class") or "").split()

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()

    def find_all(self, tag=None, cls=None, **attrs):
        return [e for e in self.iter() if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
                and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def all_text(self):
        return "".join(self.text) + "".join(c.all_text() for c in self.children)


VOID = {"meta", "input", "br", "img", "link", "hr"}


class Tree(HTMLParser):
    """A small DOM: every element with its attributes, children and text."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", (), None)
        self.at = self.root
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        e = Element(tag, attrs, self.at)
        self.at.children.append(e)
        if tag not in VOID:
            self.at = e

    def handle_startendtag(self, tag, attrs):
        self.at.children.append(Element(tag, attrs, self.at))

    def handle_endtag(self, tag):
        e = self.at
        while e is not None and e.tag != tag:
            e = e.parent
        assert e is not None, f"</{tag}> closes nothing"
        self.at = e.parent

    def handle_data(self, data):
        self.at.text.append(data)


def _mlp():
    jt.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))

    def loss_fn(x, y):  # (x * 1.0: something for the passes to remove)
        return nn.functional.cross_entropy(model(x * 1.0), y)
    return jt.compile(loss_fn), jt.randn(5, 8), jt.randint(0, 4, (5,))


def _gpt(layers=1):
    spec = importlib.util.spec_from_file_location("example_gpt", ROOT / "examples" / "programs" / "gpt.py")
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)
    jt.manual_seed(0)
    model = gpt.GPT(65, 8, layers, 2, 16, dropout=0.0)

    def loss_fn(idx, targets):
        return model(idx, targets)[1]
    return jt.compile(loss_fn), jt.randint(0, 65, (2, 8)), jt.randint(0, 65, (2, 8))


def _check_self_contained(text, tree, directory):
    """One file, nothing fetched: no URLs, no src=, no stylesheet links, no fonts or imports."""
    assert "http://" not in text and "https://" not in text and "//cdn" not in text
    assert not [e for e in tree.root.iter() if "src" in e.attrs or "href" in e.attrs and not
                e.attrs["href"].startswith("#")]
    assert not tree.root.find_all("link") and not tree.root.find_all("iframe") and not tree.root.find_all("img")
    assert "@import" not in text and "@font-face" not in text
    assert all(target.startswith("#") for target in text.split("url(")[1:])  # (the arrowheads' markers)
    assert sorted(os.listdir(directory)) == ["report.html"]  # (the atomic write left no temporary file)


def _svg(tree, key):
    (svg,) = tree.root.find_all("svg", data_graph=key)
    return svg


def _check_drawn(svg, graph):
    """One node element per input, constant and node, and an edge per value read."""
    ops = svg.find_all("g", cls="op")
    assert len(ops) == len(graph.nodes)
    assert len(svg.find_all("g", cls="input")) == len(graph.inputs)
    assert len(svg.find_all("g", cls="constant")) == len(graph.constants)
    assert [e.attrs["data-op"] for e in ops] == [n.op.name for n in graph.nodes]
    def source(v):
        return id(v.node) if v.node is not None else v.name
    edges = {(source(v), id(n)) for n in graph.nodes for v in n.input_values()}
    edges |= {(source(v), "output") for v in graph.output_values() + [v for _, v in graph.mutations]}
    assert len(svg.find_all("path", cls="edge")) == len(edges)
    for e in ops:  # the whole IR line is the tooltip
        assert e.find_all("title")[0].all_text().split("\n")[0].endswith(")")


def _check_steps(tree, svg, view):
    """The nodes coloured as a kernel are that kernel step's; eager and external steps are marked."""
    fills = []
    for i, step in enumerate(view.steps):
        drawn = svg.find_all("g", data_step=str(i))
        assert {e.attrs["data-id"] for e in drawn} == {node_key(n) for n in step.nodes}
        if hasattr(step, "kernel"):
            assert all("kernel" in e.classes for e in drawn)
            styles = {e.find_all("rect")[0].attrs["style"] for e in drawn}
            assert len(styles) == 1
            fills.append(styles.pop())
            (details,) = tree.root.find_all("details", cls="kernel", id=f"k-{view.key}-{i}")
            assert [li.all_text() for li in details.find_all("ul", cls="ops")[0].find_all("li")] == step.kernel.ops
            (ir,) = details.find_all("details", cls="llvm-ir")
            assert "define" in ir.find_all("pre")[0].all_text()
            (asm,) = details.find_all("details", cls="asm")
            assert asm.attrs["data-asm"] == "assembly" and step.kernel.name in asm.find_all("pre")[0].all_text()
        else:
            kind = "external" if step.reason == "external" else "eager"
            assert all(kind in e.classes for e in drawn)
    assert len(set(fills)) == len(fills)  # a colour per kernel


def test_mlp_report_with_grad(tmp_path):
    f, x, y = _mlp()
    path = tmp_path / "report.html"
    ex = jt.explain(f, x, y, html=str(path))
    text = path.read_text()
    tree = Tree(text)
    _check_self_contained(text, tree, tmp_path)
    views = {v.key: v for v in ex.graph_views()}
    assert list(views) == ["before", "after", "forward", "backward"]  # a call with grad: its split too
    assert len(tree.root.find_all("svg")) == 4
    for key, view in views.items():
        _check_drawn(_svg(tree, key), view.graph)
    assert views["after"].graph is ex.executable.graph and views["forward"].graph is ex.split.forward.graph
    # before the passes: the graph as traced, with the multiplication by one that simplification removes
    assert "= mul(%x, 1.0)" in views["before"].text and "= mul(%x, 1.0)" not in views["after"].text
    for key in ("after", "forward", "backward"):
        _check_steps(tree, _svg(tree, key), views[key])
    external = _svg(tree, "after").find_all("g", cls="external")
    assert {e.attrs["data-op"] for e in external} & {"matmul", "addmm", "mm", "linear"}
    guards = [li.all_text() for li in tree.root.find_all("ul", cls="guards")[0].find_all("li")]
    assert guards == ex.guards and any("x: Tensor shape=[5, 8]" in g for g in guards)
    ir_texts = {d.attrs["data-graph"]: d.find_all("pre")[0].all_text() for d in tree.root.find_all("details", cls="ir")}
    assert ir_texts == {k: v.text for k, v in views.items()}
    assert tree.root.find_all("section", id="source")[0].all_text().count("\n") > 5


def test_kernel_times_give_shares_summing_to_one_hundred(tmp_path):
    f, x, y = _mlp()
    ex = jt.explain(f, x, y)
    views = ex.graph_views()
    names = [name for v in views if v.steps is not None for name, _, _ in v.kernels()]
    assert any(n.startswith("backward/") for n in names) and any("/" not in n for n in names)
    times = {name: 1e-6 * (k + 1) for k, name in enumerate(names)}
    path = tmp_path / "report.html"
    ex.to_html(path, kernel_times=times)
    tree = Tree(path.read_text())
    for key in ("after", "forward", "backward"):
        (table,) = tree.root.find_all("details", cls="kernels", data_graph=key)
        shares = [float(td.attrs["data-share"]) for td in table.find_all("td", cls="share")]
        assert len(shares) == len([n for n in names if (n.split("/")[0] if "/" in n else "after") == key])
        assert math.isclose(sum(shares), 100.0, rel_tol=1e-6)
    last = names[-1]
    (row,) = [td for td in tree.root.find_all("td", cls="share") if td.parent.find_all("a")[0].attrs["href"]
              == f"#k-backward-{views[-1].kernels()[-1][1]}"]
    assert float(row.attrs["data-share"]) == pytest.approx(
        100 * times[last] / sum(t for n, t in times.items() if n.startswith("backward/")))


def test_bad_kernel_times_raise_before_writing(tmp_path):
    f, x, y = _mlp()
    path = tmp_path / "report.html"
    with pytest.raises(ValueError, match="'nope', which is not a kernel of this report"):
        jt.explain(f, x, y, html=str(path), kernel_times={"nope": 1.0})
    ex = jt.explain(f, x, y)
    name = ex.graph_views()[1].kernels()[0][0]
    for bad in (-1.0, float("nan"), "1"):
        with pytest.raises(ValueError, match="must be a finite number of seconds"):
            ex.to_html(path, kernel_times={name: bad})
    assert not path.exists() and os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="kernel_times is for the HTML report"):
        jt.explain(f, x, y, kernel_times={name: 1.0})


def test_gpt_report_after_a_call_retraces_for_the_graph_before_the_passes(tmp_path):
    f, idx, targets = _gpt()
    with jt.no_grad():
        f(idx, targets)  # compiled: the passes have rewritten the cached graph in place
        ex = jt.explain(f, idx, targets, html=str(tmp_path / "report.html"))
        assert ex.reused and ex.split is None
        views = {v.key: v for v in ex.graph_views()}
        assert list(views) == ["before", "after"]
        text = (tmp_path / "report.html").read_text()
        tree = Tree(text)
        _check_self_contained(text, tree, tmp_path)
        for key, view in views.items():
            _check_drawn(_svg(tree, key), view.graph)
        _check_steps(tree, _svg(tree, "after"), views["after"])
        # the new trace is the graph a first explanation keeps, as traced, from before its passes
        fresh = jt.explain(f.fn, idx, targets).graph_views()[0].graph
        assert views["before"].graph == fresh and views["before"].graph != views["after"].graph


def test_retrace_reason_and_cache_entries(tmp_path):
    @jt.compile
    def double_sum(x):
        return (x * 2).sum()

    double_sum(jt.ones(2))
    double_sum(jt.ones(2))
    path = tmp_path / "report.html"
    jt.explain(double_sum, jt.ones(3), html=str(path))
    tree = Tree(path.read_text())
    summary = tree.root.find_all("dl", cls="summary")[0].all_text()
    assert "retraced" in summary and "shape of x changed from [2] to [3]" in summary
    (entries,) = tree.root.find_all("table", cls="entries")
    rows = entries.find_all("tbody")[0].children
    assert [r.children[1].all_text() for r in rows] == ["2", "0"]  # calls per entry; the second is this one's
    assert rows[1].classes == ["this"] and "2 nodes (this call)" in rows[1].all_text()
    (info,) = tree.root.find_all("table", cls="info")
    assert "compiled (misses)" in info.all_text()


def test_eager_function_report_says_why(tmp_path):
    path = tmp_path / "report.html"
    ex = jt.explain(jt.compile(lambda x: x.item()), jt.ones(1), html=str(path))
    tree = Tree(path.read_text())
    assert not ex.compiles and not tree.root.find_all("svg")
    assert ".item() on a traced tensor" in tree.root.find_all("p", cls="eager")[0].all_text()


def test_cuda_kernels_show_their_ptx(tmp_path):
    path = tmp_path / "report.html"
    with jt.cuda.emulated():
        x, w = jt.randn(4, 8, device="cuda"), jt.randn(8, 3, device="cuda")
        ex = jt.explain(jt.compile(lambda x, w: (x @ w).relu().sum(dim=1)), x, w, html=str(path))
    tree = Tree(path.read_text())
    kernels = ex.graph_views()[1].kernels()
    assert kernels and len(tree.root.find_all("details", cls="asm")) == len(kernels)
    for asm in tree.root.find_all("details", cls="asm"):
        ptx = asm.find_all("pre")[0].all_text()
        assert asm.attrs["data-asm"] == "PTX" and ".entry" in ptx and ".target sm_" in ptx
