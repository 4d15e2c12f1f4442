"""Regenerate docs/images/explain-report.png: `jitorch.explain`'s HTML report of the GPT example's loss
(examples/programs/gpt.py at its default size, float32), shot with headless Chromium.

    python tools/screenshot_report.py                      # writes docs/images/explain-report.png
    python tools/screenshot_report.py --html /tmp/gpt.html --png /tmp/gpt.png --chromium chromium

Needs a Chromium (Debian: ``apt-get install chromium``); the unit tests do not run this, they check the
report's structure with html.parser (tests/jit/test_explain_html.py).
"""

import argparse
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jitorch as jt  # noqa: E402


def gpt_report(path, layers=2, heads=4, dims=64, block=32, batch=16):
    """Write the report of the GPT example's loss for one batch (a call with grad: its forward and
    backward graphs are drawn too) to ``path``; returns the explanation."""
    spec = importlib.util.spec_from_file_location("example_gpt", ROOT / "examples" / "programs" / "gpt.py")
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)
    jt.manual_seed(1337)
    model = gpt.GPT(65, block, layers, heads, dims, dropout=0.0)
    idx, targets = jt.randint(0, 65, (batch, block)), jt.randint(0, 65, (batch, block))

    def gpt_loss(idx, targets):
        return model(idx, targets)[1]
    return jt.explain(gpt_loss, idx, targets, html=str(path))


def screenshot(html, png, chromium, size=(1400, 1000)):
    """A headless Chromium screenshot of ``html`` (its first screen, ``size`` pixels), with nothing fetched."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={size[0]},{size[1]}",
                        pathlib.Path(html).resolve().as_uri()], check=True, capture_output=True, timeout=300)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--html", help="where to keep the report (default: a temporary file)")
    p.add_argument("--png", default=str(ROOT / "docs" / "images" / "explain-report.png"))
    p.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        html = args.html or str(pathlib.Path(tmp) / "report.html")
        ex = gpt_report(html)
        print(f"report of {ex.name}: {len(ex.split.forward.graph.nodes)} forward and "
              f"{len(ex.split.backward.graph.nodes)} backward nodes, {pathlib.Path(html).stat().st_size} bytes")
        screenshot(html, args.png, args.chromium)
    print(f"screenshot: {args.png} ({pathlib.Path(args.png).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
