"""The budget schedule (train.budget_tokens, lmgrid.neural.schedule.BudgetSchedule): a fixed budget of training
tokens, a cosine from lr to min_lr over exactly that budget, stepped per optimizer step, and a run that ends at its
budget (stopped_because budget-schedule), resumes to the same bits, and changes nothing at budget 0."""
from __future__ import annotations

import csv
import math

import pytest

from lmgrid.common.errors import LmgridError
from lmgrid.neural import module as module_mod
from lmgrid.neural import train as train_mod
from lmgrid.neural.schedule import STOP_REASONS, BudgetSchedule

from test_neural_support import TINY, killed_at_epoch, tiny_corpus
from test_neural_train import train

HP = dict(epochs=3, lr=0.01, min_lr=0.001)


def n_train(corpus, tmp_path) -> int:
    """The train tokens per epoch, as the run counts them (what the budget is counted in)."""
    from test_neural_train import spec_of
    return train_mod.build(spec_of(corpus, tmp_path / "count", **HP), threads=1).n_train


def log(run_dir):
    return [r[:-1] for r in csv.reader((run_dir / "log.csv").open())]  # wall_s aside


def test_the_rate_is_the_cosine_over_the_budget_after_the_warm_up():
    """Hand-computed points of budget 1000, warm-up 200, lr 1, min_lr 0.1.  Kills: a schedule that ignores the budget
    (its cosine over anything but budget - warmup tokens), no warm-up, a rate that does not end at min_lr, and a run
    that does not stop at the budget (the negative control: one token short does not stop)."""
    s = BudgetSchedule(budget=1000, lr=1.0, min_lr=0.1, warmup=200)
    assert s.rate(0) == 0.0 and s.rate(100) == 0.5 and s.rate(200) == 1.0
    assert s.rate(400) == pytest.approx(0.1 + 0.9 * (1 + math.sqrt(0.5)) / 2, abs=1e-12)  # a quarter of the cosine
    assert s.rate(600) == pytest.approx(0.55, abs=1e-12)  # half way: the mean of lr and min_lr
    assert s.rate(1000) == 0.1 and s.rate(5000) == 0.1
    assert not s.step(999) and s.rate() > 0.1  # the negative control: one token short
    assert s.step(1) and s.stopped_because == "budget-schedule" and s.rate() == 0.1
    assert "budget-schedule" in STOP_REASONS and "budget" in STOP_REASONS


def test_a_run_ends_at_its_budget_mid_epoch_and_says_budget_schedule(tmp_path, monkeypatch):
    """A budget of 1.5 epochs: the run trains the budget to within one batch (64 windows), stops in epoch 2, says
    budget-schedule, and reports its last state (valid PPL of the log's last row; best_epoch the last).  Kills: a
    budget counted per epoch or not at all, a stop not at the budget, a run reported as `budget` (the epoch cap), a
    final valid score not the last state's.  The negative control: a schedule that never stops runs to the epoch cap."""
    corpus = tiny_corpus(tmp_path)
    n = n_train(corpus, tmp_path)
    budget = n * 3 // 2
    metrics, run_dir = train(corpus, tmp_path / "a", budget_tokens=budget, **HP)
    assert metrics["stopped_because"] == "budget-schedule" and metrics["epochs"] == 2
    assert budget <= metrics["budget_tokens_trained"] < budget + TINY["batch_size"]
    assert metrics["best_epoch"] == 2
    rows = log(run_dir)
    assert float(rows[-1][5]) == pytest.approx(metrics["valid"]["ppl"], rel=1e-5)  # the last state's valid PPL
    assert float(rows[-1][6]) == pytest.approx(HP["min_lr"], rel=1e-5)  # it ended at min_lr

    monkeypatch.setattr(BudgetSchedule, "step", lambda self, tokens: False)  # the mutant: the budget ignored
    broken, _ = train(corpus, tmp_path / "b", budget_tokens=budget, **HP)
    assert broken["stopped_because"] == "budget" and broken["epochs"] == 3


