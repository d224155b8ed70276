"""The stream regime's PPL does not depend on how a split is cut into rows.

Rows are sentence-aligned (lmgrid.neural.data.sentence_rows): each begins at a sentence boundary from a zero state,
which is where training rows begin too.  A trained stream model of each architecture is evaluated on the same test
split cut into 1, 10 and 20 rows; the PPLs must agree to 0.5% (issue: a contiguous cut that restarts mid-sentence
moved an Elman RNN's test PPL from 71 to 187).
"""
from __future__ import annotations

import math

import pytest

from lmgrid.neural.data import IGNORE, LMData, sentence_rows
from lmgrid.neural.model_io import load_run
from lmgrid.neural.module import evaluate
from lmgrid.vocab import Vocab

from test_neural_support import BigramSource, write_corpus
from test_neural_train import train


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    src = BigramSource(n_words=8, stop=0.15, seed=5)
    return write_corpus(tmp_path_factory.mktemp("layout"), {"train": src.sample(1500), "valid": src.sample(100),
                                                            "test": src.sample(400)})


def test_sentence_rows_cover_every_target_once_and_start_at_boundaries():
    sents = [[5, 6, 7], [8], [9, 10], [11, 12, 13, 14], [15]]
    for rows in (1, 2, 3, 5, 9):
        x, y = sentence_rows(sents, rows, eos=3, pad=0)
        assert x.shape[0] == min(rows, len(sents))
        assert (x[:, 0] == 3).all()  # every row starts after a </s>, from a zero state
        targets = [t for r in y.tolist() for t in r if t != IGNORE]
        assert targets == [t for s in sents for t in [*s, 3]]  # in order, each once


@pytest.mark.parametrize("arch", ["rnn", "lstm", "gru", "transformer"])
def test_stream_test_ppl_is_the_same_under_1_10_and_20_rows(corpus, tmp_path, arch):
    extra = {"heads": 2} if arch == "transformer" else {}
    _, run_dir = train(corpus, tmp_path, arch=arch, regime="stream", epochs=2, emb_dim=32, hidden_dim=32, lr=0.01,
                       stream_batch_size=16, bptt=12, **extra)
    model = load_run(run_dir).model
    vocab = Vocab.load(corpus["vocab_path"])
    ppl = {}
    for rows in (1, 10, 20):
        data = LMData(corpus["paths"], vocab, "stream", stream_eval_batch_size=rows, bptt=12)
        data.setup()
        nll, n = evaluate(model, data.dataloader("test"), "stream", "cpu")
        assert n == data.counted_tokens("test")
        ppl[rows] = math.exp(nll / n)
    assert ppl[1] < 0.9 * 9  # trained: well below the uniform PPL over 8 words + </s>
    assert max(ppl.values()) / min(ppl.values()) - 1 < 0.005, ppl
