"""The order in which training jobs start when the slots are short (lmgrid.orchestration.job_order): the cells with
the most planned training FLOPs first, and every training job before the test-time jobs that wait on none of it."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from lmgrid.common.fileio import write_json
from lmgrid.data.vocab import build
from lmgrid.orchestration import job_order
from lmgrid.orchestration.job_order import (PRIORITY_FLOOR, UPSTREAM_PRIORITY, NominalVocab, planning_vocab,
                                            train_priority)
from lmgrid.run.spec import RunSpec

from tinygrid import TINY, snakemake, write_config

# Stream-regime cells with the seed_table's shapes, costed over the nominal vocabulary (no vocab.json at the path).
LSTM = dict(arch="lstm", layers=2, epochs=9, hidden_dim=300, emb_dim=300)


def cell(tmp_path, arch="lstm", layers=2, regime="stream", **train) -> RunSpec:
    return RunSpec.build(arch=arch, impl="torch", n_step=5 if regime == "window" else 0, layers=layers,
                         regime=regime, seed=1, corpus="c", vocab=str(tmp_path / "absent.json"),
                         train={"output_layer": "adaptive", "bptt": 35, **train}, placement=("cpu", "32-true"))


def ordering_problems(priority, tmp_path) -> list[str]:
    """What a priority function gets wrong about which of two cells costs more to train."""
    base = dict(LSTM)
    pairs = {  # (costlier, cheaper)
        "more epochs": ({**base}, {**base, "epochs": 4}),
        "wider": ({**base}, {**base, "hidden_dim": 150, "emb_dim": 150}),
        "deeper": ({**base}, {**base, "layers": 1}),
        "a smaller FLOP budget": ({**base}, {**base, "budget_flops": 1e12}),
        "lstm over ffnn": ({**base}, {**base, "arch": "ffnn", "regime": "window", "layers": 1}),
    }
    problems = []
    for what, (costly, cheap) in pairs.items():
        a, b = priority(cell(tmp_path, **costly)), priority(cell(tmp_path, **cheap))
        if not a > b:
            problems.append(f"{what}: {a} is not above {b}")
    if priority(cell(tmp_path, **{**base, "epochs": 1, "hidden_dim": 8, "emb_dim": 8})) < PRIORITY_FLOOR:
        problems.append("a small cell is below the floor, among the test-time jobs")
    return problems


def test_the_costliest_cells_train_first(tmp_path):
    """Kills: a priority that is one value for every cell (the rule's old `priority: 1` for the gated nets and 0
    for the rest), and one that reads the FLOPs per token but not the epochs (the controls run both)."""
    assert ordering_problems(train_priority, tmp_path) == []
    assert ordering_problems(lambda spec: PRIORITY_FLOOR, tmp_path)
    per_token = lambda spec: PRIORITY_FLOOR + round(job_order.planned_train_kflop(spec) / spec.hparams["epochs"])
    assert any(p.startswith("more epochs") for p in ordering_problems(per_token, tmp_path))


def test_the_n_grams_come_before_the_costliest_nets(tmp_path):
    """UPSTREAM_PRIORITY is above the training priority of the seed_table's LSTM and of a cell five times as wide
    trained ten times as long.  Kills: an upstream priority below the nets' (the n-grams would again run after the
    last net, with the run's tail waiting for them), seen failing with UPSTREAM_PRIORITY set to 10**5."""
    lstm = train_priority(cell(tmp_path, **LSTM))
    huge = train_priority(cell(tmp_path, **{**LSTM, "hidden_dim": 1500, "emb_dim": 1500, "epochs": 90}))
    assert lstm < huge < UPSTREAM_PRIORITY


def test_the_corpus_vocabulary_is_used_once_it_exists(tmp_path):
    """Kills: a plan that costs the output layer over the nominal vocabulary although the corpus's own is built
    (the control: the same cell before vocab.json is written gets the nominal one)."""
    path = tmp_path / "vocab.json"
    assert isinstance(planning_vocab(str(path)), NominalVocab)
    write_json(path, build([["a", "a", "b"]]).to_json())
    small = planning_vocab(str(path))
    assert len(small) < 10 and not isinstance(small, NominalVocab)
    spec = RunSpec.build(arch="lstm", impl="torch", n_step=0, layers=1, regime="stream", seed=1, corpus="c",
                         vocab=str(path), train={"output_layer": "full", "bptt": 35}, placement=("cpu", "32-true"))
    nominal = cell(tmp_path, layers=1, output_layer="full")
    assert job_order.planned_train_kflop(spec) < job_order.planned_train_kflop(nominal)


