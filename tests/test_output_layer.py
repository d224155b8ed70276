"""`output_layer: adaptive` (lmgrid.models.adaptive): cutoffs by the stated rule, an exact normalised distribution
over the whole vocabulary, a training loss equal to its exact NLL, a PPL independent of the evaluation's batch
layout, float32 normalisation under bf16 autocast, tied rows, and every consumer (gate statistics, `lmgrid score`, sampling, the
MLflow pyfunc model) working with it.  Every test runs its mutation too and checks that it fails."""
from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lmgrid import cli, lm
from lmgrid.data.corpus import load_split
from lmgrid.common.errors import LmgridError
from lmgrid.models import adaptive, build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.models.adaptive import AdaptiveHead, adaptive_cutoffs
from lmgrid.neural.data import IGNORE
from lmgrid.neural.datamodule import LMData
from lmgrid.neural.module import batch_nll, evaluate
from lmgrid.data.ppl import perplexity
from lmgrid.data.vocab import Vocab

from test_neural_support import tiny_corpus
from test_neural_train import train

V, CUTOFFS = 53, [9, 30]
ARCHS = ("ffnn", "rnn", "lstm", "gru", "transformer")


def make(arch, tie=False, seed=0, **kw):
    torch.manual_seed(seed)
    kw = {"vocab_size": V, "emb_dim": 12, "hidden_dim": 16, "layers": 2, "n_step": 4, "max_len": 16,
          "output_layer": "adaptive", "cutoffs": CUTOFFS, "tie_weights": tie, **kw}
    return build_model(model_config_defaults(arch=arch, **kw))


def tokens(seed, b=5, t=7):
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(seed))


def contexts(arch, seed=1):
    return tokens(seed, t=3) if arch == "ffnn" else tokens(seed)


def cutoff_violation(counts, cuts, coverage=(adaptive.HEAD_COVERAGE, adaptive.TAIL_COVERAGE)) -> str | None:
    """Why `cuts` break the documented rule for `counts` (None: they follow it), computed independently: boundary
    k is the shortest id prefix covering coverage[k] of the tokens, rounded to the step 10^(floor(log10 V) - 2)."""
    cum = np.cumsum(counts) / np.sum(counts)
    step = max(1, 10 ** (len(str(len(counts))) - 3))
    for share, cut in zip(coverage, cuts):
        shortest = int(np.argmax(cum >= share - 1e-12)) + 1
        if abs(cut - shortest) > step / 2:
            return f"cut {cut} is not the shortest prefix covering {share} ({shortest}) rounded to {step}"
    return None


def test_cutoffs_follow_the_coverage_rule():
    """Kills: a boundary off by one word (the prefix before it does not cover the share), and rounding ignored or
    applied to a vocabulary too small for it (then a cluster collapses)."""
    counts = [0, 50, 0, 30, 10, 5, 3, 1, 1]  # 100 tokens; 87% first reached by 5 ids, 97% by 7
    assert adaptive_cutoffs(counts) == [5, 7]
    rng = np.random.default_rng(0)
    zipf = sorted((rng.zipf(1.3, 5000) % 10_000 + 1).tolist(), reverse=True)
    for counts in ([0, 7, 0, 5, *zipf[:400]], [0, 7, 0, 5, *zipf]):
        cuts = adaptive_cutoffs(counts)
        assert cutoff_violation(counts, cuts) is None
        assert 0 < cuts[0] < cuts[-1] < len(counts)
        # the mutations: one id short of the covering prefix, and twice the rounding step
        assert cutoff_violation(counts, [cuts[0] - max(1, 10 ** (len(str(len(counts))) - 3)), cuts[1]]) is not None
        assert cutoff_violation(counts, [c + 2 * max(1, 10 ** (len(str(len(counts))) - 3)) for c in cuts])
    assert adaptive_cutoffs([0, 1, 0, 0]) == [2]  # a cluster that would be empty is dropped
    with pytest.raises(LmgridError, match="no frequencies"):
        adaptive_cutoffs([0, 0, 0])


