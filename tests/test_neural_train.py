"""Training end to end on tiny corpora: the bigram source's PPL, resume, NaN stop, bad input, score/generate."""
from __future__ import annotations

import csv
from pathlib import Path
import json
import math

import pytest
import torch

from lmgrid import cli, lm
from lmgrid.common.errors import LmgridError
from lmgrid.neural import gates as gates_mod
from lmgrid.neural import train as train_mod
from lmgrid.neural.callbacks import LOG_COLUMNS
from lmgrid.neural.gates import COLUMNS as GATE_COLUMNS
from lmgrid.data.ppl import counted_tokens
from lmgrid.data.corpus import load_split
from lmgrid.run.spec import RunSpec
from lmgrid.run.key import normalise

from test_neural_support import TINY, BigramSource, killed_at_epoch, tiny_corpus, write_corpus


def spec_of(corpus, tmp_path, arch="lstm", impl="torch", n_step=3, layers=1, regime="window", seed=1,
            placement=None, **hp) -> RunSpec:
    """The RunSpec of a tiny run by hand, as `lmgrid train --arch ...` builds one."""
    key = normalise(arch, impl, n_step, layers, regime, seed)
    return RunSpec.build(arch=arch, impl=impl, n_step=n_step, layers=layers, regime=regime, seed=seed, corpus="c",
                         train={**TINY, **hp}, paths=corpus["paths"], vocab=corpus["vocab_path"],
                         run_dir=str(tmp_path / key.run_dir("c")), ckpt_dir=str(tmp_path / "ckpt" / key.run_dir("c")),
                         placement=placement)


def train(corpus, tmp_path, arch="lstm", impl="torch", n_step=3, layers=1, regime="window", seed=1, **hp):
    spec = spec_of(corpus, tmp_path, arch, impl, n_step, layers, regime, seed, **hp)
    return train_mod.run(spec, threads=1), Path(spec.run_dir)


def test_window_model_at_n_step_2_reaches_bigram_source_ppl(tmp_path):
    src = BigramSource(n_words=6, stop=0.2, seed=3)
    test = src.sample(3000)
    corpus = write_corpus(tmp_path, {"train": src.sample(5000), "valid": src.sample(500),
                                         "test": test})
    metrics, _ = train(corpus, tmp_path, arch="ffnn", n_step=2, epochs=3, lr=0.01, hidden_dim=32,
                       batch_size=64, lr_decay=1.0)
    analytic, sample = src.ppl(), src.sample_ppl(test)
    assert metrics["test"]["tokens"] == counted_tokens(test)
    # The model can match the source but not beat it beyond the sample's noise.
    assert metrics["test"]["ppl"] == pytest.approx(analytic, rel=0.03)
    assert sample * 0.995 <= metrics["test"]["ppl"] <= sample * 1.02


