"""The stream regime's PPL does not depend on how a split is cut into rows, and the training carries the state.

Rows are sentence-aligned (lmgrid.neural.data.sentence_rows): each begins at a sentence boundary from a zero state,
which is where training rows begin too.  The source (test_neural_support.TopicSource) makes state matter across
and inside sentences: a topic persists from sentence to sentence, and every sentence has exactly 6 words, so </s>
is predictable only by counting.  A trained stream model of each architecture is evaluated on the test split cut
into 1, 7 and 19 rows.  An extra row start at a sentence boundary can lose only the context from before it (the
topic: ln 2 nats for an ideal model); a cut in mid-sentence from a zero state also loses the word count.  Bound:
each extra row start may cost at most MAX_NATS_PER_ROW_START nats of total NLL (measured on this machine: 0.7-1.9
for the recurrent nets, about 5 for the Transformer, which loses a whole chunk of context; contiguous mid-sentence
cuts cost 5-11 nats per start for the recurrent nets and hundreds for the Transformer).
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
MAX_NATS_PER_ROW_START = {"rnn": 3.0, "lstm": 3.0, "gru": 3.0, "transformer": 15.0}
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


def _train(corpus, tmp_path, arch):
    extra = {"heads": 2} if arch == "transformer" else {}
    _, run_dir = train(corpus, tmp_path, arch=arch, regime="stream", epochs=4, emb_dim=16, hidden_dim=32, lr=0.01,
                       stream_batch_size=16, bptt=BPTT, lr_decays=0, **extra)
    return load_run(run_dir).model


@pytest.mark.parametrize("arch", ["rnn", "lstm", "gru", "transformer"])
def test_stream_ppl_does_not_depend_on_the_rows_and_uses_the_carried_state(corpus, tmp_path, arch, monkeypatch):
    """Sentence-aligned rows: each extra row start costs at most the bound; the model uses the state it carries
    across sentences (one row beats a zero state at every sentence).
    Negative controls, run here: kills "contiguous mid-sentence cuts" (batchify layout: a cost per row start above
    the bound; every arch) and "training state carry switched off" (the training step drops the state: a recurrent
    net never learns to read a carried state, fails the bound or does no better than resetting at every
    sentence; measured for the LSTM: 1-row PPL in the thousands)."""
    model = _train(corpus, tmp_path / "carry", arch)
    bound = MAX_NATS_PER_ROW_START[arch]
    costs = _layout_costs(corpus, model)
    assert max(costs) <= bound, costs
    n_sentences = len(load_split(corpus["paths"]["test"]))
    one_row, n = _test_nll(corpus, model, 1)
    per_sentence, _ = _test_nll(corpus, model, n_sentences)  # every sentence from a zero state
    assert math.exp(one_row / n) < 0.95 * math.exp(per_sentence / n)  # the carried topic is used
    assert math.exp(one_row / n) < 0.9 * 9  # trained: well below a uniform guess over a topic's words and more

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
    assert max(_layout_costs(corpus, broken)) > bound or math.exp(one_row / n) >= 0.95 * math.exp(per_sentence / n)
