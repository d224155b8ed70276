"""Weight averaging (train.average_from_epoch, lmgrid.neural.averaging) on tiny corpora: what is validated and
kept is the mean of the training weights since the start epoch, training itself is untouched, resume is exact."""
from __future__ import annotations

import csv

import pytest
import torch

from lmgrid.neural import module as module_mod
from lmgrid.neural.averaging import WeightAverage
from lmgrid.neural.model_io import load_run

from test_neural_support import killed_at_epoch, tiny_corpus
from test_neural_train import train

# No decay and no stop within 3 epochs, so the schedule (which reads valid) cannot steer the training weights.
STEADY = dict(epochs=3, lr_decays=0, plateau_patience=10, dropout=0.2, regime="stream", arch="gru")


def _recorded_run(tmp_path, monkeypatch, average_from_epoch):
    """Train, recording the weights each training step starts from and those each validation pass reads."""
    real, seen = module_mod.batch_nll, {"train": [], "valid": []}
    last_mode = {"training": None}

    def probed(model, *args, **kwargs):
        flat = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
        if model.training:
            seen["train"].append(flat)
        elif last_mode["training"] is not False:  # the first batch of a validation pass
            seen["valid"].append(flat)
        last_mode["training"] = model.training
        return real(model, *args, **kwargs)

    monkeypatch.setattr(module_mod, "batch_nll", probed)
    corpus = tiny_corpus(tmp_path)
    metrics, run_dir = train(corpus, tmp_path / f"avg{average_from_epoch}", average_from_epoch=average_from_epoch,
                             **STEADY)
    monkeypatch.setattr(module_mod, "batch_nll", real)
    return seen, metrics, run_dir


def test_validation_reads_the_mean_of_the_weights_since_the_start_epoch_and_training_is_untouched(
        tmp_path, monkeypatch):
    """After epoch 1 (before the start epoch 2) validation reads the training weights; after epoch 2 it reads the
    mean of the weights after each of epoch 2's steps; every training step starts from exactly the weights a run
    without averaging has; model.ckpt holds the best epoch's validated weights.

    Negative controls, run here: kills "training continues from the mean" (the training weights not given back)
    and "validation reads the training weights" (the mean never swapped in)."""
    plain, _, _ = _recorded_run(tmp_path, monkeypatch, 0)
    seen, metrics, run_dir = _recorded_run(tmp_path, monkeypatch, 2)
    steps = len(seen["train"]) // 3  # steps per epoch (the test pass is not a validation pass: 3 + 1 evaluations)
    assert len(seen["train"]) == 3 * steps and steps > 1
    assert all(torch.equal(a, b) for a, b in zip(seen["train"], plain["train"]))  # training untouched
    # The weights after step i are those step i + 1 starts from (the epoch's last: the next epoch's first step).
    after = seen["train"][1:] + [None]
    assert torch.equal(seen["valid"][0], after[steps - 1])  # epoch 1: the training weights
    mean2 = torch.stack(after[steps:2 * steps]).mean(0)
    assert torch.allclose(seen["valid"][1], mean2, rtol=0, atol=1e-6)
    assert not torch.allclose(seen["valid"][1], after[2 * steps - 1], rtol=0, atol=1e-6)  # the mean is not the last
    # What the run keeps is its best epoch's validated weights.
    model = load_run(run_dir).model
    kept = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(kept, seen["valid"][metrics["best_epoch"] - 1])

    # Control 1: the training weights not given back: epoch 3 would start from the mean.
    monkeypatch.setattr(WeightAverage, "_give_back", lambda self, pl_module: setattr(self, "held", None))
    broken, _, _ = _recorded_run(tmp_path / "c1", monkeypatch, 2)
    assert not torch.equal(broken["train"][2 * steps], plain["train"][2 * steps])
    monkeypatch.undo()
    # Control 2: the mean never swapped in: validation after epoch 2 reads the last training weights.
    monkeypatch.setattr(WeightAverage, "on_validation_epoch_start", lambda self, trainer, pl_module: None)
    broken, _, _ = _recorded_run(tmp_path / "c2", monkeypatch, 2)
    assert not torch.allclose(broken["valid"][1], mean2, rtol=0, atol=1e-6)


def test_a_run_killed_while_averaging_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """Killed as epoch 3 starts (averaging since epoch 2), then resumed: the same log and test PPL as an unbroken run.

    Negative control, run here: kills "the mean and the training weights not in the checkpoint" (the callback's
    state not restored): the resumed run then trains on from the mean and averages from scratch."""
    corpus = tiny_corpus(tmp_path)
    hp = dict(STEADY, average_from_epoch=2)
    straight, straight_dir = train(corpus, tmp_path / "a", **hp)

    def killed_then_resumed(root):
        with killed_at_epoch(2):
            train(corpus, root, **hp)
        return train(corpus, root, **hp)

    resumed, resumed_dir = killed_then_resumed(tmp_path / "b")
    log = lambda d: [r[:-1] for r in csv.reader((d / "log.csv").open())]  # wall_s aside
    assert log(resumed_dir) == log(straight_dir) and len(log(straight_dir)) == 4
    assert resumed["test"]["ppl"] == straight["test"]["ppl"]

    monkeypatch.setattr(WeightAverage, "load_state_dict", lambda self, state: None)
    broken, broken_dir = killed_then_resumed(tmp_path / "c")
    assert log(broken_dir) != log(straight_dir)


def test_the_start_epoch_is_checked():
    """A start epoch below 1 is refused (0 means no averaging and never builds the callback).  Kills: a
    callback built for 0 that averages from the first step (the negative control: epoch 1 is accepted)."""
    with pytest.raises(ValueError, match="start_epoch"):
        WeightAverage(0)
    with pytest.raises(ValueError, match="start_epoch"):
        WeightAverage(-2)
    WeightAverage(1)
