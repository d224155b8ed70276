"""Shared helpers of the neural tests (no tests here): a bigram source with a known PPL and tiny corpora."""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pytest

from lmgrid.data.corpus import write_split
from lmgrid.common.fileio import write_json
from lmgrid.data.vocab import build

# Settings that keep a run to a few seconds on one CPU thread.
TINY = {"epochs": 1, "emb_dim": 16, "hidden_dim": 16, "batch_size": 64, "stream_batch_size": 8, "bptt": 10,
        "log_every": 0}


class BigramSource:
    """Sentences from a first-order Markov chain: state <s> or a word; next token a word or </s> (not after <s>)."""

    def __init__(self, n_words: int = 6, stop: float = 0.2, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.words = [f"w{i}" for i in range(n_words)]
        p = rng.dirichlet(np.full(n_words, 0.5), size=n_words + 1) * (1 - stop)  # rows: <s>, w0..; cols: words
        self.P = np.concatenate([p, np.full((n_words + 1, 1), stop)], 1)  # last column: </s>
        self.P[0] = np.append(p[0] / p[0].sum(), 0.0)  # a sentence has at least one word (blank lines are skipped)
        self.rng = np.random.default_rng(seed + 1)

    def sample(self, n: int) -> list[list[str]]:
        out = []
        for _ in range(n):
            s, state = [], 0
            while True:
                j = self.rng.choice(len(self.words) + 1, p=self.P[state])
                if j == len(self.words):
                    break
                s.append(self.words[j])
                state = j + 1
            out.append(s)
        return out

    def ppl(self) -> float:
        """Expected per-token PPL of the convention (words + </s>), from the chain's expected visits:
        per sentence E[NLL] = sum_s visits(s) H(P[s]) and E[tokens] = sum_s visits(s)."""
        k = len(self.words)
        Q = np.zeros((k + 1, k + 1))
        Q[:, 1:] = self.P[:, :k]
        visits = np.linalg.inv(np.eye(k + 1) - Q)[0]
        H = -(self.P * np.log(np.where(self.P > 0, self.P, 1.0))).sum(1)
        return math.exp(visits @ H / visits.sum())

    def sample_ppl(self, sents) -> float:
        nll, n = 0.0, 0
        for s in sents:
            state = 0
            for t in [*s, "</s>"]:
                j = len(self.words) if t == "</s>" else self.words.index(t)
                nll -= math.log(self.P[state, j])
                n += 1
                state = j + 1
        return math.exp(nll / n)


def write_corpus(root: Path, splits: dict[str, list[list[str]]], corpus: str = "c") -> dict:
    """results/<corpus>/corpus/*.txt and vocab.json under root; returns the paths train() needs."""
    base = root / "results" / corpus
    paths = {}
    for name, sents in splits.items():
        paths[name] = str(base / "corpus" / f"{name}.txt")
        write_split(paths[name], sents)
    write_json(base / "vocab.json", build(splits["train"]).to_json())
    return {"paths": paths, "vocab_path": str(base / "vocab.json"), "base": base}


def tiny_corpus(root: Path, seed: int = 0, train: int = 300, corpus: str = "c") -> dict:
    src = BigramSource(seed=seed)
    return write_corpus(root, {"train": src.sample(train), "valid": src.sample(40), "test": src.sample(40)}, corpus)


class Killed(Exception):
    """Stands for the job being killed in the middle of training."""


@contextlib.contextmanager
def killed_at_epoch(epoch: int):
    """Inside the block, a training run dies as a killed job would when it starts `epoch` (counted from 0);
    the block checks that it did. Training behaves normally again after the block."""
    from lmgrid.neural import train as train_mod

    original = train_mod.Progress.on_train_epoch_start

    def kill(self, trainer, pl_module):
        if trainer.current_epoch == epoch:
            raise Killed("job killed")
        original(self, trainer, pl_module)

    train_mod.Progress.on_train_epoch_start = kill
    try:
        with pytest.raises(Killed):
            yield
    finally:
        train_mod.Progress.on_train_epoch_start = original


class TopicSource:
    """Sentences whose state crosses the sentence boundary and matters inside it: a topic (one of `topics`, each
    with its own `words_per_topic` words) persists from sentence to sentence and switches with probability
    `switch`; every sentence holds exactly `length` words of its topic, then </s>.  A model predicts the first word
    of a sentence well only from the previous sentences (the topic), and </s> only by counting the words since
    the last </s>: a row cut mid-sentence, from a zero state, loses both."""

    def __init__(self, topics: int = 3, words_per_topic: int = 3, length: int = 4, switch: float = 0.1,
                 seed: int = 0):
        self.topics, self.wpt, self.length, self.switch = topics, words_per_topic, length, switch
        self.rng = np.random.default_rng(seed)
        self.topic = 0

    def sample(self, n: int) -> list[list[str]]:
        out = []
        for _ in range(n):
            if self.rng.random() < self.switch:
                self.topic = int(self.rng.integers(self.topics))
            out.append([f"t{self.topic}w{int(w)}" for w in self.rng.integers(self.wpt, size=self.length)])
        return out