def test_metrics_log_and_gates_follow_the_contract(tmp_path, monkeypatch):
    """metrics.json, log.csv and gates.csv as docs/contracts.md states them.  Kills: a key left out, a run that
    reaches its epoch cap reported as anything but `budget`, a valid-PPL history that is not the log's, and gate
    counts that include the <s> padding before a sentence's first words (the negative control: the padded count
    differs from the real one on this corpus, so the check can see it).  Padding-free rows: kills a padded window
    filed as padding-free (GateStats._buckets without its `* (k >= 0)` mask, every target then in bucket 0 or
    above), run here as a negative control on a second run of one epoch; and the rows per min_context read from
    their own bucket alone (no reversed cumulative sum: targets with exactly K words before them), run by hand as
    a temporary edit."""
    corpus = tiny_corpus(tmp_path)
    metrics, run_dir = train(corpus, tmp_path, arch="gru", impl="cell", n_step=4, layers=2, epochs=2)
    on_disk = json.loads((run_dir / "metrics.json").read_text())
    assert on_disk == json.loads(json.dumps(metrics))
    for key in ("name", "arch", "impl", "n_step", "layers", "regime", "seed", "params", "train_tokens_per_s",
                "epochs", "stopped_because", "wall_s", "cpu_s", "max_rss_mib", "attempts", "device", "torch_version",
                "lightning_version"):
        assert key in metrics, key
    assert metrics["attempts"] == 1  # never interrupted: one process trained it
    test_sents = load_split(corpus["paths"]["test"])
    assert metrics["test"]["tokens"] == counted_tokens(test_sents)
    assert metrics["epochs"] == 2 and metrics["stopped_because"] == "budget"  # the 2-epoch cap came first
    assert len(metrics["valid_ppl_history"]) == 2 and metrics["valid_ppl_history"] == pytest.approx(
        [float(r["valid_ppl"]) for r in csv.DictReader((run_dir / "log.csv").open())], rel=1e-6)
    assert metrics["train_tokens_per_s"] > 0
    rows = list(csv.DictReader((run_dir / "log.csv").open()))
    assert list(rows[0]) == LOG_COLUMNS and [int(r["epoch"]) for r in rows] == [1, 2]
    gates = list(csv.DictReader((run_dir / "gates.csv").open()))
    assert list(gates[0]) == GATE_COLUMNS
    alls = [g for g in gates if g["scope"] == "all"]
    assert {(int(g["layer"]), g["gate"]) for g in alls} == {(l, g) for l in (0, 1) for g in "zr"}
    # Real context tokens (not <s> padding) over the windows: target j of a sentence has min(j, 3) before it.
    real = sum(min(j, 3) for s in test_sents for j in range(len(s) + 1))
    assert all(int(g["count"]) == real * 16 for g in alls)  # real positions x units
    padded = sum(3 for s in test_sents for j in range(len(s) + 1))
    assert padded != real
    assert {int(g["index"]) for g in gates if g["scope"] == "position"} == {0, 1, 2}
    # Padding-free rows: at min_context 3 (no padding at this n_step 4) every position holds the targets with at
    # least 3 words before them, the same count at each position.
    free = sum(1 for s in test_sents for j in range(len(s) + 1) if j >= 3)
    assert {int(g["count"]) for g in gates if g["scope"] == "padfree" and g["min_context"] == "3"} == {free}
    assert {int(g["index"]) for g in gates if g["scope"] == "padfree"} == {0, 1, 2}

    def padfree_counts(gates_csv: Path) -> set[int]:
        return {int(g["count"]) for g in csv.DictReader(gates_csv.open())
                if g["scope"] == "padfree" and g["min_context"] == "3"}

    real_buckets = gates_mod.GateStats._buckets

    def unmasked(self, x):  # the mask dropped: a target with k < 0 (a padded window) lands in bucket 0
        b = real_buckets(self, x)
        if b is not None:
            b = b.clone()
            b[b.sum(1) == 0, 0] = 1.0
        return b

    monkeypatch.setattr(gates_mod.GateStats, "_buckets", unmasked)
    _, mutant_dir = train(corpus, tmp_path / "mutant", arch="gru", impl="cell", n_step=4, layers=2, epochs=1)
    assert padfree_counts(mutant_dir / "gates.csv") != {free}
    assert len([g for g in gates if g["scope"] == "unit"]) == 2 * 2 * 16
    assert all(0 <= float(g["mean"]) <= 1 and 0 <= float(g["frac_right_saturated"]) <= 1 for g in gates)
    assert not (tmp_path / "ckpt").joinpath(run_dir.relative_to(tmp_path)).exists()  # cleaned up when done


@pytest.mark.parametrize("regime", ["window", "stream"])
def test_resume_after_kill_equals_uninterrupted_run(tmp_path, regime):
    corpus = tiny_corpus(tmp_path)
    hp = dict(epochs=3, dropout=0.3, lr_decay=0.5, plateau_patience=0, deterministic=True)
    straight, straight_dir = train(corpus, tmp_path / "a", regime=regime, **hp)

    with killed_at_epoch(2):
        train(corpus, tmp_path / "b", regime=regime, **hp)
    key = normalise("lstm", "torch", 3, 1, regime, 1)
    assert (tmp_path / "b" / "ckpt" / key.run_dir("c") / "last.ckpt").is_file()
    assert not (tmp_path / "b" / key.run_dir("c") / "metrics.json").exists()
    resumed, resumed_dir = train(corpus, tmp_path / "b", regime=regime, **hp)
    assert resumed["epochs"] == straight["epochs"] == 3
    assert resumed["test"]["ppl"] == straight["test"]["ppl"]
    assert resumed["valid"]["ppl"] == straight["valid"]["ppl"]
    log_a = [r[:-1] for r in csv.reader((straight_dir / "log.csv").open())]
    log_b = [r[:-1] for r in csv.reader((resumed_dir / "log.csv").open())]
    assert log_a == log_b and len(log_a) == 4  # header + 3 epochs, wall_s aside


