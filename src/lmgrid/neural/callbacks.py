"""Callbacks: the per-epoch CSV log (the run's source of truth), a progress display for log files, and the
training time of a run's earlier attempts carried across a resume."""
from __future__ import annotations

import csv
import io
import math
import os
import time

import pytorch_lightning as pl

from lmgrid.common.fileio import atomic_write
from lmgrid.common.resources import own_usage

LOG_COLUMNS = ["epoch", "step", "train_loss", "train_ppl", "valid_loss", "valid_ppl", "lr", "wall_s"]


def _ppl(loss: float) -> float:
    return math.exp(loss) if loss < 700 else math.inf


class EpochLog(pl.Callback):
    """One row per epoch, written when the epoch's validation ends, i.e. before that epoch's checkpoint (Lightning
    runs checkpoint callbacks last). The rows travel inside the checkpoint (state_dict), so a resumed run's log
    holds exactly the epochs its weights have seen."""

    def __init__(self, live_path, train_tokens: int):
        self.live_path, self.train_tokens = live_path, train_tokens
        self.rows: list[dict] = []
        self._t_fit = self._t_epoch = time.time()
        self._wall_offset, self._train_s, self._lr = 0.0, 0.0, math.nan

    def state_dict(self):
        return {"rows": self.rows}

    def load_state_dict(self, state):
        self.rows = list(state["rows"])

    def on_train_start(self, trainer, pl_module):
        self._t_fit = time.time()
        self._wall_offset = self.rows[-1]["wall_s"] if self.rows else 0.0
        if self.rows and self.rows[-1]["stopped"]:
            trainer.should_stop = True  # early stopping had ended this run before it was interrupted

    def on_train_epoch_start(self, trainer, pl_module):
        self._t_epoch = time.time()

    def on_validation_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._train_s = time.time() - self._t_epoch
            self._lr = trainer.optimizers[0].param_groups[0]["lr"]  # the rate this epoch trained with

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        train_loss, valid_loss = pl_module.train_loss, pl_module.valid_loss
        self.rows.append({
            "epoch": trainer.current_epoch + 1, "step": trainer.global_step,
            "train_loss": train_loss, "train_ppl": _ppl(train_loss),
            "valid_loss": valid_loss, "valid_ppl": _ppl(valid_loss), "valid_tokens": pl_module.valid_count,
            "lr": self._lr,
            "wall_s": round(self._wall_offset + time.time() - self._t_fit, 3),
            "train_tokens": pl_module.train_count, "train_s": self._train_s, "stopped": bool(trainer.should_stop)})
        if trainer.is_global_zero:  # under DDP every process keeps the rows (the same); one writes them
            self.write(self.live_path)
            if trainer.logger is not None:  # the optional live MLflow mirror of the same row
                row = self.rows[-1]
                trainer.logger.log_metrics({k: row[k] for k in ("train_loss", "train_ppl", "valid_loss", "valid_ppl",
                                                                "lr")}, step=row["step"])

    @property
    def tokens_per_s(self) -> float:
        seconds = sum(r["train_s"] for r in self.rows)
        return sum(r["train_tokens"] for r in self.rows) / seconds if seconds > 0 else 0.0

    def write(self, path) -> None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(LOG_COLUMNS)
        for r in self.rows:
            w.writerow([r["epoch"], r["step"], *(f"{r[k]:.6f}" for k in LOG_COLUMNS[2:6]), f"{r['lr']:.6g}",
                        f"{r['wall_s']:.3f}"])
        with atomic_write(path) as fh:
            fh.write(buf.getvalue())


