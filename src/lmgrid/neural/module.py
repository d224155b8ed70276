"""The LightningModule: one nn.Module from lmgrid.models, trained and evaluated in either regime.

Losses are sums of NLL in nats over counted targets, divided by the count, so the valid "loss" is exactly
log(PPL) of the shared convention and never averages over padding.

The stream regime's training loss is a chunk's NLL sum over a constant, the positions of a full chunk
(`chunk_positions`: rows x bptt over all processes), not over the chunk's own count of targets.  Its
sentence-aligned rows differ in length, so the last chunks hold few targets and much tail padding (5,000 lines of
PTB in 20 rows: 6 of 700 in the last).  A mean over those few gave each 100x the weight of a target in a full
chunk, and at SGD lr 20 with clipping a whole step along a 6-token gradient just before validation: it raised the
PPL of 200 valid sentences from 865 to 1054 (lmgrid.bench vs-plain's gap to the plain loop).  Over the constant
every target weighs the same whatever padding its chunk holds, and a full chunk's loss is its mean, as before.
The window regime has no padding: its loss is the batch's mean.

Under DDP (`train.devices` > 1) each process holds a share of every global batch (lmgrid.neural.data).  DDP
averages the processes' gradients, so each process's loss is its NLL sum times the number of processes over the
global batch's count of targets (stream: over chunk_positions): the averaged gradient is then exactly that of the
global batch's loss in one process.  The divergence check reads each process's own mean NLL, not that scaled loss.  Epoch totals (train and valid NLL, targets) are summed over the processes, so every process
sees the same valid loss (early stopping, LR decay and checkpoints decide alike) and each token counts once.
"""
from __future__ import annotations

import math

import pytorch_lightning as pl
import torch

from lmgrid.common.errors import LmgridError
from lmgrid.models import ModelConfig, build_model
from lmgrid.data.ppl import perplexity

from lmgrid.neural.evaluation import batch_nll, corpus_order, evaluate  # noqa: F401 - also imported from here
from lmgrid.neural.schedule import BudgetSchedule, PlateauSchedule

# A training batch whose mean NLL exceeds this many times ln(V), the loss of the uniform model that training starts
# near, has diverged even if it is still finite (an lr of 1e30 gives ~1e32 nats on some CPUs, inf or NaN on others).
DIVERGED_LOSS_FACTOR = 3.0


# Devices whose floating-point parameters torch.optim.Adam(fused=True) updates in one kernel per parameter.
FUSED_ADAM_DEVICES = ("cpu", "cuda")


def fused_adam_applies(params) -> bool:
    """Whether Adam takes its fused kernel: every parameter a floating-point tensor on a device it covers.

    Why: the default Adam step on the CPU is eight passes over each parameter (moments, square root, division,
    update), and with a tied 10,000 x 600 table updated every step those passes were a fifth of the PTB RNN's
    training step; the fused kernel makes one pass.  It computes the same update, rounded differently in the last
    place (tests/test_fused_adam.py bounds the difference), so a model trained before and after this choice agrees
    to rounding, not to the bit (docs/benchmarks.md)."""
    return bool(params) and all(p.is_floating_point() and p.device.type in FUSED_ADAM_DEVICES for p in params)


