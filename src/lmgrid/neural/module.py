"""The LightningModule: one nn.Module from lmgrid.models, trained and evaluated in either regime.

Losses are sums of NLL in nats over counted targets, divided by the count, so the valid "loss" is exactly
log(PPL) of the shared convention and never averages over padding.

Under DDP (`train.devices` > 1) each process holds a share of every global batch (lmgrid.neural.data).  DDP
averages the processes' gradients, so each process's loss is its NLL sum times the number of processes over the
global batch's count of targets: the averaged gradient is then exactly that of the global batch's mean NLL, as
in one process.  Epoch totals (train and valid NLL, targets) are summed over the processes, so every process
sees the same valid loss (early stopping, LR decay and checkpoints decide alike) and each token counts once.
"""
from __future__ import annotations

import math

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lmgrid.errors import LmgridError
from lmgrid.models import ModelConfig, build_model

from .data import IGNORE


def batch_nll(model, x: torch.Tensor, y: torch.Tensor, regime: str, state=None):
    """(sum of NLL in nats over the counted targets, their count, the model's new state).

    window: x [B, n_step-1], y [B]; the target is predicted at the last position of its window (state None:
    every window starts from zero). stream: x, y [B, T]; every non-IGNORE position is a target.
    """
    # In a window only the last position is a target: the output layer (the costliest part of a small model
    # with a large vocabulary) runs on that position alone.
    logits, state, _ = model(x, state, last_only=regime == "window")
    if regime == "window":
        logits = logits[:, -1]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1),
                          ignore_index=IGNORE, reduction="sum")
    return nll, (y != IGNORE).sum(), state


@torch.no_grad()
def evaluate(model, batches, regime: str, device) -> tuple[float, int]:
    """Total NLL (nats) and counted tokens over a split's batches, in order, state carried in stream mode."""
    was_training = model.training
    model.eval()
    total, count, state = 0.0, 0, None
    for x, y in batches:
        nll, n, state = batch_nll(model, x.to(device), y.to(device), regime, state if regime == "stream" else None)
        total += float(nll)
        count += int(n)
    model.train(was_training)
    return total, count


class LMModule(pl.LightningModule):
    def __init__(self, model_config: dict, regime: str, optimizer: str = "adam", lr: float = 1e-3,
                 momentum: float = 0.0, weight_decay: float = 0.0, lr_decay: float = 0.5, lr_patience: int = 0,
                 seed: int = 1):
        super().__init__()
        self.save_hyperparameters()
        self.model = build_model(ModelConfig(**model_config))
        self.regime = regime
        self._train_state = self._val_state = None
        self.reset_train_totals()
        self.valid_loss = math.nan
        self._plateau = None

    def reset_train_totals(self):
        self.train_nll, self.train_count = 0.0, 0

    def forward(self, x, state=None):
        return self.model(x, state)

    # -- training -----------------------------------------------------------------------------------------
    def _sum_over_processes(self, *values: float) -> list[float]:
        if self.trainer.world_size == 1:
            return list(values)
        total = torch.tensor(values, dtype=torch.float64, device=self.device)
        return self.trainer.strategy.reduce(total, reduce_op="sum").tolist()

    def on_train_epoch_start(self):
        # Dropout noise depends on (seed, epoch) only, so a run resumed at an epoch boundary draws exactly what an
        # uninterrupted run draws (the data order is seeded the same way, in data.BatchIndices).  Under DDP each
        # process draws its own noise; process 0 draws what a single process draws.
        torch.manual_seed(self.hparams.seed * 1_000_003 + self.current_epoch + 1_000_000_007 * self.global_rank)
        self._train_state = None
        self.reset_train_totals()

    def training_step(self, batch, batch_idx):
        x, y = batch
        nll, n, state = batch_nll(self.model, x, y, self.regime, self._train_state)
        if self.regime == "stream":
            self._train_state = self.model.detach_state(state)  # truncated BPTT: carry the state, not the graph
        if self.trainer.world_size == 1:
            loss = nll / n
        else:
            n_global = n.clone()
            torch.distributed.all_reduce(n_global)  # the global batch's targets
            loss = nll * self.trainer.world_size / n_global
        if not torch.isfinite(loss):
            raise LmgridError(
                f"training loss became {float(loss.detach())} at epoch {self.current_epoch + 1}, "
                f"step {self.global_step + 1} "
                f"(batch {batch_idx + 1}): lower the learning rate (lr={self.optimizers().param_groups[0]['lr']:g})")
        self.train_nll += float(nll.detach())
        self.train_count += int(n)
        return loss

    @property
    def train_loss(self) -> float:
        return self.train_nll / self.train_count if self.train_count else math.nan

    # -- validation ---------------------------------------------------------------------------------------
    def on_validation_epoch_start(self):
        self._val_state, self._val_nll, self._val_count = None, 0.0, 0

    def validation_step(self, batch, batch_idx):
        x, y = batch
        nll, n, state = batch_nll(self.model, x, y, self.regime, self._val_state)
        self._val_state = state if self.regime == "stream" else None
        self._val_nll += float(nll)
        self._val_count += int(n)

    def on_validation_epoch_end(self):
        if self.trainer.world_size > 1:
            # Every process's train totals and its share of valid, summed: the same numbers on every process.
            self.train_nll, self.train_count, self._val_nll, self._val_count = self._sum_over_processes(
                self.train_nll, self.train_count, self._val_nll, self._val_count)
            self.train_count, self._val_count = int(self.train_count), int(self._val_count)
        loss = self._val_nll / max(self._val_count, 1)
        if not math.isfinite(loss):
            raise LmgridError(f"validation loss became {loss} after epoch {self.current_epoch + 1}: "
                              f"lower the learning rate (lr={self.optimizers().param_groups[0]['lr']:g})")
        self.valid_loss = loss
        self.log("valid_loss", loss, prog_bar=False, logger=False)
        if self._plateau is not None and not self.trainer.sanity_checking:
            self._plateau.step(loss)

    # -- optimisation -------------------------------------------------------------------------------------
    def configure_optimizers(self):
        hp = self.hparams
        if hp.optimizer == "sgd":
            opt = torch.optim.SGD(self.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
        elif hp.optimizer == "adam":
            opt = torch.optim.Adam(self.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
        else:
            raise LmgridError(f"train.optimizer: unknown optimizer {hp.optimizer!r} (expected sgd or adam)")
        # Divide the learning rate by 1/lr_decay when valid PPL has not improved for lr_patience+1 epochs. Stepped by
        # hand in on_validation_epoch_end, i.e. before the epoch's checkpoint is written: Lightning's own stepping
        # of plateau schedulers comes after it and is skipped on a restart, so a resumed run would diverge.
        self._plateau = None
        if hp.lr_decay < 1:
            self._plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=hp.lr_decay,
                                                                       patience=hp.lr_patience)
        return opt

    def on_save_checkpoint(self, checkpoint):
        if self._plateau is not None:
            checkpoint["lmgrid_plateau"] = self._plateau.state_dict()

    def on_load_checkpoint(self, checkpoint):
        self._plateau_state = checkpoint.get("lmgrid_plateau")

    def on_train_start(self):
        state = getattr(self, "_plateau_state", None)
        if state is not None and self._plateau is not None:
            self._plateau.load_state_dict(state)
