"""The PTB presets: each runs only its own studies, and every study of every preset runs end to end on the CPU
(presets/smoke.yaml: training capped to a few steps; presets/smoke-paper.yaml: the GPU presets at tiny widths),
filling the reference table with the shape docs/contracts.md gives.  Needs the Penn Treebank (LMGRID_PTB_DIR)."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest
import yaml

from lmgrid.reference import COLUMNS, NOT_RUN
from lmgrid.runkey import all_runs

from test_workflow import planned_jobs, snakemake

PRESETS = ("seed_table", "course_report", "ptb-paper-medium", "ptb-paper-large")
SMOKE = {"seed_table": "smoke", "course_report": "smoke", "ptb-paper-medium": "smoke-paper",
         "ptb-paper-large": "smoke-paper"}


def _workdir(tmp_path, repo, ptb_dir, monkeypatch):
    shutil.copy(repo / "config.yaml", tmp_path / "config.yaml")  # the default studies that must not leak in
    monkeypatch.setenv("LMGRID_PTB_DIR", str(ptb_dir))  # read the local copy: no download
    return tmp_path


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_plans_only_its_own_studies(tmp_path, repo, ptb_dir, preset, monkeypatch):
    """Kills "config.yaml's studies merged into the preset" (no `replace:`): the default grid's cells would be
    planned too."""
    work = _workdir(tmp_path, repo, ptb_dir, monkeypatch)
    cfg = yaml.safe_load((repo / "presets" / f"{preset}.yaml").read_text())
    r = snakemake(work, repo, "-n", "--configfile", str(repo / "presets" / f"{preset}.yaml"))
    assert r.returncode == 0, r.stderr[-2000:]
    jobs = planned_jobs(r)
    runs = all_runs(cfg["studies"])
    assert jobs.get("train", 0) + jobs.get("train_gated", 0) == sum(not k.is_ngram for k in runs)
    assert jobs.get("ngram", 0) == sum(k.is_ngram for k in runs)
    assert "synth" not in jobs and (jobs.get("reference", 0) == 1) == bool(cfg.get("reference"))


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_study_of_a_preset_runs_end_to_end(tmp_path, repo, ptb_dir, preset, monkeypatch):
    work = _workdir(tmp_path, repo, ptb_dir, monkeypatch)
    cfg = yaml.safe_load((repo / "presets" / f"{preset}.yaml").read_text())
    smoke = yaml.safe_load((repo / "presets" / f"{SMOKE[preset]}.yaml").read_text())
    r = snakemake(work, repo, "--configfile", str(repo / "presets" / f"{preset}.yaml"),
                  str(repo / "presets" / f"{SMOKE[preset]}.yaml"), timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    corpus = work / "results" / smoke["corpus"]["name"]
    for name in cfg["studies"]:
        assert (corpus / "studies" / name / "table.csv").is_file()
        assert (corpus / "studies" / name / "findings.md").is_file()
    summary = pd.read_csv(corpus / "summary.csv")
    assert len(summary) == len(all_runs(cfg["studies"]))
    if cfg.get("reference"):
        ref = pd.read_csv(corpus / "reference.csv")
        assert list(ref.columns) == COLUMNS and len(ref) == len(cfg["reference"])
        for row, want in zip(ref.itertuples(), cfg["reference"]):
            assert row.model == want["model"] and row.published_test_ppl == want["published_test_ppl"]
            if want.get("runs"):
                assert row.ours != NOT_RUN and row.test_ppl_mean > 1 and row.seeds >= 1
                assert row.difference == pytest.approx(row.test_ppl_mean - row.published_test_ppl)
            else:
                assert row.ours == NOT_RUN and pd.isna(row.test_ppl_mean)
        for ext in ("md", "tex", "html"):
            assert (corpus / f"reference.{ext}").stat().st_size > 0
