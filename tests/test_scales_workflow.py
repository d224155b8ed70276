"""Scales end to end on a tiny synthetic corpus: one scale run as `make run` runs it (its own Snakemake run under corpus
tiny-big), then the config's own run, whose rule `scales` (workflow/rules/scales.smk) reads the scale's
gates_effect.csv.  The scale's files are outputs of the config's own rules too (corpus=tiny-big), so the config's run
must read them, not rebuild them under its own settings."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmgrid.orchestration.scales import run_scales

from tinygrid import TINY, planned_jobs, snakemake, write_config

# A gate study: a gated architecture at two window lengths writes gates_effect.csv (analysis.layout.study_plan).
MAIN = {**TINY, "studies": {"gates": {"arch": ["gru"], "n_step": [2, 3]}},
        "train": {"epochs": 1, "emb_dim": 8, "hidden_dim": 8, "batch_size": 64, "max_train_tokens": 1500,
                  "log_every": 0},
        "scales": {"big": "big.yaml"}}
# The scale differs from the config in a setting its own rules read (the training cut), as presets/course_report.yaml's
# scale `full` does.
BIG = {"train": {"max_train_tokens": 3000}}


def _stamps(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.mark.full
def test_the_configs_run_reads_the_scales_results_and_rewrites_none(tmp_path, repo, monkeypatch, new_store):
    """After the scale's run, the config's run writes the comparison with both scales' rows and rewrites no file
    under results/tiny-big/; a dry run after it plans nothing; a rerun scale (its gates_effect.csv newer) reruns
    `scales` and nothing of the scale.  Kills: the scales' gates_effect.csv declared as inputs of rule `scales` (the
    config's run rebuilt tiny-big's corpus, vocabulary, oracle and study tables under the config's settings: seen
    failing with the old rule), and the params stamp dropped (a rerun scale leaves the comparison stale: seen failing
    with `scales_stamp` removed)."""
    monkeypatch.chdir(tmp_path)
    new_store(tmp_path / "results" / "mlflow.db")  # migrated once a session (conftest.py), not by this run's sync
    monkeypatch.setenv("LMGRID_REPORT", "0")  # the HTML report is no part of this question
    write_config(tmp_path, MAIN)
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(BIG, sort_keys=False))
    smk = [str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d", str(tmp_path),
           "--cores", "2"]
    assert run_scales(smk) == 0
    scale_files = _stamps(tmp_path / "results" / "tiny-big")
    scale_table = tmp_path / "results" / "tiny-big" / "studies" / "gates" / "gates_effect.csv"
    assert scale_table in scale_files

    r = snakemake(tmp_path, repo)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    rewritten = sorted(str(p.relative_to(tmp_path)) for p, t in scale_files.items() if p.stat().st_mtime_ns != t)
    assert rewritten == [], f"the config's run rewrote the scale's files: {rewritten[:5]}"
    assert "tiny-big:" not in r.stdout + r.stderr  # no job of the scale's corpus (messages start with the corpus)
    compared = pd.read_csv(tmp_path / "results" / "tiny" / "scales" / "gates.csv")
    assert set(compared["scale"]) == {"tiny", "tiny-big"}

    dry = snakemake(tmp_path, repo, "-n")
    assert dry.returncode == 0 and planned_jobs(dry) == {}, (dry.stdout + dry.stderr)[-3000:]

    # A scale that ran again: its table is newer; the comparison reruns, the scale's files are still only read.
    t = scale_table.stat().st_mtime_ns + 10**9
    os.utime(scale_table, ns=(t, t))
    dry = snakemake(tmp_path, repo, "-n")
    assert dry.returncode == 0 and planned_jobs(dry).get("scales") == 1, (dry.stdout + dry.stderr)[-3000:]
    assert "tiny-big:" not in dry.stdout + dry.stderr
