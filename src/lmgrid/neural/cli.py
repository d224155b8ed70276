"""`lmgrid train`: one neural grid cell, end to end (called by the `train` rule in workflow/rules/train.smk)."""
from __future__ import annotations

import argparse
import json
import os

from lmgrid.common.errors import LmgridError

# The workflow hands the settings that do not change what a run computes (log_every, accelerator, devices,
# compile) to its jobs here, as {arch: {key: value}}: not in the rule's params, so changing them reruns nothing.
JOB_SETTINGS_ENV = "LMGRID_JOB_SETTINGS"


def _setting(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    try:
        return k, json.loads(v)  # numbers, true/false; anything else is a string
    except json.JSONDecodeError:
        return k, v


def cmd_train(a) -> None:
    from lmgrid.neural.allocator import keep_freed_blocks
    from lmgrid.neural.train import run

    keep_freed_blocks()  # before the first large tensor: see lmgrid.neural.allocator

    try:
        hp = json.loads(a.hparams)
    except json.JSONDecodeError as e:
        raise LmgridError(f"--hparams: not valid JSON ({e})") from None
    if not isinstance(hp, dict):
        raise LmgridError("--hparams: expected a JSON object of training settings")
    hp.update(_job_settings(a.arch))
    sets = dict(a.set or [])
    placement = sets.pop("placement", None)  # where the workflow planned the run: not a training setting
    hp.update(sets)
    if a.fast:
        # A smoke test: one short epoch on the first 2000 train tokens, small model; evaluation stays complete.
        hp.update(epochs=1, max_train_tokens=2000, emb_dim=16, hidden_dim=16, log_every=0)
    run(arch=a.arch, impl=a.impl, n_step=a.n_step, layers=a.layers, regime=a.regime, seed=a.seed,
        paths={"train": a.train, "valid": a.valid, "test": a.test}, vocab_path=a.vocab, run_dir=a.run_dir,
        ckpt_dir=a.ckpt_dir, hp=hp, threads=a.threads, live_mlflow=_live(a), placement=placement)


def _job_settings(arch: str) -> dict:
    text = os.environ.get(JOB_SETTINGS_ENV)
    if not text:
        return {}
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as e:
        raise LmgridError(f"{JOB_SETTINGS_ENV}: not valid JSON ({e})") from None
    if not isinstance(settings, dict) or not isinstance(settings.get(arch, {}), dict):
        raise LmgridError(f"{JOB_SETTINGS_ENV}: expected a JSON object {{arch: {{setting: value}}}}")
    return settings.get(arch, {})


def _live(a) -> dict | None:
    """MLFlowLogger arguments when the workflow turned live logging on (config mlflow.live), else None."""
    from lmgrid.run.live import LIVE_ENV, live_run_tags

    text = os.environ.get(LIVE_ENV)
    if not text:
        return None
    from lmgrid.run.key import normalise

    try:
        kwargs = json.loads(text)
    except json.JSONDecodeError as e:
        raise LmgridError(f"LMGRID_MLFLOW_LIVE: not valid JSON ({e})") from None
    if not isinstance(kwargs, dict) or "tracking_uri" not in kwargs:
        raise LmgridError("LMGRID_MLFLOW_LIVE: expected a JSON object with a tracking_uri")
    key = normalise(a.arch, a.impl, a.n_step, a.layers, a.regime, a.seed)
    return {**kwargs, **live_run_tags(key.name, a.run_dir)}


def register(sub) -> None:
    s = sub.add_parser("train", help="train one neural model (a grid cell) and write its run folder")
    s.add_argument("--arch", required=True, help="ffnn, rnn, lstm, gru or transformer")
    s.add_argument("--impl", default="torch", help="implementation: torch, or for lstm cell/concat/cellonebias, for gru cell")
    s.add_argument("--n-step", type=int, required=True, help="window size incl. the target (stream: ignored, 0)")
    s.add_argument("--layers", type=int, default=1, help="stacked layers (default 1)")
    s.add_argument("--regime", default="window", help="window or stream (docs/models.md, Regimes)")
    s.add_argument("--seed", type=int, default=1, help="seed of the initial weights and batch order")
    for name, what in (("train", "the train split"), ("valid", "the valid split"), ("test", "the test split"),
                       ("vocab", "vocab.json")):
        s.add_argument(f"--{name}", required=True, help=what)
    s.add_argument("--run-dir", required=True, help="output folder (RunKey.run_dir)")
    s.add_argument("--ckpt-dir", required=True, help="in-progress checkpoints; kept on failure, resumed from")
    s.add_argument("--hparams", default="{}", help="JSON object of training settings (config.yaml `train:`)")
    s.add_argument("--set", type=_setting, action="append", metavar="KEY=VALUE",
                   help="override one setting; placement='KIND PRECISION' (the workflow's plan, e.g. 'cuda "
                        "bf16-mixed'): train on that device kind and check the precision (auto: as it resolves)")
    s.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    s.add_argument("--fast", action="store_true", help="smoke test: one tiny epoch on 2000 train tokens")
    s.set_defaults(func=cmd_train)
