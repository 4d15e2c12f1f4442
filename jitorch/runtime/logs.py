"""Stage logs, switched on by ``JITORCH_LOGS`` (comma-separated stages, or ``all``).

    JITORCH_LOGS=graph,guards,recompiles python train.py

Each stage logs through Python's `logging` under ``jitorch.<stage>``; when the
variable names a stage, jitorch gives the ``jitorch`` logger a stderr handler
and sets the stage's logger to INFO. Stages: graph (each traced graph),
guards (the guards of each cache entry), recompiles (why a call retraced or
ran eagerly); later layers add their own (passes, fusion, codegen).
"""

from __future__ import annotations

import logging
import os

STAGES = ("graph", "guards", "recompiles", "passes", "fusion", "codegen")
_enabled: set = set()


def set_logs(spec):
    """Enable the stages in ``spec`` ("graph,guards", "all", or "" for none)."""
    names = {s.strip() for s in (spec or "").split(",") if s.strip()}
    if "all" in names:
        names = set(STAGES)
    _enabled.clear()
    _enabled.update(names)
    root = logging.getLogger("jitorch")
    if names and not any(getattr(h, "_jitorch", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[jitorch.%(name)s] %(message)s".replace("%(name)s", "%(stage)s")))
        handler.addFilter(_stage_filter)
        handler._jitorch = True
        root.addHandler(handler)
    for stage in STAGES:
        logging.getLogger(f"jitorch.{stage}").setLevel(logging.INFO if stage in names else logging.WARNING)


def _stage_filter(record):
    record.stage = record.name.removeprefix("jitorch.")
    return True


def enabled(stage):
    return stage in _enabled


def log(stage, message, *args):
    """Log ``message % args`` under ``jitorch.<stage>`` (formatted only when the stage is on)."""
    logger = logging.getLogger(f"jitorch.{stage}")
    if logger.isEnabledFor(logging.INFO):
        logger.info(message, *args)


set_logs(os.environ.get("JITORCH_LOGS", ""))
