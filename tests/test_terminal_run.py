"""`make run`'s terminal on a real run: Snakemake finds lmgrid's logger plugin (`--logger lmgrid`, the package
snakemake_logger_plugin_lmgrid) and a piped run shows one line per finished job, the run's own headline table and
the plugin's results table, and none of Snakemake's per-job chatter (tests/test_terminal.py checks the views on
synthetic records)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinygrid import TINY, write_config

REPO = Path(__file__).resolve().parents[1]
CHATTER = ("Select jobs to execute", "Finished jobid", "steps (", "Execute 1 jobs", "Job stats", "localrule ")


@pytest.mark.full
def test_piped_run_shows_one_line_per_job(tmp_path):
    """The tiny n-gram grid (12 jobs) piped: exactly one '[k/N]' line per job, k = 1..N, each n-gram cell's with its
    result line, a results row per cell, and no line of Snakemake's default log.  Kills: the plugin not found or not
    used (Snakemake's default handler prints its chatter), and a job line lost or printed twice."""
    write_config(tmp_path, TINY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"),
                        "-d", str(tmp_path), "--cores", "2", "--logger", "lmgrid"],
                       capture_output=True, text=True, timeout=900, env=env)
    out = (r.stdout + r.stderr).splitlines()
    (tmp_path / "terminal.txt").write_text("\n".join(out))
    assert r.returncode == 0, "\n".join(out[-60:])
    jobs = [line for line in out if re.match(r"\[\d+/\d+\] ", line)]
    total = int(jobs[0].split("/")[1].split("]")[0])
    assert [int(line[1:].split("/")[0]) for line in jobs] == list(range(1, total + 1)), jobs
    ngram = [line for line in jobs if "mkn order" in line]
    assert len(ngram) == 2 and all("valid PPL" in line and "test PPL" in line for line in ngram), ngram
    assert sorted(line.split()[1] for line in out if line.startswith("mkn n")) == ["n2", "n3"]  # the table's rows
    assert not [line for line in out if any(c in line for c in CHATTER)], out
    # what else a pipe shows: the profile note, the headline table and report lines, the summary and the table
    assert len(out) <= total + 20, out
