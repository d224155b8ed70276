"""The MLflow settings a training job needs: the config's mlflow section checked, and the live logger's arguments
(config mlflow.live), with the tags that name the grid cell.  Here, below the training code, because a training
job reads them; lmgrid.tracking (the mirror after training) imports the trained models and must not be imported by
them."""
from __future__ import annotations

from lmgrid.common.errors import LmgridError
from lmgrid.run.key import RunKey


def check_mlflow(mlflow: dict, source: str = "config") -> None:
    """The mlflow config section beyond the schema: live logging needs a server, never the sqlite file."""
    uri = mlflow.get("tracking_uri", "sqlite:///results/mlflow.db")
    if not uri.startswith(("sqlite:///", "http://", "https://")):
        raise LmgridError(f"{source}: mlflow.tracking_uri: expected sqlite:///<path> or http(s)://, got {uri!r}")
    if mlflow.get("live") and uri.startswith("sqlite:"):
        raise LmgridError(f"{source}: mlflow.live: needs an http(s):// tracking_uri; training jobs must not write "
                          f"the sqlite file {uri!r} (parallel writers get 'database is locked')")


def live_logger_kwargs(mlflow: dict, corpus: str, key: RunKey | None = None) -> dict | None:
    """Arguments for Lightning's MLFlowLogger in a training job when `mlflow.live` is on, else None
    (without `key`: the part shared by every job, which RunSpec.build completes with the run's name and tags).

    Live runs go to their own experiment (`<corpus>-live`): the aggregation's experiment keeps exactly one
    run per grid cell.  The tracking URI is always explicit (MLFlowLogger would default to ./mlruns).
    """
    if not mlflow.get("live"):
        return None
    check_mlflow(mlflow)
    kwargs = {"tracking_uri": mlflow["tracking_uri"],
              "experiment_name": f"{mlflow.get('experiment_prefix', '')}{corpus}-live"}
    if key is not None:
        kwargs.update(live_run_tags(key.name, key.run_dir(corpus)))
    return kwargs


def live_run_tags(name: str, run_dir: str) -> dict:
    return {"run_name": name, "tags": {"lmgrid.run_key": run_dir, "lmgrid.kind": "live"}}
