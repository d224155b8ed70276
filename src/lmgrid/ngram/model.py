"""Scoring a back-off model by the shared convention, the `ngram` job of one grid cell, and `load_run`.

Scoring is vectorised over the whole id stream: per order, one sorted-key lookup finds the row of
the n-gram ending at every position; the back-off recursion is then a few masked additions.
"""
from __future__ import annotations

import concurrent.futures
import logging
import math
import time
from pathlib import Path

import numpy as np

from ..errors import LmgridError, write_json
from ..ppl import BOS, PAD, counted_tokens, perplexity
from ..runkey import normalise
from ..vocab import Vocab
from . import arpa
from .counts import load as load_counts
from .counts import sentence_start_of, stream
from .estimate import METHODS, Backoff, estimate

log = logging.getLogger(__name__)


def _lookup(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Row of each query key in the sorted `keys`, -1 where absent."""
    if keys.size == 0:
        return np.full(query.size, -1, dtype=np.int64)
    idx = np.searchsorted(keys, query)
    idx_c = np.minimum(idx, keys.size - 1)
    return np.where(keys[idx_c] == query, idx_c, -1)


def _rows(bo: Backoff, ids: np.ndarray, sent_start: np.ndarray) -> list[np.ndarray]:
    """rows[j-1][t]: row of the j-gram ending at stream position t in the order-j table (-1: absent)."""
    n, v = ids.size, bo.vocab_size
    pos = np.arange(n)
    rows = [ids]
    for j in range(2, bo.order + 1):
        prev = np.empty(n, dtype=np.int64)
        prev[0] = -1
        prev[1:] = rows[-1][:-1]
        ok = (pos - j + 1 >= sent_start) & (prev >= 0)
        r = np.full(n, -1, dtype=np.int64)
        r[ok] = _lookup(bo.keys[j - 1], prev[ok] * v + ids[ok])
        rows.append(r)
    return rows


def stream_logprobs(bo: Backoff, ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Natural-log probability of every stream position given its sentence so far (NaN at each <s>)."""
    n = ids.size
    sent_start = sentence_start_of(n, starts)
    rows = _rows(bo, ids, sent_start)
    out = np.zeros(n)
    done = np.zeros(n, dtype=bool)
    for j in range(bo.order, 0, -1):
        r = rows[j - 1]
        hit = ~done & (r >= 0)
        out[hit] += bo.logp[j - 1][r[hit]]
        done |= hit
        if j > 1:  # back off: add bow of the (j-1)-word context ending just before t, if listed
            ctx = np.full(n, -1, dtype=np.int64)
            ctx[1:] = rows[j - 2][:-1]
            miss = ~done & (ctx >= 0)
            out[miss] += bo.bow[j - 2][ctx[miss]]
    out[starts] = np.nan
    return out


class NgramModel:
    """A back-off model with its vocabulary; satisfies `lmgrid.lm.LanguageModel`."""

    def __init__(self, backoff: Backoff, vocab: Vocab):
        self.backoff = backoff
        self.vocab = vocab

    def _targets(self, sentences: list[list[str]], oov: list | None = None) -> np.ndarray:
        ids, starts = stream(sentences, self.vocab, oov)
        lp = stream_logprobs(self.backoff, ids, starts)
        return lp[~np.isnan(lp)]

    def sentence_logprobs(self, sentences: list[list[str]]) -> list[list[float]]:
        if not sentences:
            return []
        lp = self._targets(sentences)
        cut = np.cumsum([len(s) + 1 for s in sentences])[:-1]
        return [a.tolist() for a in np.split(lp, cut)]

    def evaluate(self, sentences: list[list[str]]) -> dict:
        """{ppl, nll_nats, tokens, oov_tokens} of a split, by the shared convention."""
        oov: list[int] = []
        lp = self._targets(sentences, oov)
        tokens = counted_tokens(sentences)
        if lp.size != tokens:
            raise AssertionError(f"scored {lp.size} targets, convention counts {tokens}")
        nll = -float(lp.sum())
        return {"ppl": perplexity(nll, tokens), "nll_nats": nll, "tokens": tokens, "oov_tokens": oov[0]}

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


def load_run(run_dir: str | Path) -> NgramModel:
    backoff, tokens = arpa.read(Path(run_dir) / "model.arpa")
    return NgramModel(backoff, vocab_from_tokens(tokens))


def train_run(*, counts_path, vocab_path, valid_path, test_path, arch: str, order: int, arpa_path, metrics_path,
              addk_k: float = 1.0, katz_max_count: int = 7) -> dict:
    """One n-gram grid cell: estimate from the shared counts, write the ARPA file, score valid and test,
    write metrics.json (docs/contracts.md).  Returns the metrics."""
    from ..corpus import load_split

    if arch not in METHODS:  # an n-gram arch names its estimation method
        raise LmgridError(f"arch {arch!r}: not an n-gram architecture ({', '.join(METHODS)})")
    t0 = time.perf_counter()
    timing = {}

    def lap(name):
        nonlocal t0
        now = time.perf_counter()
        timing[name] = round(now - t0, 3)
        t0 = now

    vocab = Vocab.load(vocab_path)
    counts = load_counts(counts_path, vocab, order)
    lap("load_s")
    method = arch
    bo = estimate(counts, method, order, vocab.index[BOS], vocab.index[PAD], addk_k=addk_k,
                  katz_max_count=katz_max_count)
    lap("estimate_s")
    # Writing the ARPA file and scoring only read the model: overlap them on two threads (numpy and
    # file writes release the GIL), as KenLM's tools use several cores.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        written = pool.submit(arpa.write, arpa_path, bo, vocab.tokens)
        model = NgramModel(bo, vocab)
        scores = {split: model.evaluate(load_split(path)) for split, path in (("valid", valid_path),
                                                                              ("test", test_path))}
        lap("score_s")
        written.result()
    lap("arpa_after_score_s")
    key = normalise(arch, "ngram", order, 1, "window", 0)
    metrics = {"name": key.name, "arch": key.arch, "impl": key.impl, "n_step": key.n_step, "layers": key.layers,
               "regime": key.regime, "seed": key.seed, **scores,
               "params": bo.entries(), "order": order, "method": method, "settings": bo.settings,
               "ngrams_per_order": [int(k.size) if i else int(np.isfinite(bo.logp[0]).sum()) + 1
                                    for i, k in enumerate(bo.keys)],
               "timing": timing, "wall_s": round(sum(timing.values()), 3)}
    write_json(metrics_path, metrics)
    return metrics
