"""What a job's own process used: its CPU time and peak resident memory, written into the run's metrics.json.

Why here and not Snakemake's `benchmark:` file: a training job forked from the warm server (lmgrid.orchestration.warm) is a
child of that server, not of the job's `lmgrid train` process, which only waits for it.  Snakemake measures the
job's process tree, so its benchmark file holds the thin client's figures (about 17 MiB and 0.06 s of CPU for an
LSTM that used 479 MiB and 26 s).  The training process measures itself instead, the same way with or without the
server (getrusage(RUSAGE_SELF)):

* `cpu_s`: user + system CPU seconds of this process.  A forked child starts from zero (POSIX fork), so under the
  warm server it leaves out the imports the server paid once for every job.
* `max_rss_mib`: the peak resident set of this process in MiB (Linux reports KiB).  A forked child's peak counts
  the pages it shares with the server (torch and Lightning, resident in the child too), so it is what the same job
  peaks at in a process of its own, to within what the server imported beyond the job's needs.

A resumed training run is several processes: its checkpoint carries the earlier attempts' figures (up to that
checkpoint), and metrics.json reports the sums and the highest peak (lmgrid.neural.callbacks.AttemptUsage).
"""
from __future__ import annotations

import resource
import sys


def own_usage() -> dict[str, float]:
    """This process's CPU seconds and peak RSS so far (call it last, just before writing metrics.json)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    rss_mib = usage.ru_maxrss / (2 ** 20 if sys.platform == "darwin" else 1024)
    return {"cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "max_rss_mib": round(rss_mib, 1)}
