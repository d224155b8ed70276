"""The perplexity convention, shared by every model in the pipeline (n-gram, neural and the oracle).

* Each sentence is scored on its own; its context is padded with ``<s>``.
* Every word and the final ``</s>`` are predicted and counted; ``<s>`` is never counted.
* A word not in the vocabulary is ``<unk>``, an ordinary vocabulary entry (the PTB convention).
* PPL = exp(total negative log-likelihood in nats / counted tokens).
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
