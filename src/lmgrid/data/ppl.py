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
  and previous ``bptt`` chunk).  The test-time modes (cache, dynamic evaluation; docs/adapt.md) read the split as
  one such row.
* **The oracle** (the synthetic grammar): each sentence's exact probability; the grammar draws sentences
  independently, so no context outside the sentence would change it.

Scoring a text outside the pipeline (``lmgrid score``, the MLflow model) reads each sentence of a stream cell on
its own, after one ``</s>`` from a zero state (``lmgrid.neural.model_io``), so only window cells give their
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
