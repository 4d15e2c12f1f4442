"""jitorch's coverage of torch's public API, measured against torch itself.

    python tools/api_coverage.py                  # full run: writes docs/api-coverage.md (a few minutes)
    python tools/api_coverage.py --only 'nn\\.(ReLU|Linear)$' --json -   # a subset, verdicts as JSON

Enumerates torch's API (torch.overrides' functions and Tensor methods, torch.nn.functional, torch.linalg,
torch.special, torch.fft, torch.nn.init, the torch.nn modules, torch.optim and its LR schedulers,
torch.autograd), excludes what does not apply (with the reason), and for every other entry reports
whether jitorch has the same dotted path and whether smoke calls give torch's results: OpInfo samples
from torch's test suite, recipes, or generated calls (see tools/apicov). Needs torch installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tools")]

from apicov import calls, report, runner, universe  # noqa: E402


def selected(args):
    """The entries this run checks (all of them, or those --only and --areas pick)."""
    entries = universe.entries()
    if args.only:
        entries = [e for e in entries if re.search(args.only, e.path)]
    if args.areas:
        entries = [e for e in entries if e.area in args.areas.split(",")]
    return entries


def _needs_opinfos(entries):
    """Whether any entry may take its samples from torch's OpInfos (loading them costs seconds)."""
    return any(e.area in universe.FUNCTION_AREAS and not e.excluded and e.path not in calls.recipes.RECIPES
               for e in entries)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="check only the entries whose dotted path matches this regex")
    parser.add_argument("--areas", help=f"comma-separated areas ({', '.join(universe.AREAS)})")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "api-coverage.md"),
                        help="the Markdown report (written only by a full run, unless --only/--areas with --out)")
    parser.add_argument("--json", help="also write the verdicts as JSON to this file ('-': stdout)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    entries = selected(args)
    if args.worker is not None:
        runner.worker(entries, args.worker, _needs_opinfos(entries))
        return 0
    started = time.time()
    command = _worker_command(args)
    verdicts = runner.run(entries, command)
    rows = [{"path": e.path, "area": e.area, "kind": e.kind, **v} for e, v in zip(entries, verdicts)]
    if args.json:
        text = json.dumps(rows, indent=1)
        print(text) if args.json == "-" else open(args.json, "w").write(text)
    full = not (args.only or args.areas)
    if full or "--out" in (argv or sys.argv[1:]):
        with open(args.out, "w") as out:
            out.write(report.markdown(rows, time.time() - started))
    print(report.summary(rows), file=sys.stderr)
    return 0


def _worker_command(args):
    """The command line of a worker process checking the same entries from a start index."""
    command = [sys.executable, os.path.abspath(__file__)]
    if args.only:
        command += ["--only", args.only]
    if args.areas:
        command += ["--areas", args.areas]
    return command + ["--worker"]


if __name__ == "__main__":
    sys.exit(main())
