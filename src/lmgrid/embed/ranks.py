"""Spearman's rho of word-pair benchmarks, on the data and on bootstrap resamples of it.

A resample draws pairs with replacement, so it is the same data with pair i repeated weights[r, i] times.  Its rho
follows from the weights and one sort of the data (weighted_ranks), rather than from re-ranking every resample: the
embeddings job scores every vector set on two benchmarks thousands of times, and that re-ranking was most of its time.
Both the per-set intervals (embed.evaluate) and the paired comparisons between sets (embed.paired) use it.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

MIN_PAIRS = 10  # below this many (repeated) pairs a rho means nothing: reported as missing
CHUNK = 250  # resamples per vectorised step: [sets, CHUNK, pairs] floats stay a few tens of MB


def spearman(x, y, axis=-1):
    """Spearman's rho along `axis` (vectorised over bootstrap resamples): Pearson's r of the ranks."""
    rx, ry = stats.rankdata(x, axis=axis), stats.rankdata(y, axis=axis)
    rx = rx - rx.mean(axis, keepdims=True)
    ry = ry - ry.mean(axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(axis) / np.sqrt((rx * rx).sum(axis) * (ry * ry).sum(axis))


def draw_counts(draws: np.ndarray, n: int) -> np.ndarray:
    """[..., n] how often each of n pairs is among a resample's drawn indices (draws [..., size], ints below n): the
    weights that make the resampled data the repeated pairs."""
    flat = draws.reshape(-1, draws.shape[-1])
    offsets = n * np.arange(len(flat))[:, None]
    return np.bincount((flat + offsets).ravel(), minlength=len(flat) * n).reshape(draws.shape[:-1] + (n,))


def weighted_ranks(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[sets, resamples, pairs] the mid-ranks each value would get in the data with pair i repeated weights[r, i]
    times (values [sets, pairs], weights [resamples, pairs]): the weight of the lower tie groups plus half its own
    group's, plus one half.  Ranking the repeated data itself would cost a sort per resample; here each set is
    sorted once, and a resample costs a sum per tie group."""
    out = np.empty((len(values),) + weights.shape)
    for s, v in enumerate(values):
        _, group = np.unique(v, return_inverse=True)  # each pair's tie group, the groups in ascending value
        order = np.argsort(group, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(group[order]) != 0])
        per_group = np.add.reduceat(weights[:, order], starts, axis=1)  # [resamples, groups]
        out[s] = (np.cumsum(per_group, axis=1) - per_group + (per_group + 1) / 2)[:, group]
    return out


def weighted_spearman(human: np.ndarray, sims: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[resamples, sets]: Spearman's rho of each set against the human scores on the data with pair i repeated
    weights[r, i] times (exactly the rho of np.repeat'ed data); NaN under MIN_PAIRS repeated pairs."""
    rh = weighted_ranks(human[None, :], weights)[0]  # [resamples, pairs]
    rs = weighted_ranks(sims, weights)  # [sets, resamples, pairs]
    total = weights.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        dh = rh - (weights * rh).sum(-1, keepdims=True) / total
        ds = rs - (weights * rs).sum(-1, keepdims=True) / total
        rho = (weights * dh * ds).sum(-1) / np.sqrt((weights * dh * dh).sum(-1) * (weights * ds * ds).sum(-1))
    rho[:, total[:, 0] < MIN_PAIRS] = np.nan
    return rho.T
