"""The stream regime's PPL does not depend on how a split is cut into rows, and the training carries the state.

Rows are sentence-aligned (lmgrid.neural.data.sentence_rows): each begins at a sentence boundary from a zero state,
which is where training rows begin too.  The source (test_neural_support.TopicSource) makes state matter across
and inside sentences: a topic persists from sentence to sentence, and every sentence has exactly 6 words, so </s>
is predictable only by counting.  A trained stream model of each architecture is evaluated on the test split cut
into 1, 7 and 19 rows.  An extra row start at a sentence boundary is a reset of the state at a sentence boundary,
so it should cost what this model's own resets cost: RESET_REF, the extra NLL per row start with rows of
SENTENCES_PER_REF_ROW sentences (124 resets, so little sampling noise, and each reset's slow recovery over the
next sentences counted; a reset before every sentence would miss that recovery and read low).  A cut in
mid-sentence from a zero state also loses the word count.  Bound per extra row start: RESET_MULTIPLE * RESET_REF +
RESET_SLACK_NATS.  The absolute bound it replaces (3 nats) sat inside the seed noise: a model's reset cost alone
ranged 0.5-7 nats over training seeds.
Measured on the test's corpus and _train recipe, training seeds 1-24, every arch (helper-layouttest, Intel Xeon
CPU): RESET_REF 0.57-4.1 nats (rnn), 0.70-6.8 (lstm), 0.52-2.3 (gru), 0.54-7.0 (transformer); cost per
row start / RESET_REF, aligned against contiguous: rnn 0.94-1.23 vs 1.58-224, lstm 0.94-1.34 vs 0.82-16,
gru 0.94-1.34 vs 2.84-20, transformer 1.02-1.28 vs 147-2847; cost / bound: aligned 0.32-0.80 (all 96 runs),
contiguous 1.06-915 in 95 of 96 runs; the one miss, lstm seed 8 (0.59), is a model whose zero state is so foreign
(6.3 nats per reset) that a mid-sentence cut costs it no more than a boundary reset.  With a reset before every
sentence as the reference instead, the aligned ratio reached 3.6 (gru seed 19) and the contiguous one fell to 0.89,
so the two overlapped.  The Transformer's carried "state" is the previous chunk, and a row start loses it just as
a reference row start does, so the same bound holds for it (measured above; it had its own bound of 15 nats).
"""
from __future__ import annotations

import math

import pytest

from lmgrid.data.corpus import load_split
from lmgrid.neural import module as module_mod
from lmgrid.neural.data import IGNORE, batchify, encode, sentence_rows, stream_tokens
from lmgrid.neural.datamodule import LMData
from lmgrid.neural.model_io import load_run
from lmgrid.neural.module import evaluate
from lmgrid.data.ppl import EOS, PAD
from lmgrid.data.vocab import Vocab

from test_neural_support import TopicSource, write_corpus
from test_neural_train import train

ROWS = (1, 7, 19)  # 7 and 19 do not divide the test stream into whole sentences: contiguous cuts fall mid-sentence
SENTENCES_PER_REF_ROW = 16  # rows of the reference layout: long enough to hold a reset's recovery, many of them
RESET_MULTIPLE, RESET_SLACK_NATS = 1.25, 1.0  # from the gap between the aligned and contiguous costs (docstring)
BPTT = 7  # one sentence of TopicSource (</s> + 6 words) per chunk


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    src = TopicSource(topics=2, length=6, seed=5)
    return write_corpus(tmp_path_factory.mktemp("layout"), {"train": src.sample(1500), "valid": src.sample(200),
                                                            "test": src.sample(2000)})


def test_sentence_rows_cover_every_target_once_and_start_at_boundaries():
    sents = [[5, 6, 7], [8], [9, 10], [11, 12, 13, 14], [15]]
    for rows in (1, 2, 3, 5, 9):
        x, y = sentence_rows(sents, rows, eos=3, pad=0)
        assert x.shape[0] == min(rows, len(sents))
        assert (x[:, 0] == 3).all()  # every row starts after a </s>, from a zero state
        targets = [t for r in y.tolist() for t in r if t != IGNORE]
        assert targets == [t for s in sents for t in [*s, 3]]  # in order, each once


