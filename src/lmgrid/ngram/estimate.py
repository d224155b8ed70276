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
  is the same method); on PTB it reproduces the published 3- and 5-gram figures (tests/test_ngram_ptb.py).
* ``kn``   the same with one discount per order, D = n1/(n1 + 2 n2).
* ``katz`` Katz back-off with Good-Turing discounts for counts up to `katz_max_count` (SRILM's gtNmax,
  default 7; unigrams: singletons only, as SRILM's gt1max = 1), back-off weights that renormalise.
  Where a context leaves no mass for unseen words, 1/(c(h)+1) is reserved for them (documented below).
* ``addk`` add-k at the model's order: p(w|h) = (c(h w) + k) / (c(h) + k |V|), |V| predictable words.

Where a count-of-count needed for a discount is zero or a discount leaves its range, the method
falls back and logs a warning: KN/MKN as `lmplz --discount_fallback` does (D = 0.5, 1, 1.5; plain KN
0.5), Katz by leaving that count undiscounted.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..errors import LmgridError
from .counts import Counts

log = logging.getLogger(__name__)
METHODS = ("addk", "katz", "kn", "mkn")
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)  # lmplz --discount_fallback defaults


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

    def entries(self) -> int:
        """Number of n-gram entries (unigrams: every word but <pad>), the model's parameter count."""
        return int(np.isfinite(self.logp[0]).sum()) + 1 + sum(int(k.size) for k in self.keys[1:])


def _by_context(ctx: np.ndarray, n_ctx: int, weights=None) -> np.ndarray:
    return np.bincount(ctx, weights=weights, minlength=n_ctx).astype(np.float64)


def _effective_order(counts: Counts, order: int) -> int:
    eff = min(order, counts.max_order)
    while eff > 1 and counts.keys[eff - 1].size == 0:
        eff -= 1
    if eff < order:
        log.warning("no %d-grams in train (every sentence is shorter): estimating a %d-gram model", order, eff)
    return eff


def _predictable(counts: Counts, bos: int, pad: int) -> np.ndarray:
    mask = np.ones(counts.vocab_size, dtype=bool)
    mask[[bos, pad]] = False
    return mask


def kn_discounts(adjusted: np.ndarray, k: int, modified: bool) -> tuple[float, float, float]:
    """D1, D2, D3+ of one order from the count-of-counts of its adjusted counts."""
    n = [int(np.count_nonzero(adjusted == i)) for i in (1, 2, 3, 4)]
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


def kneser_ney(counts: Counts, order: int, bos: int, pad: int, modified: bool = True) -> Backoff:
    n_order = _effective_order(counts, order)
    first_is_bos = [counts.first(k) == bos for k in range(1, n_order + 1)]
    adjusted = []
    for k in range(1, n_order + 1):
        raw = counts.count[k - 1]
        if k == n_order:
            adjusted.append(raw)
        else:
            cont = np.bincount(counts.suffix[k], minlength=raw.size)
            adjusted.append(np.where(first_is_bos[k - 1], raw, cont))
    discounts, logp, bow = [], [], []
    pred = _predictable(counts, bos, pad)
    # Unigrams: discounted adjusted counts interpolated with the uniform distribution.
    a = adjusted[0] * pred
    d = np.array((0.0,) + kn_discounts(a[pred], 1, modified))
    discounts.append(d[1:].tolist())
    da = d[np.minimum(a, 3)]
    total = a.sum()
    gamma0 = da.sum() / total
    p = np.where(pred, (a - da) / total + gamma0 / pred.sum(), 0.0)
    with np.errstate(divide="ignore"):
        logp.append(np.log(p))
    for k in range(2, n_order + 1):
        a = adjusted[k - 1]
        ctx = counts.prefix[k - 1]
        n_ctx = counts.keys[k - 2].size
        d = np.array((0.0,) + kn_discounts(a, k, modified))
        discounts.append(d[1:].tolist())
        da = d[np.minimum(a, 3)]
        denom = _by_context(ctx, n_ctx, a)
        gamma = np.divide(_by_context(ctx, n_ctx, da), denom, out=np.ones(n_ctx), where=denom > 0)
        p = (a - da) / denom[ctx] + gamma[ctx] * np.exp(logp[k - 2][counts.suffix[k - 1]])
        logp.append(np.log(p))
        bow.append(np.log(gamma))
    bow.append(np.zeros(counts.keys[n_order - 1].size))
    return Backoff(counts.vocab_size, counts.keys[:n_order], logp, bow, "mkn" if modified else "kn",
                   {"discounts": discounts, "effective_order": n_order})


def _good_turing(c: np.ndarray, max_count: int, k: int) -> np.ndarray:
    """Katz's discount ratio d_r for r = 0..max_count (index r); 1 for trusted or unusable counts."""
    n = np.bincount(c[c > 0], minlength=max_count + 2)[: max_count + 2]
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


