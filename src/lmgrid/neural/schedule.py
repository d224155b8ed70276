"""When to lower the learning rate and when to stop: a plateau schedule on valid NLL.

The rule is the "newbob" schedule of Mikolov's RNNLM training (Mikolov et al. 2011, "RNNLM - Recurrent Neural
Network Language Modeling Toolkit"; Mikolov 2012, PhD thesis, ch. 3), in the form of PyTorch's
ReduceLROnPlateau with a stopping count:

* after each epoch, the epoch *improves* when valid NLL is below the best so far by more than `min_delta` nats;
* `patience` + 1 epochs in a row at one learning rate that do not improve are a *plateau*;
* on a plateau the learning rate is multiplied by `lr_decay`, up to `max_decays` times; a plateau at the last
  rate (the decays are spent, or the next one would take the rate below `min_lr`) ends the run: `plateau`;
* `max_epochs` (config `epochs`) is the budget: a run that reaches it before such a plateau ends with `budget`,
  whether or not its last epochs still improved.  Only `plateau` means converged by this rule.

What `plateau` guarantees, and no more: the last `patience` + 1 epochs all trained at the run's final learning
rate, and none of them lowered the best valid NLL so far by more than `min_delta` nats, so over those epochs the
best valid NLL fell by at most (`patience` + 1) x `min_delta` nats in all (valid PPL by a factor of at most
exp((`patience` + 1) x `min_delta`): 0.2% for one epoch at 0.002 nats).  An epoch that gains less than `min_delta` still holds the best weights, so with
`min_delta` > 0 the last epoch can be the best one (`best_epoch` == `epochs`); with `min_delta` 0 it never is.
It says nothing about what a lower rate, or more epochs at this one beyond the window, would still gain.
The reported model is the best epoch's (the checkpoint of the lowest valid NLL).
With `max_decays: 0` the rule is plain early stopping with `patience`.

`decay_from` (> 0) adds the fixed decay of Zaremba et al. 2014 ("after epoch 4 the learning rate is halved
every epoch"; their code decays after epochs 5, 6, ...): from epoch `decay_from` on, every epoch ends with a
decay, improving or not, until the `max_decays` are spent; then the plateau rule above decides, at the last rate.

Torch-free and stateful only through `state_dict`, so the schedule travels in the checkpoint and a resumed run
decides exactly as an uninterrupted one.

`BudgetSchedule` (`train.budget_tokens` > 0) replaces this rule's decays and stop: a cosine over a fixed budget of
training tokens that ends the run at the budget (`budget-schedule`); the plateau schedule then only keeps the record.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

# stopped_because values of metrics.json, and what ended the run
STOP_REASONS = {
    "plateau": "converged by the rule: patience+1 epochs at the last learning rate without a gain above min_delta",
    "budget": "the epoch cap (train.epochs) came first; not converged by the rule (it may still have been improving)",
    "budget-schedule": "the run trained its train.budget_tokens, where its cosine schedule (BudgetSchedule) ends: the "
                       "designed end, with the final weights kept",
}


@dataclass
class PlateauSchedule:
    lr_decay: float = 0.5
    max_decays: int = 3
    patience: int = 0
    min_delta: float = 0.0
    min_lr: float = 0.0
    decay_from: int = 0
    max_epochs: int = 0  # the budget; 0: no cap known here (the caller stops the run)
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
        new_lr = self._decide(valid_nll, lr)
        if not self.stopped_because and 0 < self.max_epochs <= self.epochs:
            self.stopped_because = "budget"
        return new_lr

    def _decide(self, valid_nll: float, lr: float) -> float:
        self.epochs += 1
        self.lr_history.append(lr)
        # Is there a rate below this one? Not when the decays are spent, there is no decay, or it is below min_lr.
        can_decay = self.decays < self.max_decays and self.lr_decay < 1 and lr * self.lr_decay >= self.min_lr
        fixed_decay = 0 < self.decay_from <= self.epochs and can_decay
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
        if not can_decay:  # a plateau at the last rate this schedule allows
            self.stopped_because = "plateau"
            return lr
        self.bad_epochs = 0  # a new rate starts a new count, so a plateau is always at one rate
        self.decays += 1
        return lr * self.lr_decay

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, list(value) if key == "lr_history" else value)


@dataclass
class BudgetSchedule:
    """A fixed compute budget (`train.budget_tokens`) and a learning rate that anneals to its end.

    Counted in training tokens (the targets each optimizer step trains on, as an epoch's train tokens are counted),
    not in seconds: the schedule, and so the result, does not depend on the machine or its load, and a resumed or
    re-run cell computes the same bits.  The rate of the step that starts after `seen` tokens:

    * a linear warm-up from 0 to `lr` over the first `warmup` tokens (`train.budget_warmup_tokens`; 0: none);
    * then a cosine from `lr` to `min_lr` over the rest of the budget:
      min_lr + (lr - min_lr) x (1 + cos(pi x (seen - warmup) / (budget - warmup))) / 2, and min_lr from the budget on.

    The run stops after the step that reaches the budget (mid-epoch when that is where it falls), so it trains
    between `budget` and `budget` + one batch's tokens - 1.  Torch-free and stateful only through `state_dict`, so
    the position travels in the checkpoint and a resumed run continues the same schedule.
    """
    budget: int
    lr: float
    min_lr: float = 0.0
    warmup: int = 0
    seen: int = 0  # training tokens of the optimizer steps taken so far
    stopped_because: str = ""

    def rate(self, seen: int | None = None) -> float:
        """The learning rate of a step that starts after `seen` tokens (default: the position now)."""
        t = self.seen if seen is None else seen
        if t < self.warmup:
            return self.lr * t / self.warmup
        if t >= self.budget:
            return self.min_lr
        progress = (t - self.warmup) / (self.budget - self.warmup)
        return self.min_lr + (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * progress)) / 2.0

    def step(self, tokens: int) -> bool:
        """Count one optimizer step's training tokens; True when the budget is reached (the run should end)."""
        self.seen += int(tokens)
        if self.seen >= self.budget:
            self.stopped_because = "budget-schedule"
        return bool(self.stopped_because)

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)