def test_the_final_state_is_reported_even_when_an_earlier_epoch_validated_better(tmp_path):
    """At a constant rate of 0.1 (lr = min_lr) valid PPL rises in the last, partial epoch of a 2.5-epoch budget; the
    run reports that final state (valid PPL of the last row, best_epoch the last), not the lowest valid PPL.  Kills:
    the best epoch's checkpoint evaluated under a budget schedule (the check that the last row is not the lowest
    is the control that this corpus can tell the two apart)."""
    corpus = tiny_corpus(tmp_path)
    budget = n_train(corpus, tmp_path) * 5 // 2
    metrics, _ = train(corpus, tmp_path / "a", budget_tokens=budget, epochs=3, lr=0.1, min_lr=0.1)
    history = metrics["valid_ppl_history"]
    assert metrics["stopped_because"] == "budget-schedule" and len(history) == 3
    assert history[-1] > min(history)  # the control: the last state is not the best one
    assert metrics["valid"]["ppl"] == history[-1] and metrics["best_epoch"] == 3


def _step_rates(corpus, root, monkeypatch, **hp):
    """The (tokens trained before the step, rate of the step) of every optimizer step of a run."""
    real, seen = module_mod.LMModule.training_step, []

    def probed(self, batch, batch_idx):
        seen.append((self.budget.seen, self.optimizers().param_groups[0]["lr"]))
        return real(self, batch, batch_idx)

    monkeypatch.setattr(module_mod.LMModule, "training_step", probed)
    metrics, run_dir = train(corpus, root, **hp)
    monkeypatch.setattr(module_mod.LMModule, "training_step", real)
    return seen, metrics, run_dir


