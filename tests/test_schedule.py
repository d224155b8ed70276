"""The plateau schedule (lmgrid.neural.schedule) on given valid-NLL sequences: when it decays, when it stops, and
which reason it gives (`plateau`: converged by the rule; `budget`: the epoch cap came first)."""
from __future__ import annotations

import math

import pytest

from lmgrid.neural.schedule import STOP_REASONS, PlateauSchedule


def drive(schedule: PlateauSchedule, losses, lr=1.0):
    """Feed the losses epoch by epoch until the schedule stops; returns the rates the epochs trained with."""
    for loss in losses:
        lr = schedule.step(loss, lr)
        if schedule.stopped_because:
            break
    return schedule.lr_history


def last_epoch_is_best(schedule: PlateauSchedule, valid_nll: float, lr: float) -> float:
    """Mutant: the reported weights are the last epoch's, not the lowest valid NLL's."""
    new_lr = PlateauSchedule._decide(schedule, valid_nll, lr)
    schedule.best_epoch = schedule.epochs
    return new_lr


def best_only_on_improvement(schedule: PlateauSchedule, valid_nll: float, lr: float) -> float:
    """Mutant: the best weights move only on an improvement by more than min_delta (a smaller gain is dropped)."""
    best, best_epoch = schedule.best, schedule.best_epoch
    new_lr = PlateauSchedule._decide(schedule, valid_nll, lr)
    if valid_nll >= best - schedule.min_delta:
        schedule.best, schedule.best_epoch = best, best_epoch
    return new_lr


def test_a_plateau_decays_and_the_plateau_after_the_last_decay_stops(monkeypatch):
    """Kills: "stop on the first plateau", "decay without limit", and "the last epoch's weights are reported"
    (last_epoch_is_best, run below as the negative control: with min_delta 0 the stopping epoch did not improve, so
    the best epoch is the 6th, not the 7th)."""
    losses = [5.0, 4.0, 4.1, 3.9, 3.95, 3.8, 3.85, 3.0]
    s = PlateauSchedule(lr_decay=0.5, max_decays=2)
    rates = drive(s, losses)
    assert rates == [1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25]  # decays after epochs 3 and 5; epoch 7 ends the run
    assert s.stopped_because == "plateau" and s.decays == 2 and s.best_epoch == 6 < s.epochs
    monkeypatch.setattr(PlateauSchedule, "step", last_epoch_is_best)
    mutant = PlateauSchedule(lr_decay=0.5, max_decays=2)
    drive(mutant, losses)
    assert (mutant.stopped_because, mutant.best_epoch) == ("plateau", 7)  # the check above fails on it


def test_improvement_after_a_decay_keeps_training_going():
    """A run that keeps improving at the lower rate is never stopped. Kills: "stop after N epochs of the rate"."""
    s = PlateauSchedule(lr_decay=0.5, max_decays=1)
    drive(s, [5.0, 5.1] + [4.0 - 0.01 * k for k in range(30)])
    assert not s.stopped_because and s.decays == 1 and s.epochs == 32


def test_patience_min_delta_and_min_lr():
    s = PlateauSchedule(lr_decay=0.1, max_decays=5, patience=1, min_delta=0.05)
    assert drive(s, [2.0, 1.97, 1.96]) == [1.0, 1.0, 1.0]  # two epochs below min_delta: a plateau after the 2nd
    assert s.decays == 1 and s.best_epoch == 3  # the lowest loss is still the best weights
    s = PlateauSchedule(lr_decay=0.1, max_decays=5, min_lr=0.05)
    drive(s, [2.0, 2.0, 2.0, 2.0])
    assert s.stopped_because == "plateau" and s.lr_history == [1.0, 1.0, 0.1]  # 0.01 < min_lr: 0.1 is the last rate


def test_what_a_plateau_stop_guarantees_with_min_delta():
    """The docstring's guarantee, on a run whose gains shrink below min_delta: the last patience+1 epochs trained
    at the final rate and together lowered the best valid NLL by at most (patience+1) x min_delta; the last epoch
    may be the best one (it gained, but less than min_delta).  Kills "a gain below min_delta counts as an
    improvement" (min_delta ignored: the run would not stop at epoch 9) and "a gain below min_delta drops the best
    weights" (best_only_on_improvement: the best epoch would stay the 7th), both run below as negative controls."""
    min_delta, patience = 0.01, 1
    losses = [5.0, 4.5, 4.2, 4.195, 4.19, 4.0, 3.9, 3.895, 3.891, 3.5]
    s = PlateauSchedule(lr_decay=0.5, max_decays=1, patience=patience, min_delta=min_delta)
    drive(s, losses)
    assert s.stopped_because == "plateau" and s.epochs == 9
    window = range(s.epochs - patience - 1, s.epochs)  # the last patience+1 epochs, 0-based
    assert len({s.lr_history[i] for i in window}) == 1 and s.lr_history[-1] == 0.5
    best_before = min(losses[:window[0]])
    assert best_before - s.best <= (patience + 1) * min_delta + 1e-12
    assert s.best_epoch == s.epochs  # the last epoch is the best one: it gained 0.004 nats, below min_delta
    ignored = PlateauSchedule(lr_decay=0.5, max_decays=1, patience=patience, min_delta=0.0)
    drive(ignored, losses)
    assert (ignored.stopped_because, ignored.epochs) != ("plateau", 9)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(PlateauSchedule, "step", best_only_on_improvement)
        dropped = PlateauSchedule(lr_decay=0.5, max_decays=1, patience=patience, min_delta=min_delta)
        drive(dropped, losses)
    assert (dropped.stopped_because, dropped.epochs, dropped.best_epoch) == ("plateau", 9, 7)


