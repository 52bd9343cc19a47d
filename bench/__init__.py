"""Mercato's benchmark harness (`python -m bench --help`); a tool, not a test."""
