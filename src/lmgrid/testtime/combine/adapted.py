"""Test-time score modes of a stream cell: `cache`, `dynamic`, `dynamic+cache` (lmgrid.testtime.adapt, docs/adapt.md).

Each is a mode of lmgrid.testtime.combine.cells.MODES: it reads the cell's model.ckpt, chooses the adaptation's settings on
valid from its grid (lmgrid.testtime.adapt.tune.adapt: every grid point a pass over valid), then scores test once with them.
Both splits' log-probs are those of the chosen settings (the mixture fits its weights on valid's), read as one
stream (batch 1, state carried), so the PPL a mode's file claims is its own, not the run's metrics.json (which is
scored in stream_eval_batch_size rows); `adapt.json` beside the files records the choice: the settings, every grid
point's valid PPL and the one-stream base PPLs.  The targets are the corpus's in order (stream_tokens' stream
minus its leading </s>), so the files hold the base files' token sequence; write_scores checks that.

A window-regime cell (ffnn, a window transformer, a window lstm) has no stream state to carry or cache: refused
with one line naming the cell and the mode.
"""
from __future__ import annotations

import re
from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json
from lmgrid.run.record import RECORD_FILE, RunRecord
from lmgrid.data.vocab import Vocab

METHODS = ("cache", "dynamic", "dynamic+cache")
SETTINGS_FILE = "adapt.json"  # beside a mode's score files: what it chose on valid (write_scores writes it)


def run_threads(record: RunRecord) -> int:
    """The torch threads a neural run was evaluated with: metrics.json's device 'cpu (N threads)' (0: unknown)."""
    m = re.search(r"\((\d+) threads\)", str(record.get("device", "")))
    return int(m.group(1)) if m else 0


def check_stream_cell(run_dir: Path, mode: str, record: RunRecord) -> None:
    if record.regime != "stream" or not (run_dir / "model.ckpt").is_file():
        what = (f"a {record.regime}-regime {record.arch} cell"
                if (run_dir / "model.ckpt").is_file() else "not a neural cell (no model.ckpt)")
        raise LmgridError(f"{run_dir}: mode {mode} needs a stream-regime cell (rnn, lstm, gru or transformer), "
                          f"this is {what}")


def adapt_cell(run_dir: Path, paths: dict, vocab: Vocab, method: str, grid: dict | None = None) -> dict:
    """{valid: (log-probs, ppl, target ids), test: (...), "adapt": the record for adapt.json}.  paths: {valid, test
    [, train]}; train is read only by dynamic evaluation's rule rms (its gradient statistics)."""
    import torch

    from lmgrid.testtime.adapt.cli import needs_train, run_settings, split_stream
    from lmgrid.testtime.adapt.tune import adapt
    from lmgrid.neural.allocator import keep_freed_blocks
    from lmgrid.neural.model_io import load_run


    record = RunRecord.read(run_dir / RECORD_FILE)
    check_stream_cell(run_dir, method, record)
    threads = run_threads(record)
    if threads:
        torch.set_num_threads(threads)
    keep_freed_blocks()  # dynamic evaluation frees and reallocates the same gradients every segment
    lm = load_run(run_dir)
    streams = {split: split_stream(lm.vocab, paths[split]) for split in ("valid", "test")}
    train = None
    if needs_train(method, grid):  # dynamic evaluation's rule rms: its gradient statistics come from train
        if not paths.get("train"):
            raise LmgridError(f"{run_dir}: mode {method} with rule rms needs the train split (--train)")
        train = split_stream(lm.vocab, paths["train"])
    settings = run_settings(run_dir)
    result = adapt(lm.model.cpu(), streams["valid"], streams["test"], method, grid=grid, train_ids=train,
                   **settings)
    out = {split: (result.pop(f"{split}_log_probs"), result[f"{split}_ppl"], streams[split][1:])
           for split in ("valid", "test")}
    out["adapt"] = {"run_dir": str(run_dir), **settings, "threads": torch.get_num_threads(), **result}
    return out


def mode(method: str):
    def fn(run_dir: Path, paths: dict, vocab: Vocab, grid: dict | None = None) -> dict:
        return adapt_cell(run_dir, paths, vocab, method, grid)

    fn.__name__ = fn.__qualname__ = f"{method.replace('+', '_')}_mode"
    fn.__doc__ = f"The cell with {method}, settings chosen on valid (lmgrid.testtime.adapt.tune)."
    return fn


ADAPTED_MODES = {m: mode(m) for m in METHODS}


def dynamic_grid(section: dict) -> dict:
    """The tuner's grid from the config's adapt.dynamic ({rule, lr, segment, rms_lr, decay, train_tokens}):
    rule sgd gives {lr, segment} (what it gave before rule rms existed, so its jobs' params are unchanged); rule rms
    gives {rule: rms, lr: rms_lr, decay, segment, train_tokens}."""
    section = dict(section)
    rule = section.pop("rule", "sgd")
    rms = {k: section.pop(k) for k in ("rms_lr", "decay", "train_tokens") if k in section}
    if rule != "rms":
        return section
    grid = {"rule": "rms", **({"lr": rms["rms_lr"]} if "rms_lr" in rms else {})}
    grid.update({k: v for k, v in rms.items() if k != "rms_lr"})
    if "segment" in section:
        grid["segment"] = section["segment"]
    return grid


def grid_of(method: str, adapt_config: dict) -> dict:
    """The grid of `method` from the config's `adapt:` section ({cache: {window, theta, lam}, dynamic: {rule, lr,
    segment, rms_lr, decay, train_tokens}}): the parts the method uses, merged (dynamic's by dynamic_grid)."""
    grid: dict = {}
    for part in method.split("+"):
        section = adapt_config.get(part) or {}
        grid.update(dynamic_grid(section) if part == "dynamic" else section)
    return grid


def needs_train_split(method: str, adapt_config: dict) -> bool:
    """Whether the mode reads the train split with this config (dynamic evaluation's rule rms): the test that
    `lmgrid adapt` makes, on the grid this config gives the mode."""
    from lmgrid.testtime.adapt.cli import needs_train

    return needs_train(method, grid_of(method, adapt_config))


def read_settings(score_dir: str | Path) -> dict | None:
    """A mode folder's adapt.json ({mode, method, settings, valid_ppl, test_ppl, base_valid_ppl, base_test_ppl,
    grid, ...}), or None for a base folder (which has none)."""
    path = Path(score_dir) / SETTINGS_FILE
    return read_json(path) if path.is_file() else None


def describe(settings: dict) -> str:
    """'window 500, theta 0.3, lam 0.1' (the chosen settings, as the tables show them)."""
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in settings.items())