def dry_run_priorities(workdir: Path, snakefile_repo: Path) -> dict[str, list[tuple[str, int]]]:
    """rule -> [(its job's wildcards, priority)] from a dry run's job blocks (0 where a block shows none); the
    caller sets LMGRID_VERBOSE=1, which prints the blocks."""
    write_config(workdir, {**TINY, "studies": {"g": {"arch": ["lstm", "ffnn"], "n_step": [3], "layers": [1, 2]},
                                               "n": {"arch": ["kn"], "n_step": [3]}},
                           "train": {"epochs": 1, "emb_dim": 8, "hidden_dim": 8, "log_every": 0}})
    r = snakemake(workdir, snakefile_repo, "-n")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    jobs: dict[str, list[tuple[str, int]]] = {}
    for block in re.split(r"^(?:local)?rule ", r.stdout, flags=re.M)[1:]:
        rule = block.split(":", 1)[0]
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        priority = re.search(r"^\s+priority: (\d+)$", block, re.M)
        jobs.setdefault(rule, []).append((wildcards[1] if wildcards else "", int(priority[1]) if priority else 0))
    return jobs


# The jobs besides training with a priority of their own (lmgrid.orchestration.job_order; the rest have 0): the
# n-grams and the oracle before the nets, the cells' MLflow mirror first of the run's tail.
OTHER_PRIORITIES = {"ngram_counts": UPSTREAM_PRIORITY, "ngram": UPSTREAM_PRIORITY, "oracle": UPSTREAM_PRIORITY,
                    "mlflow_cells": 1}


def workflow_problems(jobs) -> list[str]:
    train = {w: p for rule in ("train", "train_gated") for w, p in jobs.get(rule, [])}
    problems = [f"{w}: priority {p}" for w, p in train.items() if p < PRIORITY_FLOOR]
    problems += [f"{rule} {w}: priority {p}" for rule, js in jobs.items() if rule not in ("train", "train_gated")
                 for w, p in js if p != OTHER_PRIORITIES.get(rule, 0)]
    problems += [f"{rule}: not in the dry run" for rule in OTHER_PRIORITIES if rule not in jobs]
    if train and max(train.values()) >= UPSTREAM_PRIORITY:
        problems.append(f"a training job's priority {max(train.values())} reaches the n-grams' {UPSTREAM_PRIORITY}")
    deep = [p for w, p in train.items() if "arch=lstm" in w and "layers=2" in w]
    shallow = [p for w, p in train.items() if "arch=lstm" in w and "layers=1" in w]
    if not (deep and shallow and min(deep) > max(shallow)):
        problems.append(f"the 2-layer LSTM ({deep}) does not come before the 1-layer one ({shallow})")
    return problems


@pytest.mark.full  # dry runs of the workflow (tests/tiers.py)
def test_the_workflow_gives_each_training_job_its_priority(tmp_path, repo, monkeypatch):
    """The rule carries the priority to the jobs; the n-gram jobs and the oracle come before every net, the cells'
    MLflow mirror first of the tail, every other job at 0.  Kills: the train rule without `priority:
    train_job_priority` (the control: a copy of the workflow with that line removed, dry-run the same way), and the
    n-gram rule without `priority: UPSTREAM_PRIORITY` (seen failing by hand)."""
    monkeypatch.setenv("LMGRID_VERBOSE", "1")
    (tmp_path / "run").mkdir()
    assert workflow_problems(dry_run_priorities(tmp_path / "run", repo)) == []

    mutant = tmp_path / "mutant"
    mutant.mkdir()
    for name in ("Snakefile", "workflow", "profiles", "config.yaml"):
        src = repo / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, mutant / name)
    rules = mutant / "workflow" / "rules" / "train.smk"
    text = rules.read_text()
    assert "    priority: train_job_priority\n" in text
    rules.write_text(text.replace("    priority: train_job_priority\n", ""))
    (tmp_path / "run2").mkdir()
    assert workflow_problems(dry_run_priorities(tmp_path / "run2", mutant))