@pytest.mark.full
def test_cutoffs_of_ptb_are_near_2000_and_6000(ptb_dir):
    """The rule on PTB's vocabulary (the issue's measured head of 2000 words covers 86.9%): the boundaries the
    seed_table preset and its docs quote.  Kills: counts taken in another order than the vocabulary's ids (by
    token string, say), or the rule applied to the counts of another split; the negative control, the cutoffs
    from the shuffled counts, breaks the rule for the real ones."""
    from lmgrid.data.vocab import build

    vocab = build(load_split(ptb_dir / "ptb.train.txt"))
    counts = [vocab.counts.get(t, 0) for t in vocab.tokens]
    cuts = adaptive_cutoffs(counts)
    assert cutoff_violation(counts, cuts) is None
    assert cuts == [2000, 6200]
    by_string = [vocab.counts.get(t, 0) for t in sorted(vocab.tokens)]
    assert cutoff_violation(counts, adaptive_cutoffs(by_string)) is not None


def max_sum_error(model, x) -> float:
    """max over positions of |sum over the whole vocabulary of p(w | context) - 1|, in float64."""
    with torch.no_grad():
        log_probs, _, _ = model.eval()(x)
    assert log_probs.shape[-1] == V
    return float((log_probs.double().exp().sum(-1) - 1).abs().max())


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("arch", ARCHS)
def test_probabilities_over_the_vocabulary_sum_to_one(arch, tie, monkeypatch):
    """For several contexts (5 rows x 7 positions, two draws) the adaptive softmax's probabilities over all V words
    sum to 1.  Negative control, run here: kills "a tail cluster left unnormalised" (its raw scores added to the
    cluster's head log-probability instead of its log-softmax)."""
    model = make(arch, tie)
    for seed in (1, 2):
        assert max_sum_error(model, contexts(arch, seed)) < 1e-5
    monkeypatch.setattr(AdaptiveHead, "_tail_log_probs",
                        lambda self, i, x, rows=None: F.linear(self.tail_proj[i](x), self._rows(i + 1),
                                                                   self.tail_bias[i]))
    assert max_sum_error(model, contexts(arch)) > 1e-3


@pytest.mark.parametrize("regime", ["window", "stream"])
@pytest.mark.parametrize("arch", ARCHS)
def test_training_loss_is_the_exact_nll(arch, regime, monkeypatch):
    """batch_nll's fast path (the head for every target, a tail only for the targets in it) equals the exact NLL
    read off the full log-probabilities, with padding (IGNORE) neither scored nor counted.  Negative control, run
    here: kills "the tail's within-cluster term dropped" (the loss of a tail word = its cluster's probability)."""
    if arch == "ffnn" and regime == "stream":
        pytest.skip("ffnn has no stream regime")
    model = make(arch, dropout=0.0).eval()
    x = contexts(arch)
    y = tokens(9, t=1)[:, 0] if regime == "window" else tokens(9)
    if regime == "stream":
        y[0, 4:] = IGNORE  # a padded row tail
    log_probs, _, _ = model(x, last_only=regime == "window")
    lp = log_probs[:, -1] if regime == "window" else log_probs
    exact = F.nll_loss(lp.reshape(-1, V).double(), y.reshape(-1), ignore_index=IGNORE, reduction="sum")
    nll, n, _ = batch_nll(model, x, y, regime)
    assert int(n) == int((y != IGNORE).sum())
    assert float(nll.detach()) == pytest.approx(float(exact.detach()), rel=1e-6)
    assert (y >= CUTOFFS[0]).any()  # some targets are tail words, so the mutation below changes the sum
    monkeypatch.setattr(AdaptiveHead, "_tail_nll", lambda self, i, x, word, rows=None: x.new_zeros(()))
    mutated, _, _ = batch_nll(model, x, y, regime)
    assert float(mutated.detach()) < float(exact.detach()) - 1e-3


