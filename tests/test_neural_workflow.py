"""The `train` rules and the `train:` config section."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from lmgrid.common.errors import LmgridError
from lmgrid.run.settings import DEFAULTS, JOB_KEYS, NOT_COMPUTING, resolve_hparams


def test_training_defaults_come_from_the_schema_only(repo):
    """One place for defaults and types: hparams reads $defs/train_settings; the train section and every
    per_arch entry refer to that one definition."""
    schema = yaml.safe_load((repo / "workflow/schemas/config.schema.yaml").read_text())
    settings = schema["$defs"]["train_settings"]["properties"]
    assert DEFAULTS == {k: v["default"] for k, v in settings.items()}
    train = schema["properties"]["train"]
    assert train["$ref"] == "#/$defs/train_settings" and set(train["properties"]) == {"threads", *JOB_KEYS, "per_arch"}
    for arch in ("ffnn", "rnn", "lstm", "gru", "transformer"):
        assert train["properties"]["per_arch"]["properties"][arch]["$ref"] == "#/$defs/train_settings"
    assert set(NOT_COMPUTING) == {"log_every", "accelerator", "devices", "compile", "gate_stats"}


def test_config_yaml_train_section_resolves(repo):
    config = yaml.safe_load((repo / "config.yaml").read_text())
    for arch in ("ffnn", "rnn", "lstm", "gru", "transformer"):
        hp = resolve_hparams(config["train"], arch)
        assert set(hp) == set(DEFAULTS)


def test_per_arch_overrides_and_unknown_keys():
    hp = resolve_hparams({"lr": 0.01, "threads": 2, "per_arch": {"transformer": {"lr": 0.001}}}, "transformer")
    assert hp["lr"] == 0.001 and "threads" not in hp
    assert resolve_hparams({"lr": 0.01, "per_arch": {"transformer": {"lr": 0.001}}}, "lstm")["lr"] == 0.01
    with pytest.raises(LmgridError, match=r"train.per_arch.gru.hiden_dim: unknown training setting"):
        resolve_hparams({"per_arch": {"gru": {"hiden_dim": 3}}}, "gru")
    with pytest.raises(LmgridError, match=r"train.epochs: 0 is less than the minimum of 1"):
        resolve_hparams({"epochs": 0}, "gru")


@pytest.mark.full
@pytest.mark.skipif(importlib.util.find_spec("snakemake") is None, reason="snakemake is not installed")
def test_dry_run_schedules_one_job_per_neural_run(repo, tmp_path):
    shutil.copy(repo / "Snakefile", tmp_path)
    shutil.copytree(repo / "workflow", tmp_path / "workflow")
    config = yaml.safe_load((repo / "config.yaml").read_text())
    config["studies"] = {"neural": {"arch": ["ffnn", "rnn", "lstm", "gru", "transformer"], "n_step": [3, 5],
                                    "impl": ["torch", "cell"]},
                         "stream": {"arch": ["lstm"], "n_step": [2], "regime": ["stream"], "layers": [1, 2]}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", "rules"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:] + out.stdout[-2000:]
    counts = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    # window: ffnn, rnn, transformer x 2 n_step = 6 plain; lstm x2 impls + gru x2 impls, x 2 n_step = 8 gated;
    # stream: lstm x 2 layers = 2 gated.
    assert counts.get("train") == 6 and counts.get("train_gated") == 10, out.stdout
