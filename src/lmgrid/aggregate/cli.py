"""`lmgrid aggregate` (tables and figures of every study) and `lmgrid mlflow-sync` (runs and studies into MLflow).

Both take the studies as JSON on the command line, as Snakemake passes them from the validated config,
so a job depends on nothing but its arguments.
"""
from __future__ import annotations

import json
import sys

from ..errors import LmgridError
from ..fileio import write_json


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
    from .build import build_all

    files = build_all(a.corpus, _studies(a.studies), a.oracle, a.root)
    print(f"wrote {len(files)} files", file=sys.stderr)


def cmd_sync(a) -> None:
    from .tracking import sync

    try:
        data_settings = json.loads(a.data_settings)
    except json.JSONDecodeError as e:
        raise LmgridError(f"--data-settings: not valid JSON ({e})") from None
    result = sync(a.tracking_uri, a.corpus, _studies(a.studies), a.root, a.experiment_prefix, data_settings,
                  a.register_models, a.combinations)
    print(f"mlflow: experiment {result['experiment']!r} at {a.tracking_uri}: {result['created']} created, "
          f"{result['replaced']} replaced, {result['unchanged']} unchanged", file=sys.stderr)
    if a.out:
        write_json(a.out, result)


def register(sub) -> None:
    s = sub.add_parser("aggregate", help="per-study tables (CSV, Markdown, LaTeX, HTML) and figures (PDF, PNG)")
    s.add_argument("--corpus", required=True, help="corpus name: runs are read from results/<corpus>/runs")
    s.add_argument("--studies", required=True, help="JSON object: study name -> grid (the config's studies)")
    s.add_argument("--oracle", help="oracle.json of the synthetic corpus (adds the oracle line and row)")
    s.add_argument("--root", default=".", help="folder holding results/ (default: current folder)")
    s.set_defaults(func=cmd_aggregate)

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
    s.set_defaults(func=cmd_sync)
