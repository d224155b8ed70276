"""Weight averaging (`train.average_from_epoch`): validate, keep and report the mean of the weights over the
training steps since an epoch, while the optimizer keeps training the weights themselves.

This is the averaging of averaged SGD (Polyak & Juditsky 1992), which AWD-LSTM (Merity et al. 2018, NT-ASGD)
switches on once the validation loss stalls: at a small, constant learning rate SGD's iterates wander around a
minimum, and their mean sits closer to it than any one of them.  Here the switch is an epoch chosen in the config,
like the fixed decays (`lr_decay_from_epoch`), so that a run's recipe does not depend on its own noise.

* From the first step of epoch `start_epoch` (1-based) on, after every optimizer step the running mean
  avg <- avg + (w - avg) / (k + 1) over the k + 1 steps so far takes in the new weights w.
* For validation the mean is swapped into the model, and it stays there until the next epoch's training starts,
  so the epoch's checkpoint (best.ckpt, last.ckpt) holds the mean: the weights that were validated are the
  weights the run keeps, scores on test and writes to model.ckpt.  The plateau schedule reads that validation.
* The training weights, the step count and the mean travel in the checkpoint (this callback's state), so a run
  resumed after a kill continues exactly as an uninterrupted one.

Before `start_epoch` nothing changes: the run validates its training weights, as without averaging.
"""
from __future__ import annotations

import pytorch_lightning as pl
import torch


class WeightAverage(pl.Callback):
    def __init__(self, start_epoch: int):
        if start_epoch < 1:
            raise ValueError(f"start_epoch must be >= 1, got {start_epoch}")
        self.start_epoch = start_epoch
        self.steps = 0  # optimizer steps in the mean
        self.mean: list[torch.Tensor] | None = None
        self.held: list[torch.Tensor] | None = None  # the training weights while the mean is in the model

    @staticmethod
    def _params(pl_module) -> list[torch.Tensor]:
        return list(pl_module.parameters())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch + 1 < self.start_epoch:
            return
        weights = [p.detach() for p in self._params(pl_module)]
        with torch.no_grad():
            if self.steps == 0:
                self.mean = [w.clone() for w in weights]
            else:
                torch._foreach_lerp_(self.mean, weights, 1.0 / (self.steps + 1))
        self.steps += 1

    def on_validation_epoch_start(self, trainer, pl_module):
        if trainer.sanity_checking or self.steps == 0 or self.held is not None:
            return
        with torch.no_grad():
            params = self._params(pl_module)
            self.held = [p.detach().clone() for p in params]
            for p, m in zip(params, self.mean):
                p.copy_(m)

    def on_train_epoch_start(self, trainer, pl_module):
        # A resumed run's tensors come from the checkpoint on the CPU (restored before or after on_fit_start,
        # depending on the strategy; always before this hook): put them where the model is.
        device = next(pl_module.parameters()).device
        for name in ("mean", "held"):
            tensors = getattr(self, name)
            if tensors is not None:
                setattr(self, name, [t.to(device) for t in tensors])
        self._give_back(pl_module)

    def _give_back(self, pl_module) -> None:
        """The training weights back into the model (the mean, which the model held, stays in self.mean)."""
        if self.held is None:
            return
        with torch.no_grad():
            for p, w in zip(self._params(pl_module), self.held):
                p.copy_(w)
        self.held = None

    def state_dict(self):
        return {"start_epoch": self.start_epoch, "steps": self.steps,
                "mean": None if self.mean is None else [m.detach().cpu() for m in self.mean],
                "held": None if self.held is None else [w.detach().cpu() for w in self.held]}

    def load_state_dict(self, state):
        if state["start_epoch"] != self.start_epoch:
            raise ValueError(f"checkpoint averages from epoch {state['start_epoch']}, this run from {self.start_epoch}")
        self.steps = state["steps"]
        self.mean, self.held = state["mean"], state["held"]
