"""The training curve of each cell a sync re-mirrors (curve.png, lmgrid.analysis.plots.run_curve), drawn ahead in
a child process while the sync writes the cells before it into MLflow.

Why: `mlflow_sync` is the store's one writer and the last job of a run, so on a two-core machine the second core
idles through it.  A curve is matplotlib work that needs no store (about 0.1 s a cell, a sixth of the job), so with
`jobs` > 1 it moves to `jobs - 1` child processes (lmgrid.common.processes.spawned_pool), and the sync only copies
the finished file.  With `jobs` = 1 each curve is drawn here, when its cell is written.  The PNG is the same bytes
either way (`plots.save` writes no timestamps).
"""
from __future__ import annotations

import contextlib
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from lmgrid.common.processes import spawned_pool


def draw(log_csv: str, stem: str, title: str) -> str:
    """One curve from a run's log.csv: `stem`.png, its path.  Top-level, so a child process can run it."""
    from lmgrid.analysis.collect import read_log
    from lmgrid.analysis.plots import run_curve

    return run_curve(read_log(Path(log_csv)), stem, title)[0]


class CurveDrawer:
    """Curves by cell tag, drawn into `folder` (which the caller removes): `ahead` queues one in a child process,
    `path` returns it, waiting for the child's or drawing it now."""

    def __init__(self, folder: Path, jobs: int = 1):
        self.folder = Path(folder)
        self.jobs = jobs
        self.pending: dict[str, Future] = {}
        self._drawn = 0  # curves asked for: each gets its own folder
        self._pool: ProcessPoolExecutor | None = None
        self._closing = contextlib.ExitStack()

    def _stem(self) -> str:
        # a folder per curve, so each keeps the file name curve.png that the run's artifacts list
        self._drawn += 1
        folder = self.folder / f"curve{self._drawn}"
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder / "curve")

    def ahead(self, tag: str, log_csv: Path, title: str) -> None:
        """Start drawing a cell's curve in a child (nothing with jobs = 1; the child pool starts on the first)."""
        if self.jobs < 2 or tag in self.pending:
            return
        if self._pool is None:
            self._pool = spawned_pool(self._closing, self.jobs - 1)  # stopped by close(), also after a failure
        self.pending[tag] = self._pool.submit(draw, str(log_csv), self._stem(), title)

    def path(self, tag: str, log_csv: Path, title: str) -> Path:
        """The cell's curve.png: the child's when one was started (its error, an LmgridError, raised here), else drawn
        in this process now."""
        future = self.pending.pop(tag, None)
        if future is not None:
            return Path(future.result())
        return Path(draw(str(log_csv), self._stem(), title))

    def close(self) -> None:
        self._closing.close()
        self._pool = None