def _test_nll(corpus, model, rows: int, contiguous: bool = False) -> tuple[float, int]:
    vocab = Vocab.load(corpus["vocab_path"])
    data = LMData(corpus["paths"], vocab, "stream", stream_eval_batch_size=rows, bptt=BPTT)
    data.setup()
    if contiguous:  # the mutation: the pre-fix layout, rows cut anywhere in the stream
        ids = encode(vocab, load_split(corpus["paths"]["test"]))
        data.tensors["test"] = batchify(stream_tokens(ids, vocab.index[EOS]), rows, vocab.index[PAD])
    nll, n = evaluate(model, data.dataloader("test"), "stream", "cpu")
    assert n == data.counted_tokens("test")
    return nll, n


def _layout_costs(corpus, model, contiguous=False) -> list[float]:
    """Extra total NLL per extra row start, for each layout against one row."""
    nll = {rows: _test_nll(corpus, model, rows, contiguous)[0] for rows in ROWS}
    return [abs(nll[r] - nll[1]) / (r - 1) for r in ROWS[1:]]


def _reset_ref(corpus, model, one_row: float) -> float:
    """RESET_REF: extra total NLL per row start with sentence-aligned rows of SENTENCES_PER_REF_ROW sentences."""
    ref_rows = len(load_split(corpus["paths"]["test"])) // SENTENCES_PER_REF_ROW
    return (_test_nll(corpus, model, ref_rows)[0] - one_row) / (ref_rows - 1)


def _train(corpus, tmp_path, arch):
    extra = {"heads": 2} if arch == "transformer" else {}
    _, run_dir = train(corpus, tmp_path, arch=arch, regime="stream", epochs=4, emb_dim=16, hidden_dim=32, lr=0.01,
                       stream_batch_size=16, bptt=BPTT, lr_decays=0, **extra)
    return load_run(run_dir).model


@pytest.mark.parametrize("arch", ["rnn", "lstm", "gru", "transformer"])
def test_stream_ppl_does_not_depend_on_the_rows_and_uses_the_carried_state(corpus, tmp_path, arch, monkeypatch):
    """Sentence-aligned rows: each extra row start costs at most RESET_MULTIPLE times the model's own cost per
    sentence-boundary reset plus RESET_SLACK_NATS; the model uses the state it carries across sentences (one row
    beats a zero state at every sentence).
    Negative controls, run here. Kills: "contiguous mid-sentence cuts" (batchify layout: a cost per row start above
    the bound; every arch) and "training state carry switched off" (the training step drops the state: a recurrent
    net never learns to read a carried state, fails the bound or does no better than resetting at every
    sentence; measured for rnn, lstm and gru, training seeds 1-6: 1-row PPL 16-1537 against 2.9 with a reset at
    every sentence)."""
    model = _train(corpus, tmp_path / "carry", arch)
    n_sentences = len(load_split(corpus["paths"]["test"]))
    one_row, n = _test_nll(corpus, model, 1)
    per_sentence, _ = _test_nll(corpus, model, n_sentences)  # every sentence from a zero state
    assert math.exp(one_row / n) < 0.95 * math.exp(per_sentence / n)  # the carried topic is used
    assert math.exp(one_row / n) < 0.9 * 9  # trained: well below a uniform guess over a topic's words and more
    bound = RESET_MULTIPLE * _reset_ref(corpus, model, one_row) + RESET_SLACK_NATS
    costs = _layout_costs(corpus, model)
    assert max(costs) <= bound, (costs, bound)

    assert min(_layout_costs(corpus, model, contiguous=True)) > bound  # mutation 1: contiguous cuts
    if arch == "transformer":
        # Its carried "state" is the previous chunk's tokens, not a learned state: trained without it, it still reads
        # it at evaluation (measured: 1-row PPL 2.66 against 2.84 with a reset at every sentence), so this test
        # cannot see mutation 2 for it; the carry of context is checked in tests/test_models.py.
        return

    real_step = module_mod.LMModule.training_step

    def no_carry(self, batch, batch_idx):  # mutation 2: the training state is not carried to the next chunk
        loss = real_step(self, batch, batch_idx)
        self._train_state = None
        return loss

    monkeypatch.setattr(module_mod.LMModule, "training_step", no_carry)
    broken = _train(corpus, tmp_path / "no_carry", arch)
    one_row, n = _test_nll(corpus, broken, 1)
    per_sentence, _ = _test_nll(corpus, broken, n_sentences)
    broken_bound = RESET_MULTIPLE * _reset_ref(corpus, broken, one_row) + RESET_SLACK_NATS
    reads_the_state = math.exp(one_row / n) < 0.95 * math.exp(per_sentence / n)
    assert max(_layout_costs(corpus, broken)) > broken_bound or not reads_the_state
