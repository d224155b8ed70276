"""The perplexity convention, shared by every model in the pipeline (n-gram, neural and the oracle).

What is counted is the same for every model:

* Every word and the final ``</s>`` of each sentence are predicted and counted; ``<s>`` is never counted (nor
  predicted).
* A word not in the vocabulary is ``<unk>``, an ordinary vocabulary entry (the PTB convention).
* PPL = exp(total negative log-likelihood in nats / counted tokens).

What a prediction is conditioned on depends on the model's regime (docs/models.md, "Regimes"):

* **Window** (the n-grams, the FFNN, and rnn, lstm, gru or transformer cells in the window regime): only the
  current sentence.  A token sees the n-1 tokens before it in its sentence (n = n_step); near the sentence's start
  the missing context is ``<s>``: a neural window is left-padded with ``<s>`` to n-1 tokens
  (``lmgrid.neural.data.window_examples``), an n-gram reads the sentence after one ``<s>``, as KenLM and SRILM pad
  (``lmgrid.ngram.counts``).  No sentence sees another.
* **Stream** (rnn, lstm, gru and transformer cells in the stream regime): the preceding text, across sentence
  boundaries.  A split is read in rows of whole sentences, ``</s> w1 .. </s> w1 .. </s>``
  (``lmgrid.neural.data.sentence_rows``; ``<s>`` never appears): each row starts at a sentence boundary from a zero
  state, with ``</s>`` as the context of its first word, and the state is carried through the row, so a sentence
  is conditioned on every sentence before it in its row (a stream Transformer on at most the tokens of its current
  and previous ``bptt`` chunk).  The first sentence of each row is thus scored from a zero state, every later one
  after the sentences before it.  The test-time modes (cache, dynamic evaluation; docs/adapt.md) read the split as
  one such row.
* **Stream, reset** (the summary's ``test_ppl_reset``; ``lmgrid.testtime.reset``): a finished stream cell scored
  again with its state reset at every sentence start, no retraining: each sentence is read as ``</s> w1 .. wn`` from
  a zero state, on its own, and predicts ``w1 .. wn </s>``; the same counted tokens as its test PPL.  Like a window
  model it sees only the current sentence (all of it, not the last n-1 tokens), so the gap between a stream
  cell's test PPL and its reset PPL is what the earlier sentences are worth to it.
* **The oracle** (the synthetic grammar): each sentence's exact probability; the grammar draws sentences
  independently, so no context outside the sentence would change it.

Arithmetic: a neural run's test PPL (metrics.json, and its ``base`` score files) is scored in its training precision
(``train.precision``: ``32-true`` by default; ``auto``, as the PTB presets set it, gives ``bf16-mixed`` where the CPU
has avx512_bf16 or amx_bf16 or the GPU computes bf16 natively: the embedding, the output layer and the
Transformer in bf16, every recurrence in float32) over the eval batch layout (``eval_batch_size`` windows, or
``stream_eval_batch_size`` rows); its valid PPL is the best epoch's validation, in the same arithmetic.  The reset
pass uses the run's precision too, one sentence per row.  The test-time modes read the split in float32 on the CPU
as one stream (batch 1), so their unadapted ``base_valid_ppl``/``base_test_ppl`` (adapt.json) differ from
metrics.json's by rounding and, for a bf16 run, by precision.

Scoring a text outside the pipeline (``lmgrid score``, the MLflow model) reads each sentence of a stream cell on
its own, after one ``</s>`` from a zero state in the run's precision (``lmgrid.neural.model_io``): the reset
convention, so a stream cell's score of its test split is its reset PPL, and only window cells give their
metrics' test PPL there.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

BOS, EOS, UNK, PAD = "<s>", "</s>", "<unk>", "<pad>"


class InfinitePerplexity(ValueError):
    """A non-finite or overflowing NLL: raised, never returned as a score (callers that expect it, such as the
    test-time tuner meeting a diverged grid point, catch this type, not a message)."""


def targets(sentence: Sequence[str]) -> list[str]:
    """The tokens a model is scored on for one sentence: its words, then ``</s>``."""
    return [*sentence, EOS]


def counted_tokens(sentences: Iterable[Sequence[str]]) -> int:
    """How many predictions PPL averages over: words plus one ``</s>`` per sentence."""
    return sum(len(s) + 1 for s in sentences)


def perplexity(nll_nats: float, n_tokens: int) -> float:
    """exp(mean negative log-likelihood). A non-finite result is a bug upstream, never a score."""
    if n_tokens <= 0:
        raise ValueError("perplexity over zero counted tokens is undefined")
    try:
        value = math.exp(nll_nats / n_tokens)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        what = "non-finite" if not math.isfinite(nll_nats) else "overflowing"
        raise InfinitePerplexity(f"{what} NLL ({nll_nats:g} nats over {n_tokens} tokens): perplexity is infinite")
    return value