def test_every_parameter_gets_a_gradient_when_no_target_is_in_a_tail(monkeypatch):
    """DDP (train.devices > 1) needs a gradient for every parameter at every step: a batch whose targets are all
    head words still reaches each tail (with zeros).  Negative control, run here: kills "empty tails skipped"."""
    def missing():
        model = make("lstm")
        nll, _, _ = batch_nll(model, tokens(1), tokens(2) % CUTOFFS[0], "stream")  # head words only
        nll.backward()
        return [name for name, p in model.named_parameters() if p.grad is None]

    assert missing() == []
    tail_nll = AdaptiveHead._tail_nll
    monkeypatch.setattr(AdaptiveHead, "_tail_nll", lambda self, i, x, word, rows=None: (
        tail_nll(self, i, x, word, rows) if len(word) else x.new_zeros(())))  # the mutation
    assert missing() and all(name.startswith("head.tail_") for name in missing())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return tiny_corpus(tmp_path_factory.mktemp("adaptive"), train=200)


def _eval_nll(corpus, model, regime: str, rows: int, split_rows: bool = False) -> tuple[float, int]:
    """evaluate() on the test split with `rows` per batch; with split_rows each batch's rows are scored one by one
    (state carried per row), the same positions in another layout."""
    vocab = Vocab.load(corpus["vocab_path"])
    data = LMData(corpus["paths"], vocab, regime, n_step=4, eval_batch_size=rows, stream_eval_batch_size=rows,
                  bptt=5)
    data.setup()
    batches = list(data.dataloader("test"))
    if not split_rows:
        return evaluate(model, batches, regime, "cpu")
    total, count = 0.0, 0
    for r in range(batches[0][0].shape[0]):
        nll, n = evaluate(model, [(x[r:r + 1], y[r:r + 1]) for x, y in batches if r < x.shape[0]], regime, "cpu")
        total, count = total + nll, count + n
    return total, count


def _batch_normalised_f():
    """The mutation: log_softmax over the batch dimension, so a score depends on the other rows of its batch."""
    return types.SimpleNamespace(linear=F.linear, log_softmax=lambda x, dim: torch.log_softmax(x, 0))


def test_ppl_does_not_depend_on_the_evaluation_batch_layout(corpus, monkeypatch):
    """Window regime: the test NLL of the 1-, 7- and 64-window batchings agree; stream regime: a layout of 7 rows
    scores what its rows score one at a time (padding of the shorter rows included).  Negative control, run here:
    kills "normalised across the batch" (log_softmax over dim 0 in the adaptive head), which a per-position test
    with one batch cannot see."""
    vocab_size = len(Vocab.load(corpus["vocab_path"]))

    def figures():
        window = make("lstm", vocab_size=vocab_size, cutoffs=[5, 8], layers=1).eval()
        stream = make("gru", vocab_size=vocab_size, cutoffs=[5, 8], layers=1, seed=1).eval()
        w = [_eval_nll(corpus, window, "window", rows) for rows in (1, 7, 64)]
        s = [_eval_nll(corpus, stream, "stream", 7), _eval_nll(corpus, stream, "stream", 7, split_rows=True)]
        return w, s

    def agree(pairs):
        return all(n == pairs[0][1] and nll == pytest.approx(pairs[0][0], rel=1e-6) for nll, n in pairs)

    window, stream = figures()
    assert agree(window) and agree(stream)
    monkeypatch.setattr(adaptive, "F", _batch_normalised_f())
    window, stream = figures()
    assert not agree(window) and not agree(stream)


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_normalised_and_exact_under_bf16_autocast(arch, monkeypatch):
    """Under CPU bf16 autocast (bf16-mixed; PyTorch's own module fails there, pytorch#44724) the adaptive head's
    products run in bf16 (its scores differ from fp32's), but every normalisation in float32: the log-probabilities
    are float32 and sum to 1 to float32 rounding, and the training loss is their exact NLL.  Negative control, run
    here: kills "log-softmax left in bf16" (then the sums miss 1 by bf16 rounding)."""
    model = make(arch).eval()
    x, y = tokens(3), tokens(4)

    def under_autocast():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            log_probs, _, _ = model(x)
            nll, _, _ = batch_nll(model, x, y, "stream")
        return log_probs, nll

    log_probs, nll = under_autocast()
    assert log_probs.dtype == torch.float32 and nll.dtype == torch.float32
    assert float((log_probs.double().exp().sum(-1) - 1).abs().max()) < 1e-5
    exact = -log_probs.double().gather(-1, y[..., None]).sum()
    assert float(nll) == pytest.approx(float(exact), rel=1e-6)
    with torch.no_grad():
        fp32 = model(x)[0]
    assert not torch.equal(fp32, log_probs) and torch.allclose(fp32, log_probs, atol=0.1)
    monkeypatch.setattr(adaptive, "F", types.SimpleNamespace(  # the mutation
        linear=F.linear, log_softmax=lambda t, dim: torch.log_softmax(t.bfloat16(), dim)))
    log_probs, _ = under_autocast()
    assert float((log_probs.double().exp().sum(-1) - 1).abs().max()) > 1e-3


