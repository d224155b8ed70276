"""The git commit a checkout is at, as every record of where a figure came from names it: a docs snapshot's
run.json (lmgrid.analysis.docs_snapshot), an MLflow run's tags (lmgrid.tracking.mirror), the screenshots' sidecars
(lmgrid.orchestration.screenshots), a benchmark's header (lmgrid.bench.steps), the GPU check (tools/gpu_check.py)
and a fresh clone's timed quick start (tools/first_run.py).

One function, so that they all mean the same by "the commit" and by "dirty": uncommitted changes to tracked files
(untracked files, such as results/, are not a change to the code that ran).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

UNKNOWN = "unknown"


def commit(where: Path | str = ".", short: int | None = 10) -> dict:
    """{"commit": HEAD's hash (its first `short` hex digits; all 40 when short is None), or UNKNOWN where `where` is
    not in a git checkout or git is missing; "dirty": whether tracked files there have uncommitted changes}."""
    def git(*args: str) -> str:
        try:
            r = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True)
        except OSError:  # no git on this machine
            return ""
        return r.stdout.strip() if r.returncode == 0 else ""

    head = git("rev-parse", *([f"--short={short}"] if short else []), "HEAD")
    return {"commit": head or UNKNOWN,
            "dirty": bool(head) and bool(git("status", "--porcelain", "--untracked-files=no"))}
