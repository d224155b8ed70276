"""The worked examples (examples/ngram_mlp.py, examples/min_gru.py) through the whole workflow: the shared tiny grid
(tests/tinygrid.py) with one `--config set=` line that adds a study of both, as a user would add them."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tinygrid import copy_grid, snakemake

pytestmark = pytest.mark.full

# The one line: a study of both examples, named by file and class relative to the folder Snakemake runs in
ADD_EXAMPLES = "set=studies.examples={arch: [examples/ngram_mlp.py:NGramMLP, examples/min_gru.py:MinGRU], n_step: [3]}"
CELLS = {"ngram_mlp": "results/tiny/runs/ngram_mlp/plugin/n3_l1_window_s1",
         "min_gru": "results/tiny/runs/min_gru/plugin/n3_l1_window_s1"}
DISPLAY = {"ngram_mlp": "n-gram MLP", "min_gru": "minGRU"}


@pytest.fixture(scope="module")
def examples_grid(tiny_pipeline, tmp_path_factory, repo) -> Path:
    """A copy of the finished tiny grid, the examples/ folder beside its config, and the study added: only the two
    new cells train (and what reads every cell, summary and tables, runs again)."""
    work = copy_grid(tiny_pipeline, tmp_path_factory.mktemp("examples") / "grid")
    shutil.copytree(repo / "examples", work / "examples")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMGRID_REPORT", "0")  # the report is test_report's; here the results
        r = snakemake(work, repo, "--config", ADD_EXAMPLES)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return work


def test_both_examples_get_a_summary_row_and_a_study_table(examples_grid):
    """Kills: an example missing from the summary or the study's table (its reference not resolved, its cell not
    planned, its display name not used: run with NGramMLP's lmgrid_display changed to "ngram_mlp", failed)."""
    summary = pd.read_csv(examples_grid / "results/tiny/summary.csv")
    for name in CELLS:
        row = summary[summary["arch"] == name]
        assert len(row) == 1 and row["impl"].item() == "plugin", summary[["arch", "impl"]]
        assert 1 < row["test_ppl"].item() < float("inf")
    summary_md = (examples_grid / "results/tiny/summary.md").read_text()
    table = (examples_grid / "results/tiny/studies/examples/table.md").read_text()
    for display in DISPLAY.values():
        assert f"| {display} " in summary_md and display in table, display


def test_min_grus_gate_z_is_measured_and_the_n_gram_mlp_has_no_gates(examples_grid):
    """Kills: MinGRU's z not measured (its lmgrid_gates not read: no gates.csv), a gate outside [0, 1], gates
    written for a model that declares none.  Run with MinGRU's lmgrid_gates = (): no gates.csv, failed."""
    gates = pd.read_csv(examples_grid / CELLS["min_gru"] / "gates.csv")
    assert set(gates["gate"]) == {"z"} and gates["mean"].between(0, 1).all()
    assert not (examples_grid / CELLS["ngram_mlp"] / "gates.csv").exists()