def test_tied_rows_are_the_embedding(monkeypatch):
    """tie_weights: the head's word rows and every tail cluster's output rows are the embedding's rows, so a word
    seen only as a target (never as an input) still moves its embedding row, and no copy is saved.  Negative
    control, run here: kills "tie_weights ignored by the adaptive head" (untied: that row's gradient is zero)."""
    def tail_row_grad():
        model = make("lstm", tie=True, dropout=0.0)
        x = torch.full((2, 5), 2)  # only id 2 is ever an input
        y = torch.full((2, 5), V - 1)  # the last tail cluster's last word
        nll, _, _ = batch_nll(model, x, y, "stream")
        nll.backward()
        return model, float(model.embedding.weight.grad[V - 1].abs().sum())

    model, grad = tail_row_grad()
    assert grad > 0
    assert not any(k.startswith(("head.head_words", "head.tail_words")) for k in model.state_dict())
    assert model.head._rows(2).data_ptr() == model.embedding.weight[CUTOFFS[1]].data_ptr()
    init = AdaptiveHead.__init__
    monkeypatch.setattr(AdaptiveHead, "__init__", lambda self, cfg, in_dim, emb: init(  # the mutation
        self, dataclasses.replace(cfg, tie_weights=False), in_dim, emb))
    _, grad = tail_row_grad()
    assert grad == 0


@pytest.mark.parametrize("changes, key", [
    ({"output_layer": "hierarchical"}, "output_layer"),
    ({"cutoffs": []}, "cutoffs"),
    ({"cutoffs": [30, 9]}, "cutoffs"),
    ({"cutoffs": [9, V]}, "cutoffs"),
    ({"arch": "ffnn", "direct": True}, "direct"),
])
def test_bad_adaptive_config_is_a_one_line_error(changes, key):
    """Kills: a bad output_layer, or cutoffs that leave a cluster empty or out of range, reaching the model."""
    kw = {"arch": "lstm", **changes}
    with pytest.raises(LmgridError, match=f"model.{key}:") as e:
        make(**kw)
    assert "\n" not in str(e.value)


