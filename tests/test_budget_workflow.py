"""The equal-compute study end to end on a tiny synthetic corpus: a config with two budgets, one at two widths (one
scale per budget and width, b1_w8, b1_w12, b4_w8, each its own Snakemake run, as `make run` runs them; the shape of
presets/ptb_budget.yaml), two architectures and two seeds each, and the main run's rule `budget`."""
from __future__ import annotations

import os

import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmgrid.orchestration.scales import run_scales

from tinygrid import TINY, snakemake, write_config

BUDGETS = {"b1": 2.0e7, "b4": 8.0e7}  # FLOPs: about 1 and 4 epochs of the 1,500-token prefix (at width 8)
# train.hidden_dim and emb_dim of each budget's scales: b1 at two widths, chosen on valid, b4 at one (its only width
# chosen): three Snakemake runs, not four, for the test's time
WIDTHS = {"b1": (8, 12), "b4": (8,)}
SCALE = {"replace": ["studies", "train"],
         "studies": {"neural": {"arch": ["ffnn", "rnn"], "n_step": [3], "seed": [1, 2]}},
         "train": {"epochs": 12, "emb_dim": 8, "hidden_dim": 8, "batch_size": 64, "max_train_tokens": 1500,
                   "log_every": 0, "lr": 0.01}}


@pytest.mark.full
def test_budget_and_width_scales_give_one_row_per_architecture_budget_and_width_over_the_seeds(
        tmp_path, repo, monkeypatch, new_store):
    """compute.csv: one row per architecture x budget x width, each over 2 seeds with its t interval, the FLOPs the
    runs spent near the budget and growing with it; per budget and architecture one width chosen, the one with the
    lower mean valid PPL; the n-gram reference row; the figure and the findings written.  Kills: seeds pooled into
    one point (rows with seeds 1), an architecture, a budget or a width missing (fewer than 6 neural rows), a run's
    FLOP budget not the scale's, the scales' runs retrained by the config's own run, the width chosen on anything but valid, each width scale read as a budget of its
    own (budget.smk passing the scale label b1_w8, not its budget b1: 3 "budgets", every row chosen).  Seen failing
    with budget.smk's BUDGET_RUNS cut to the first architecture of each scale, and with the scale label as budget."""
    monkeypatch.chdir(tmp_path)
    new_store(tmp_path / "results" / "mlflow.db")  # migrated once a session (conftest.py), not by this run's sync
    scales = {f"{label}_w{w}": f"{label}_w{w}.yaml" for label in BUDGETS for w in WIDTHS[label]}
    write_config(tmp_path, {**TINY, "studies": {"ref": {"arch": ["mkn"], "n_step": [2]}}, "scales": scales})
    for label, flops in BUDGETS.items():
        for w in WIDTHS[label]:
            (tmp_path / f"{label}_w{w}.yaml").write_text(yaml.safe_dump(
                {**SCALE, "train": {**SCALE["train"], "budget_flops": flops, "hidden_dim": w, "emb_dim": w}},
                sort_keys=False))
    smk = [str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d", str(tmp_path),
           "--cores", "2"]
    assert run_scales(smk) == 0
    trained = {p: p.stat().st_mtime_ns for p in (tmp_path / "results").glob("tiny-*/runs/**/metrics.json")}
    r = snakemake(tmp_path, repo)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert trained and {p: p.stat().st_mtime_ns for p in trained} == trained  # the scales' runs read, not retrained

    out = tmp_path / "results" / "tiny" / "budget"
    table = pd.read_csv(out / "compute.csv")
    neural = table[table["kind"] == "neural"]
    assert sorted(zip(neural["budget"], neural["model"], neural["width"])) == sorted(
        (b, a, w) for b in BUDGETS for a in ("ffnn", "rnn") for w in WIDTHS[b])
    assert (neural["seeds"] == 2).all() and neural["test_ppl_ci_low"].notna().all()
    assert (neural["test_ppl_ci_low"] <= neural["test_ppl_mean"]).all()
    for row in neural.itertuples():
        assert row.budget_flops == BUDGETS[row.budget]
        assert BUDGETS[row.budget] <= row.train_flops_mean < 1.2 * BUDGETS[row.budget]  # to within a batch
    picked = neural[neural["chosen"].astype(bool)]
    best = neural.loc[neural.groupby(["budget", "model"])["valid_ppl_mean"].idxmin()]
    assert len(picked) == len(BUDGETS) * 2 and sorted(picked.index) == sorted(best.index)
    assert (table["kind"] == "ngram").sum() == 1
    for name in ("ppl_vs_compute.png", "ppl_vs_compute.pdf", "compute.md", "compute.html"):
        assert (out / name).stat().st_size > 0
    findings = (out / "findings.md").read_text()
    assert "**b1**" in findings and "**b4**" in findings
    assert (tmp_path / "results" / "tiny" / "logs" / "budget.log").is_file()


@pytest.mark.slow  # the Penn Treebank, 60 runs of a batch or two (tests/tiers.py)
@pytest.mark.skipif(os.environ.get("LMGRID_BUDGET_SMOKE") != "1",
                    reason="60 PTB runs, 589 s once on a loaded 2-core AVX-512 machine (2026-11-27): over .ci/run's budget; LMGRID_BUDGET_SMOKE=1 runs it")
def test_the_ptb_smoke_form_chooses_one_width_per_budget_and_architecture(tmp_path, repo, ptb_dir, monkeypatch):
    """presets/ptb_budget.yaml with its smoke form presets/smoke-budget.yaml, as `make run` runs it (every scale,
    then the config): compute.csv has every architecture at every budget (b1x, b3x, b9x) and width (100, 200) over
    the smoke's 2 seeds, one width chosen per budget and architecture, the one with the lower mean valid PPL.  Kills:
    the preset's widths lost to the smoke form (smoke.yaml's hidden_dim 16 makes both widths one: the run stops on
    a seed twice), a width scale read as a budget of its own, the choice made on test."""
    import shutil

    from lmgrid.run.key import NEURAL_ARCHS

    shutil.copy(repo / "config.yaml", tmp_path / "config.yaml")  # the default studies that must not leak in
    monkeypatch.setenv("LMGRID_PTB_DIR", str(ptb_dir))
    monkeypatch.chdir(tmp_path)
    files = [str(repo / "presets" / "ptb_budget.yaml"), str(repo / "presets" / "smoke-budget.yaml")]
    smk = [str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d", str(tmp_path),
           "--cores", "2"]
    assert run_scales(smk, files) == 0
    r = snakemake(tmp_path, repo, "--configfile", *files, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    table = pd.read_csv(tmp_path / "results" / "ptb-smoke-budget" / "budget" / "compute.csv")
    neural = table[table["kind"] == "neural"]
    assert sorted(zip(neural["budget"], neural["model"], neural["width"])) == sorted(
        (b, a, w) for b in ("b1x", "b3x", "b9x") for a in NEURAL_ARCHS for w in (100, 200))
    assert (neural["seeds"] == 2).all()
    picked = neural[neural["chosen"].astype(bool)]
    best = neural.loc[neural.groupby(["budget", "model"])["valid_ppl_mean"].idxmin()]
    assert len(picked) == 3 * len(NEURAL_ARCHS) and sorted(picked.index) == sorted(best.index)
