"""Estimation: raw counts -> a back-off model (log-probability and back-off weight per n-gram).

Every method yields the same representation, the one ARPA stores: a listed n-gram ``h w`` has
probability p(w|h); an unlisted one backs off, p(w|h) = bow(h) p(w|h without its first word).
Interpolated models fit exactly: their listed probabilities already include the lower orders, and
bow(h) is the interpolation weight gamma(h).

Methods (Chen & Goodman 1998, "An empirical study of smoothing techniques for language modeling"):
* ``mkn``  interpolated modified Kneser-Ney: three discounts D1, D2, D3+ per order from the
  count-of-counts n1..n4 of that order's adjusted counts, Y = n1/(n1+2 n2), Di = i - (i+1) Y n(i+1)/n(i).
  Adjusted counts are raw counts at the highest order and for n-grams starting with <s> (they have no
  left context); elsewhere the number of distinct words seen before the n-gram (continuation count).
  The unigrams interpolate with the uniform distribution over every predictable word (the vocabulary
  but <s> and <pad>; <unk> is an ordinary word, counted and discounted like the others).  No pruning,
  a single <s> of left padding.  This is the estimate of KenLM lmplz (SRILM `-kndiscount -interpolate`
  is the same method): on PTB our 3- and 5-gram ARPA files equal lmplz's n-gram by n-gram within its float
  rounding and its extra zero-count <unk> (tests/test_ngram_kenlm.py), and reproduce the published 3- and 5-gram
  figures (tests/test_ngram_ptb.py).
* ``kn``   the same with one discount per order, D = n1/(n1 + 2 n2).
* ``katz`` Katz back-off with Good-Turing discounts for counts up to `katz_max_count` (SRILM's gtNmax,
  default 7; unigrams: singletons only, as SRILM's gt1max = 1), back-off weights that renormalise.
  Where a context leaves no mass for unseen words, 1/(c(h)+1) is reserved for them (documented below).
* ``addk`` add-k at the model's order: p(w|h) = (c(h w) + k) / (c(h) + k |V|), |V| predictable words.

Where a count-of-count needed for a discount is zero or a discount leaves its range, the method
falls back and logs a warning: KN/MKN as `lmplz --discount_fallback` does (D = 0.5, 1, 1.5; plain KN
0.5), Katz by leaving that count undiscounted.

Bounded memory: every method reads the order-k table in slices that keep each context's n-grams
together (the table is sorted by context), so per-context sums are local to a slice; what spans a
whole order is held densely for one order at a time: the lower order's probabilities (gathered by
suffix row) and, for KN, the continuation counts.  In memory (`estimate`) the whole table is one
slice; on disk (`estimate_tables`, `lmgrid ngram`) slices follow `ngram.memory_mb`.  Both run the
same code, so they give the same numbers.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from lmgrid.common.errors import LmgridError
from lmgrid.ngram.counts import Counts
from lmgrid.ngram.store import Filler, Tables

log = logging.getLogger(__name__)
METHODS = ("addk", "katz", "kn", "mkn")
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)  # lmplz --discount_fallback defaults
SLICE_BYTES = 160  # per table row in an estimation slice: its columns and a dozen float temporaries


@dataclass
class Backoff:
    """A back-off n-gram model.  Tables are indexed like `Counts` (order 1 by word id); log-probs and
    back-off weights are natural logs; -inf marks <pad> and <s>, which are never predicted."""
    vocab_size: int
    keys: list[np.ndarray]
    logp: list[np.ndarray]
    bow: list[np.ndarray]
    method: str = "mkn"
    settings: dict = field(default_factory=dict)

    @property
    def order(self) -> int:
        return len(self.keys)

    def tables(self) -> Tables:
        """The model as `Tables` (keys{k}, logp{k}, bow{k}), what scoring and the ARPA writer read."""
        arrays = {}
        for k in range(1, self.order + 1):
            arrays.update({f"keys{k}": self.keys[k - 1], f"logp{k}": self.logp[k - 1], f"bow{k}": self.bow[k - 1]})
        t = Tables(arrays)
        t.order, t.vocab_size = self.order, self.vocab_size
        return t

    def entries(self) -> int:
        """Number of n-gram entries (unigrams: every word but <pad>), the model's parameter count."""
        return int(np.isfinite(self.logp[0]).sum()) + 1 + sum(int(k.size) for k in self.keys[1:])


def _by_context(ctx: np.ndarray, n_ctx: int, weights=None) -> np.ndarray:
    return np.bincount(ctx, weights=weights, minlength=n_ctx).astype(np.float64)


