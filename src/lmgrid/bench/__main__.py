"""python -m lmgrid.bench <name> [args...]: run one benchmark and print its figures."""
import importlib
import sys

# name -> module with main(argv) -> int
BENCHMARKS = {
    "ngram": "lmgrid.bench.ngram",
    "lstm": "lmgrid.bench.lstm",
    "cells": "lmgrid.bench.cells",
    "startup": "lmgrid.bench.startup",
    "archs": "lmgrid.bench.archs",
    "vs-plain": "lmgrid.bench.vs_plain",
    "cores": "lmgrid.bench.cores",
    "allocator": "lmgrid.bench.allocator",
    "eta": "lmgrid.bench.eta",
    "flops": "lmgrid.bench.flops",
    "steps": "lmgrid.bench.steps",
}

if len(sys.argv) < 2 or sys.argv[1] not in BENCHMARKS:
    print(f"usage: python -m lmgrid.bench {{{','.join(BENCHMARKS)}}} [args...]", file=sys.stderr)
    sys.exit(2)
sys.exit(importlib.import_module(BENCHMARKS[sys.argv[1]]).main(sys.argv[2:]))