def decays_spent_label(schedule: PlateauSchedule, valid_nll: float, lr: float) -> float:
    """Mutant: the old rule's reading of an ended schedule, where a run that has spent its decays and reaches the
    cap is called converged (lr_schedule_end) though it is still improving."""
    new_lr = schedule._decide(valid_nll, lr)
    if not schedule.stopped_because and 0 < schedule.max_epochs <= schedule.epochs:
        schedule.stopped_because = "plateau" if schedule.decays >= schedule.max_decays else "budget"
    return new_lr


def last_epoch_label(schedule: PlateauSchedule, valid_nll: float, lr: float) -> float:
    """Mutant: at the cap, a last epoch without a gain is called a plateau, whatever patience asks for."""
    bad_before = schedule.bad_epochs
    new_lr = schedule._decide(valid_nll, lr)
    if not schedule.stopped_because and 0 < schedule.max_epochs <= schedule.epochs:
        schedule.stopped_because = "plateau" if schedule.bad_epochs > bad_before else "budget"
    return new_lr


def test_a_stop_at_the_cap_while_improving_is_budget_and_a_flat_tail_is_plateau(monkeypatch):
    """Zaremba-style: the decays are spent by epoch 4 and the cap is 6.  Still improving by 0.05 nats an epoch at
    the cap: `budget`; flat at the last rate before the cap: `plateau`; at the cap one flat epoch of the two that
    patience 1 asks for: `budget`.  Kills the old rule's label, "a run that has spent its decays and stops is
    converged" (decays_spent_label), and "patience ignored at the cap" (last_epoch_label), both run below."""
    def run(losses, patience=0):
        s = PlateauSchedule(lr_decay=0.5, max_decays=2, decay_from=3, patience=patience, max_epochs=6)
        drive(s, losses)
        return s

    improving, half_flat = [5.0, 4.5, 4.2, 4.1, 4.05, 4.0], [5.0, 4.5, 4.2, 4.1, 4.05, 4.06]
    s = run(improving)
    assert (s.stopped_because, s.epochs, s.best_epoch) == ("budget", 6, 6)
    assert s.lr_history == [1.0, 1.0, 1.0, 0.5, 0.25, 0.25]
    flat = run([5.0, 4.5, 4.2, 4.1, 4.1, 4.0])
    assert (flat.stopped_because, flat.epochs) == ("plateau", 5)
    assert run(half_flat, patience=1).stopped_because == "budget"
    assert set(STOP_REASONS) == {"plateau", "budget", "budget-schedule"}  # the last: BudgetSchedule's

    with monkeypatch.context() as m:
        m.setattr(PlateauSchedule, "step", decays_spent_label)
        assert run(improving).stopped_because == "plateau"  # calls the still-improving run converged
    with monkeypatch.context() as m:
        m.setattr(PlateauSchedule, "step", last_epoch_label)
        assert run(half_flat, patience=1).stopped_because == "plateau"


def test_max_decays_zero_is_early_stopping_and_state_round_trips():
    s = PlateauSchedule(max_decays=0, patience=2, max_epochs=50)
    drive(s, [3.0, 2.0, 2.5, 2.4, 2.3, 1.0])
    assert s.stopped_because == "plateau" and s.epochs == 5
    copy = PlateauSchedule()
    copy.load_state_dict(s.state_dict())
    assert copy == s and s.stopped_because in STOP_REASONS


@pytest.mark.parametrize("losses", [[1.0] * 3, [3.0, 2.0, 1.0]])
def test_the_epoch_count_matches_the_history(losses):
    s = PlateauSchedule(max_decays=0)
    drive(s, losses)
    assert len(s.lr_history) == s.epochs


def test_fixed_decay_from_an_epoch_then_the_plateau_rule_ends_the_run():
    """Zaremba-style decay (lr_decay_from_epoch): improving epochs from decay_from on still decay, and once the
    decays are spent the run ends only on a plateau.  Kills: "decay_from ignored" (no decay while improving),
    and "stop as soon as the decays are spent" (the still-improving epoch after the last decay would end it)."""
    s = PlateauSchedule(lr_decay=0.5, max_decays=2, decay_from=3)
    # epochs 1-2 improve at lr 1; epochs 3 and 4 improve and decay anyway; epoch 5 still improves (runs on);
    # epoch 6 does not improve: the plateau after the last decay ends the run.
    assert drive(s, [5.0, 4.0, 3.5, 3.3, 3.25, 3.26, 3.0]) == [1.0, 1.0, 1.0, 0.5, 0.25, 0.25]
    assert s.stopped_because == "plateau" and s.best_epoch == 5
    broken = PlateauSchedule(lr_decay=0.5, max_decays=2, decay_from=0)  # the rule without the fixed decay
    assert drive(broken, [5.0, 4.0, 3.5, 3.3, 3.25, 3.26, 3.0]) != s.lr_history


def test_zaremba_small_rates():
    """presets/zaremba_small.yaml's schedule gives Zaremba et al.'s rates: 5 epochs at the first rate, then halved
    after every epoch, 13 epochs, ended by the budget.  Kills an off-by-one in decay_from (decay after epoch 4)."""
    s = PlateauSchedule(lr_decay=0.5, max_decays=8, decay_from=5, patience=13, max_epochs=13)
    drive(s, [6.0 - 0.1 * k for k in range(20)], lr=20.0)
    assert s.lr_history == [20.0] * 5 + [20.0 * 0.5 ** k for k in range(1, 9)]
    assert s.stopped_because == "budget" and s.epochs == 13 and not math.isinf(s.best)
