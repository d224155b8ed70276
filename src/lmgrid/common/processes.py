"""Child processes for a job's independent pieces: `lmgrid aggregate`'s studies (lmgrid.analysis.build) and
`lmgrid mlflow-sync`'s curves (lmgrid.tracking.curves)."""
from __future__ import annotations

import contextlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor


def spawned_pool(stack: contextlib.ExitStack, workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` child processes, shut down once, when `stack` closes, also after a failure: the tasks not
    started are cancelled, the running ones finish, and a task's error (an LmgridError) reaches the caller unchanged
    through `Future.result()`.  Children are spawned, as on macOS, not forked: each starts from a clean interpreter
    whatever the caller holds (threads, matplotlib's state), for the price of importing lmgrid again (about a
    second, in parallel)."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    stack.callback(pool.shutdown, wait=True, cancel_futures=True)
    return pool
