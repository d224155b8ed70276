"""A plug-in architecture through the whole workflow (issue 47 item 1): the tiny grid of tests/tinygrid.py with the
test plug-in (tests/plugins/tiny_gated.py, gated, window and stream) beside built-ins, a combination with its test-time
cache, and what an edit of its file reruns."""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tinygrid import GRID, copy_grid, planned_jobs, snakemake, write_config

pytestmark = pytest.mark.full

PLUGINS = Path(__file__).parent / "plugins"
REF = "plugins/tiny_gated.py:TinyGated"
# The shared tiny grid with the plug-in added beside a built-in (its rnn cell is the grid's own) in both regimes, and
# a combination with its test-time cache: only the plug-in's cells train (and what reads every cell runs again).
CONFIG = copy.deepcopy(GRID)
CONFIG["studies"].update({"plug": {"arch": ["rnn", REF], "n_step": [3]},
                          "plug_stream": {"arch": [REF], "n_step": [3], "regime": ["stream"]}})
CONFIG["combine"]["kn_plug"] = {"components": [{"arch": "mkn", "n_step": 3},
                                               {"arch": REF, "regime": "stream", "mode": "cache"},
                                               {"arch": REF, "regime": "stream", "mode": "dynamic"}]}
CONFIG["adapt"]["dynamic"] = {"lr": [1.0], "segment": [10]}  # dynamic evaluation of the plug-in: one setting
PLUGIN_CELLS = ("results/tiny/runs/tiny_gated/plugin/n3_l1_window_s1", "results/tiny/runs/tiny_gated/plugin/n0_l1_stream_s1")


@pytest.fixture(scope="module")
def plugin_grid(tiny_pipeline, tmp_path_factory, repo) -> Path:
    """A copy of the finished tiny grid (tests/tinygrid.py), the plug-in's folder beside its config and the config
    with the plug-in's studies: a grid of its own cost the full tier about 9 more minutes."""
    workdir = copy_grid(tiny_pipeline, tmp_path_factory.mktemp("plugin_grid") / "grid")
    shutil.copytree(PLUGINS, workdir / "plugins")
    write_config(workdir, CONFIG)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LMGRID_REPORT", "0")  # the report is test_report's; here the results
        r = snakemake(workdir, repo)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    retrained = {k: n for k, n in planned_jobs(r).items() if k in ("train", "train_gated")}
    assert not retrained, f"built-in cells of the shared grid trained again: {retrained}"
    return workdir


def test_the_plugin_gets_a_summary_row_gates_figures_and_a_combination(plugin_grid):
    """Kills: a plug-in cell without its summary row or display name, its gates not measured (the gated set without
    plug-ins: no gates.csv, no saturation figure), the combination selector not resolving the reference, a stream
    plug-in refused the test-time cache or dynamic evaluation."""
    summary = pd.read_csv(plugin_grid / "results/tiny/summary.csv")
    mine = summary[summary["arch"] == "tiny_gated"]
    assert len(mine) == 2 and set(mine["impl"]) == {"plugin"}
    assert mine["test_ppl"].gt(1).all()
    assert "| Tiny gated " in (plugin_grid / "results/tiny/summary.md").read_text()
    for cell in PLUGIN_CELLS:
        gates = pd.read_csv(plugin_grid / cell / "gates.csv")
        assert set(gates["gate"]) == {"a"} and {"all", "unit"} <= set(gates["scope"])
        assert gates["mean"].between(0, 1).all()
    assert (plugin_grid / "results/tiny/studies/plug/saturation_tiny_gated_plugin.png").is_file()
    table = pd.read_csv(plugin_grid / "results/tiny/studies/plug/table.csv")
    assert table.loc[table["arch"] == "tiny_gated", "model_name"].tolist() == ["Tiny gated"]
    result = json.loads((plugin_grid / "results/tiny/combine/kn_plug/result.json").read_text())
    assert "tiny_gated" in json.dumps(result)
    # its test-time cache and dynamic evaluation: each mode's scores of the plug-in's stream cell, tuned on valid
    scores = plugin_grid / PLUGIN_CELLS[1].replace("/runs/", "/scores/")
    for mode in ("cache", "dynamic"):
        assert (scores / mode / "test.npy").is_file(), f"no {mode} scores: {sorted(p.name for p in scores.iterdir())}"


