"""The continuous cache of Grave, Joulin & Usunier (2017), "Improving neural language models with a continuous
cache", as an evaluation mode of a stream model (no training, no parameters beyond window, theta, lambda).

At position t (hidden state h_t, predicting target y_t) the cache holds the pairs (h_i, y_i) of the `window`
positions before it, i in [t - window, t - 1]: each earlier hidden state with the token that followed it, all of
which the reader has already seen.  Position t's own target is never in it.

    p_cache(w | t) = sum_{i in window, y_i = w} exp(theta h_t . h_i) / sum_{i in window} exp(theta h_t . h_i)
    p(w | t)       = (1 - lam) p_model(w | t) + lam p_cache(w | t)

Both are normalised distributions over the vocabulary, so the mixture is.  At the stream's first position the
cache is empty and p = p_model.  Everything is float32; the mixture is taken in log space,
logaddexp(log(1 - lam) + log p_model, log(lam) + log p_cache), so lam = 0 returns log p_model bit for bit.
"""
from __future__ import annotations

import numpy as np
import torch

from lmgrid.testtime.adapt.stream import stream_states

CHUNK = 512  # positions scored at once: a [CHUNK, window + CHUNK] score matrix


def _window_weights(queries: torch.Tensor, keys: torch.Tensor, first: int, offset: int, window: int, theta: float):
    """Normalised cache weights [T, K] of the query positions offset .. offset+T-1 over the key positions
    first .. first+K-1 (global indices): row t is softmax(theta h_t . h_i) over i in [t - window, t - 1], 0 elsewhere
    (an all-zero row when that range is empty).  Also returns which rows have any cache position."""
    t = torch.arange(offset, offset + len(queries))[:, None]
    i = torch.arange(first, first + len(keys))[None, :]
    allowed = (i < t) & (i >= t - window)
    scores = (theta * (queries @ keys.T)).masked_fill(~allowed, -torch.inf)
    has = allowed.any(1)
    weights = torch.softmax(scores, 1)
    return torch.where(has[:, None], weights, torch.zeros(())), has


def _chunks(n: int, window: int):
    """(key range start, query range start, query range stop) covering positions 0..n-1 in CHUNK pieces."""
    for a in range(0, n, CHUNK):
        yield max(0, a - window), a, min(a + CHUNK, n)


@torch.no_grad()
def cache_target_probs(hidden: torch.Tensor, targets: torch.Tensor, *, window: int, theta: float):
    """p_cache(targets[t] | t) [N] and whether position t had a cache [N], for a whole stream's hidden states."""
    probs, has_any = [], []
    for k0, a, b in _chunks(len(targets), window):
        w, has = _window_weights(hidden[a:b], hidden[k0:b], k0, a, window, theta)
        hit = targets[k0:b][None, :] == targets[a:b, None]
        probs.append((w * hit).sum(1))
        has_any.append(has)
    return torch.cat(probs), torch.cat(has_any)


@torch.no_grad()
def cache_distribution(hidden: torch.Tensor, targets: torch.Tensor, positions, *, window: int, theta: float,
                       vocab_size: int) -> torch.Tensor:
    """p_cache(. | t) over the whole vocabulary [len(positions), V] (a zero row where the cache is empty): the
    distribution whose value at targets[t] cache_target_probs returns."""
    rows = []
    for t in positions:
        k0 = max(0, t - window)
        w, _ = _window_weights(hidden[t:t + 1], hidden[k0:t + 1], k0, t, window, theta)
        rows.append(torch.zeros(vocab_size).scatter_add_(0, targets[k0:t + 1], w[0]))
    return torch.stack(rows)


def mix(model_logp: torch.Tensor, cache_p: torch.Tensor, has_cache: torch.Tensor, lam: float) -> torch.Tensor:
    """log((1 - lam) p_model + lam p_cache) from log p_model, in log space; lam acts only where there is a cache."""
    lam_t = torch.where(has_cache, torch.tensor(float(lam)), torch.tensor(0.0))
    return torch.logaddexp(torch.log1p(-lam_t) + model_logp, torch.log(lam_t) + torch.log(cache_p))


def check_settings(window, theta, lam) -> None:
    from lmgrid.common.errors import LmgridError

    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise LmgridError(f"cache: window {window!r} is not a whole number >= 1")
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not np.isfinite(theta):
        raise LmgridError(f"cache: theta {theta!r} is not a finite number")
    if not isinstance(lam, (int, float)) or isinstance(lam, bool) or not 0 <= lam < 1:
        raise LmgridError(f"cache: lam {lam!r} is not a number in [0, 1)")


def cache_mix(hidden, model_logp, targets, *, window: int, theta: float, lam: float) -> np.ndarray:
    """Per-token log p of the cache mixture from one stream pass's states (stream.stream_states), float32 [N]."""
    check_settings(window, theta, lam)
    cache_p, has = cache_target_probs(hidden, targets, window=window, theta=theta)
    return mix(model_logp, cache_p, has, lam).numpy()


def cache_logprobs(model, token_ids, *, window: int, theta: float, lam: float, segment: int | None = None,
                   bptt: int = 35) -> np.ndarray:
    """Natural-log probability of every target of the stream `token_ids` (stream.py) under the model with a
    continuous cache, float32 [len(token_ids) - 1], in corpus order.  segment: the chunk the stream is read in
    (default bptt; the transformer's is its context_len)."""
    check_settings(window, theta, lam)
    hidden, model_logp, targets = stream_states(model, token_ids, segment=segment, bptt=bptt)
    return cache_mix(hidden, model_logp, targets, window=window, theta=theta, lam=lam)
