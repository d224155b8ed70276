"""Per-token score files and their linear interpolation (lmgrid.testtime.combine; issue 26).

Each test also runs the broken variant named in its docstring and asserts that it fails.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from lmgrid.testtime.combine import cells, mixture, scorefile
from lmgrid.testtime.combine.mixture import combine, fit_weights
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json
from lmgrid.neural import evaluation as eval_mod
from lmgrid.ngram.external import count_to_npz
from lmgrid.ngram.model import train_run
from lmgrid.run.record import RunRecord
from lmgrid.run.key import normalise
from lmgrid.data.vocab import Vocab

from test_neural_support import tiny_corpus
from test_neural_train import train


def _scores(lp, split="valid", sha="same", path=""):
    lp = np.asarray(lp, dtype=np.float32)
    return scorefile.Scores(lp, split, sha, math.exp(-float(np.mean(lp, dtype=np.float64))), "run", "base", path)


def _write_scores(corpus, run_dir, out):
    p = corpus["paths"]
    return cells.write_scores(run_dir, p["valid"], p["test"], corpus["vocab_path"], "base", out)


# -- score files of trained cells --------------------------------------------------------------------------------
@pytest.mark.parametrize("arch,regime,layers", [("lstm", "window", 1), ("gru", "stream", 2), ("ffnn", "window", 1),
                                                 ("transformer", "stream", 1)])
def test_score_files_reproduce_the_runs_ppl(tmp_path, monkeypatch, arch, regime, layers):
    """Score files hold the run's own evaluation: exp(-mean) equals metrics.json's valid and test PPL to 1e-6, and
    the targets are the corpus's, in order.  Mutations killed: the stream state not carried across chunks (a
    different pass from the one that produced test_ppl), and stream chunks put in corpus order row-interleaved."""
    corpus = tiny_corpus(tmp_path)
    metrics, run_dir = train(corpus, tmp_path, arch=arch, n_step=4, layers=layers, regime=regime, epochs=2)
    out = _write_scores(corpus, run_dir, tmp_path / "scores")
    for split in ("valid", "test"):
        back = scorefile.read(tmp_path / "scores", split)
        assert back.count == metrics[split]["tokens"] == out[split].count
        assert back.file_ppl() == pytest.approx(metrics[split]["ppl"], rel=1e-6)
        assert back.tokens_sha256 == scorefile.tokens_sha256(
            cells.target_ids(cells.load_split(corpus["paths"][split]), Vocab.load(corpus["vocab_path"])))
    if regime != "stream":
        return
    real = eval_mod.batch_nll

    def stateless(model, x, y, regime, state=None, *a):  # mutation: every chunk from the zero state
        return real(model, x, y, regime, None, *a)

    monkeypatch.setattr(eval_mod, "batch_nll", stateless)
    with pytest.raises(LmgridError, match="per-token scores give PPL"):
        _write_scores(corpus, run_dir, tmp_path / "bad")
    monkeypatch.setattr(eval_mod, "batch_nll", real)

    def interleaved(token_nll, regime):  # mutation: chunk after chunk, each row-major (rows interleaved)
        nll = torch.cat([n.reshape(-1) for n, _ in token_nll])
        y = torch.cat([t.reshape(-1) for _, t in token_nll])
        return nll[y != -100], y[y != -100]

    monkeypatch.setattr(eval_mod, "corpus_order", interleaved)
    with pytest.raises(LmgridError, match="not the corpus's targets in order"):
        _write_scores(corpus, run_dir, tmp_path / "bad2")
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad2").exists()  # nothing half-written


def test_token_nll_collector_changes_no_total_and_sums_to_it(tmp_path):
    """batch_nll/evaluate with a token_nll list return the very totals they return without it, and the per-token
    values sum to that total; window values equal NeuralLM's per-sentence scores (another code path).  Mutation
    killed: per-token values taken at the window's first position instead of its last."""
    from lmgrid.neural.datamodule import LMData
    from lmgrid.neural.model_io import load_run

    corpus = tiny_corpus(tmp_path)
    _, run_dir = train(corpus, tmp_path, arch="lstm", n_step=4, epochs=1)
    lm = load_run(run_dir)
    data = LMData(corpus["paths"], lm.vocab, "window", n_step=4, eval_batch_size=17)
    data.setup()
    plain = eval_mod.evaluate(lm.model, data.dataloader("test"), "window", "cpu")
    collected = []
    with_list = eval_mod.evaluate(lm.model, data.dataloader("test"), "window", "cpu", token_nll=collected)
    assert with_list == plain
    nll, _ = eval_mod.corpus_order(collected, "window")
    assert float(nll.double().sum()) == pytest.approx(plain[0], rel=1e-6) and nll.numel() == plain[1]
    per_sentence = lm.sentence_logprobs(cells.load_split(corpus["paths"]["test"]))
    other = np.array([v for s in per_sentence for v in s])
    assert np.allclose(-nll.numpy(), other, atol=1e-5)
    # the mutation: the first position's prediction
    logits, _, _ = lm.model(data.tensors["test"][0])
    wrong = torch.nn.functional.cross_entropy(logits[:, 0].float(), data.tensors["test"][1], reduction="none")
    assert not np.allclose(-wrong.detach().numpy(), other, atol=1e-5)


