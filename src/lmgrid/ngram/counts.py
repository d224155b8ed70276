"""Counting every n-gram up to a maximum order, vectorised with numpy.

Sentences become one id stream ``<s> w1 .. wn </s> <s> ...`` (one ``<s>``, as KenLM and SRILM pad);
an n-gram is any window of that stream that does not cross a sentence start.

Representation: n-grams of order k live in a table sorted by an int64 key.  Order 1 is indexed by
the word id itself.  For k >= 2 the key is ``id(prefix) * V + last_word``, where ``id(prefix)`` is the
row of the (k-1)-word prefix in the order k-1 table.  Row numbers are below the number of stream
positions, so a key stays below ``tokens * V`` whatever the order (packing five word ids of a 10k
vocabulary into one integer would overflow int64).
"""
from __future__ import annotations

import hashlib
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write
from lmgrid.data.ppl import BOS, EOS, PAD
from lmgrid.data.vocab import Vocab

log = logging.getLogger(__name__)
FORMAT_VERSION = 2


def _word_ids(words: list[str], vocab: Vocab, oov: list | None, extra: dict | None = None) -> np.ndarray:
    """Vocabulary ids of a token list: unknown words and literal specials become <unk> (`extra` maps
    more strings to their own codes).  The lookup is `dict.get` mapped in C over the list (no Python
    code runs per token)."""
    unk = vocab.unk_id
    index = dict(vocab.index)
    for special in (BOS, EOS, PAD):
        index[special] = unk
    index.update(extra or {})
    ids = np.fromiter(map(index.get, words, itertools.repeat(-1)), dtype=np.int64, count=len(words))
    missing = ids == -1
    if oov is not None:
        oov.append(int(missing.sum()))
    ids[missing] = unk
    return ids


def _assemble(ids: np.ndarray, lengths: np.ndarray, vocab: Vocab) -> tuple[np.ndarray, np.ndarray]:
    starts = np.zeros(lengths.size, dtype=np.int64)  # position of each <s> in the stream
    np.cumsum(lengths[:-1] + 2, out=starts[1:])
    out = np.empty(int(lengths.sum()) + 2 * lengths.size, dtype=np.int64)
    word_pos = np.ones(out.size, dtype=bool)
    word_pos[starts] = False
    word_pos[starts + lengths + 1] = False
    out[starts] = vocab.index[BOS]
    out[starts + lengths + 1] = vocab.index[EOS]
    out[word_pos] = ids
    return out, starts


