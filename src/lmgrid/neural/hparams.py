"""Training settings: their defaults and how config.yaml's `train:` section resolves for one architecture.

Kept free of torch imports: the workflow calls `resolve_hparams` while it builds the DAG, so that a change of
any setting reruns the affected runs (Snakemake compares params).
"""
from __future__ import annotations

from lmgrid.errors import LmgridError

# Every training setting, with the default used when config.yaml's `train:` section leaves it out.
DEFAULTS = {
    "epochs": 2, "batch_size": 128, "stream_batch_size": 20, "eval_batch_size": 256, "stream_eval_batch_size": 10,
    "bptt": 35, "max_train_tokens": 0,
    "optimizer": "adam", "lr": 0.003, "momentum": 0.0, "weight_decay": 0.0, "clip": 1.0,
    "lr_decay": 0.5, "lr_patience": 0, "early_stop_patience": 3, "early_stop_min_delta": 0.0,
    "emb_dim": 64, "hidden_dim": 64, "dropout": 0.0, "tie_weights": False, "activation": "tanh", "direct": False,
    "heads": 4, "residual": False, "compile": False,
    "precision": "32-true", "accelerator": "auto", "devices": 1, "deterministic": True, "log_every": 200,
}
MODEL_KEYS = ("emb_dim", "hidden_dim", "dropout", "tie_weights", "activation", "direct", "heads", "residual",
              "compile")
# Settings that change how a run is displayed or placed, not what it computes: not part of the fingerprint.
# `devices` too: the batch sizes are global (split across the DDP processes), so the run computes the same.
NOT_FINGERPRINTED = ("log_every", "accelerator", "devices")
# Keys of `train:` that configure the job, not the model: handled by the workflow (Snakemake threads).
JOB_KEYS = ("threads",)


def resolve_hparams(train_cfg: dict | None, arch: str) -> dict:
    """DEFAULTS, overridden by the config's `train:` keys, overridden by its `per_arch: {<arch>: {...}}`."""
    train_cfg = dict(train_cfg or {})
    for key in JOB_KEYS:
        train_cfg.pop(key, None)
    per_arch = train_cfg.pop("per_arch", {}) or {}
    hp = dict(DEFAULTS)
    for source, values in (("train", train_cfg), (f"train.per_arch.{arch}", per_arch.get(arch, {}))):
        for key, value in values.items():
            if key not in DEFAULTS:
                raise LmgridError(f"{source}.{key}: unknown training setting (known: {', '.join(sorted(DEFAULTS))})")
            hp[key] = value
    for key in ("epochs", "batch_size", "stream_batch_size", "eval_batch_size", "stream_eval_batch_size", "bptt",
                "devices"):
        if not isinstance(hp[key], int) or isinstance(hp[key], bool) or hp[key] < 1:
            raise LmgridError(f"train.{key}: {hp[key]!r} is not allowed (must be an integer >= 1)")
    if not (isinstance(hp["lr"], (int, float)) and hp["lr"] > 0):
        raise LmgridError(f"train.lr: {hp['lr']!r} is not allowed (must be a number > 0)")
    if hp["optimizer"] not in ("sgd", "adam"):
        raise LmgridError(f"train.optimizer: unknown optimizer {hp['optimizer']!r} (expected sgd or adam)")
    if hp["precision"] not in ("32-true", "bf16-mixed"):
        raise LmgridError(f"train.precision: {hp['precision']!r} is not supported (expected 32-true or bf16-mixed)")
    return hp
