"""train.budget_flops (lmgrid.neural.compute_budget): a FLOP budget becomes the run's token budget through its own
model's training FLOPs per token, then runs the budget schedule; both budgets given is one line."""
from __future__ import annotations

import pytest

from lmgrid.common.errors import LmgridError
from lmgrid.models import flops as flops_mod
from lmgrid.neural import compute_budget
from lmgrid.neural import train as train_mod

from test_neural_support import BigramSource, write_corpus
from test_neural_train import spec_of, train

E = H = 16  # TINY's emb_dim and hidden_dim
BUDGET_FLOPS = 4e8


def corpus_of(tmp_path):
    """Twenty words, so that the adaptive softmax cuts tail clusters whose shares are not equal."""
    src = BigramSource(n_words=20, stop=0.1, seed=2)
    return write_corpus(tmp_path, {"train": src.sample(400), "valid": src.sample(40), "test": src.sample(40)}, "c")


def by_hand(job) -> float:
    """Training FLOPs per token of a 1-layer LSTM (window regime, n_step 3: two steps a target) with the adaptive
    softmax (untied), written out: 3 x (recurrence + head + each tail cluster times its share of training tokens)."""
    counts = [job.vocab.counts.get(t, 0) for t in job.vocab.tokens]
    cuts, V = job.model_config["cutoffs"], len(counts)
    bounds, total = [*cuts, V], sum(counts)
    recurrence = 2 * (2 * 4 * H * (E + H))
    head = 2 * H * (cuts[0] + len(cuts))
    tails = 0.0
    for i in range(len(cuts)):
        share = sum(counts[bounds[i]:bounds[i + 1]]) / total
        width = max(1, H // 4 ** (i + 1))  # DIV_VALUE 4
        tails += share * (2 * H * width + 2 * width * (bounds[i + 1] - bounds[i]))
    return 3 * (recurrence + head + tails)


def budget_of(corpus, tmp_path, **hp) -> int:
    job = train_mod.build(spec_of(corpus, tmp_path, output_layer="adaptive", epochs=50, **hp), threads=1)
    return job, job.module.budget.budget


def test_budget_flops_gives_flops_over_the_training_count_per_token(tmp_path, monkeypatch):
    """tokens = budget_flops / (hand-counted training FLOPs per token) for a small adaptive-softmax LSTM.  Kills: the
    evaluation (forward) count used instead of the training one, and the adaptive softmax's cluster shares ignored
    (every tail cluster counted as if all tokens fell in it, or none); both mutants are run here and must miss."""
    corpus = corpus_of(tmp_path)
    job, tokens = budget_of(corpus, tmp_path / "a", budget_flops=BUDGET_FLOPS)
    per_token = by_hand(job)
    assert len(job.model_config["cutoffs"]) >= 1
    assert tokens == round(BUDGET_FLOPS / per_token)
    assert job.compute == {"budget_flops": BUDGET_FLOPS, "train_flops_per_token": pytest.approx(per_token),
                           "budget_tokens": tokens}

    with monkeypatch.context() as m:  # mutant: the eval (forward) count
        m.setattr(flops_mod.FlopCount, "train", property(lambda self: self.forward))
        assert budget_of(corpus, tmp_path / "b", budget_flops=BUDGET_FLOPS)[1] != tokens
    for share in (0.0, 1.0):  # mutants: the shares ignored
        with monkeypatch.context() as m:
            m.setattr(compute_budget, "cluster_fractions", lambda counts, cuts, s=share: [s] * len(cuts))
            assert budget_of(corpus, tmp_path / f"c{share}", budget_flops=BUDGET_FLOPS)[1] != tokens


def test_both_budgets_given_is_one_line_naming_both(tmp_path):
    """Kills: one budget silently winning over the other (the negative control: each alone builds)."""
    corpus = corpus_of(tmp_path)
    with pytest.raises(LmgridError) as e:
        budget_of(corpus, tmp_path / "a", budget_flops=BUDGET_FLOPS, budget_tokens=500)
    msg = str(e.value)
    assert "\n" not in msg and "train.budget_flops" in msg and "train.budget_tokens" in msg
    assert budget_of(corpus, tmp_path / "b", budget_tokens=500)[1] == 500


def test_a_flop_budget_run_records_its_budget_and_stops_at_it(tmp_path):
    """metrics.json of a trained run holds budget_flops, train_flops_per_token and budget_tokens, and the run stops
    at those tokens (budget-schedule).  Kills: the fields left out of the record, or the schedule given anything but
    the converted tokens (budget_tokens_trained then falls outside [tokens, tokens + one batch))."""
    corpus = corpus_of(tmp_path)
    metrics, _ = train(corpus, tmp_path / "a", output_layer="adaptive", epochs=50, budget_flops=BUDGET_FLOPS)
    tokens = metrics["budget_tokens"]
    assert metrics["budget_flops"] == BUDGET_FLOPS and tokens == round(BUDGET_FLOPS / metrics["train_flops_per_token"])
    assert metrics["stopped_because"] == "budget-schedule"
    assert tokens <= metrics["budget_tokens_trained"] < tokens + 64