def stream(sentences: list[list[str]], vocab: Vocab, oov: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The id stream ``<s> w.. </s> <s> ..`` of the sentences and the position of each ``<s>``.
    Words outside the vocabulary and literal specials become ``<unk>`` (their number is appended to
    `oov` when given)."""
    lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    return _assemble(_word_ids(list(itertools.chain.from_iterable(sentences)), vocab, oov), lengths, vocab)


_LINE = "\x00"  # cannot occur in a text file the corpus stage accepted (it rejects NUL bytes)


def read_stream(path: str | Path, vocab: Vocab) -> tuple[np.ndarray, np.ndarray]:
    """`stream` of a split file written by the corpus stage (one sentence per line), read without
    building a list per sentence: line breaks become a marker token, split once, mapped once."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise LmgridError(f"{path}: not valid UTF-8 ({e})") from None
    if _LINE in text:
        raise LmgridError(f"{path}: looks like a binary file (NUL byte)")
    ids = _word_ids(f" {_LINE} ".join(text.splitlines()).split(), vocab, None, {_LINE: -2})
    is_break = ids == -2
    lengths = np.bincount(np.cumsum(is_break)[~is_break], minlength=int(is_break.sum()) + 1)
    lengths = lengths[lengths > 0]  # blank lines are no sentences
    if lengths.size == 0:
        raise LmgridError(f"{path}: has no sentences")
    return _assemble(ids[~is_break], lengths, vocab)


def sentence_start_of(n_positions: int, starts: np.ndarray) -> np.ndarray:
    """For every stream position, the position of its sentence's ``<s>``."""
    marks = np.zeros(n_positions, dtype=np.int64)
    marks[starts] = 1
    return starts[np.cumsum(marks) - 1]


@dataclass
class Counts:
    """Every n-gram of orders 1..max_order with its raw count.

    Per order k (index k-1): ``keys`` sorted int64, ``count`` int64, and for k >= 2 ``prefix`` (row of
    the first k-1 words in order k-1) and ``suffix`` (row of the last k-1 words).  Order 1 has one row
    per vocabulary id (count 0 for ids absent from train).
    """
    vocab_size: int
    keys: list[np.ndarray]
    count: list[np.ndarray]
    prefix: list[np.ndarray] = field(default_factory=list)
    suffix: list[np.ndarray] = field(default_factory=list)

    @property
    def max_order(self) -> int:
        return len(self.keys)

    def last(self, k: int) -> np.ndarray:
        """Last word id of each order-k n-gram."""
        return self.keys[k - 1] % self.vocab_size

    def first(self, k: int) -> np.ndarray:
        """First word id of each order-k n-gram."""
        f = self.keys[0]
        for j in range(2, k + 1):
            f = f[self.prefix[j - 1]]
        return f

    def words(self, k: int) -> list[np.ndarray]:
        """The k word-id columns of the order-k table."""
        cols = [self.keys[0]]
        for j in range(2, k + 1):
            cols = [c[self.prefix[j - 1]] for c in cols] + [self.last(j)]
        return cols

    def sizes(self) -> list[int]:
        return [int(k.size) for k in self.keys]


def count(ids: np.ndarray, starts: np.ndarray, vocab_size: int, max_order: int) -> Counts:
    """Count all n-grams of orders 1..max_order in an id stream (see `stream`)."""
    if max_order < 1:
        raise LmgridError(f"ngram order: must be >= 1, got {max_order}")
    n = ids.size
    if n * vocab_size >= 2**63:
        raise LmgridError(f"corpus too large to key n-grams in int64 ({n} tokens x {vocab_size} words)")
    is_bos = np.zeros(n + max_order, dtype=bool)  # padded: windows may run past the end
    is_bos[starts] = True
    is_bos[n:] = True
    keys = [np.arange(vocab_size, dtype=np.int64)]
    counts = [np.bincount(ids, minlength=vocab_size).astype(np.int64)]
    prefix, suffix = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    row = ids.copy()  # row of the order-k n-gram starting at each position (-1: none)
    for k in range(2, max_order + 1):
        # the window of k words from i is the (k-1)-gram from i plus a word that is not a sentence start
        start = np.flatnonzero((row >= 0) & ~is_bos[k - 1:n + k - 1])
        key = row[start] * vocab_size + ids[start + k - 1]
        uniq, inverse, cnt = np.unique(key, return_inverse=True, return_counts=True)
        nxt = np.full(n, -1, dtype=np.int64)
        nxt[start] = inverse
        keys.append(uniq)
        counts.append(cnt.astype(np.int64))
        prefix.append(uniq // vocab_size)
        suf = np.empty(uniq.size, dtype=np.int64)
        suf[inverse] = row[start + 1]  # the last k-1 words start one position later (any occurrence)
        suffix.append(suf)
        row = nxt
    return Counts(vocab_size, keys, counts, prefix, suffix)


def count_sentences(sentences: list[list[str]], vocab: Vocab, max_order: int) -> Counts:
    ids, starts = stream(sentences, vocab)
    return count(ids, starts, len(vocab), max_order)


def count_file(path: str | Path, vocab: Vocab, max_order: int) -> Counts:
    ids, starts = read_stream(path, vocab)
    return count(ids, starts, len(vocab), max_order)


def _vocab_digest(vocab: Vocab) -> str:
    return hashlib.sha256("\n".join(vocab.tokens).encode("utf-8")).hexdigest()


def save(path: str | Path, counts: Counts, vocab: Vocab) -> None:
    arrays = {"format_version": np.array(FORMAT_VERSION), "vocab_size": np.array(counts.vocab_size),
              "vocab_sha256": np.array(_vocab_digest(vocab)), "max_order": np.array(counts.max_order)}
    for k in range(1, counts.max_order + 1):
        arrays[f"keys{k}"] = counts.keys[k - 1]
        arrays[f"count{k}"] = counts.count[k - 1]
        if k >= 2:
            arrays[f"suffix{k}"] = counts.suffix[k - 1]
    with atomic_write(path, "wb") as fh:
        np.savez(fh, **arrays)


def _checked(path, data, vocab: Vocab, max_order: int | None) -> int:
    """The order to read from a counts file, after checking its format and vocabulary."""
    if int(data["format_version"]) != FORMAT_VERSION:
        raise LmgridError(f"{path}: counts format {int(data['format_version'])}, expected {FORMAT_VERSION}")
    stored = int(data["max_order"])
    if str(data["vocab_sha256"]) != _vocab_digest(vocab):
        raise LmgridError(f"{path}: counted with another vocabulary ({int(data['vocab_size'])} words; "
                          f"this one has {len(vocab)}): recount")
    order = stored if max_order is None else max_order
    if order > stored:
        raise LmgridError(f"{path}: holds orders up to {stored}, order {order} requested "
                          f"(the counting stage takes the largest n-gram n_step of the studies: recount)")
    return order


def load(path: str | Path, vocab: Vocab, max_order: int | None = None) -> Counts:
    """Counts from `save`, truncated to `max_order`; checked against the vocabulary they were made with."""
    try:
        data = np.load(path)
        order = _checked(path, data, vocab, max_order)
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except (OSError, KeyError, ValueError) as e:
        raise LmgridError(f"{path}: not an n-gram counts file ({e})") from None
    v = len(vocab)
    keys = [data[f"keys{k}"] for k in range(1, order + 1)]
    return Counts(v, keys, [data[f"count{k}"] for k in range(1, order + 1)],
                  [np.empty(0, np.int64)] + [keys[k - 1] // v for k in range(2, order + 1)],
                  [np.empty(0, np.int64)] + [data[f"suffix{k}"] for k in range(2, order + 1)])


def open_tables(path: str | Path, vocab: Vocab, max_order: int | None = None):
    """A counts file as on-disk `Tables` (nothing read but its small fields), checked as `load`."""
    from lmgrid.ngram.store import Tables

    t = Tables.npz(path)
    small = {}
    try:
        for name in ("format_version", "max_order", "vocab_sha256", "vocab_size"):
            small[name] = t.read(name).reshape(())
        order = _checked(path, small, vocab, max_order)
    except KeyError as e:
        raise LmgridError(f"{path}: not an n-gram counts file (no {e})") from None
    t.vocab_size, t.max_order = len(vocab), order
    return t


__all__ = ["Counts", "stream", "read_stream", "count", "count_sentences", "count_file", "save", "load", "open_tables"]
