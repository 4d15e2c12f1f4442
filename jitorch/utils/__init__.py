"""Utilities shared across jitorch (pytrees)."""