def test_the_plugin_model_loads_and_scores_in_a_fresh_process_elsewhere(plugin_grid, tmp_path):
    """`lmgrid score` of a plug-in's run from another folder: model.ckpt keeps the reference and the file it was
    resolved to.  Kills: the class not re-imported when the checkpoint is loaded."""
    run = plugin_grid / PLUGIN_CELLS[0]
    out = subprocess.run([sys.executable, "-m", "lmgrid", "score", "--run", str(run),
                          "--text", str(plugin_grid / "results/tiny/corpus/test.txt")],
                         capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "LMGRID_PLUGINS": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    ppl = json.loads((run / "metrics.json").read_text())["test"]["ppl"]  # a window cell: the same targets
    scored = float(re.search(r"PPL ([0-9.]+)", out.stdout + out.stderr).group(1))
    assert scored == pytest.approx(ppl, rel=1e-4)


def test_editing_the_plugin_reruns_its_cells_and_nothing_else(plugin_grid, repo, tmp_path):
    """An edit to the plug-in's file plans its two training jobs and no other cell's.  The negative control runs the
    workflow with the file removed from the plug-in rules' inputs: then nothing is planned.  Kills: the source file
    not part of the cell's identity (an edited model's old results kept)."""
    work = tmp_path / "grid"
    shutil.copytree(plugin_grid, work, symlinks=True)
    source = work / "plugins/tiny_gated.py"
    source.write_text(source.read_text() + "\n# an edit\n")
    def trained(plan: dict) -> dict:
        return {r: n for r, n in plan.items() if r.startswith("train") or r in ("ngram", "ngram_counts")}

    plan = planned_jobs(snakemake(work, repo, "-n"))
    assert trained(plan) == {"train_plugin_gated": 2}, plan
    # The mutation: the source file not an input of the plug-in rules (a copy of the workflow without it).  Compared
    # on modification times alone: with Snakemake's default triggers a rule whose set of inputs changed reruns anyway.
    mutant = tmp_path / "mutant"
    shutil.copytree(repo / "workflow", mutant / "workflow")
    shutil.copy(repo / "Snakefile", mutant / "Snakefile")
    shutil.copytree(repo / "profiles", mutant / "profiles")
    rules = mutant / "workflow/rules/train.smk"
    rules.write_text(rules.read_text().replace("        plugin=plugin_source,\n", ""))
    assert trained(planned_jobs(snakemake(work, repo, "-n", "--rerun-triggers", "mtime"))) == {"train_plugin_gated": 2}
    control = planned_jobs(snakemake(work, mutant, "-n", "--rerun-triggers", "mtime"))
    assert trained(control) == {}, control


# A fresh interpreter: the plug-in's MLflow model, loaded by MLflow, scores test sentences.
PYFUNC_LOAD = """
import json, sys
import mlflow
from mlflow import MlflowClient
uri, run_dir = sys.argv[1], sys.argv[2]
client = MlflowClient(tracking_uri=uri)
mlflow.set_tracking_uri(uri)
runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
model, = [r.data.tags["lmgrid.model"] for r in runs if r.data.tags.get("lmgrid.run_key") == run_dir]
loaded = mlflow.pyfunc.load_model(model)
from lmgrid.tracking.pyfunc_model import perplexity_of
print(perplexity_of(loaded.predict(open(sys.argv[3]).read().splitlines())))
"""


def test_the_plugins_mlflow_model_loads_without_its_folder(plugin_grid, tmp_path):
    """The MLflow model of a plug-in cell carries the class's file: with the user's plugins/ folder gone it loads in
    a fresh process and scores the test split at the cell's test PPL.  Kills: the file not shipped with the model."""
    moved = tmp_path / "away"
    shutil.move(plugin_grid / "plugins", moved)
    try:
        out = subprocess.run([sys.executable, "-c", PYFUNC_LOAD, f"sqlite:///{plugin_grid}/results/mlflow.db",
                              PLUGIN_CELLS[0], str(plugin_grid / "results/tiny/corpus/test.txt")],
                             capture_output=True, text=True, cwd=plugin_grid, env={**os.environ, "LMGRID_PLUGINS": ""})
    finally:
        shutil.move(moved, plugin_grid / "plugins")
    assert out.returncode == 0, out.stderr[-3000:]
    ppl = json.loads((plugin_grid / PLUGIN_CELLS[0] / "metrics.json").read_text())["test"]["ppl"]
    assert float(out.stdout.split()[-1]) == pytest.approx(ppl, rel=1e-4)
