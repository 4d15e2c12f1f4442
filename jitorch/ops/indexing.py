"""Indexing: ``__getitem__``/``__setitem__`` and the index ops (gather, scatter, ...)."""

from __future__ import annotations
