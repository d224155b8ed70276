"""`lmgrid train`: one neural grid cell, end to end (called by the `train` rule in workflow/rules/train.smk).

The workflow's way is `lmgrid train --spec FILE` (lmgrid.run.spec: every setting of the run, resolved once); by hand,
the flags build a RunSpec, and both run it through the one path, lmgrid.neural.train.run(spec)."""
from __future__ import annotations

import argparse
import json

from lmgrid.common.errors import LmgridError


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
    run(spec_of(a), threads=a.threads)


def spec_of(a):
    """The run's spec: the workflow's file (--spec), or one built from the flags (a run by hand)."""
    from lmgrid.run.spec import RunSpec, hand_spec

    if a.spec:
        given = [f"--{n.replace('_', '-')}" for n in HAND_FLAGS if getattr(a, n) not in (None, False)]
        if given:
            raise LmgridError(f"--spec: the spec file holds every setting of the run; {given[0]} cannot be added")
        return RunSpec.read(a.spec)
    missing = [f"--{n.replace('_', '-')}" for n in REQUIRED_BY_HAND if getattr(a, n) is None]
    if missing:
        raise LmgridError(f"train: {missing[0]} is required without --spec")
    try:
        hp = json.loads(a.hparams or "{}")
    except json.JSONDecodeError as e:
        raise LmgridError(f"--hparams: not valid JSON ({e})") from None
    if not isinstance(hp, dict):
        raise LmgridError("--hparams: expected a JSON object of training settings")
    sets = dict(a.set or [])
    placement = sets.pop("placement", None)  # where to train, and in which precision: not a training setting
    hp.update(sets)
    if a.fast:
        # A smoke test: one short epoch on the first 2000 train tokens, small model; evaluation stays complete.
        hp.update(epochs=1, max_train_tokens=2000, emb_dim=16, hidden_dim=16, log_every=0)
    return hand_spec(arch=a.arch, impl=a.impl or "torch", n_step=a.n_step, layers=a.layers if a.layers is not None else 1,
                     regime=a.regime or "window", seed=a.seed if a.seed is not None else 1, hp=hp,
                     paths={"train": a.train, "valid": a.valid, "test": a.test}, vocab_path=a.vocab,
                     run_dir=a.run_dir, ckpt_dir=a.ckpt_dir, placement=placement)


REQUIRED_BY_HAND = ("arch", "n_step", "train", "valid", "test", "vocab", "run_dir", "ckpt_dir")
HAND_FLAGS = REQUIRED_BY_HAND + ("impl", "layers", "regime", "seed", "hparams", "set", "fast")


def register(sub) -> None:
    s = sub.add_parser("train", help="train one neural model (a grid cell) and write its run folder")
    s.add_argument("--spec", help="the run spec file the workflow wrote (lmgrid.run.spec; docs/contracts.md), "
                                   "which holds every setting of the run; the flags below build one by hand instead")
    s.add_argument("--arch", help="ffnn, rnn, lstm, gru or transformer")
    s.add_argument("--impl", help="implementation: torch (default), or for lstm cell/concat/cellonebias, for gru cell")
    s.add_argument("--n-step", type=int, help="window size incl. the target (stream: ignored, 0)")
    s.add_argument("--layers", type=int, help="stacked layers (default 1)")
    s.add_argument("--regime", help="window (default) or stream (docs/models.md, Regimes)")
    s.add_argument("--seed", type=int, help="seed of the initial weights and batch order (default 1)")
    for name, what in (("train", "the train split"), ("valid", "the valid split"), ("test", "the test split"),
                       ("vocab", "vocab.json")):
        s.add_argument(f"--{name}", help=what)
    s.add_argument("--run-dir", help="output folder (RunKey.run_dir)")
    s.add_argument("--ckpt-dir", help="in-progress checkpoints; kept on failure, resumed from")
    s.add_argument("--hparams", help="JSON object of training settings (config.yaml `train:`)")
    s.add_argument("--set", type=_setting, action="append", metavar="KEY=VALUE",
                   help="override one setting; placement='KIND PRECISION' (the workflow's plan, e.g. 'cuda "
                        "bf16-mixed'): train on that device kind and check the precision (auto: as it resolves)")
    s.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    s.add_argument("--fast", action="store_true", help="smoke test: one tiny epoch on 2000 train tokens")
    s.set_defaults(func=cmd_train)
