"""Scoring a back-off model by the shared convention, the `ngram` job of one grid cell, and `load_run`.

Scoring is vectorised over the whole id stream.  Per order, the keys of the n-grams ending at every
position are joined with the model's table: the distinct query keys, sorted, against the table read in
slices, so only the entries the text uses are ever in memory (the model can stay on disk).  The
back-off recursion is then a few masked additions.
"""
from __future__ import annotations

import concurrent.futures
import logging
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write
from lmgrid.data.ppl import BOS, PAD, counted_tokens, perplexity
from lmgrid.common.resources import own_usage
from lmgrid.run.record import EVAL_SPLITS, RunRecord, SplitScore
from lmgrid.run.key import normalise
from lmgrid.data.vocab import Vocab
from lmgrid.ngram import arpa
from lmgrid.ngram.counts import open_tables, sentence_start_of, stream
from lmgrid.ngram.estimate import METHODS, SLICE_BYTES, Backoff, estimate_tables
from lmgrid.ngram.store import Filler, Tables, rows_per_chunk

log = logging.getLogger(__name__)
ARPA_AUTO_MAX_NGRAMS = 10_000_000  # write_arpa: auto writes models up to this size (an ARPA file of ~400 MB)
SCAN_BYTES = 48  # per table row in a scoring slice: key, log-prob, back-off and their lookups


