"""`lmgrid budget-compare` and the equal-compute study's output names (lmgrid.analysis.budget does the work).

Apart from lmgrid.analysis.budget because that module imports pandas and scipy.stats (about 2 CPU-seconds), and
both this command's registration (every `lmgrid` process builds the whole parser: lmgrid.cli, PLUGINS) and
workflow/rules/budget.smk (the Snakemake process) need only these few names.
"""
from __future__ import annotations

from lmgrid.common.errors import LmgridError

BUDGET_DIR = "results/{corpus}/budget"
OUTPUTS = ("compute.csv", "compute.md", "compute.html", "ppl_vs_compute.pdf", "ppl_vs_compute.png", "findings.md")


def budget_label(scale: str) -> str:
    """The budget a scale belongs to: its label up to its last '_' (`b1x_w100` -> `b1x`: one scale per budget and
    width), or the whole label (`b1x`: one width per budget)."""
    return scale.rsplit("_", 1)[0] if "_" in scale else scale


def cmd_compare(a) -> None:
    from lmgrid.analysis.budget import compute_table, references, run_rows, write

    runs = [tuple(r) for r in a.run]
    if not runs:
        raise LmgridError("budget-compare: no --run given (a budget study's scales have no neural runs)")
    write(compute_table(run_rows(runs)), references(a.reference), a.out_dir)


def register(sub) -> None:
    s = sub.add_parser("budget-compare", help="the equal-compute study: test PPL per architecture and FLOP budget")
    s.add_argument("--run", nargs=2, action="append", default=[], metavar=("BUDGET", "METRICS"),
                   help="a neural run's metrics.json at a budget (a scale's label; repeat)")
    s.add_argument("--reference", action="append", default=[], metavar="METRICS",
                   help="an n-gram run's metrics.json, drawn as a horizontal line (repeat)")
    s.add_argument("--out-dir", required=True, help="writes compute.{csv,md,html}, ppl_vs_compute.{pdf,png}, "
                   "findings.md")
    s.set_defaults(func=cmd_compare)