def katz(counts: Counts, order: int, bos: int, pad: int, max_count: int = 7) -> Backoff:
    n_order = _effective_order(counts, order)
    pred = _predictable(counts, bos, pad)
    # Unigrams: Good-Turing on singletons (SRILM's default gt1max = 1); the freed mass goes to the
    # unseen words, or over all words when every word was seen.
    c = counts.count[0] * pred
    d = _good_turing(c[pred], 1, 1)
    p = _discounted(c, d) / c.sum()
    unseen = pred & (c == 0)
    spread = unseen if unseen.any() else pred
    if unseen.any() and 1 - p.sum() < 1e-9:  # nothing freed for the unseen words: one novel event
        p = p * c.sum() / (c.sum() + 1)
    p = np.where(spread, p + (1 - p.sum()) / spread.sum(), p) * pred
    with np.errstate(divide="ignore"):
        logp, bow = [np.log(p)], []
    for k in range(2, n_order + 1):
        c = counts.count[k - 1]
        ctx = counts.prefix[k - 1]
        n_ctx = counts.keys[k - 2].size
        d = _good_turing(c, max_count, k)
        dc = _discounted(c, d)
        total = _by_context(ctx, n_ctx, c)
        kept = _by_context(ctx, n_ctx, dc)
        lower = np.exp(logp[k - 2][counts.suffix[k - 1]])
        lower_unseen = 1 - _by_context(ctx, n_ctx, lower)  # lower-order mass of the words unseen after h
        left = np.divide(total - kept, total, out=np.ones(n_ctx), where=total > 0)
        # A context followed by every word has nowhere to back off: its seen words share all the mass.
        full = (total > 0) & (lower_unseen < 1e-10)
        # A context whose every count is trusted keeps no mass for unseen words; reserve 1/(c(h)+1)
        # for them (as if one novel event), so no word ever gets probability zero.
        tight = (total > 0) & ~full & (left < 1e-9)
        norm = np.where(full, kept, np.where(tight, total + 1, total))
        left = np.where(full, 0.0, np.where(tight, 1 / (total + 1), left))
        p = dc / norm[ctx]
        alpha = np.where(full, 1.0, left / np.maximum(lower_unseen, 1e-10))
        logp.append(np.log(p))
        bow.append(np.log(alpha))
    bow.append(np.zeros(counts.keys[n_order - 1].size))
    return Backoff(counts.vocab_size, counts.keys[:n_order], logp, bow, "katz",
                   {"katz_max_count": max_count, "effective_order": n_order})


def add_k(counts: Counts, order: int, bos: int, pad: int, k_add: float = 1.0) -> Backoff:
    """Add-k over the full context.  Exact as a back-off model: the n-grams that carry an add-k
    estimate (those of the model's order, and shorter ones starting with <s>, whose context cannot
    grow) list it; every other n-gram lists the uniform 1/|V|, and each add-k context h gets the
    back-off weight k |V| / (c(h) + k |V|), so an unseen h w gets k / (c(h) + k |V|)."""
    if k_add <= 0:
        raise LmgridError(f"ngram.addk_k: must be > 0, got {k_add}")
    n_order = _effective_order(counts, order)
    pred = _predictable(counts, bos, pad)
    n_pred = pred.sum()
    uniform = np.log(1.0 / n_pred)
    logp, bow = [], []
    for k in range(1, n_order + 1):
        c = counts.count[k - 1].astype(np.float64)
        if k == 1:
            if n_order == 1:
                p = np.log((c + k_add) / (c[pred].sum() + k_add * n_pred))
            else:
                p = np.full(c.size, uniform)
            with np.errstate(divide="ignore"):
                logp.append(np.where(pred, p, -np.inf))
            continue
        carries = np.ones(c.size, bool) if k == n_order else counts.first(k) == bos
        ctx = counts.prefix[k - 1]
        n_ctx = counts.keys[k - 2].size
        total = _by_context(ctx[carries], n_ctx, c[carries])
        logp.append(np.where(carries, np.log((c + k_add) / (total[ctx] + k_add * n_pred)), uniform))
        has = _by_context(ctx[carries], n_ctx) > 0
        bow.append(np.where(has, np.log(k_add * n_pred / (total + k_add * n_pred)), 0.0))
    bow.append(np.zeros(counts.keys[n_order - 1].size))
    return Backoff(counts.vocab_size, counts.keys[:n_order], logp, bow, "addk",
                   {"addk_k": k_add, "effective_order": n_order})


def estimate(counts: Counts, method: str, order: int, bos: int, pad: int, *, addk_k: float = 1.0,
             katz_max_count: int = 7) -> Backoff:
    if method not in METHODS:
        raise LmgridError(f"ngram method: unknown {method!r} (expected one of {', '.join(METHODS)})")
    if not 1 <= order <= counts.max_order:
        raise LmgridError(f"ngram order {order}: counts hold orders 1..{counts.max_order}")
    if method in ("kn", "mkn"):
        return kneser_ney(counts, order, bos, pad, modified=method == "mkn")
    if method == "katz":
        return katz(counts, order, bos, pad, katz_max_count)
    return add_k(counts, order, bos, pad, addk_k)