def test_ngram_score_files_reproduce_the_runs_ppl(tmp_path):
    """An n-gram cell's scores come from its own scoring of its model.arpa and give its PPL to 1e-6.  Mutation
    killed: a cell scored with another cell's model (the 2-gram's ARPA in the 3-gram's folder)."""
    corpus = tiny_corpus(tmp_path, train=600)
    vocab = Vocab.load(corpus["vocab_path"])
    counts = tmp_path / "counts.npz"
    count_to_npz(corpus["paths"]["train"], vocab, 3, counts)
    dirs = {}
    for order in (2, 3):
        d = tmp_path / normalise("kn", "ngram", order, 1, "window", 0).run_dir("c")
        train_run(counts_path=counts, vocab_path=corpus["vocab_path"], valid_path=corpus["paths"]["valid"],
                  test_path=corpus["paths"]["test"], arch="kn", order=order, arpa_path=d / "model.arpa",
                  metrics_path=d / "metrics.json", write_arpa="true")
        dirs[order] = d
    out = _write_scores(corpus, dirs[3], tmp_path / "s3")
    assert out["test"].file_ppl() == pytest.approx(RunRecord.read(dirs[3] / "metrics.json").test.ppl, rel=1e-6)
    (dirs[3] / "model.arpa").write_bytes((dirs[2] / "model.arpa").read_bytes())
    with pytest.raises(LmgridError, match="per-token scores give PPL"):
        _write_scores(corpus, dirs[3], tmp_path / "bad")


def test_a_combination_refuses_files_of_different_token_sequences(tmp_path):
    """Two files of different token sequences: one line naming both.  Negative control: files of one sequence
    pass (the check compares the sequences, it does not refuse every pair)."""
    a = scorefile.write(tmp_path / "a", "valid", [-1.0, -2.0, -0.5], [4, 5, 3], math.exp(3.5 / 3), "ra", "base")
    b = scorefile.write(tmp_path / "b", "valid", [-1.5, -1.0, -0.5], [4, 6, 3], math.exp(1.0), "rb", "base")
    c = scorefile.write(tmp_path / "c", "valid", [-0.5, -1.5, -1.0], [4, 5, 3], math.exp(1.0), "rc", "base")
    a, b, c = (scorefile.read(tmp_path / n, "valid") for n in "abc")
    with pytest.raises(LmgridError) as e:
        scorefile.stack([a, b])
    assert str(tmp_path / "a" / "valid.npy") in str(e.value) and str(tmp_path / "b" / "valid.npy") in str(e.value)
    assert "\n" not in str(e.value)
    assert scorefile.stack([a, c]).shape == (2, 3)


