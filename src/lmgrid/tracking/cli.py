"""`lmgrid mlflow-sync`: every run and study of the results folder into MLflow (lmgrid.tracking.mirror).

Like `lmgrid aggregate` it takes the studies as JSON on the command line, as Snakemake passes them from the
validated config, so a job depends on nothing but its arguments.
"""
from __future__ import annotations

import json
import sys

from lmgrid.analysis.cli import _studies
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import write_json


def cmd_sync(a) -> None:
    from lmgrid.tracking.mirror import sync

    try:
        data_settings = json.loads(a.data_settings)
    except json.JSONDecodeError as e:
        raise LmgridError(f"--data-settings: not valid JSON ({e})") from None
    if a.jobs < 1:
        raise LmgridError(f"--jobs: expected at least 1, got {a.jobs}")
    result = sync(a.tracking_uri, a.corpus, _studies(a.studies), a.root, a.experiment_prefix, data_settings,
                  a.register_models, a.combinations, jobs=a.jobs, cells_only=a.cells_only)
    print(f"mlflow: experiment {result['experiment']!r} at {a.tracking_uri}: {result['created']} created, "
          f"{result['replaced']} replaced, {result['unchanged']} unchanged", file=sys.stderr)
    if a.out:
        write_json(a.out, result)


def register(sub) -> None:
    s = sub.add_parser("mlflow-sync", help="mirror every run and study into MLflow (idempotent)")
    s.add_argument("--corpus", required=True, help="corpus name: the experiment's name, runs from results/<corpus>")
    s.add_argument("--studies", required=True, help="JSON object: study name -> grid (the config's studies)")
    s.add_argument("--tracking-uri", required=True, help="sqlite:///results/mlflow.db or http(s)://host:port")
    s.add_argument("--experiment-prefix", default="", help="put before the corpus name in the experiment's name")
    s.add_argument("--root", default=".", help="folder holding results/ (default: current folder)")
    s.add_argument("--out", help="write a JSON record of the sync (counts and run ids) here")
    s.add_argument("--data-settings", default="{}", help="JSON: the config's corpus and vocab sections (run params)")
    s.add_argument("--register-models", action="store_true", help="also register each run's model (a version)")
    s.add_argument("--combinations", nargs="*", default=[], help="the combinations' result.json files (a run each)")
    s.add_argument("--jobs", type=int, default=1,
                   help="processes: this one, the store's writer, and JOBS-1 drawing the runs' curves (default: 1)")
    s.add_argument("--cells-only", action="store_true",
                   help="only the cells' runs, no study or combination (the workflow's mlflow_cells job, which then "
                        "runs beside the aggregation)")
    s.set_defaults(func=cmd_sync)