def test_full_keeps_the_checkpoint_fingerprint_of_runs_before_the_setting(tmp_path, monkeypatch):
    """`output_layer: full` (the default) fingerprints a run as its settings did before output_layer existed, so an
    interrupted run still resumes; `adaptive` fingerprints differently.  The fingerprint of before is computed here
    from its formula (sha256 of the JSON of run, computing settings and placement, then each input file by name), so
    a changed formula fails too.  Negative control, run here: kills "the neutral default fingerprinted like any
    setting" (x-neutral-default ignored)."""
    import hashlib
    import json

    from lmgrid.neural import train as train_mod
    from lmgrid.run import spec as spec_mod
    from lmgrid.run.spec import RunSpec

    paths = {}
    for name in ("train", "valid", "test", "vocab"):
        (tmp_path / name).write_text(name)
        paths[name] = str(tmp_path / name)
    placement = {"device": "cpu", "precision": "32-true"}

    def spec(**hp):
        return RunSpec.build(arch="lstm", impl="torch", n_step=3, layers=1, regime="window", seed=1, corpus="c",
                             train=hp, paths={s: paths[s] for s in ("train", "valid", "test")}, vocab=paths["vocab"])

    def fingerprint(**hp):
        return train_mod._fingerprint(spec(**hp), placement)

    # init_range, weight_drop, average_from_epoch and the budgets are neutral defaults too (0: what every run computed before they
    # existed); log_every ... compile and gate_stats change no result
    before = {k: v for k, v in spec().hparams.items()
              if k not in ("output_layer", "init_range", "weight_drop", "average_from_epoch", "budget_tokens", "budget_flops",
                           "budget_warmup_tokens", "log_every", "accelerator", "devices",
                           "compile", "gate_stats")}
    h = hashlib.sha256(json.dumps({"run": spec().cell, "hp": before, "placement": placement}, sort_keys=True).encode())
    for name in sorted(paths):
        h.update(name.encode())
        h.update(name.encode())  # each file holds its own name
    old = h.hexdigest()
    assert fingerprint() == fingerprint(output_layer="full") == old != fingerprint(output_layer="adaptive")
    assert fingerprint(weight_drop=0.0) == old != fingerprint(weight_drop=0.3)
    monkeypatch.setattr(spec_mod, "NEUTRAL_DEFAULTS", {})  # the mutation
    assert fingerprint(output_layer="full") != old


# -- every consumer of a trained run, with the adaptive output layer -------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny LSTM (gated: gate statistics) per regime, trained with the adaptive output layer."""
    root = tmp_path_factory.mktemp("trained")
    c = tiny_corpus(root)
    runs = {regime: train(c, root, arch="lstm", regime=regime, output_layer="adaptive", epochs=1)
            for regime in ("window", "stream")}
    return c, runs


@pytest.mark.parametrize("regime", ["window", "stream"])
def test_trained_run_reports_exact_nll_and_writes_gates(trained, regime):
    """The valid NLL that training reported (the adaptive loss) equals the exact NLL of the saved model, scored
    again through the full log-probabilities; gates.csv is written.  Kills: training and scoring disagreeing on
    the distribution (e.g. a valid loss of another normalisation)."""
    c, runs = trained
    metrics, run_dir = runs[regime]
    assert metrics["hparams"]["output_layer"] == "adaptive" and (run_dir / "gates.csv").is_file()
    blob = torch.load(run_dir / "model.ckpt", weights_only=True)
    assert blob["model_config"]["cutoffs"] == adaptive_cutoffs(blob["vocab"]["counts"])
    model = lm.load(run_dir).model
    vocab = Vocab.load(c["vocab_path"])
    data = LMData(c["paths"], vocab, regime, n_step=3, stream_eval_batch_size=10, bptt=10)
    data.setup()
    exact, n = 0.0, 0
    state = None
    with torch.no_grad():
        for x, y in data.dataloader("valid"):
            log_probs, state, _ = model(x, state if regime == "stream" else None, last_only=regime == "window")
            lp = log_probs[:, -1] if regime == "window" else log_probs
            exact += float(F.nll_loss(lp.reshape(-1, lp.shape[-1]).double(), y.reshape(-1), ignore_index=IGNORE,
                                      reduction="sum"))
            n += int((y != IGNORE).sum())
    assert n == metrics["valid"]["tokens"]
    assert metrics["valid"]["nll_nats"] == pytest.approx(exact, rel=1e-6)
    assert metrics["valid"]["ppl"] == pytest.approx(perplexity(exact, n), rel=1e-6)


