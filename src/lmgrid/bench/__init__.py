"""Benchmarks: `python -m lmgrid.bench <name>` prints measured figures (never asserted in tests)."""
