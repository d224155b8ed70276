"""Interpolated modified Kneser-Ney on the Penn Treebank against the published figures, and KenLM's
reading of our ARPA file.  Published: 3-gram 148.3, 5-gram 141.2 test PPL (Mikolov 2012, Table 4.1;
see the README beside the data); <unk> is an ordinary word, one </s> per sentence counted."""
from __future__ import annotations

import math

import pytest

from lmgrid.data.corpus import load_split
from lmgrid.ngram import arpa
from lmgrid.ngram.counts import count_sentences
from lmgrid.ngram.estimate import estimate
from lmgrid.ngram.model import NgramModel
from lmgrid.data.ppl import BOS, PAD
from lmgrid.data.vocab import build

pytestmark = pytest.mark.ptb
PUBLISHED_TEST_PPL = {3: 148.3, 5: 141.2}


@pytest.fixture(scope="module")
def ptb(ptb_dir):
    splits = {s: load_split(ptb_dir / f"ptb.{s}.txt") for s in ("train", "valid", "test")}
    vocab = build(splits["train"])
    return splits, vocab, count_sentences(splits["train"], vocab, 5)


def mkn(ptb, order) -> NgramModel:
    _, vocab, counts = ptb
    return NgramModel(estimate(counts, "mkn", order, vocab.index[BOS], vocab.index[PAD]), vocab)


@pytest.mark.parametrize("order", [3, 5])
def test_mkn_reproduces_the_published_test_ppl(ptb, order):
    splits, vocab, _ = ptb
    result = mkn(ptb, order).evaluate(splits["test"])
    assert result["tokens"] == 82_430 and result["oov_tokens"] == 0  # README: 78,669 words + 3,761 </s>
    assert result["ppl"] == pytest.approx(PUBLISHED_TEST_PPL[order], rel=1e-3)


@pytest.mark.slow
def test_kenlm_scores_our_5gram_arpa_like_we_do(ptb, tmp_path, kenlm, monkeypatch):
    """KenLM scoring our modified-KN 5-gram ARPA file of PTB gives the test log-probability we compute in memory.
    Kills: back-off weights written in natural log (the writer's `* LOG10E` left off the back-off column), as
    tests/test_ngram.py's small-corpus test does, here at PTB's size.  Negative control, run here: that writer, and
    KenLM's total moves outside the tolerance."""
    splits, vocab, _ = ptb
    model = mkn(ptb, 5)
    ours = -model.evaluate(splits["test"])["nll_nats"]

    def kenlm_logprob(name: str) -> float:
        path = tmp_path / name
        arpa.write(path, model.backoff, vocab.tokens)
        lm = kenlm.Model(str(path))
        return sum(lm.score(" ".join(s), bos=True, eos=True) for s in splits["test"]) * math.log(10)

    assert kenlm_logprob("ptb5.arpa") == pytest.approx(ours, rel=1e-4)
    real = arpa._write_lines
    monkeypatch.setattr(arpa, "_write_lines", lambda fh, buf, tokens, cols, logp, bow: real(
        fh, buf, tokens, cols, logp, None if bow is None else bow / arpa.LOG10E))  # log10 back to natural log
    assert kenlm_logprob("natural_bow.arpa") != pytest.approx(ours, rel=1e-4)