class _Order:
    """One slice of an order-k table: its context of each row, numbered from the slice's first
    context (`c0`), so per-context sums are bincounts of the slice alone."""

    def __init__(self, lo: int, cols: dict, v: int):
        self.lo, self.cols = lo, cols
        ctx = cols["keys"] // v
        self.c0 = int(ctx[0])
        self.ctx = ctx - self.c0
        self.n_ctx = int(self.ctx[-1]) + 1

    def by_context(self, weights=None, rows=None) -> np.ndarray:
        ctx = self.ctx if rows is None else self.ctx[rows]
        return _by_context(ctx, self.n_ctx, weights)


def _slices(t: Tables, k: int, v: int, names=("count", "suffix")):
    for lo, cols in t.slices(k, ("keys",) + names, v):
        yield _Order(lo, cols, v)


def effective_order(t: Tables, order: int) -> int:
    eff = min(order, int(t.max_order))
    while eff > 1 and t.size(f"keys{eff}") == 0:
        eff -= 1
    if eff < order:
        log.warning("no %d-grams in train (every sentence is shorter): estimating a %d-gram model", order, eff)
    return eff


def _predictable(vocab_size: int, bos: int, pad: int) -> np.ndarray:
    mask = np.ones(vocab_size, dtype=bool)
    mask[[bos, pad]] = False
    return mask


def bos_rows(t: Tables, n_order: int, v: int, bos: int) -> list[tuple[int, int]]:
    """Per order, the rows of the n-grams that start with <s>: one range, as tables are sorted by
    their words from the first (a k-gram's key orders it by its prefix row, then its last word)."""
    ranges = [(bos, bos + 1)]
    for k in range(2, n_order + 1):
        lo, hi = ranges[-1]
        ranges.append((t.search(f"keys{k}", lo * v), t.search(f"keys{k}", hi * v)))
    return ranges


def _in_range(o: _Order, size: int, rng: tuple[int, int]) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    mask[max(rng[0] - o.lo, 0):max(rng[1] - o.lo, 0)] = True
    return mask


def _count_of_counts(c: np.ndarray, top: int) -> np.ndarray:
    """n[r] = number of entries equal to r, for r = 0..top (n[0] stays 0)."""
    return np.bincount(c[(c > 0) & (c <= top)], minlength=top + 1)[: top + 1]


def kn_discounts(n_of: np.ndarray, k: int, modified: bool) -> tuple[float, float, float]:
    """D1, D2, D3+ of one order from the count-of-counts n1..n4 of its adjusted counts (n_of[1..4])."""
    n = [int(x) for x in n_of[1:5]]
    need = n if modified else n[:2]
    if min(need) == 0:
        missing = 1 + need.index(0)
        log.warning("order %d: no n-grams with adjusted count %d; using fallback discounts %s "
                    "(as lmplz --discount_fallback)", k, missing, FALLBACK_DISCOUNTS)
        return FALLBACK_DISCOUNTS if modified else (FALLBACK_DISCOUNTS[0],) * 3
    y = n[0] / (n[0] + 2 * n[1])
    if not modified:
        return (y, y, y)
    d = tuple(i - (i + 1) * y * n[i] / n[i - 1] for i in (1, 2, 3))
    # lmplz accepts 0 <= Di <= i; a zero discount would leave a context no mass to back off with
    # (a zero probability), so it falls back too.
    if any(not 0 < di <= i for i, di in zip((1, 2, 3), d)):
        log.warning("order %d: discounts %s out of range; using fallback %s", k, d, FALLBACK_DISCOUNTS)
        return FALLBACK_DISCOUNTS
    return d


def _continuation(t: Tables, k: int, v: int) -> np.ndarray:
    """Per order-k row, the number of distinct words seen before it (order k+1 rows with it as suffix)."""
    cont = np.zeros(t.size(f"keys{k}"), dtype=np.int64)
    for o in _slices(t, k + 1, v, ("suffix",)):
        np.add.at(cont, o.cols["suffix"], 1)
    return cont


