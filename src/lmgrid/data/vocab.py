"""Vocabulary stage: one vocabulary per corpus, built from train only, shared by every model."""
from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json, write_json
from lmgrid.data.ppl import BOS, EOS, PAD, UNK

SPECIALS = (PAD, UNK, BOS, EOS)  # fixed ids 0..3


@dataclass
class Vocab:
    tokens: list[str]          # id -> token, specials first
    counts: dict[str, int]     # train counts (</s> = one per sentence, <s> and <pad> = 0)

    def __post_init__(self):
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def unk_id(self) -> int:
        return self.index[UNK]

    def id(self, token: str) -> int:
        return self.index.get(token, self.index[UNK])

    def map(self, sentence: list[str]) -> list[str]:
        """The sentence as the models see it: unknown words become <unk>."""
        return [t if t in self.index else UNK for t in sentence]

    def encode(self, sentence: list[str]) -> list[int]:
        return [self.id(t) for t in sentence]

    def to_json(self) -> dict:
        return {"size": len(self.tokens), "specials": list(SPECIALS),
                "tokens": [[t, self.counts.get(t, 0)] for t in self.tokens]}

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        data = read_json(path)
        try:
            tokens = [t for t, _ in data["tokens"]]
            counts = {t: c for t, c in data["tokens"]}
        except (KeyError, TypeError, ValueError):
            raise LmgridError(f"{path}: not a vocabulary file (expected a 'tokens' list of [token, count])") from None
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise LmgridError(f"{path}: vocabulary must start with the specials {' '.join(SPECIALS)}")
        return cls(tokens, counts)


def build(train: list[list[str]], min_count: int = 1, max_size: int = 0) -> Vocab:
    """Specials, then train words by descending count (ties alphabetical) with count >= min_count,
    at most `max_size` words besides the specials (0 = no limit)."""
    counts = collections.Counter(t for s in train for t in s)
    unk_literal = counts.pop(UNK, 0)
    words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    if max_size > 0:
        words = words[:max_size]
    kept = set(words)
    # Every dropped word becomes <unk> in train, so <unk> carries their mass as well as literal <unk>s.
    unk_count = unk_literal + sum(c for w, c in counts.items() if w not in kept)
    all_counts = {PAD: 0, BOS: 0, EOS: len(train), UNK: unk_count, **{w: counts[w] for w in words}}
    return Vocab(list(SPECIALS) + words, all_counts)


def oov_report(vocab: Vocab, splits: dict[str, list[list[str]]]) -> dict:
    """Per split: word tokens, out-of-vocabulary tokens (mapped to <unk>) and their rate."""
    out = {}
    for name, sents in splits.items():
        n = sum(len(s) for s in sents)
        oov = sum(1 for s in sents for t in s if t not in vocab.index)
        unk = sum(1 for s in sents for t in s if t == UNK or t not in vocab.index)
        out[name] = {"tokens": n, "oov_tokens": oov, "oov_rate": oov / n if n else 0.0, "unk_tokens": unk}
    return out


def run(train_path, valid_path, test_path, vocab_out, report_out, min_count=1, max_size=0) -> Vocab:
    from lmgrid.data.corpus import load_split

    splits = {"train": load_split(train_path), "valid": load_split(valid_path), "test": load_split(test_path)}
    vocab = build(splits["train"], min_count, max_size)
    report = {"vocab_size": len(vocab), "min_count": min_count, "max_size": max_size,
              "splits": oov_report(vocab, {k: splits[k] for k in ("valid", "test")})}
    write_json(vocab_out, vocab.to_json())
    write_json(report_out, report)
    return vocab
