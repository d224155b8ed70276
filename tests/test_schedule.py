"""The plateau schedule (lmgrid.neural.schedule) on given valid-NLL sequences: when it decays, when it stops."""
from __future__ import annotations

import pytest

from lmgrid.neural.schedule import STOP_REASONS, PlateauSchedule


def drive(schedule: PlateauSchedule, losses, lr=1.0):
    """Feed the losses epoch by epoch until the schedule stops; returns the rates the epochs trained with."""
    for loss in losses:
        lr = schedule.step(loss, lr)
        if schedule.stopped_because:
            break
    return schedule.lr_history


def test_a_plateau_decays_and_the_plateau_after_the_last_decay_stops():
    """Kills: "stop on the first plateau" and "decay without limit"."""
    s = PlateauSchedule(lr_decay=0.5, max_decays=2)
    rates = drive(s, [5.0, 4.0, 4.1, 3.9, 3.95, 3.8, 3.85, 3.0])
    assert rates == [1.0, 1.0, 1.0, 0.5, 0.5, 0.25, 0.25]  # decays after epochs 3 and 5; epoch 7 ends the run
    assert s.stopped_because == "lr_schedule_end" and s.decays == 2 and s.best_epoch == 6
    assert s.best_epoch < s.epochs  # never stopped on an improving epoch


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
    assert s.stopped_because == "min_lr" and s.lr_history == [1.0, 1.0, 0.1]


def test_max_decays_zero_is_early_stopping_and_state_round_trips():
    s = PlateauSchedule(max_decays=0, patience=2)
    drive(s, [3.0, 2.0, 2.5, 2.4, 2.3, 1.0])
    assert s.stopped_because == "lr_schedule_end" and s.epochs == 5
    copy = PlateauSchedule()
    copy.load_state_dict(s.state_dict())
    assert copy == s and set(STOP_REASONS) >= {s.stopped_because, "max_epochs"}


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
    assert s.stopped_because == "lr_schedule_end" and s.best_epoch == 5
    broken = PlateauSchedule(lr_decay=0.5, max_decays=2, decay_from=0)  # the rule without the fixed decay
    assert drive(broken, [5.0, 4.0, 3.5, 3.3, 3.25, 3.26, 3.0]) != s.lr_history
