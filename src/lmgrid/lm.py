"""What every trained model offers to `lmgrid score` and `lmgrid generate`, and how a run is loaded.

A run folder holds either an n-gram model or a neural checkpoint; `load` picks the loader by the
files present, so the commands work the same for both families.
"""
from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Protocol

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write
from lmgrid.data.ppl import BOS, EOS, PAD, perplexity, targets
from lmgrid.data.vocab import Vocab


class LanguageModel(Protocol):
    vocab: Vocab

    def sentence_logprobs(self, sentences: list[list[str]]) -> list[list[float]]:
        """Natural-log probability of each target of each sentence (its words, then </s>),
        by the shared convention; words outside the vocabulary are scored as <unk>."""

    def next_logprobs(self, context: list[str]) -> list[float]:
        """Log-probabilities over the whole vocabulary (by id) of the token after `context`,
        which holds the sentence so far without <s>."""


def load(run_dir: str | Path, plugin_file: str | None = None) -> LanguageModel:
    """A run's model.  `plugin_file`: a plug-in run's class file, where it is not at its reference (MLflow's copy)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise LmgridError(f"{run_dir}: run folder not found")
    if (run_dir / "model.arpa").exists():
        from lmgrid.ngram.model import load_run
        return load_run(run_dir)
    if (run_dir / "model.ckpt").exists():
        from lmgrid.neural.model_io import load_run
        return load_run(run_dir, plugin_file)
    raise LmgridError(f"{run_dir}: no trained model here (expected model.arpa or model.ckpt)")


def unknown_tokens(vocab: Vocab, sentences: list[list[str]]) -> int:
    """Words of `sentences` outside the vocabulary, each scored as <unk> (a literal <unk> in the text is known)."""
    return sum(1 for s in sentences for t in s if t not in vocab.index)


def score_file(model: LanguageModel, text_path, out_path=None) -> dict:
    """Per-sentence log-prob (nats) and PPL of a text file, the total PPL, and how many of its counted tokens were
    unknown words (scored as <unk>: a PPL over mostly <unk> says little about the text)."""
    from lmgrid.data.corpus import read_sentences

    sentences, _ = read_sentences(text_path)
    per = model.sentence_logprobs(sentences)
    rows, total_nll, total_tokens = [], 0.0, 0
    for sent, lps in zip(sentences, per):
        nll = -sum(lps)
        n = len(targets(sent))
        rows.append((nll, n, " ".join(sent)))
        total_nll += nll
        total_tokens += n
    lines = ["logprob_nats\tppl\ttokens\tsentence"]
    lines += [f"{-nll:.4f}\t{perplexity(nll, n):.4f}\t{n}\t{s}" for nll, n, s in rows]
    text = "\n".join(lines) + "\n"
    if out_path:
        with atomic_write(out_path) as fh:
            fh.write(text)
    else:
        print(text, end="")
    summary = {"sentences": len(rows), "tokens": total_tokens, "nll_nats": total_nll,
               "ppl": perplexity(total_nll, total_tokens), "unknown": unknown_tokens(model.vocab, sentences)}
    return summary


def sample(model: LanguageModel, n: int, seed: int = 0, temperature: float = 1.0, top_k: int = 0,
           max_tokens: int = 100) -> list[list[str]]:
    """Ancestral sampling with temperature and optional top-k, until </s> or `max_tokens`."""
    if temperature <= 0:
        raise LmgridError(f"--temperature: must be > 0, got {temperature}")
    if top_k < 0:
        raise LmgridError(f"--top-k: must be >= 0, got {top_k}")
    rng = random.Random(seed)
    tokens = model.vocab.tokens
    banned = {model.vocab.index[t] for t in (PAD, BOS)}  # never predicted
    out = []
    for _ in range(n):
        sent: list[str] = []
        while len(sent) < max_tokens:
            lps = model.next_logprobs(sent)
            cand = [(lp / temperature, i) for i, lp in enumerate(lps) if i not in banned and lp > -math.inf]
            if top_k:
                cand = sorted(cand, reverse=True)[:top_k]
            top = max(c for c, _ in cand)
            weights = [math.exp(c - top) for c, _ in cand]
            i = rng.choices([i for _, i in cand], weights=weights)[0]
            if tokens[i] == EOS:
                break
            sent.append(tokens[i])
        out.append(sent)
    return out
