"""`make run`'s last step: Snakemake's report of the finished run, then lmgrid's results page and its PDF
(lmgrid.analysis.report), the wall time recorded as a Snakemake benchmark file.

`python -m lmgrid.orchestration.report_run <snakemake command ... --report results/report_workflow.html>`: the
config of the page (corpus name and studies) is the one the command's `--configfile` and `--config set=...` give,
resolved as Snakemake resolves it (lmgrid.orchestration.config), which is why this step lives here and not in
lmgrid.analysis (a floor below the config).
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from lmgrid.analysis.report import PDF, REPORT, record_s, write_results
from lmgrid.orchestration.config import load_config


def config_of(command: list[str]) -> dict:
    """The config of a `snakemake ... [--configfile F] [--config set=...]` command (`make run`'s SMKCFG)."""
    files = [command[i + 1] for i, a in enumerate(command[:-1]) if a == "--configfile"]
    sets = [a[len("set="):] for i, a in enumerate(command) if a.startswith("set=") and command[i - 1] == "--config"]
    return load_config(files, sets[0] if sets else "")


def timed(command: list[str]) -> int:
    """Run the report command, then write the results page and the PDF, recording the wall time when it succeeds.
    Snakemake's output (a line per embedded file) is shown only when it fails; on success one line says where the
    report is."""
    started = time.time()
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        return r.returncode
    for note in write_results(Path("."), config_of(command)):
        print(f"lmgrid: {note}", file=sys.stderr)
    record_s(time.time() - started)
    pdf = f" (one page: {PDF})" if Path(PDF).is_file() else ""
    print(f"lmgrid: report {REPORT}{pdf}: open {Path(REPORT).resolve().as_uri()} in a browser", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(timed(sys.argv[1:]))