class LMModule(pl.LightningModule):
    def __init__(self, model_config: dict, regime: str, optimizer: str = "adam", lr: float = 1e-3,
                 momentum: float = 0.0, weight_decay: float = 0.0, schedule: dict | None = None,
                 seed: int = 1, finite_check_every: int = 100, budget: dict | None = None, chunk_positions: int = 0):
        super().__init__()
        self.save_hyperparameters()
        self.model = build_model(ModelConfig(**model_config))
        self.regime = regime
        self._train_state = self._val_state = None
        self.reset_train_totals()
        self.valid_loss, self.valid_count = math.nan, 0
        self.schedule = PlateauSchedule(**(schedule or {}))
        # train.budget_tokens > 0: the rate of every step from the tokens trained so far, and the stop at the budget
        self.budget = BudgetSchedule(**budget) if budget else None
        self._step_tokens = 0
        self.max_loss_nats = DIVERGED_LOSS_FACTOR * math.log(model_config["vocab_size"])

    def reset_train_totals(self):
        # Summed on the device, step after step, and read on the host only every finite_check_every steps, when a
        # progress line is printed and at the epoch's end: a per-step float()/int()/`if loss` would stall a GPU.
        # [NLL sum, target count, steps this epoch, first non-finite step of the epoch (0 = none), that step's loss]
        self._train_sums = None
        self._epoch_start_step = self.global_step if self._trainer is not None else 0
        self._train_totals = None  # (nll, count) over every process, fixed when the epoch's validation ends

    def _running_train_totals(self) -> tuple[float, int]:
        if self._train_totals is not None:
            return self._train_totals
        if self._train_sums is None:
            return 0.0, 0
        nll, count = self._train_sums[:2].tolist()
        return nll, int(count)

    @property
    def train_nll(self) -> float:
        return self._running_train_totals()[0]

    @property
    def train_count(self) -> int:
        return self._running_train_totals()[1]

    @property
    def train_loss(self) -> float:
        nll, count = self._running_train_totals()
        return nll / count if count else math.nan

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

    def on_train_batch_start(self, batch, batch_idx):
        if self.budget is not None:  # the rate of this step: from the tokens trained before it
            self._set_lr(self.budget.rate())

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.budget is not None and self.budget.step(self._step_tokens):
            self._set_lr(self.budget.rate())  # min_lr: the rate the schedule ends at, as the epoch log reads it
            self.trainer.should_stop = True  # Lightning validates, checkpoints, and ends the run here, mid-epoch

    def _set_lr(self, lr: float) -> None:
        opt = self.optimizers()
        for group in getattr(opt, "optimizer", opt).param_groups:
            group["lr"] = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        nll, n, state = batch_nll(self.model, x, y, self.regime, self._train_state)
        if self.regime == "stream":
            self._train_state = self.model.detach_state(state)  # truncated BPTT: carry the state, not the graph
        n_global = n
        if self.trainer.world_size > 1:
            n_global = n.clone()
            torch.distributed.all_reduce(n_global)  # the global batch's targets
        # Stream: over a full chunk's positions, so a target's weight does not depend on its chunk's padding
        # (module docstring); window: the global batch's mean.
        loss = nll * self.trainer.world_size / (self.hparams.chunk_positions or n_global)
        if self.budget is not None:  # the step's training tokens (every process's): a host read, budget runs only
            self._step_tokens = int(n_global)
        # The divergence check reads this process's own mean NLL: the loss above is up to world-size times it (a
        # process holding one example of a short last batch), and a process with no targets has nothing to check.
        own_mean = torch.where(n > 0, nll.detach() / n.clamp(min=1), torch.zeros_like(nll.detach()))
        self._add_train_step(nll.detach(), n, own_mean)
        # On the CPU reading the sums costs nothing, so every step is checked and a diverged step stops the run
        # before the optimizer applies it; on a GPU a host read per step would stall it, so the device-side record
        # of the first bad step is read every finite_check_every steps (the message still names that step).
        if self.device.type == "cpu" or (batch_idx + 1) % self.hparams.finite_check_every == 0:
            self.check_finite()
        return loss

    def _add_train_step(self, nll: torch.Tensor, n: torch.Tensor, loss: torch.Tensor) -> None:
        """Add a step's NLL sum and count; record the first step whose mean NLL `loss` is bad (check_finite)."""
        # Device-side only: no host value enters (a host scalar copied to the GPU would synchronise too).
        if self._train_sums is None:
            self._train_sums = torch.zeros(5, dtype=torch.float64, device=nll.device)
        sums = self._train_sums
        sums[0] += nll.double()
        sums[1] += n
        sums[2] += 1
        first_bad = ~(loss.abs() <= self.max_loss_nats) & (sums[3] == 0)  # NaN, inf, or past the bound
        sums[3] = torch.where(first_bad, sums[2], sums[3])
        sums[4] = torch.where(first_bad, loss.double(), sums[4])

    def check_finite(self) -> None:
        """Raise the one-line error if a training loss so far this epoch was NaN, inf or above max_loss_nats (the
        divergence bound, DIVERGED_LOSS_FACTOR x ln V).  Under DDP the check is
        a collective that every process makes at the same step, so all of them stop together with the same line
        (one process raising alone would leave the others waiting in their next all-reduce until it times out)."""
        bad = (self._train_sums[3:] if self._train_sums is not None
               else torch.zeros(2, dtype=torch.float64, device=self.device))
        if self.trainer.world_size > 1:
            parts = [torch.empty_like(bad) for _ in range(self.trainer.world_size)]
            torch.distributed.all_gather(parts, bad.contiguous())
            bad = torch.stack(parts)
        per_process = bad.reshape(-1, 2).tolist()  # [[first bad step (0 = none), its loss], ...] per process
        hits = sorted((step, rank, value) for rank, (step, value) in enumerate(per_process) if step > 0)
        if hits:
            step, rank, value = hits[0]
            step += self._epoch_start_step  # the run's optimizer step, as Lightning counts them
            on = f" on process {rank} of {len(per_process)}" if len(per_process) > 1 else ""
            what = "non-finite" if not math.isfinite(value) else f"above the divergence bound {self.max_loss_nats:.2f}"
            raise LmgridError(
                f"training diverged at epoch {self.current_epoch + 1}, step {int(step)}{on}: batch loss {value:g} "
                f"nats is {what}; lower the learning rate (lr={self.optimizers().param_groups[0]['lr']:g})")

    # -- validation ---------------------------------------------------------------------------------------
    def on_validation_epoch_start(self):
        if not self.trainer.sanity_checking:
            self.check_finite()  # before validating (and checkpointing) weights a bad step has spoilt
        self._val_state, self._val_sums = None, None

    def validation_step(self, batch, batch_idx):
        x, y = batch
        nll, n, state = batch_nll(self.model, x, y, self.regime, self._val_state)
        self._val_state = state if self.regime == "stream" else None
        if self._val_sums is None:
            self._val_sums = torch.zeros(2, dtype=torch.float64, device=nll.device)
        self._val_sums[0] += nll.double()
        self._val_sums[1] += n

    def on_validation_epoch_end(self):
        val_nll, val_count = self._val_sums.tolist() if self._val_sums is not None else (0.0, 0)
        train_nll, train_count = self._running_train_totals()
        if self.trainer.world_size > 1:
            # Every process's train totals and its share of valid, summed: the same numbers on every process.
            train_nll, train_count, val_nll, val_count = self._sum_over_processes(
                train_nll, train_count, val_nll, val_count)
        self._train_totals = (train_nll, int(train_count))
        loss = val_nll / max(val_count, 1)
        try:
            perplexity(val_nll, max(int(val_count), 1))  # the one place that says when a PPL is not a number
        except ValueError as e:
            raise LmgridError(f"validation NLL after epoch {self.current_epoch + 1}: {e}; training diverged, lower the "
                              f"learning rate (lr={self.optimizers().param_groups[0]['lr']:g})") from None
        self.valid_loss, self.valid_count = loss, int(val_count)
        self.log("valid_loss", loss, prog_bar=False, logger=False)
        if not self.trainer.sanity_checking:
            # Stepped here, before the epoch's checkpoint is written (checkpoint callbacks run last), so the
            # schedule's state in last.ckpt is that after this epoch and a resumed run decides as an unbroken one.
            opt = self.optimizers()
            opt = getattr(opt, "optimizer", opt)
            lr = opt.param_groups[0]["lr"]
            new_lr = self.schedule.step(loss, lr)
            for group in opt.param_groups:
                group["lr"] = new_lr
            if self.schedule.stopped_because:
                self.trainer.should_stop = True

    # -- optimisation -------------------------------------------------------------------------------------
    def configure_optimizers(self):
        hp = self.hparams
        if hp.optimizer == "sgd":
            opt = torch.optim.SGD(self.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
        elif hp.optimizer == "adam":
            params = list(self.parameters())
            # A gradient scaler (fp16 mixed precision) unscales inside a fused step, after the clipping: not fused.
            scaled = getattr(getattr(self._trainer, "precision_plugin", None), "scaler", None) is not None
            opt = torch.optim.Adam(params, lr=hp.lr, weight_decay=hp.weight_decay,
                                   fused=fused_adam_applies(params) and not scaled)
        else:
            raise LmgridError(f"train.optimizer: unknown optimizer {hp.optimizer!r} (expected sgd or adam)")
        return opt

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        """Lightning's mixed-precision plugin refuses to clip for an optimizer that could unscale gradients itself
        (a fused one), whether or not a scaler exists.  Fused Adam is only chosen without a scaler
        (configure_optimizers), so its gradients are the true ones: they are clipped here by the same call the
        plugin makes, over the same parameters in the same order (torch.nn.utils.clip_grad_norm_)."""
        fused = getattr(optimizer, "optimizer", optimizer).defaults.get("fused")
        if fused and gradient_clip_val:
            if gradient_clip_algorithm not in (None, "norm"):
                raise LmgridError(f"gradient clipping by {gradient_clip_algorithm!r}: lmgrid clips by norm only")
            params = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_save_checkpoint(self, checkpoint):
        checkpoint["lmgrid_schedule"] = self.schedule.state_dict()
        if self.budget is not None:
            checkpoint["lmgrid_budget"] = self.budget.state_dict()

    def on_load_checkpoint(self, checkpoint):
        if "lmgrid_schedule" in checkpoint:
            self.schedule.load_state_dict(checkpoint["lmgrid_schedule"])
        if self.budget is not None and "lmgrid_budget" in checkpoint:
            self.budget.load_state_dict(checkpoint["lmgrid_budget"])
