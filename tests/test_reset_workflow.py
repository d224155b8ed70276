"""The reset pass in the workflow (workflow/rules/reset.smk): the shared tiny grid's stream cell gets its
reset_scores.json, and the summary its column test_ppl_reset."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lmgrid.run import reset_scores

pytestmark = pytest.mark.full  # reads the shared tiny grid, which a Snakemake run builds (tests/tiers.py)


def test_summary_has_the_reset_column_for_stream_cells(tiny_pipeline, tmp_path):
    """The grid's stream RNN has reset_scores.json (with its job's log and benchmark), counting the run's test
    tokens; summary.csv gives that row its test_ppl_reset and every window row none; summary.md names the column.
    Kills: the rule left out of the Snakefile or its file out of the summary's inputs (the negative control, run
    here: the same summary command without --reset, what the job runs without that input, leaves the stream row's
    column empty)."""
    res = tiny_pipeline / "results" / "tiny"
    run = res / "runs" / "rnn" / "torch" / "n0_l1_stream_s1"
    record = reset_scores.read(run / reset_scores.RESET_FILE)
    metrics = json.loads((run / "metrics.json").read_text())
    assert record["test_tokens"] == metrics["test"]["tokens"] and record["test_ppl"] == metrics["test"]["ppl"]
    assert (res / "logs" / "reset_scores" / "rnn" / "torch" / "n0_l1_stream_s1.log").is_file()
    assert (res / "benchmarks" / "reset_scores" / "rnn" / "torch" / "n0_l1_stream_s1.tsv").is_file()

    table = pd.read_csv(res / "summary.csv")
    stream = table[(table.arch == "rnn") & (table.regime == "stream")]
    assert stream.test_ppl_reset.iloc[0] == pytest.approx(record["test_ppl_reset"], rel=1e-4)
    assert table[table.regime == "window"].test_ppl_reset.isna().all()
    assert "Test PPL (reset)" in (res / "summary.md").read_text()

    metrics_files = sorted(str(p) for p in res.glob("runs/*/*/*/metrics.json"))
    out = tmp_path / "summary.csv"
    subprocess.run([str(Path(sys.executable).with_name("lmgrid")), "summary", "--corpus", "tiny", "--corpus-stats",
                    str(res / "corpus" / "corpus_stats.json"), "--vocab-report", str(res / "vocab_report.json"),
                    "--metrics", *metrics_files, "--csv", str(out), "--md", str(tmp_path / "summary.md")], check=True)
    without = pd.read_csv(out)
    assert math.isnan(without[(without.arch == "rnn") & (without.regime == "stream")].test_ppl_reset.iloc[0])