def test_score_file_write_checks_the_claimed_ppl(tmp_path):
    """write refuses log-probs that do not give the PPL they claim, and writes nothing.  Mutation killed: a claimed
    PPL off by 1e-5 relative passes."""
    lp = [-1.0, -2.0, -0.5]
    with pytest.raises(LmgridError, match="relative difference"):
        scorefile.write(tmp_path / "x", "test", lp, [1, 2, 3], math.exp(3.5 / 3) * (1 + 1e-5), "r", "base")
    assert not (tmp_path / "x").exists()
    scorefile.write(tmp_path / "x", "test", lp, [1, 2, 3], math.exp(3.5 / 3) * (1 + 1e-8), "r", "base")


# -- EM ----------------------------------------------------------------------------------------------------------
def _three_components(seed=0, n=3000):
    """Three 'models' of one token stream, each good on its own share of the tokens (50%, 30%, 20%): the best
    mixture weights are inside the simplex, far from uniform, and the mixture beats each component."""
    rng = np.random.default_rng(seed)
    own = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    p = rng.uniform(0.01, 0.08, (3, n))
    p[own, np.arange(n)] = rng.uniform(0.2, 0.7, n)
    return np.log(p)


def _grid_best(lp, step=0.01):
    best, best_w = -np.inf, None
    k = np.arange(0, 1 + step / 2, step)
    for w0, w1 in itertools.product(k, k):
        if w0 + w1 > 1 + 1e-12:
            continue
        w = np.array([w0, w1, max(0.0, 1 - w0 - w1)])
        with np.errstate(divide="ignore"):
            ll = float(np.mean(mixture.mixture_logprob(np.log(w), lp)))
        if ll > best:
            best, best_w = ll, w
    return best_w, best


def test_em_weights_match_a_brute_force_grid_search(monkeypatch):
    """EM's weights are the valid-likelihood maximum a 0.01 grid over the simplex finds.  Mutation killed: an
    M-step that weights each component by its mean likelihood (not by its posterior share of each token)."""
    lp = _three_components()
    valid = [_scores(row) for row in lp]
    w, _ = fit_weights(valid)
    grid_w, grid_ll = _grid_best(scorefile.stack(valid))
    with np.errstate(divide="ignore"):
        em_ll = float(np.mean(mixture.mixture_logprob(np.log(w), scorefile.stack(valid))))
    assert np.abs(w - grid_w).max() <= 0.011 and em_ll >= grid_ll - 1e-7
    assert np.abs(grid_w - 1 / 3).max() > 0.1  # the optimum is not the starting point

    def by_mean_likelihood(w, lp):
        m = w * np.exp(lp).mean(axis=1)
        return float(np.mean(mixture.mixture_logprob(np.log(w), lp))), m / m.sum()

    monkeypatch.setattr(mixture, "em_step", by_mean_likelihood)
    bad, _ = fit_weights(valid)
    assert np.abs(bad - grid_w).max() > 0.011


def _plain_em(lp, tol=mixture.TOL_NATS):
    """EM written out as the module docstring states it: weights from the mean posterior shares, then the new
    weights' valid log-likelihood, until a step gains less than tol."""
    w = np.full(len(lp), 1.0 / len(lp))
    ll = float(np.mean(mixture.mixture_logprob(np.log(w), lp)))
    for it in range(1, mixture.MAX_ITER + 1):
        joint = np.log(w)[:, None] + lp
        share = np.exp(joint - mixture.mixture_logprob(np.log(w), lp))
        w = share.mean(axis=1) / share.mean(axis=1).sum()
        new = float(np.mean(mixture.mixture_logprob(np.log(w), lp)))
        gain, ll = new - ll, new
        if gain < tol:
            return w, it


