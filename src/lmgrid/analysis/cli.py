"""`lmgrid aggregate`: the tables and figures of every study (`lmgrid mlflow-sync` is lmgrid.tracking.cli), and
`lmgrid docs` (lmgrid.analysis.docs_render).

It takes the studies as JSON on the command line, as Snakemake passes them from the validated config,
so a job depends on nothing but its arguments.
"""
from __future__ import annotations

import json
import sys

from lmgrid.common.errors import LmgridError


def _studies(text: str) -> dict:
    try:
        studies = json.loads(text)
    except json.JSONDecodeError as e:
        raise LmgridError(f"--studies: not valid JSON ({e})") from None
    if not isinstance(studies, dict) or not studies:
        raise LmgridError("--studies: expected a JSON object of study name -> grid")
    for name, study in studies.items():
        if not isinstance(study, dict) or "arch" not in study or "n_step" not in study:
            raise LmgridError(f"--studies: studies.{name}: needs at least 'arch' and 'n_step'")
    return studies


def cmd_aggregate(a) -> None:
    from lmgrid.analysis.build import build_all

    if a.jobs < 1:
        raise LmgridError(f"--jobs: expected at least 1, got {a.jobs}")
    files = build_all(a.corpus, _studies(a.studies), a.oracle, a.root, jobs=a.jobs)
    print(f"wrote {len(files)} files", file=sys.stderr)


def register(sub) -> None:
    s = sub.add_parser("aggregate", help="per-study tables (CSV, Markdown, LaTeX, HTML) and figures (PDF, PNG)")
    s.add_argument("--corpus", required=True, help="corpus name: runs are read from results/<corpus>/runs")
    s.add_argument("--studies", required=True, help="JSON object: study name -> grid (the config's studies)")
    s.add_argument("--oracle", help="oracle.json of the synthetic corpus (adds the oracle line and row)")
    s.add_argument("--root", default=".", help="folder holding results/ (default: current folder)")
    s.add_argument("--jobs", type=int, default=1, help="studies built at once, one process each (default: 1)")
    s.set_defaults(func=cmd_aggregate)

    from lmgrid.analysis.docs_render import register as register_docs  # `lmgrid docs`: README and docs/ tables

    register_docs(sub)
