"""When to lower the learning rate and when to stop: a plateau schedule on valid NLL.

The rule is the "newbob" schedule of Mikolov's RNNLM training (Mikolov et al. 2011, "RNNLM - Recurrent Neural
Network Language Modeling Toolkit"; Mikolov 2012, PhD thesis, ch. 3), in the form of PyTorch's
ReduceLROnPlateau with a stopping count:

* after each epoch, the epoch *improves* when valid NLL is below the best so far by more than `min_delta` nats;
* `patience` + 1 epochs in a row that do not improve are a *plateau*;
* on a plateau the learning rate is multiplied by `lr_decay`, up to `max_decays` times; the plateau that comes
  after the last decay ends the run (`lr_schedule_end`), and so does a decay that would take the rate below
  `min_lr` (`min_lr`);
* `epochs` is a safety cap only: a run that reaches it (`max_epochs`) did not converge by the rule, and says so.

A run therefore ends only after its valid NLL has stopped improving at its smallest learning rate: the last
epoch never improves, and the reported model is the best epoch's (the checkpoint of the lowest valid NLL).
With `max_decays: 0` the rule is plain early stopping with `patience`.

`decay_from` (> 0) adds the fixed decay of Zaremba et al. 2014 ("after epoch 4 the learning rate is halved
every epoch"): from epoch `decay_from` on, every epoch ends with a decay, improving or not, until the
`max_decays` are spent; after that the plateau rule above ends the run, so even then the last epoch is one
that did not improve on the best by more than `min_delta`.  It spends a fixed CPU budget on annealing rather
than waiting for plateaus at the higher rates.

Torch-free and stateful only through `state_dict`, so the schedule travels in the checkpoint and a resumed run
decides exactly as an uninterrupted one.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

# stopped_because values of metrics.json, and what ended the run
STOP_REASONS = {
    "lr_schedule_end": "valid NLL plateaued after the last learning-rate decay",
    "min_lr": "a further decay would take the learning rate below min_lr",
    "max_epochs": "the epoch cap was reached before the schedule ended (not converged by the rule)",
}


@dataclass
class PlateauSchedule:
    lr_decay: float = 0.5
    max_decays: int = 3
    patience: int = 0
    min_delta: float = 0.0
    min_lr: float = 0.0
    decay_from: int = 0
    best: float = math.inf
    best_epoch: int = 0
    bad_epochs: int = 0
    decays: int = 0
    epochs: int = 0
    stopped_because: str = ""
    lr_history: list = field(default_factory=list)  # the rate each epoch trained with

    def step(self, valid_nll: float, lr: float) -> float:
        """Record one epoch (its valid NLL, the rate it trained with); return the rate for the next epoch.
        Sets `stopped_because` when the run should end here."""
        self.epochs += 1
        self.lr_history.append(lr)
        fixed_decay = 0 < self.decay_from <= self.epochs and self.decays < self.max_decays
        if valid_nll < self.best - self.min_delta:
            self.best, self.best_epoch, self.bad_epochs = valid_nll, self.epochs, 0
            if not fixed_decay:
                return lr
        else:
            if valid_nll < self.best:  # better, but not by min_delta: still the best weights, not an improvement
                self.best, self.best_epoch = valid_nll, self.epochs
            self.bad_epochs += 1
            if self.bad_epochs <= self.patience and not fixed_decay:
                return lr
        self.bad_epochs = 0
        if self.decays >= self.max_decays or self.lr_decay >= 1:
            self.stopped_because = "lr_schedule_end"
            return lr
        new_lr = lr * self.lr_decay
        if new_lr < self.min_lr:
            self.stopped_because = "min_lr"
            return lr
        self.decays += 1
        return new_lr

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, list(value) if key == "lr_history" else value)