def test_em_steps_are_plain_ems_to_the_bit():
    """fit_weights takes a weight's likelihood and the next step's weights from one pass (em_step): its weights and
    step count equal plain EM's exactly (==), a component near 0 included.  Kills: the weights one step past the
    stop returned (the fused loop's update applied after its last check; run here)."""
    lp = _three_components(3, 500)
    lp[2] = lp[0] - 0.1  # a slightly worse copy: many steps, its weight going to 0
    valid = [_scores(row) for row in lp]

    def same(fit) -> bool:
        w, it = fit(valid)
        plain_w, plain_it = _plain_em(scorefile.stack(valid))
        return it == plain_it and list(w) == list(plain_w)

    assert same(fit_weights) and _plain_em(scorefile.stack(valid))[1] > 100

    def one_step_past(v):
        w, it = fit_weights(v)
        update = mixture.em_step(w, scorefile.stack(v))[1]
        return update / update.sum(), it

    assert not same(one_step_past)


def test_mixture_valid_ppl_is_never_above_the_best_component(monkeypatch):
    """Over random cases (one component far better, near-duplicates, a useless one), the mixture's valid PPL is at
    most its best component's.  Mutation killed: weights left at uniform (no fit)."""
    def cases():
        for seed in range(6):
            lp = _three_components(seed, 1000)
            if seed % 3 == 1:
                lp[2] = lp[0] - 3.0      # a much worse copy of component 0
            if seed % 3 == 2:
                lp[1] = lp[0] + 1e-3 * np.random.default_rng(seed).standard_normal(lp.shape[1])
            yield [_scores(r) for r in lp], [_scores(r, "test") for r in lp]

    def worst_excess():
        return max(m.valid_ppl - min(m.component_valid_ppl)
                   for m in (combine(["a", "b", "c"], v, t) for v, t in cases()))

    assert worst_excess() <= 1e-9
    monkeypatch.setattr(mixture, "fit_weights", lambda v, tol=0: (np.full(len(v), 1.0 / len(v)), 0))
    assert worst_excess() > 0.1


def test_a_single_component_gives_back_its_own_ppl_exactly(monkeypatch):
    """One component: weight 1, and its valid and test PPL exactly (==).  Mutation killed: a 'safe' mixture that
    adds 1e-12 to p_mix before the log."""
    lp = _three_components()[0]
    valid, test = _scores(lp), _scores(lp[::-1].copy(), "test")
    m = combine(["only"], [valid], [test])
    assert m.weights == [1.0]
    assert m.valid_ppl == valid.file_ppl() and m.test_ppl == test.file_ppl()
    real = mixture.mixture_logprob
    monkeypatch.setattr(mixture, "mixture_logprob", lambda log_w, lp: np.log(np.exp(real(log_w, lp)) + 1e-12))
    m = combine(["only"], [valid], [test])
    assert m.valid_ppl != valid.file_ppl()


def test_weights_fitted_on_test_are_caught(monkeypatch):
    """The fit only ever sees valid: fit_weights refuses test scores.  Negative controls: a combine that passes
    test scores to the fit (the leak) stops with that one line; and with the split check removed, fitting on test
    silently gives other weights and a lower, leaked test PPL (what the check prevents)."""
    rng = np.random.default_rng(1)
    good, bad = np.log(rng.uniform(0.3, 0.6, 2000)), np.log(rng.uniform(0.05, 0.2, 2000))
    valid = [_scores(good), _scores(bad)]          # valid prefers component a
    test = [_scores(bad, "test"), _scores(good, "test")]  # test prefers b
    honest = combine(["a", "b"], valid, test)
    assert honest.weights[0] > 0.9
    with pytest.raises(LmgridError, match="fitted on valid only, not on test"):
        fit_weights(test)
    real = mixture.fit_weights
    monkeypatch.setattr(mixture, "fit_weights", lambda v, tol=mixture.TOL_NATS: real(test, tol))
    with pytest.raises(LmgridError, match="fitted on valid only"):
        combine(["a", "b"], valid, test)
    monkeypatch.setattr(mixture, "FIT_SPLIT", "test")  # the check removed: the leak goes through
    leaked = combine(["a", "b"], valid, test)
    assert leaked.weights[1] > 0.9 and leaked.test_ppl < honest.test_ppl


