"""One writer at a time per MLflow sqlite store, across processes.

Within one Snakemake run the `mlflow_sync` job is the only writer, but two runs in one checkout (other corpora, so
other outputs: Snakemake's own lock does not stop them) share `results/mlflow.db`.  Two processes creating a fresh
store at once both run MLflow's schema migrations and one fails (`table _alembic_tmp_experiments already exists`);
sqlite's own locking covers single statements, not a migration or a sync as a whole.  So every lmgrid command that
writes a sqlite store holds an exclusive advisory lock (fcntl.flock) on `<db>.lock` beside the database for as
long as it writes, schema creation included; the others wait their turn.  An http(s) store takes no lock: the
server serialises its writers.  The lock goes with the open file, so the kernel releases it when the process ends,
however it ends.
"""
from __future__ import annotations

import fcntl
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from lmgrid.tracking.artifact_store import sqlite_path

LOCK_SUFFIX = ".lock"
# How long a writer waits quietly before it says which lock holds it up, and how often it tries meanwhile.
QUIET_WAIT_S = 1.0
POLL_S = 0.05


def lock_path(tracking_uri: str) -> Path | None:
    """The lock file of a sqlite tracking URI (`<db>.lock` beside the database), None for any other store."""
    db = sqlite_path(tracking_uri)
    return None if db is None else db.with_name(db.name + LOCK_SUFFIX)


@contextmanager
def writing(tracking_uri: str):
    """Hold the store's writer lock for the body (blocking until the other writer is done); yields the lock file's
    path, or None for a store that needs no lock."""
    path = lock_path(tracking_uri)
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        _acquire(fh, path)
        try:
            yield path
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _acquire(fh, path: Path) -> None:
    # Try without blocking for a moment, so a short wait stays silent; then say why we wait and block.
    deadline = time.monotonic() + QUIET_WAIT_S
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
    print(f"mlflow: waiting for {path} (another lmgrid process is writing this MLflow store)", file=sys.stderr,
          flush=True)
    fcntl.flock(fh, fcntl.LOCK_EX)