def _lookup(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Row of each query key in the sorted `keys`, -1 where absent."""
    if keys.size == 0:
        return np.full(query.size, -1, dtype=np.int64)
    idx = np.searchsorted(keys, query)
    idx_c = np.minimum(idx, keys.size - 1)
    return np.where(keys[idx_c] == query, idx_c, -1)


def _join(t: Tables, k: int, query: np.ndarray):
    """Row (-1: absent), log-prob and back-off weight of each order-k query key: a sorted join of the
    distinct queries against the table, slice by slice."""
    uq, inverse = np.unique(query, return_inverse=True)
    row, logp, bow = np.full(uq.size, -1, dtype=np.int64), np.zeros(uq.size), np.zeros(uq.size)
    for lo, cols in t.slices(k, ("keys",), t.vocab_size, whole_contexts=False):
        keys = cols["keys"]
        a, b = np.searchsorted(uq, keys[0]), np.searchsorted(uq, keys[-1], "right")
        idx = _lookup(keys, uq[a:b])
        hit = idx >= 0
        if not hit.any():
            continue
        at, idx = np.arange(a, b)[hit], idx[hit]
        first, last = lo + int(idx[0]), lo + int(idx[-1]) + 1  # rows read for the values: the hit range only
        row[at] = lo + idx
        logp[at] = t.read(f"logp{k}", first, last)[lo + idx - first]
        bow[at] = t.read(f"bow{k}", first, last)[lo + idx - first]
    return row[inverse], logp[inverse], bow[inverse]


def stream_logprobs(t: Tables, ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Natural-log probability of every stream position given its sentence so far (NaN at each <s>),
    under the model `t` (tables keys{k}, logp{k}, bow{k}; attributes order, vocab_size)."""
    n, v = ids.size, t.vocab_size
    sent_start = sentence_start_of(n, starts)
    pos = np.arange(n)
    # per order j, for the j-gram ending at each position: its row (-1: absent), log-prob, back-off
    rows, logp, bow = [ids], [t.dense("logp1")[ids]], [t.dense("bow1")[ids]]
    for j in range(2, t.order + 1):
        prev = np.empty(n, dtype=np.int64)
        prev[0] = -1
        prev[1:] = rows[-1][:-1]
        ok = (pos - j + 1 >= sent_start) & (prev >= 0)
        r, lp, bw = np.full(n, -1, dtype=np.int64), np.zeros(n), np.zeros(n)
        r[ok], lp[ok], bw[ok] = _join(t, j, prev[ok] * v + ids[ok])
        rows.append(r)
        logp.append(lp)
        bow.append(bw)
    out = np.zeros(n)
    done = np.zeros(n, dtype=bool)
    for j in range(t.order, 0, -1):
        hit = ~done & (rows[j - 1] >= 0)
        out[hit] += logp[j - 1][hit]
        done |= hit
        if j > 1:  # back off: add bow of the (j-1)-word context ending just before t, if listed
            miss = np.zeros(n, dtype=bool)
            miss[1:] = ~done[1:] & (rows[j - 2][:-1] >= 0)
            out[miss] += bow[j - 2][np.flatnonzero(miss) - 1]
    out[starts] = np.nan
    return out


def score_splits(t: Tables, vocab: Vocab, splits: dict[str, list[list[str]]]) -> dict[str, dict]:
    """{split: {ppl, nll_nats, tokens, oov_tokens}} by the shared convention; all splits in one join."""
    streams, oov = [], []
    for sentences in splits.values():
        streams.append(stream(sentences, vocab, oov))
    offsets = np.cumsum([0] + [ids.size for ids, _ in streams])
    ids = np.concatenate([s[0] for s in streams])
    starts = np.concatenate([s[1] + off for s, off in zip(streams, offsets)])
    lp = stream_logprobs(t, ids, starts)
    out = {}
    for i, (name, sentences) in enumerate(splits.items()):
        part = lp[offsets[i]:offsets[i + 1]]
        part = part[~np.isnan(part)]
        tokens = counted_tokens(sentences)
        if part.size != tokens:
            raise AssertionError(f"scored {part.size} targets, convention counts {tokens}")
        nll = -float(part.sum())
        out[name] = {"ppl": perplexity(nll, tokens), "nll_nats": nll, "tokens": tokens, "oov_tokens": oov[i]}
    return out


class NgramModel:
    """A back-off model with its vocabulary; satisfies `lmgrid.lm.LanguageModel`."""

    def __init__(self, backoff: Backoff, vocab: Vocab):
        self.backoff = backoff
        self.vocab = vocab

    def sentence_logprobs(self, sentences: list[list[str]]) -> list[list[float]]:
        if not sentences:
            return []
        ids, starts = stream(sentences, self.vocab)
        lp = stream_logprobs(self.backoff.tables(), ids, starts)
        lp = lp[~np.isnan(lp)]
        cut = np.cumsum([len(s) + 1 for s in sentences])[:-1]
        return [a.tolist() for a in np.split(lp, cut)]

    def evaluate(self, sentences: list[list[str]]) -> dict:
        """{ppl, nll_nats, tokens, oov_tokens} of a split, by the shared convention."""
        return score_splits(self.backoff.tables(), self.vocab, {"split": sentences})["split"]

    def next_logprobs(self, context: list[str]) -> list[float]:
        bo, v = self.backoff, self.vocab
        hist = [v.index[BOS]] + v.encode(v.map(list(context)))
        hist = hist[len(hist) - (bo.order - 1):] if bo.order > 1 else []
        # crow[L]: row of the L-gram formed by the last L history words (-1: absent)
        crow = {0: 0}
        for length in range(1, len(hist) + 1):
            gram = hist[len(hist) - length:]
            r = gram[0]
            for j in range(2, length + 1):
                r = int(_lookup(bo.keys[j - 1], np.array([r * bo.vocab_size + gram[j - 1]]))[0]) if r >= 0 else -1
            crow[length] = r
        words = np.arange(bo.vocab_size)
        out = np.zeros(bo.vocab_size)
        done = np.zeros(bo.vocab_size, dtype=bool)
        for j in range(bo.order, 0, -1):
            pre = crow.get(j - 1, -1)
            if j == 1:
                r = words
            elif pre >= 0:
                r = _lookup(bo.keys[j - 1], pre * bo.vocab_size + words)
            else:
                continue
            hit = ~done & (r >= 0)
            out[hit] += bo.logp[j - 1][r[hit]]
            done |= hit
            if j > 1:
                out[~done] += bo.bow[j - 2][pre]
        out[[v.index[PAD], v.index[BOS]]] = -math.inf
        return out.tolist()


def vocab_from_tokens(tokens: list[str]) -> Vocab:
    return Vocab(list(tokens), {})


ARPA_NOT_WRITTEN = "# lmgrid: ARPA file not written"


def load_run(run_dir: str | Path) -> NgramModel:
    path = Path(run_dir) / "model.arpa"
    with open(path, "rb") as fh:
        if fh.read(len(ARPA_NOT_WRITTEN)).decode(errors="replace") == ARPA_NOT_WRITTEN:
            raise LmgridError(f"{path}: the run did not write its ARPA file (ngram.write_arpa): rerun with "
                              f"write_arpa: true to load it")
    backoff, tokens = arpa.read(path)
    return NgramModel(backoff, vocab_from_tokens(tokens))


def _want_arpa(write_arpa: str, n_ngrams: int) -> bool:
    if write_arpa not in ("auto", "true", "false"):
        raise LmgridError(f"ngram.write_arpa: expected auto, true or false, got {write_arpa!r}")
    return write_arpa == "true" or (write_arpa == "auto" and n_ngrams <= ARPA_AUTO_MAX_NGRAMS)


def train_run(*, counts_path, vocab_path, valid_path, test_path, arch: str, order: int, arpa_path, metrics_path,
              addk_k: float = 1.0, katz_max_count: int = 7, memory_mb: float = 512,
              write_arpa: str = "auto") -> dict:
    """One n-gram grid cell: estimate from the shared counts (on disk, in slices that fit `memory_mb`),
    score valid and test, write the ARPA file (or, when `write_arpa` says no, a one-line note in its
    place), write metrics.json (docs/contracts.md).  Returns the metrics."""
    from lmgrid.data.corpus import load_split

    if arch not in METHODS:  # an n-gram arch names its estimation method
        raise LmgridError(f"arch {arch!r}: not an n-gram architecture ({', '.join(METHODS)})")
    if memory_mb <= 0:
        raise LmgridError(f"ngram.memory_mb: must be > 0, got {memory_mb}")
    start_unix_s = time.time()
    t0 = time.perf_counter()
    timing = {}

    def lap(name):
        nonlocal t0
        now = time.perf_counter()
        timing[name] = round(now - t0, 3)
        t0 = now

    vocab = Vocab.load(vocab_path)
    counts = open_tables(counts_path, vocab, order)
    counts.step = rows_per_chunk(memory_mb / 2, SLICE_BYTES)
    lap("load_s")
    Path(metrics_path).parent.mkdir(parents=True, exist_ok=True)  # the model's tables go beside its metrics
    with tempfile.TemporaryDirectory(prefix=".ngram-", dir=Path(metrics_path).parent) as tmp:
        model, settings = estimate_tables(counts, Filler(tmp), arch, order, vocab.index[BOS], vocab.index[PAD],
                                          addk_k=addk_k, katz_max_count=katz_max_count)
        model.step = rows_per_chunk(memory_mb / 2, SCAN_BYTES)
        lap("estimate_s")
        sizes = [int(np.isfinite(model.dense("logp1")).sum()) + 1] + [
            model.size(f"keys{k}") for k in range(2, model.order + 1)]
        arpa_on = _want_arpa(str(write_arpa).lower(), sum(sizes))
        # Writing the ARPA file and scoring only read the model: overlap them on two threads (numpy and
        # file writes release the GIL), as KenLM's tools use several cores.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            written = pool.submit(arpa.write, arpa_path, model, vocab.tokens) if arpa_on else None
            scores = score_splits(model, vocab, {"valid": load_split(valid_path), "test": load_split(test_path)})
            lap("score_s")
            if written is not None:
                written.result()
        if not arpa_on:
            with atomic_write(arpa_path) as fh:
                fh.write(f"{ARPA_NOT_WRITTEN} (ngram.write_arpa: {write_arpa}; {sum(sizes)} n-grams)\n")
        lap("arpa_after_score_s")
    key = normalise(arch, "ngram", order, 1, "window", 0)
    record = RunRecord(
        name=key.name, arch=key.arch, impl=key.impl, n_step=key.n_step, layers=key.layers, regime=key.regime,
        seed=key.seed, **{split: SplitScore(**scores[split]) for split in EVAL_SPLITS}, params=sum(sizes),
        # The n-gram fields of the run record (lmgrid.run.record), in the order the file has always had them.
        extra={"order": order, "method": arch, "settings": settings, "ngrams_per_order": sizes, "arpa_written": arpa_on,
               "timing": timing, "wall_s": round(sum(timing.values()), 3),
               "start_unix_s": round(start_unix_s, 3), "end_unix_s": round(time.time(), 3),
               **own_usage()})  # this process's CPU seconds and peak RSS, as a training job records its own
    return record.write(metrics_path)
