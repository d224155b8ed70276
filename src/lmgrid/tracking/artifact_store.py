"""Where MLflow artifacts go, so that moving results/ (or syncing to a remote server) breaks no artifact URI.

MLflow stores each experiment's artifact location in the tracking store as an absolute URI: a relative path
given to `create_experiment` is resolved against the current directory at creation (MLflow PR #7670), so a
sqlite store with file:// locations breaks when its folder moves.  The one location-independent form MLflow
has is the server-managed `mlflow-artifacts:/<path>`: a tracking server maps it under its
`--artifacts-destination`.  lmgrid therefore creates experiments as

* `mlflow-artifacts:/<experiment>` with a sqlite store.  A server (`mlflow ui --backend-store-uri
  sqlite:///results/mlflow.db --artifacts-destination results/mlartifacts`, `make mlflow`) serves them as is;
  without a server, `repository` maps them to `mlartifacts/<path>` beside the database file, wherever that file now
  is.  MLflow finds it through lmgrid's entry point `mlflow.artifact_repository` (pyproject.toml) wherever lmgrid
  is installed, so plain `mlflow.pyfunc.load_model("runs:/...")` works with the sqlite URI; `install()` registers it
  by hand (the sync does, so that it works from a source checkout too);
* the server's default with an http(s) tracking URI (the server decides, normally `mlflow-artifacts:/`).

Experiments created before this keep their stored (absolute) location.
"""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

SCHEME = "mlflow-artifacts"
LOCAL_ROOT = "mlartifacts"  # beside the sqlite database
SQLITE = "sqlite:///"


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a sqlite tracking URI (as MLflow resolves it: relative to the current folder unless
    absolute; sqlite URIs may carry ?timeout=... options), None for any other store."""
    if not tracking_uri.startswith(SQLITE):
        return None
    return Path(tracking_uri[len(SQLITE):].split("?", 1)[0])


def experiment_location(tracking_uri: str, experiment: str) -> str | None:
    """The artifact location to create an experiment with (None: the tracking server's default)."""
    return f"{SCHEME}:/{experiment}" if tracking_uri.startswith(SQLITE) else None


def local_root(tracking_uri: str) -> Path:
    """The folder `mlflow-artifacts:/` stands for with a sqlite store: mlartifacts/ beside the database."""
    return sqlite_path(tracking_uri).resolve().parent / LOCAL_ROOT


def repository(artifact_uri: str, tracking_uri: str | None = None, registry_uri: str | None = None):
    """MLflow artifact-repository factory for `mlflow-artifacts:` URIs: local files under a sqlite store's
    mlartifacts/, else MLflow's own (proxied through the tracking server)."""
    import mlflow
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository
    from mlflow.store.artifact.mlflow_artifacts_repo import MlflowArtifactsRepository

    uri = tracking_uri or mlflow.get_tracking_uri()
    if uri.startswith(SQLITE) and not urlparse(artifact_uri).netloc:
        path = (local_root(uri) / urlparse(artifact_uri).path.lstrip("/")).as_uri()
        return LocalArtifactRepository(path, tracking_uri=uri, registry_uri=registry_uri)
    return MlflowArtifactsRepository(artifact_uri, tracking_uri=tracking_uri, registry_uri=registry_uri)


def install() -> None:
    """Make `mlflow-artifacts:` URIs resolve with a sqlite tracking URI too (idempotent)."""
    from mlflow.store.artifact.artifact_repository_registry import _artifact_repository_registry

    _artifact_repository_registry.register(SCHEME, repository)
