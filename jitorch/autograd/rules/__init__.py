"""Derivative rules, one module per family of ops."""