def test_score_and_generate_with_the_adaptive_layer(trained, capsys, tmp_path):
    """`lmgrid score` on the window run gives its test PPL, next_logprobs sum to 1, `lmgrid generate` samples
    words of the vocabulary.  Kills: score or sampling reading the adaptive head's output as unnormalised logits of
    another scale (a PPL off the run's), or a crash on the head's output."""
    c, runs = trained
    metrics, run_dir = runs["window"]
    capsys.readouterr()
    assert cli.main(["score", "--run", str(run_dir), "--text", c["paths"]["test"],
                     "--out", str(tmp_path / "s.tsv")]) == 0
    ppl = float(capsys.readouterr().err.rsplit("PPL", 1)[1])  # printed to 3 decimals
    assert ppl == pytest.approx(metrics["test"]["ppl"], rel=1e-3)
    per = lm.load(run_dir).sentence_logprobs(load_split(c["paths"]["test"]))  # what score sums
    nll = -sum(sum(lps) for lps in per)
    assert perplexity(nll, sum(map(len, per))) == pytest.approx(metrics["test"]["ppl"], rel=1e-6)
    for regime in ("window", "stream"):
        model = lm.load(runs[regime][1])
        assert sum(np.exp(model.next_logprobs(["w1", "w2"]))) == pytest.approx(1, abs=1e-5)
        assert cli.main(["generate", "--run", str(runs[regime][1]), "-n", "3", "--top-k", "4"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 3 and all(t in model.vocab.index for line in lines for t in line.split())


def test_mlflow_pyfunc_model_scores_like_the_run(trained, tmp_path):
    """The MLflow pyfunc model of an adaptive run (saved, loaded back, predict) gives the run's test PPL.
    Kills: the pyfunc wrapper failing on, or rescaling, the adaptive layer's log-probabilities."""
    import mlflow.pyfunc
    import pandas as pd

    from lmgrid.tracking.pyfunc_model import LmgridPyfunc, perplexity_of

    c, runs = trained
    metrics, run_dir = runs["window"]
    path = tmp_path / "pyfunc"
    mlflow.pyfunc.save_model(str(path), python_model=LmgridPyfunc(), artifacts={"model": str(run_dir / "model.ckpt")})
    model = mlflow.pyfunc.load_model(str(path))
    test = load_split(c["paths"]["test"])
    pred = model.predict(pd.DataFrame({"sentence": [" ".join(s) for s in test]}))
    assert perplexity_of(pred) == pytest.approx(metrics["test"]["ppl"], rel=1e-5)


def _tied_table_gradient(model, x, y):
    """The tied table's gradient after one backward of batch_nll, and the autograd nodes that feed it."""
    model.zero_grad(set_to_none=True)
    nll, _, _ = batch_nll(model, x, y, "stream")
    nll.backward()
    weight = model.embedding.weight
    feeders, seen, stack = set(), set(), [nll.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            if child is not None and getattr(child, "variable", None) is weight:
                feeders.add(node)
            stack.append(child)
    return weight.grad.clone(), sorted(type(n).__name__ for n in feeders)


def test_tied_rows_backward_through_one_split_to_the_same_gradient(monkeypatch):
    """Tied, the head's and the tails' rows come from one `split` of the embedding table, so the table's gradient
    is built by two backward nodes (the embedding's and the split's), not one zero-filled [V, d] tensor per cluster;
    and that gradient is the per-cluster slices' bit for bit (their rows are disjoint, so adding the other slices'
    zeros is exact).  Negative control, run here: kills "each cluster's rows sliced on their own" (one feeder per
    cluster, the slow path this replaced), and shows the comparison tells the two apart by their graphs only."""
    model = make("lstm", tie=True, dropout=0.0)
    x, y = tokens(3), tokens(4)
    assert any(int(t) >= CUTOFFS[1] for t in y.flatten())  # the last tail is in the loss
    grad, feeders = _tied_table_gradient(model, x, y)
    assert feeders == ["EmbeddingBackward0", "SplitWithSizesBackward0"]
    monkeypatch.setattr(AdaptiveHead, "_blocks", lambda self: [self._rows(c) for c in range(len(self.bounds))])
    sliced_grad, sliced_feeders = _tied_table_gradient(model, x, y)  # the mutation
    assert sliced_feeders == ["EmbeddingBackward0"] + ["SliceBackward0"] * len(model.head.bounds)
    assert torch.equal(grad, sliced_grad)
