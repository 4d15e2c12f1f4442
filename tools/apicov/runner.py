"""Running the smoke calls: each entry is checked in a worker process, so a crash of jitorch (or of torch)
costs one entry, recorded as a crash, and the run goes on in a fresh worker from the next entry."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings

import torch

from . import calls, libraries
from .compare import Lib, SkipSample, difference, plain
from .universe import FUNCTION_AREAS, resolve

MARK = "@@apicov "
ENTRY_SECONDS = 30


class EntryTimeout(Exception):
    """An entry's smoke calls ran longer than ENTRY_SECONDS."""


def exists(jitorch, entry):
    """Whether jitorch has ``entry``'s path (a Tensor property may live on instances only)."""
    try:
        resolve(jitorch, entry.path)
        return True
    except Exception:
        if entry.area == "Tensor":
            return hasattr(jitorch.zeros(1), entry.short)
        return False


def _error(exc):
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= 70 else text[:67] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _samples(entry, opinfos):
    """[(label, call, mode)] of ``entry``."""
    if entry.area in FUNCTION_AREAS:
        return [(s.label, s.call, s.mode) for s in calls.samples(entry, opinfos)]
    return libraries.library_samples(entry)


def _run(call, lib):
    """The plain result of ``call`` on ``lib``, with the samples' warnings (deprecations) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plain(call(lib))


def _torch_result(call, mode):
    """torch's result of ``call`` (its exception for a "raises" sample), or None when the sample does not
    serve: torch rejected it, or it should have raised and did not. SkipSample propagates."""
    torch.manual_seed(0)
    try:
        result = _run(call, Lib(torch))
    except SkipSample:
        raise
    except Exception as exc:
        return exc if mode == "raises" else None
    return None if mode == "raises" else result


def _jitorch_difference(call, mode, expected, jitorch):
    """Why jitorch's result of ``call`` differs from torch's ``expected``, or None."""
    jitorch.manual_seed(0)
    try:
        got = _run(call, Lib(jitorch))
    except (SkipSample, EntryTimeout):
        raise
    except Exception as exc:
        if mode != "raises":
            return f"raises {_error(exc)}"
        same = type(exc).__name__ == type(expected).__name__
        return None if same else f"raises {type(exc).__name__}, torch {type(expected).__name__}"
    return f"no error (torch raises {type(expected).__name__})" if mode == "raises" else difference(expected, got, mode)


def check(entry, jitorch, opinfos):
    """The verdict of one entry: {status, note, samples}; status is one of excluded, missing, match,
    mismatch, untested."""
    if entry.excluded:
        return {"status": "excluded", "note": entry.excluded, "samples": 0}
    if not exists(jitorch, entry):
        return {"status": "missing", "note": "", "samples": 0}
    if entry.path in calls.recipes.UNCALLED:
        return {"status": "untested", "note": calls.recipes.UNCALLED[entry.path], "samples": 0}
    compared, per_group, rejected = 0, collections.Counter(), 0
    for label, call, mode in _samples(entry, opinfos):
        group = label.split("#")[0]
        if per_group[group] >= calls.MAX_SAMPLES:
            continue
        try:
            expected = _torch_result(call, mode)
            if expected is None:
                rejected += 1
                continue
            per_group[group] += 1
            compared += 1
            why = _jitorch_difference(call, mode, expected, jitorch)
        except SkipSample:
            continue
        if why:
            return {"status": "mismatch", "note": f"{why} [{label}]", "samples": compared}
    if not compared:
        why = f"torch rejected all {rejected} samples" if rejected else "no smoke sample"
        return {"status": "untested", "note": why, "samples": 0}
    return {"status": "match", "note": "", "samples": compared}


def _alarm(signum, frame):
    raise EntryTimeout(f"over {ENTRY_SECONDS} s")


def worker(entries, start, need_opinfos):
    """Checks entries[start:], printing a begin line before each and its verdict after it."""
    import jitorch
    torch.set_num_threads(1)
    opinfos = calls.load_opinfos() if need_opinfos else {}
    signal.signal(signal.SIGALRM, _alarm)
    for index in range(start, len(entries)):
        print(MARK + json.dumps({"begin": index}), flush=True)
        signal.alarm(ENTRY_SECONDS)
        try:
            verdict = check(entries[index], jitorch, opinfos)
        except EntryTimeout as exc:
            verdict = {"status": "mismatch", "note": f"timed out ({exc})", "samples": 0}
        except Exception as exc:
            verdict = {"status": "mismatch", "note": f"harness error {_error(exc)}", "samples": 0,
                       "trace": traceback.format_exc(limit=3)}
        finally:
            signal.alarm(0)
        print(MARK + json.dumps({"index": index, **verdict}), flush=True)


def run(entries, worker_command):
    """Verdicts of every entry (a list aligned with ``entries``), from worker processes started with
    ``worker_command + [start index]``; an entry whose worker died is a crash."""
    verdicts = [None] * len(entries)
    start = 0
    while start < len(entries):
        with tempfile.TemporaryFile("w+") as errors:
            proc = subprocess.Popen(worker_command + [str(start)], stdout=subprocess.PIPE, stderr=errors, text=True,
                                    env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
            current = None
            for line in proc.stdout:
                if not line.startswith(MARK):
                    continue
                message = json.loads(line[len(MARK):])
                if "begin" in message:
                    current = message["begin"]
                else:
                    verdicts[message.pop("index")] = message
                    current = None
            code = proc.wait()
            if code == 0 or current is None:
                if code != 0:
                    errors.seek(0)
                    raise RuntimeError(f"worker failed before its first entry:\n{errors.read()[-2000:]}")
                break
            errors.seek(0)
            last = [ln for ln in errors.read().splitlines() if ln.strip()][-1:] or [""]
            verdicts[current] = {"status": "crash", "note": f"process died ({_signal_name(code)}) {last[0][:80]}",
                                 "samples": 0}
            print(f"crash in {entries[current].path}: {_signal_name(code)}", file=sys.stderr)
            start = current + 1
    return verdicts


def _signal_name(code):
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            pass
    return f"exit code {code}"
