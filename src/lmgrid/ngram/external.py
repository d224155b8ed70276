"""Counting a corpus of any size in bounded memory: the same tables as `counts.count`, built on disk.

Passes, each over slices that fit the memory budget (`ngram.memory_mb`):
1. the train text, read a block of lines at a time, becomes the id stream (a file of int32 ids);
   unigram counts are a bincount of it.
2. for each order k >= 2 (as `counts.count`, the key of a k-gram is row(prefix) * V + last word):
   a. over stream slices: the key of every valid k-window and the row of its last k-1 words go to the
      bucket of its prefix row.  Buckets are ranges of prefix rows sized from the order k-1 counts
      (a prefix row is followed at most count(prefix) times), so each bucket fits the budget.
   b. bucket by bucket (in key order): `np.unique` gives its distinct keys, counts and suffix rows,
      appended to the order-k table, which comes out sorted without any merge; its inverse gives
      the row of the k-gram at each position of the bucket's windows, which the next order keys its
      prefixes with (a position array, held whole: 4 bytes per stream position).
Memory: the slices and buckets, plus that position array.
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np

from lmgrid.common.errors import LmgridError
from lmgrid.data.ppl import BOS
from lmgrid.data.vocab import Vocab
from lmgrid.ngram.counts import FORMAT_VERSION, _LINE, _assemble, _vocab_digest, _word_ids
from lmgrid.ngram.store import MIB, Appender, Tables, rows_per_chunk, write_npz

log = logging.getLogger(__name__)
TEXT_BYTES_PER_MIB = MIB // 80  # text read at once: ~40x its size as Python strings and ids
POSITION_BYTES = 128  # per stream position in a slice pass (~64 measured, so half the budget)
BUCKET_BYTES = 128  # per occurrence in a bucket: key, suffix, position, np.unique sort, inverse (~64 measured)
MAX_BUCKETS = 256


def _ids_file(path: Path, vocab: Vocab, out: Appender, block_bytes: int) -> np.ndarray:
    """Write the id stream of a split file (as `counts.read_stream`) to `out` ("ids"); unigram counts."""
    v = len(vocab)
    unigrams = np.zeros(v, dtype=np.int64)
    sentences = 0
    try:
        fh = open(path, encoding="utf-8-sig")
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    with fh:
        while True:
            try:
                lines = fh.readlines(block_bytes)
            except UnicodeDecodeError as e:
                raise LmgridError(f"{path}: not valid UTF-8 ({e})") from None
            if not lines:
                break
            text = "".join(lines)
            if _LINE in text:
                raise LmgridError(f"{path}: looks like a binary file (NUL byte)")
            ids = _word_ids(f" {_LINE} ".join(text.splitlines()).split(), vocab, None, {_LINE: -2})
            is_break = ids == -2
            lengths = np.bincount(np.cumsum(is_break)[~is_break], minlength=int(is_break.sum()) + 1)
            lengths = lengths[lengths > 0]
            if lengths.size == 0:
                continue
            block, _ = _assemble(ids[~is_break], lengths, vocab)
            sentences += lengths.size
            unigrams += np.bincount(block, minlength=v)
            out.append("ids", block.astype(np.int32))
    if sentences == 0:
        raise LmgridError(f"{path}: has no sentences")
    return unigrams


def _bucket_bounds(tables: Tables, name: str, cap: int, step: int) -> np.ndarray:
    """Ranges of prefix rows whose summed counts stay within `cap` (a row above it is its own range)."""
    n = tables.size(name)
    bounds, start_cum, cum = [0], 0, 0
    for lo in range(0, n, step):
        cs = cum + np.cumsum(tables.read(name, lo, lo + step))
        while True:
            end = max(lo + int(np.searchsorted(cs, start_cum + cap, "right")), bounds[-1] + 1)
            if end >= lo + cs.size:
                break
            bounds.append(end)
            start_cum = int(cs[end - lo - 1]) if end > lo else cum
        cum = int(cs[-1])
    if bounds[-1] != n:
        bounds.append(n)
    return np.array(bounds, dtype=np.int64)


class _Windows:
    """Slices of the stream with, per position, the row of the (k-1)-gram starting there."""

    def __init__(self, tables: Tables, k: int, bos: int, v: int):
        self.t, self.k, self.bos, self.v = tables, k, bos, v
        self.n = tables.size("ids")
        self.prev = "ids" if k == 2 else f"rows{k - 1}"

    def slice(self, lo: int, hi: int):
        """Start positions of the valid k-windows in [lo, hi), their keys and their suffix rows."""
        rp = np.full(hi - lo + 1, -1, dtype=np.int64)
        got = self.t.read(self.prev, lo, hi + 1)
        rp[:got.size] = got
        last = np.full(hi - lo, self.bos, dtype=np.int64)
        got = self.t.read("ids", lo + self.k - 1, hi + self.k - 1)
        last[:got.size] = got
        start = np.flatnonzero((rp[:-1] >= 0) & (last != self.bos))
        return start, rp[start] * self.v + last[start], rp[start + 1]


def count_to_npz(train: str | Path, vocab: Vocab, max_order: int, out: str | Path, memory_mb: float = 1024,
                 *, slice_positions: int | None = None, bucket_rows: int | None = None,
                 tmp_dir: str | Path | None = None) -> list[int]:
    """Count orders 1..max_order of a split file into `out` (the format of `counts.save`) within about
    `memory_mb`; returns the table sizes.  `slice_positions` / `bucket_rows` override the sizes the
    budget gives (tests force many slices with them)."""
    if max_order < 1:
        raise LmgridError(f"ngram order: must be >= 1, got {max_order}")
    if memory_mb <= 0:
        raise LmgridError(f"ngram.memory_mb: must be > 0, got {memory_mb}")
    v, bos = len(vocab), vocab.index[BOS]
    step = slice_positions or rows_per_chunk(memory_mb, POSITION_BYTES)
    cap = bucket_rows or rows_per_chunk(memory_mb, BUCKET_BYTES)
    tmp_root = Path(tmp_dir) if tmp_dir else Path(out).parent
    tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".ngram-counts-", dir=tmp_root) as tmp:
        work = Appender(Path(tmp) / "work")
        unigrams = _ids_file(Path(train), vocab, work, max(1 << 16, int(memory_mb * TEXT_BYTES_PER_MIB)))
        tables = work.tables()
        n = tables.size("ids")
        if n * v >= 2**63:
            raise LmgridError(f"corpus too large to key n-grams in int64 ({n} tokens x {v} words)")
        out_tabs = Appender(Path(tmp) / "tables")
        out_tabs.append("count1", unigrams)
        out_tabs.tables(tables)
        sizes = [v]
        for k in range(2, max_order + 1):
            win = _Windows(tables, k, bos, v)
            bounds = _bucket_bounds(tables, f"count{k - 1}", cap, step)
            if bounds.size - 1 > MAX_BUCKETS:  # too many open files: larger buckets
                bounds = bounds[:: -(-(bounds.size - 1) // MAX_BUCKETS)]
                bounds = np.append(bounds, sizes[-1]) if bounds[-1] != sizes[-1] else bounds
            buckets = Appender(Path(tmp) / f"buckets{k}")
            for lo in range(0, n, step):  # a: scatter the windows to their buckets
                start, key, suf = win.slice(lo, min(lo + step, n))
                b = np.searchsorted(bounds, key // v, "right") - 1
                by_bucket = np.argsort(b, kind="stable")
                cut = np.cumsum(np.bincount(b, minlength=bounds.size - 1))
                for i, sel in enumerate(np.split(by_bucket, cut[:-1])):
                    if sel.size:
                        buckets.append(f"key{i}", key[sel])
                        buckets.append(f"suf{i}", suf[sel])
                        buckets.append(f"pos{i}", start[sel] + lo)
            del start, key, suf, b, by_bucket
            btabs = buckets.tables()
            size = 0
            rows = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64) if k < max_order else None
            for i in range(bounds.size - 1):  # b: each bucket's distinct keys, in key order
                if f"key{i}" not in btabs:
                    continue
                uniq, inverse, cnt = np.unique(btabs.read(f"key{i}"), return_inverse=True, return_counts=True)
                suffix = np.empty(uniq.size, dtype=np.int64)
                suffix[inverse] = btabs.read(f"suf{i}")
                out_tabs.append(f"keys{k}", uniq)
                out_tabs.append(f"count{k}", cnt.astype(np.int64))
                out_tabs.append(f"suffix{k}", suffix)
                if rows is not None:
                    rows[btabs.read(f"pos{i}")] = inverse + size
                size += uniq.size
                for name in (f"key{i}", f"suf{i}", f"pos{i}"):
                    buckets.remove(name)
                del uniq, inverse, cnt, suffix
            for name in (f"keys{k}", f"count{k}", f"suffix{k}"):
                if name not in out_tabs.dtypes:
                    out_tabs.append(name, np.empty(0, dtype=np.int64))
            out_tabs.tables(tables)
            sizes.append(size)
            if rows is not None:
                work.append(f"rows{k}", rows)
                del rows
                work.tables(tables)
            if k > 2:
                work.remove(f"rows{k - 1}")
        small = {"format_version": np.array(FORMAT_VERSION), "vocab_size": np.array(v),
                 "vocab_sha256": np.array(_vocab_digest(vocab)), "max_order": np.array(max_order),
                 "keys1": np.arange(v, dtype=np.int64), "count1": unigrams}
        raw = {f"{name}{k}": (out_tabs.path(f"{name}{k}"), np.int64)
               for k in range(2, max_order + 1) for name in ("keys", "count", "suffix")}
        write_npz(out, small, raw)
    log.info("counted %d positions in slices of %d, buckets of <= %d occurrences", n, step, cap)
    return sizes