def kneser_ney(t: Tables, out: Filler, order: int, bos: int, pad: int, modified: bool = True) -> dict:
    v = int(t.vocab_size)
    n_order = effective_order(t, order)
    starts_bos = bos_rows(t, n_order, v, bos)

    def adjusted(k: int, o: _Order, cont) -> np.ndarray:
        """Raw counts at the top order and for n-grams starting with <s>; continuation counts elsewhere."""
        raw = o.cols["count"]
        return raw if cont is None else np.where(_in_range(o, raw.size, starts_bos[k - 1]), raw,
                                                 cont[o.lo:o.lo + raw.size])

    discounts = []
    pred = _predictable(v, bos, pad)
    # Unigrams: discounted adjusted counts interpolated with the uniform distribution.
    cont = _continuation(t, 1, v) if n_order > 1 else None
    a = adjusted(1, _Order(0, {"keys": np.arange(v), "count": t.dense("count1")}, v), cont) * pred
    d = np.array((0.0,) + kn_discounts(_count_of_counts(a[pred], 4), 1, modified))
    discounts.append(d[1:].tolist())
    da = d[np.minimum(a, 3)]
    total = a.sum()
    gamma0 = da.sum() / total
    p = np.where(pred, (a - da) / total + gamma0 / pred.sum(), 0.0)
    with np.errstate(divide="ignore"):
        out.put("logp1", 0, np.log(p))
    for k in range(2, n_order + 1):
        cont = _continuation(t, k, v) if k < n_order else None
        n_of = sum(_count_of_counts(adjusted(k, o, cont), 4) for o in _slices(t, k, v, ("count",)))
        d = np.array((0.0,) + kn_discounts(n_of, k, modified))
        discounts.append(d[1:].tolist())
        lower = _lower(out, k)
        for o in _slices(t, k, v):
            a = adjusted(k, o, cont)
            da = d[np.minimum(a, 3)]
            denom = o.by_context(a)
            gamma = np.divide(o.by_context(da), denom, out=np.ones(o.n_ctx), where=denom > 0)
            p = (a - da) / denom[o.ctx] + gamma[o.ctx] * lower[o.cols["suffix"]]
            out.put(f"logp{k}", o.lo, np.log(p))
            out.put(f"bow{k - 1}", o.c0, np.log(gamma))
        del lower, cont
    return {"discounts": discounts, "effective_order": n_order}


def _lower(out: Filler, k: int) -> np.ndarray:
    """p(w | shorter context) of every order-(k-1) row, dense: the gather target of order k."""
    logp = out.dense(f"logp{k - 1}")
    return np.exp(logp, out=logp) if out.app is not None else np.exp(logp)  # a disk read is ours to overwrite


def _good_turing(n: np.ndarray, max_count: int, k: int) -> np.ndarray:
    """Katz's discount ratio d_r for r = 0..max_count (index r) from the count-of-counts n[0..max_count+1];
    1 for trusted or unusable counts."""
    d = np.ones(max_count + 1)
    if max_count < 1 or n[1] == 0:
        return d
    big = (max_count + 1) * n[max_count + 1] / n[1]
    bad = []
    for r in range(1, max_count + 1):
        if n[r] == 0:
            continue
        dr = ((r + 1) * n[r + 1] / (r * n[r]) - big) / (1 - big) if big < 1 else -1.0
        if 0 < dr <= 1:
            d[r] = dr
        else:
            bad.append(r)
    if bad:
        log.warning("order %d: Good-Turing discount out of range for counts %s; left undiscounted", k, bad)
    return d


