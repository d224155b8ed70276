"""The shared perplexity convention and the oracle built on it."""
import math

import pytest

from lmgrid.data.oracle import run as oracle_run
from lmgrid.data.oracle import write_sample
from lmgrid.data.ppl import counted_tokens, perplexity, targets
from lmgrid.data.synth import Grammar
from lmgrid.data.vocab import build


def test_targets_and_counting():
    assert targets(["a", "b"]) == ["a", "b", "</s>"]
    assert counted_tokens([["a", "b"], ["c"]]) == 5  # </s> counted once per sentence, <s> never


def test_perplexity_definition_and_guards():
    assert perplexity(2 * math.log(4), 2) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="zero counted tokens"):
        perplexity(1.0, 0)
    with pytest.raises(ValueError, match="non-finite"):
        perplexity(math.inf, 3)
    with pytest.raises(ValueError, match="overflowing NLL"):
        perplexity(1e308, 1)


def test_oracle_is_the_exact_sentence_probability(tmp_path):
    g = Grammar()
    sample = g.sample(300, seed=4)
    write_sample(sample[:200], tmp_path / "train.txt", tmp_path / "train.logprob")
    write_sample(sample[200:], tmp_path / "test.txt", tmp_path / "test.logprob")
    vocab = build([s for s, _ in sample[:200]])
    (tmp_path / "vocab.json").write_text(__import__("json").dumps(vocab.to_json()))
    result = oracle_run(tmp_path / "vocab.json", tmp_path / "oracle.json",
                        test=(tmp_path / "test.txt", tmp_path / "test.logprob"))
    nll = -math.fsum(lp for _, lp in sample[200:])
    tokens = sum(len(s) + 1 for s, _ in sample[200:])
    assert result["test"]["tokens"] == tokens
    assert result["test"]["ppl"] == pytest.approx(math.exp(nll / tokens), rel=1e-12)
    oov = sum(1 for s, _ in sample[200:] for t in s if t not in vocab.index)
    assert result["test"]["oov_tokens"] == oov and result["test"]["is_floor"] == (oov == 0)