def test_every_step_trains_at_the_cosine_of_the_tokens_before_it(tmp_path, monkeypatch):
    """Each optimizer step's rate is min_lr + (lr - min_lr)(1 + cos(pi t / B)) / 2 of the tokens t trained before
    it, with a warm-up lr t / W before that; the rate changes within an epoch.  Kills: per-epoch stepping (the
    negative control, run here: the rate set at an epoch's first step only) and a schedule that ignores the budget."""
    corpus = tiny_corpus(tmp_path)
    n = n_train(corpus, tmp_path)
    budget, warmup = 2 * n, n // 4
    lr, lo = HP["lr"], HP["min_lr"]

    def want(t):
        if t < warmup:
            return lr * t / warmup
        return lo + (lr - lo) * (1 + math.cos(math.pi * (t - warmup) / (budget - warmup))) / 2

    seen, metrics, _ = _step_rates(corpus, tmp_path / "a", monkeypatch, budget_tokens=budget,
                                   budget_warmup_tokens=warmup, **HP)
    assert metrics["stopped_because"] == "budget-schedule" and len(seen) > 10
    assert [t for t, _ in seen] == sorted(t for t, _ in seen) and seen[0][0] == 0
    for t, rate in seen:
        assert rate == pytest.approx(want(t), rel=1e-12, abs=1e-15)
    assert len({rate for _, rate in seen[: len(seen) // 2]}) > 3  # it moves within the first epoch

    real = module_mod.LMModule.on_train_batch_start
    monkeypatch.setattr(module_mod.LMModule, "on_train_batch_start",  # the mutant: per-epoch stepping
                        lambda self, batch, batch_idx: real(self, batch, batch_idx) if batch_idx == 0 else None)
    broken, _, _ = _step_rates(corpus, tmp_path / "b", monkeypatch, budget_tokens=budget,
                               budget_warmup_tokens=warmup, **HP)
    assert any(rate != pytest.approx(want(t), rel=1e-12, abs=1e-15) for t, rate in broken)


def test_a_run_killed_mid_schedule_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """Budget 2.5 epochs, killed as epoch 2 starts, resumed: the same log, test PPL and tokens trained as an unbroken
    run.  Negative control, run here: kills "the schedule's position not in the checkpoint" (BudgetSchedule's state
    not restored): the resumed run starts its cosine again and ends elsewhere."""
    corpus = tiny_corpus(tmp_path)
    budget = n_train(corpus, tmp_path) * 5 // 2
    hp = dict(HP, budget_tokens=budget, regime="stream", arch="gru", dropout=0.2)
    straight, straight_dir = train(corpus, tmp_path / "a", **hp)

    def killed_then_resumed(root):
        with killed_at_epoch(1):
            train(corpus, root, **hp)
        return train(corpus, root, **hp)

    resumed, resumed_dir = killed_then_resumed(tmp_path / "b")
    assert straight["stopped_because"] == "budget-schedule" and straight["epochs"] == 3
    assert log(resumed_dir) == log(straight_dir)
    assert resumed["test"] == straight["test"] and resumed["valid"] == straight["valid"]
    assert resumed["budget_tokens_trained"] == straight["budget_tokens_trained"]

    monkeypatch.setattr(BudgetSchedule, "load_state_dict", lambda self, state: None)
    broken, broken_dir = killed_then_resumed(tmp_path / "c")
    assert log(broken_dir) != log(straight_dir)


def test_budget_0_is_todays_run(tmp_path):
    """budget_tokens 0 (and warm-up 0) stated outright computes what a run without the settings computes: the same
    log and scores, no budget_tokens_trained, the plateau rule in charge.  Kills: a budget path taken at 0 (e.g. the
    last state evaluated instead of the best, or the plateau rule switched off)."""
    corpus = tiny_corpus(tmp_path)
    hp = dict(epochs=3, lr=0.05, lr_decays=1)
    plain, plain_dir = train(corpus, tmp_path / "a", **hp)
    zero, zero_dir = train(corpus, tmp_path / "b", budget_tokens=0, budget_warmup_tokens=0, **hp)
    assert log(zero_dir) == log(plain_dir)
    assert zero["test"] == plain["test"] and zero["valid"] == plain["valid"]
    assert zero["stopped_because"] == plain["stopped_because"] != "budget-schedule"
    assert "budget_tokens_trained" not in zero and zero.keys() == plain.keys()


@pytest.mark.parametrize("hp,key", [
    (dict(budget_tokens=0, budget_warmup_tokens=10), "train.budget_warmup_tokens"),
    (dict(budget_tokens=100, budget_warmup_tokens=100), "train.budget_warmup_tokens"),
    (dict(budget_tokens=100, average_from_epoch=2), "train.average_from_epoch"),
    (dict(budget_tokens=100, min_lr=1.0), "train.min_lr"),
    (dict(budget_tokens=10**9), "train.budget_tokens"),
])
def test_a_setting_that_cannot_hold_is_one_line_naming_its_key(hp, key):
    """Kills: a warm-up without a budget or as long as it, averaging (whose weights are not the final ones) or a
    min_lr above lr accepted silently, and a budget the epoch cap cannot reach (it would end as `budget`).  The
    negative control: a budget that fits is accepted."""
    base = {"epochs": 2, "lr": 0.01, "min_lr": 0.0, "average_from_epoch": 0, "budget_warmup_tokens": 0}
    with pytest.raises(LmgridError, match=key.replace(".", r"\.")) as e:
        train_mod.budget_settings({**base, **hp}, n_train=1000)
    assert "\n" not in str(e.value)
    assert train_mod.budget_settings({**base, "budget_tokens": 2000}, n_train=1000)["budget"] == 2000


def test_a_run_killed_after_its_budget_stop_resumes_to_the_same_result(tmp_path, monkeypatch):
    """Killed after the mid-epoch stop at the budget, before the run folder is written, then run again: it trains no
    further (last.ckpt holds the stop) and writes the uninterrupted run's log and scores.  Kills: a resumed run that
    restarts the cut epoch or trains on past the budget (the negative control: without the stop in the log, the
    resumed run trains on, so the check can see it)."""
    corpus = tiny_corpus(tmp_path)
    hp = dict(HP, budget_tokens=n_train(corpus, tmp_path) * 3 // 2)
    straight, straight_dir = train(corpus, tmp_path / "a", **hp)
    real_write = train_mod.write

    def killed_then_resumed(root):
        def killed(*args, **kwargs):
            raise KeyboardInterrupt("job killed")
        monkeypatch.setattr(train_mod, "write", killed)
        with pytest.raises(KeyboardInterrupt):
            train(corpus, root, **hp)
        monkeypatch.setattr(train_mod, "write", real_write)
        return train(corpus, root, **hp)

    resumed, resumed_dir = killed_then_resumed(tmp_path / "b")
    assert log(resumed_dir) == log(straight_dir)
    assert resumed["test"] == straight["test"] and resumed["budget_tokens_trained"] == straight["budget_tokens_trained"]

    from lmgrid.neural.callbacks import EpochLog
    real_load = EpochLog.load_state_dict
    monkeypatch.setattr(EpochLog, "load_state_dict",  # the mutant: the stop forgotten on resume
                        lambda self, state: real_load(self, {"rows": [dict(r, stopped=False) for r in state["rows"]]}))
    broken, broken_dir = killed_then_resumed(tmp_path / "c")
    assert log(broken_dir) != log(straight_dir)
