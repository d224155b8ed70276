"""A process pool that counts its use, for the tests of jobs that hand work to child processes (`lmgrid aggregate
--jobs`, `lmgrid mlflow-sync --jobs`): a test patches it over the ProcessPoolExecutor of lmgrid.common.processes,
which makes both jobs' pools."""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor


class CountingPool(ProcessPoolExecutor):
    """The real pool, counting how many were made, with how many workers, and the tasks given to them."""
    made: list = []

    def __init__(self, workers, **kw):
        super().__init__(workers, **kw)
        self.made.append({"workers": workers, "tasks": 0})

    def submit(self, *args, **kw):
        self.made[-1]["tasks"] += 1
        return super().submit(*args, **kw)


def one_pool(workers: int, tasks: int) -> None:
    """Assert that exactly one pool was made since `CountingPool.made` was last emptied, of `workers` processes,
    and given `tasks` tasks."""
    assert CountingPool.made == [{"workers": workers, "tasks": tasks}], CountingPool.made