class Progress(pl.Callback):
    """Plain lines instead of a carriage-return bar: one per `every` training steps and one per epoch.  With a
    `path`, also the state `lmgrid status` reads (progress.json in the checkpoint folder): epoch, step of the
    epoch, latest valid PPL, times; rewritten at most every WRITE_EVERY_S seconds and at each epoch's end."""

    WRITE_EVERY_S = 2.0

    def __init__(self, every: int = 200, path=None):
        self.every, self.path = every, path
        self._t = self._written = self._started = time.time()
        self._valid_ppl, self._epoch_s = None, None

    def on_train_epoch_start(self, trainer, pl_module):
        self._t = time.time()

    def _write(self, trainer, batch: int) -> None:
        import json

        self._written = time.time()
        state = {"pid": os.getpid(), "host": os.uname().nodename, "epoch": trainer.current_epoch + 1,
                 "max_epochs": trainer.max_epochs, "batch": batch, "batches": trainer.num_training_batches,
                 "started_at": self._started,
                 "epoch_started_at": self._t, "updated_at": self._written, "valid_ppl": self._valid_ppl,
                 "last_epoch_s": self._epoch_s}
        with atomic_write(self.path) as fh:
            json.dump(state, fh)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # For `python -m lmgrid.bench startup`: the wall clock at the run's first training step.
        stamp = os.environ.get("LMGRID_FIRST_STEP_FILE")
        if stamp and trainer.global_step == 0 and batch_idx == 0:
            with open(stamp, "w") as fh:
                fh.write(f"{time.time():.6f}\n")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.path and trainer.is_global_zero and time.time() - self._written >= self.WRITE_EVERY_S:
            self._write(trainer, batch_idx + 1)
        if self.every > 0 and trainer.is_global_zero and (batch_idx + 1) % self.every == 0:
            elapsed = max(time.time() - self._t, 1e-9)
            loss = pl_module.train_loss
            print(f"epoch {trainer.current_epoch + 1} step {batch_idx + 1}/{trainer.num_training_batches}: "
                  f"train loss {loss:.4f} ppl {_ppl(loss):.2f}, {pl_module.train_count / elapsed:.0f} tokens/s",
                  flush=True)

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        self._valid_ppl, self._epoch_s = _ppl(pl_module.valid_loss), time.time() - self._t
        if self.path:
            self._write(trainer, trainer.num_training_batches)
        schedule = pl_module.schedule
        trained_lr, next_lr = schedule.lr_history[-1], trainer.optimizers[0].param_groups[0]["lr"]
        budget = getattr(pl_module, "budget", None)
        reason = (budget.stopped_because if budget is not None else "") or schedule.stopped_because
        then = f" ({reason})" if trainer.should_stop else (
            f", next lr {next_lr:.3g}" if next_lr != trained_lr else "")
        print(f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}: train ppl {_ppl(pl_module.train_loss):.3f}, "
              f"valid ppl {_ppl(pl_module.valid_loss):.3f}, lr {trained_lr:.3g}, {time.time() - self._t:.1f} s{then}",
              flush=True)


class AttemptUsage(pl.Callback):
    """A run's training time over its attempts: the CPU seconds, wall seconds and peak RSS of the processes that
    trained it, and how many there were (metrics.json cpu_s, wall_s, max_rss_mib, attempts).

    A process measures only itself (lmgrid.common.resources), so a run killed and resumed would report its last
    attempt alone (a PTB GRU run resumed near its end: 170 s of CPU against about 1,900 s uninterrupted).  Each
    checkpoint therefore stores the totals at its save: the earlier attempts' (loaded from the checkpoint this
    process resumed from) plus this process's CPU and wall seconds so far (wall from `started_at`, when this
    attempt's run() began).  An earlier attempt counts up to the checkpoint that was resumed from; what it did after
    that checkpoint (the epoch it was killed in) is lost work, done again by the next attempt, and not counted.
    A checkpoint written before this callback existed carries nothing: its earlier attempts count zero."""

    def __init__(self, started_at: float):
        self.started_at = started_at
        self.earlier = {"attempts": 0, "cpu_s": 0.0, "wall_s": 0.0, "max_rss_mib": 0.0}

    def totals(self, now: float) -> dict:
        """The earlier attempts' usage plus this process's, up to `now` (time.time())."""
        own = own_usage()
        return {"attempts": self.earlier["attempts"] + 1,
                "cpu_s": round(self.earlier["cpu_s"] + own["cpu_s"], 3),
                "wall_s": round(self.earlier["wall_s"] + now - self.started_at, 3),
                "max_rss_mib": max(self.earlier["max_rss_mib"], own["max_rss_mib"])}

    def state_dict(self):  # Lightning calls it as it saves each checkpoint: the totals at that save
        return self.totals(time.time())

    def load_state_dict(self, state):
        self.earlier = {**self.earlier, **state}