def test_stale_checkpoint_of_another_config_is_not_resumed(tmp_path, capsys):
    corpus = tiny_corpus(tmp_path)
    with killed_at_epoch(1):
        train(corpus, tmp_path, epochs=2)
    metrics, _ = train(corpus, tmp_path, epochs=2, lr=0.001)
    assert "discarding" in capsys.readouterr().out
    assert metrics["epochs"] == 2


def _train_with_injected_loss(tmp_path, monkeypatch, value, at_step=3, in_training=True):
    """Train a tiny run whose loss at one training step (or in validation) is multiplied by `value`, deterministically
    on every machine; returns (the LmgridError or None, how many training steps computed a loss)."""
    from lmgrid.neural import module as module_mod

    real, calls = module_mod.batch_nll, {"train": 0}

    def injected(model, x, y, regime, state=None, gate_stats=None, token_nll=None):
        nll, n, state = real(model, x, y, regime, state, gate_stats, token_nll)
        if model.training:
            calls["train"] += 1
        if model.training == in_training and (calls["train"] == at_step or not in_training):
            nll = nll * value
        return nll, n, state

    monkeypatch.setattr(module_mod, "batch_nll", injected)
    corpus = tiny_corpus(tmp_path)
    try:
        train(corpus, tmp_path, epochs=2, log_every=0)
    except LmgridError as e:
        return e, calls["train"]
    return None, calls["train"]


@pytest.mark.parametrize("value", [math.nan, math.inf, 1e32])
def test_diverged_training_loss_stops_at_that_step_with_one_line(tmp_path, monkeypatch, value):
    """A NaN, infinite or finite-but-huge (1e32, what lr 1e30 gives on AVX-512 CPUs) training loss stops the run at
    that very step, with one line naming epoch and step.

    Negative controls, run here: kills "no bound on finite losses" (DIVERGED_LOSS_FACTOR = inf: the 1e32 step is
    not caught) and "checked only every N steps" (the run goes on past the bad step)."""
    from lmgrid.neural import module as module_mod

    err, steps = _train_with_injected_loss(tmp_path / "a", monkeypatch, value)
    assert err is not None and steps == 3  # no step after the bad one
    msg = str(err)
    assert "\n" not in msg and "epoch 1, step 3" in msg and "lower the learning rate" in msg
    assert ("non-finite" if not math.isfinite(value) else "above the divergence bound") in msg
    if value == 1e32:
        monkeypatch.setattr(module_mod, "DIVERGED_LOSS_FACTOR", math.inf)  # mutation: no bound
        err, _ = _train_with_injected_loss(tmp_path / "b", monkeypatch, value)
        assert err is None or "step 3" not in str(err)
    monkeypatch.setattr(module_mod.LMModule, "check_finite", lambda self: None)  # mutation: never checked per step
    err, steps = _train_with_injected_loss(tmp_path / "c", monkeypatch, value)
    assert steps > 3


def test_diverged_validation_says_what_happened(tmp_path, monkeypatch):
    """A non-finite valid NLL is reported as such, never as "a zero probability"."""
    err, _ = _train_with_injected_loss(tmp_path, monkeypatch, math.nan, in_training=False)
    msg = str(err)
    assert "\n" not in msg and "validation NLL after epoch 1" in msg and "non-finite" in msg
    assert "zero probability" not in msg