def test_cli_scores_combines_and_fills_the_reference_row(tmp_path, monkeypatch, capsys):
    """`lmgrid token-scores` for an n-gram and a neural cell, `lmgrid combine`, `lmgrid combinations` and a
    reference row naming the combination: the row holds the mixture's test PPL, not a component's.  Negative
    control: a component scored on another corpus stops `lmgrid combine` with one line naming both files."""
    from lmgrid.cli import main
    from lmgrid.analysis.reference import reference_table

    monkeypatch.chdir(tmp_path)
    corpus = tiny_corpus(tmp_path, train=600)
    vocab = Vocab.load(corpus["vocab_path"])
    count_to_npz(corpus["paths"]["train"], vocab, 3, tmp_path / "counts.npz")
    kn = normalise("kn", "ngram", 3, 1, "window", 0)
    kn_dir = tmp_path / kn.run_dir("c")
    train_run(counts_path=tmp_path / "counts.npz", vocab_path=corpus["vocab_path"],
              valid_path=corpus["paths"]["valid"], test_path=corpus["paths"]["test"], arch="kn", order=3,
              arpa_path=kn_dir / "model.arpa", metrics_path=kn_dir / "metrics.json", write_arpa="true")
    _, rnn_dir = train(corpus, tmp_path, arch="rnn", regime="stream", epochs=2)
    p = corpus["paths"]
    for d in (kn_dir, rnn_dir):
        assert main(["token-scores", "--run-dir", str(d), "--valid", p["valid"], "--test", p["test"],
                     "--vocab", corpus["vocab_path"], "--out-dir", str(d) + "-scores"]) in (0, None)
    out = tmp_path / "combine" / "mix"
    assert main(["combine", "--name", "mix", "--component", f"kn={kn_dir}-scores", "--component",
                 f"rnn={rnn_dir}-scores", "--out-dir", str(out)]) in (0, None)
    result = read_json(out / "result.json")
    assert sorted(result["labels"]) == ["kn", "rnn"] and sum(result["weights"]) == pytest.approx(1.0)
    assert result["valid_ppl"] <= min(result["component_valid_ppl"]) + 1e-9
    assert main(["combinations", "--results", str(out / "result.json"), "--csv", "all.csv", "--md", "all.md",
                 "--html", "all.html"]) in (0, None)
    assert "mix" in (tmp_path / "all.md").read_text()
    table = reference_table([{"model": "KN + RNN", "published_test_ppl": 105.7, "source": "s", "combine": "mix"},
                             {"model": "other", "published_test_ppl": 1.0, "source": "s", "combine": "absent"}],
                            [str(kn_dir / "metrics.json"), str(rnn_dir / "metrics.json")], [str(out / "result.json")])
    assert table["test_ppl_mean"][0] == result["test_ppl"] and table["ours"][1] == "not run here"
    # negative control: a component of another corpus
    other = tiny_corpus(tmp_path / "o", seed=5)
    _, other_dir = train(other, tmp_path / "o", arch="rnn", regime="stream", epochs=1)
    q = other["paths"]
    main(["token-scores", "--run-dir", str(other_dir), "--valid", q["valid"], "--test", q["test"],
          "--vocab", other["vocab_path"], "--out-dir", str(other_dir) + "-scores"])
    capsys.readouterr()
    assert main(["combine", "--name", "bad", "--component", f"kn={kn_dir}-scores", "--component",
                 f"o={other_dir}-scores", "--out-dir", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{other_dir}-scores/valid.npy" in err and f"{kn_dir}-scores" in err
    assert not (tmp_path / "bad").exists()