def _discounted(c: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Counts times their discount ratio (counts beyond the table are trusted)."""
    top = d.size - 1
    return np.where(c <= top, d[np.minimum(c, top)], 1.0) * c


def katz(t: Tables, out: Filler, order: int, bos: int, pad: int, max_count: int = 7) -> dict:
    v = int(t.vocab_size)
    n_order = effective_order(t, order)
    pred = _predictable(v, bos, pad)
    # Unigrams: Good-Turing on singletons (SRILM's default gt1max = 1); the freed mass goes to the
    # unseen words, or over all words when every word was seen.
    c = t.dense("count1") * pred
    d = _good_turing(_count_of_counts(c[pred], 2), 1, 1)
    p = _discounted(c, d) / c.sum()
    unseen = pred & (c == 0)
    spread = unseen if unseen.any() else pred
    if unseen.any() and 1 - p.sum() < 1e-9:  # nothing freed for the unseen words: one novel event
        p = p * c.sum() / (c.sum() + 1)
    p = np.where(spread, p + (1 - p.sum()) / spread.sum(), p) * pred
    with np.errstate(divide="ignore"):
        out.put("logp1", 0, np.log(p))
    for k in range(2, n_order + 1):
        n_of = sum(_count_of_counts(o.cols["count"], max_count + 1) for o in _slices(t, k, v, ("count",)))
        d = _good_turing(n_of, max_count, k)
        lower_all = _lower(out, k)
        for o in _slices(t, k, v):
            c = o.cols["count"]
            dc = _discounted(c, d)
            total = o.by_context(c)
            kept = o.by_context(dc)
            lower_unseen = 1 - o.by_context(lower_all[o.cols["suffix"]])  # mass of the words unseen after h
            left = np.divide(total - kept, total, out=np.ones(o.n_ctx), where=total > 0)
            # A context followed by every word has nowhere to back off: its seen words share all the mass.
            full = (total > 0) & (lower_unseen < 1e-10)
            # A context whose every count is trusted keeps no mass for unseen words; reserve 1/(c(h)+1)
            # for them (as if one novel event), so no word ever gets probability zero.
            tight = (total > 0) & ~full & (left < 1e-9)
            norm = np.where(full, kept, np.where(tight, total + 1, total))
            left = np.where(full, 0.0, np.where(tight, 1 / (total + 1), left))
            alpha = np.where(full, 1.0, left / np.maximum(lower_unseen, 1e-10))
            out.put(f"logp{k}", o.lo, np.log(dc / norm[o.ctx]))
            out.put(f"bow{k - 1}", o.c0, np.log(alpha))
        del lower_all
    return {"katz_max_count": max_count, "effective_order": n_order}


def add_k(t: Tables, out: Filler, order: int, bos: int, pad: int, k_add: float = 1.0) -> dict:
    """Add-k over the full context.  Exact as a back-off model: the n-grams that carry an add-k
    estimate (those of the model's order, and shorter ones starting with <s>, whose context cannot
    grow) list it; every other n-gram lists the uniform 1/|V|, and each add-k context h gets the
    back-off weight k |V| / (c(h) + k |V|), so an unseen h w gets k / (c(h) + k |V|)."""
    if k_add <= 0:
        raise LmgridError(f"ngram.addk_k: must be > 0, got {k_add}")
    v = int(t.vocab_size)
    n_order = effective_order(t, order)
    starts_bos = bos_rows(t, n_order, v, bos)
    pred = _predictable(v, bos, pad)
    n_pred = pred.sum()
    uniform = np.log(1.0 / n_pred)
    c = t.dense("count1").astype(np.float64)
    if n_order == 1:
        p = np.log((c + k_add) / (c[pred].sum() + k_add * n_pred))
    else:
        p = np.full(c.size, uniform)
    with np.errstate(divide="ignore"):
        out.put("logp1", 0, np.where(pred, p, -np.inf))
    for k in range(2, n_order + 1):
        for o in _slices(t, k, v, ("count",)):
            c = o.cols["count"].astype(np.float64)
            carries = np.ones(c.size, bool) if k == n_order else _in_range(o, c.size, starts_bos[k - 1])
            total = o.by_context(c[carries], carries)
            out.put(f"logp{k}", o.lo, np.where(carries, np.log((c + k_add) / (total[o.ctx] + k_add * n_pred)),
                                               uniform))
            has = o.by_context(None, carries) > 0
            out.put(f"bow{k - 1}", o.c0, np.where(has, np.log(k_add * n_pred / (total + k_add * n_pred)), 0.0))
    return {"addk_k": k_add, "effective_order": n_order}


def estimate_tables(t: Tables, out: Filler, method: str, order: int, bos: int, pad: int, *, addk_k: float = 1.0,
                    katz_max_count: int = 7) -> tuple[Tables, dict]:
    """Estimate from count tables (`keys{k}`, `count{k}`, `suffix{k}`, `vocab_size`, `max_order` as
    attributes) into `out`; returns the model's tables (keys, logp, bow per order) and its settings."""
    if method not in METHODS:
        raise LmgridError(f"ngram method: unknown {method!r} (expected one of {', '.join(METHODS)})")
    if not 1 <= order <= t.max_order:
        raise LmgridError(f"ngram order {order}: counts hold orders 1..{t.max_order}")
    if method in ("kn", "mkn"):
        settings = kneser_ney(t, out, order, bos, pad, modified=method == "mkn")
    elif method == "katz":
        settings = katz(t, out, order, bos, pad, katz_max_count)
    else:
        settings = add_k(t, out, order, bos, pad, addk_k)
    n_order = settings["effective_order"]
    for k in range(1, n_order + 1):  # contexts no slice reached, and the top order, back off with weight 1
        out.finish(f"bow{k}", t.size(f"keys{k}"))
    model = out.tables().update(t.subset([f"keys{k}" for k in range(1, n_order + 1)]))
    model.order, model.vocab_size, model.step = n_order, int(t.vocab_size), t.step
    return model, settings


def count_tables(counts: Counts) -> Tables:
    arrays = {}
    for k in range(1, counts.max_order + 1):
        arrays.update({f"keys{k}": counts.keys[k - 1], f"count{k}": counts.count[k - 1]})
        if k >= 2:
            arrays[f"suffix{k}"] = counts.suffix[k - 1]
    t = Tables(arrays)
    t.vocab_size, t.max_order = counts.vocab_size, counts.max_order
    return t


def estimate(counts: Counts, method: str, order: int, bos: int, pad: int, *, addk_k: float = 1.0,
             katz_max_count: int = 7) -> Backoff:
    """Estimate in memory (the whole table as one slice)."""
    model, settings = estimate_tables(count_tables(counts), Filler(), method, order, bos, pad, addk_k=addk_k,
                                      katz_max_count=katz_max_count)
    n = settings["effective_order"]
    return Backoff(counts.vocab_size, counts.keys[:n], [model.dense(f"logp{k}") for k in range(1, n + 1)],
                   [model.dense(f"bow{k}") for k in range(1, n + 1)], method, settings)