@pytest.mark.parametrize("args, match", [
    (dict(n_step=1), "n_step: 1 is below 2"),
    (dict(layers=0), "layers: 0"),
    (dict(arch="lstmx"), "unknown neural architecture 'lstmx'"),
    (dict(impl="fused"), "'fused' is not an implementation of lstm"),
    (dict(arch="ffnn", regime="stream"), "ffnn .* no stream regime"),
    (dict(bogus=1), "train.bogus: unknown training setting"),
    (dict(optimizer="rmsprop"), "train.optimizer"),
])
def test_bad_input_is_a_one_line_error(tmp_path, args, match):
    corpus = tiny_corpus(tmp_path)
    with pytest.raises(LmgridError, match=match) as e:
        train(corpus, tmp_path, **args)
    assert "\n" not in str(e.value)


def test_cli_reports_bad_input_on_one_line(tmp_path, capsys):
    corpus = tiny_corpus(tmp_path)
    p = corpus["paths"]
    rc = cli.main(["train", "--arch", "lstm", "--n-step", "1", "--train", p["train"], "--valid", p["valid"],
                   "--test", p["test"], "--vocab", corpus["vocab_path"], "--run-dir", str(tmp_path / "r"),
                   "--ckpt-dir", str(tmp_path / "k")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "n_step: 1 is below 2" in err


@pytest.mark.parametrize("regime", ["window", "stream"])
def test_score_and_generate_on_a_trained_run(tmp_path, capsys, regime):
    corpus = tiny_corpus(tmp_path)
    metrics, run_dir = train(corpus, tmp_path, regime=regime, n_step=3)
    capsys.readouterr()
    model = lm.load(run_dir)
    sents = load_split(corpus["paths"]["test"])
    per = model.sentence_logprobs(sents)
    assert [len(p) for p in per] == [len(s) + 1 for s in sents]
    # next_logprobs agrees with sentence_logprobs on every target of a sentence.
    s = sents[0]
    for j, t in enumerate([*s, "</s>"]):
        assert model.next_logprobs(s[:j])[model.vocab.index[t]] == pytest.approx(per[0][j], abs=1e-5)
    assert cli.main(["score", "--run", str(run_dir), "--text", corpus["paths"]["test"],
                     "--out", str(tmp_path / "s.tsv")]) == 0
    summary = capsys.readouterr().err
    assert f"{metrics['test']['tokens']} counted tokens" in summary
    if regime == "window":  # the same convention as training's evaluation: the same PPL
        ppl = float(summary.rsplit("PPL", 1)[1])
        assert ppl == pytest.approx(metrics["test"]["ppl"], rel=1e-3)
    assert cli.main(["generate", "--run", str(run_dir), "-n", "4", "--top-k", "3", "--temperature", "0.8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(t in model.vocab.index for line in lines for t in line.split())


def test_checkpoint_with_another_vocabulary_is_a_one_line_error(tmp_path):
    corpus = tiny_corpus(tmp_path)
    _, run_dir = train(corpus, tmp_path)
    vocab = json.loads(open(corpus["vocab_path"]).read())
    vocab["tokens"].append(["newword", 1])
    vocab["size"] += 1
    open(corpus["vocab_path"], "w").write(json.dumps(vocab))
    with pytest.raises(LmgridError, match="vocabulary .* differs from the corpus") as e:
        lm.load(run_dir)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("arch, impl, regime", [
    ("ffnn", "torch", "window"), ("rnn", "torch", "stream"), ("lstm", "cell", "window"),
    ("lstm", "concat", "stream"), ("gru", "torch", "stream"), ("transformer", "torch", "window"),
])
def test_lmgrid_train_fast_smoke(tmp_path, capsys, arch, impl, regime):
    corpus = tiny_corpus(tmp_path)
    p = corpus["paths"]
    key = normalise(arch, impl, 3, 1, regime, 1)
    run_dir = tmp_path / key.run_dir("c")
    rc = cli.main(["train", "--arch", arch, "--impl", impl, "--n-step", str(key.n_step), "--regime", regime,
                   "--train", p["train"], "--valid", p["valid"], "--test", p["test"], "--vocab",
                   corpus["vocab_path"], "--run-dir", str(run_dir), "--ckpt-dir", str(tmp_path / "k"),
                   "--threads", "1", "--fast"])
    assert rc == 0, capsys.readouterr().err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test"]["tokens"] == counted_tokens(load_split(p["test"]))
    assert 1 < metrics["test"]["ppl"] < 2 * metrics["params"]
    assert (run_dir / "model.ckpt").is_file() and (run_dir / "log.csv").is_file()
    assert (run_dir / "gates.csv").is_file() == (arch in ("lstm", "gru"))
    torch.set_num_threads(1)


def test_training_ends_on_a_plateau_after_the_last_decay(tmp_path):
    """The plateau schedule end to end: valid NLL stops improving, the rate halves lr_decays times, the plateau
    after the last decay ends the run; the reported PPL is the best epoch's, and the best epoch is not the last.
    Kills: "stop on the first plateau" (no decay in lr_history), "lr history not recorded", "last epoch reported"."""
    src = BigramSource(seed=5)
    corpus = write_corpus(tmp_path, {"train": src.sample(15), "valid": src.sample(200), "test": src.sample(50)})
    # 15 training sentences and a wide model: valid NLL soon rises (overfitting).
    metrics, run_dir = train(corpus, tmp_path, epochs=60, hidden_dim=64, emb_dim=64, lr=0.03, lr_decay=0.5,
                             lr_decays=2)
    assert metrics["stopped_because"] == "plateau" and metrics["epochs"] < 60
    lrs = metrics["lr_history"]
    assert len(lrs) == metrics["epochs"] and metrics["lr_decays"] == 2
    assert sorted(set(lrs), reverse=True) == pytest.approx([0.03, 0.015, 0.0075]) and lrs == sorted(lrs, reverse=True)
    valid = [float(r["valid_loss"]) for r in csv.DictReader((run_dir / "log.csv").open())]
    best = min(range(len(valid)), key=valid.__getitem__)
    assert metrics["best_epoch"] == best + 1 < metrics["epochs"]
    assert valid[-1] >= valid[best]  # the run ended on an epoch that did not improve, at the smallest rate
    assert [float(r["lr"]) for r in csv.DictReader((run_dir / "log.csv").open())] == pytest.approx(lrs)
    # The reported PPL is that of the best epoch's weights.
    assert metrics["valid"]["nll_nats"] / metrics["valid"]["tokens"] == pytest.approx(valid[best], rel=1e-6)
    # Valid is taken from the best epoch's own validation, not scored again: the saved model scored again on valid
    # gives the same PPL (kills: the last epoch's sums, a wrong token count); the last epoch's differs (the control).
    rescored = lm.score_file(lm.load(run_dir), corpus["paths"]["valid"])
    assert rescored["ppl"] == pytest.approx(metrics["valid"]["ppl"], rel=1e-6)
    assert rescored["tokens"] == metrics["valid"]["tokens"]
    assert math.exp(valid[-1]) != pytest.approx(rescored["ppl"], rel=1e-4)


FIT_ENDED = ("fit ended", None)


def _test_passes(calls: list) -> list[bool]:
    """The forward calls after training (after the marker a wrapped Trainer.fit leaves when it returns), as their
    return_gates flags."""
    return [gates for _, gates in calls[calls.index(FIT_ENDED) + 1:]]


@pytest.mark.parametrize("regime", ["window", "stream"])
def test_test_ppl_and_gates_come_from_one_pass_over_test(tmp_path, monkeypatch, regime):
    """A gated run scores test and gathers its gate statistics in one forward pass: after training, every forward
    over test returns gates, one per test batch, and gates.csv equals what a separate gate pass (gates.collect)
    over the saved model gives, while test NLL equals scoring without gates.
    Negative control, the mutation it kills: scoring test, then a second pass for the gates (what train.py did
    before), recorded the same way, fails the one-pass check."""
    from lmgrid.models.lstm import LSTMLM
    from lmgrid.neural import gates as gates_mod
    from lmgrid.neural.datamodule import LMData
    from lmgrid.neural.model_io import load_run
    from lmgrid.neural.module import evaluate
    from lmgrid.data.vocab import Vocab

    calls = []
    forward = LSTMLM.forward

    def counted(self, tokens, state=None, return_gates=False, last_only=False):
        calls.append((self.training, return_gates))
        return forward(self, tokens, state, return_gates, last_only)

    monkeypatch.setattr(LSTMLM, "forward", counted)
    fit = train_mod.pl.Trainer.fit

    def fit_then_mark(*args, **kwargs):
        fit(*args, **kwargs)
        calls.append(FIT_ENDED)

    monkeypatch.setattr(train_mod.pl.Trainer, "fit", fit_then_mark)
    corpus = tiny_corpus(tmp_path)
    metrics, run_dir = train(corpus, tmp_path, regime=regime, layers=2, epochs=1)
    data = LMData(corpus["paths"], Vocab.load(corpus["vocab_path"]), regime, n_step=3, **{
        k: TINY[k] for k in ("batch_size", "stream_batch_size", "bptt")})
    data.setup()
    n_batches = len(data.dataloader("test"))
    one_pass = _test_passes(calls)
    assert one_pass == [True] * n_batches

    model = load_run(run_dir).model
    bos = data.vocab.index["<s>"]
    calls[:] = [FIT_ENDED]
    nll, n = evaluate(model, data.dataloader("test"), regime, "cpu")
    preceding = gates_mod.preceding_words(data.sentences["test"]) if regime == "window" else None
    rows = gates_mod.collect(model, data.dataloader("test"), regime, "cpu", bos=bos, preceding=preceding)
    assert _test_passes(calls) != [True] * n_batches  # the two-pass way is caught
    assert n == metrics["test"]["tokens"] and nll == pytest.approx(metrics["test"]["nll_nats"], rel=1e-6)
    on_disk = list(csv.DictReader((run_dir / "gates.csv").open()))
    assert len(on_disk) == len(rows)
    by_key = {(r["scope"], int(r["layer"]), r["gate"], int(r["index"]), int(r["min_context"])): r for r in on_disk}
    for r in rows:
        got = by_key[(r["scope"], r["layer"], r["gate"], r["index"], r["min_context"])]
        assert int(got["count"]) == r["count"]
        assert float(got["mean"]) == pytest.approx(r["mean"], abs=1e-5)


def test_training_skips_the_nan_fill_of_deterministic_mode_with_the_same_bits(tmp_path, monkeypatch):
    """Training under deterministic algorithms does not fill each new tensor with NaN (PyTorch's default there;
    py-spy put 4.7% of a PTB GRU job's samples in it), gives back the caller's setting, and trains to exactly the
    numbers the fill gives.

    Kills "the fill left on" (train.run's switch removed: the probe in the training step then sees True where
    FILL_UNINITIALIZED_MEMORY is False; seen failing). Its control, the same run with FILL_UNINITIALIZED_MEMORY =
    True, runs here and must match the first to the bit."""
    from lmgrid.neural import module as module_mod

    real, seen = module_mod.batch_nll, []

    def probed(model, *args, **kwargs):
        if model.training:
            seen.append(torch.utils.deterministic.fill_uninitialized_memory)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(module_mod, "batch_nll", probed)
    corpus = tiny_corpus(tmp_path)
    hp = dict(epochs=2, dropout=0.3, deterministic=True)
    assert torch.utils.deterministic.fill_uninitialized_memory is True  # PyTorch's default, the caller's here
    runs = {}
    for fill in (False, True):
        monkeypatch.setattr(train_mod, "FILL_UNINITIALIZED_MEMORY", fill)
        seen.clear()
        metrics, run_dir = train(corpus, tmp_path / str(fill), arch="gru", regime="stream", **hp)
        assert seen and set(seen) == {fill}, fill
        assert torch.utils.deterministic.fill_uninitialized_memory is True  # given back
        runs[fill] = (metrics["valid"]["ppl"], metrics["test"]["ppl"],
                      [r[:-1] for r in csv.reader((run_dir / "log.csv").open())])  # wall_s aside
    assert runs[False] == runs[True]
