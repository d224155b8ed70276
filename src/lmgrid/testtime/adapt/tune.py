"""Choose an adaptation's settings on valid from a small grid, then score test once with them.

The grids (each point is a full pass over valid; the test split is read exactly once, after the choice):

* cache: window {100, 500, 2000} x theta {0.1, 0.3, 1.0} x lam {0.05, 0.1, 0.2}.  Grave et al. (2017) use windows
  of 100 to 2000 on PTB and Merity's AWD-LSTM code window 500, theta 1.0, lambda 0.1; theta scales dot products of
  hidden states whose size depends on the model, so it spans a decade.  Cheap: one model pass over valid gives
  every hidden state, and each (window, theta) is then one matrix product per chunk; lam costs nothing.
* dynamic: lr {1, 3, 10} x segment {10, 20}.  Each point is a forward and backward pass over valid with
  one SGD step per segment, so the grid stays small; the gradient is clipped to the run's own clip.  A stream
  transformer has one segment, its context_len.

  With rule rms (Krause et al.'s RMS-normalised update with decay to the trained weights; --grid '{"rule": "rms"}'):
  lr {1e-4, 1e-3} x decay {0.001, 0.01} x segment {10, 20} (RMS_GRID): the RMS-normalised step moves each weight
  by about lr, so its lr is on another scale than SGD's; a starting grid, not yet measured on PTB.  Its gradient
  statistics MS_g are computed once per segment length on the TRAINING stream (train_ids; `train_tokens` targets,
  default 100,000), never on valid or test.  `rule` and `train_tokens` are single values, not grid axes.

* dynamic+cache: the dynamic grid first; then the cache grid on the hidden states that the chosen dynamic pass
  over valid scored with (kept from that pass: no extra pass).

Ties go to the first grid point in the order above (the smaller window, theta, lam, lr, decay, segment).
"""
from __future__ import annotations

import itertools
import math
import time

import torch

from lmgrid.common.errors import LmgridError
from lmgrid.data.ppl import InfinitePerplexity

from lmgrid.testtime.adapt.cache import cache_logprobs, cache_mix
from lmgrid.testtime.adapt.dynamic import RULES, TRAIN_TOKENS, dynamic_logprobs, dynamic_states, gradient_stats
from lmgrid.testtime.adapt.stream import as_stream, perplexity_of, stream_segment, stream_states

CACHE_GRID = {"window": (100, 500, 2000), "theta": (0.1, 0.3, 1.0), "lam": (0.05, 0.1, 0.2)}
DYNAMIC_GRID = {"lr": (1.0, 3.0, 10.0), "segment": (10, 20)}
RMS_GRID = {"lr": (1e-4, 1e-3), "decay": (0.001, 0.01), "segment": (10, 20)}  # dynamic with rule rms
METHODS = ("cache", "dynamic", "dynamic+cache")


def parse_grid(text: str | None) -> dict | None:
    """A grid given on the command line (--grid '{"lr": [1, 3]}'): a JSON object, or None when not given."""
    import json

    try:
        grid = json.loads(text) if text else None
    except json.JSONDecodeError as e:
        raise LmgridError(f"--grid: not valid JSON ({e})") from None
    if grid is not None and not isinstance(grid, dict):
        raise LmgridError("--grid: expected a JSON object {setting: [values]}")
    return grid


def grid_points(grid: dict) -> list[dict]:
    for key, values in grid.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise LmgridError(f"adapt grid: {key} needs a non-empty list of values, got {values!r}")
    return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]


def _valid_ppl_or_none(valid_ppl_of, point: dict) -> float | None:
    """A point's valid PPL, or None when its pass diverged (a non-finite log-probability: a too large rate of
    dynamic evaluation can blow the weights up); a diverged point is recorded as such, never chosen."""
    try:
        ppl = valid_ppl_of(point)
    except InfinitePerplexity:  # lmgrid.data.ppl.perplexity refuses a non-finite or overflowing NLL
        return None
    return ppl if math.isfinite(ppl) else None


def choose_on_valid(valid_ppl_of, points: list[dict]) -> tuple[dict, list[dict]]:
    """The point with the lowest valid PPL (the first on a tie) and every point's row {**point, valid_ppl}; a point
    whose pass diverged has valid_ppl None and is not chosen; if every point diverged, one line says so."""
    rows = [{**p, "valid_ppl": _valid_ppl_or_none(valid_ppl_of, p)} for p in points]
    finite = [i for i, r in enumerate(rows) if r["valid_ppl"] is not None]
    if not finite:
        raise LmgridError(f"adapt grid: every point diverged on valid (non-finite PPL): {points}")
    best = min(finite, key=lambda i: rows[i]["valid_ppl"])
    return dict(points[best]), rows


def _split_grid(grid: dict | None, method: str, model, segment: int) -> tuple[dict, dict, dict]:
    """(dynamic grid, cache grid, the dynamic mode's fixed settings {rule[, train_tokens]}) of a method; a given
    grid's keys replace the defaults' (unknown keys refused).  rule rms takes RMS_GRID's defaults and its decay."""
    grid = dict(grid or {})
    rule = grid.pop("rule", "sgd") if "dynamic" in method else "sgd"
    if rule not in RULES:
        raise LmgridError(f"adapt grid: rule {rule!r} is not one of {', '.join(RULES)}")
    dynamic_grid = RMS_GRID if rule == "rms" else DYNAMIC_GRID
    fixed = {"rule": rule} if rule == "rms" else {}
    if rule == "rms":
        fixed["train_tokens"] = grid.pop("train_tokens", TRAIN_TOKENS)
    known = {"cache": set(CACHE_GRID), "dynamic": set(dynamic_grid)}
    wanted = set().union(*(known[m] for m in method.split("+")))
    if set(grid) - wanted:
        also = " (decay and train_tokens are settings of rule rms)" if {"decay", "train_tokens"} & set(grid) else ""
        raise LmgridError(f"adapt grid: {', '.join(sorted(set(grid) - wanted))} is not a setting of {method} "
                          f"(settings: {', '.join(sorted(wanted))}){also}")
    dyn = {k: grid.get(k, v) for k, v in dynamic_grid.items()}
    if model.cfg.arch == "transformer":
        dyn["segment"] = (segment,)
    return dyn, {k: grid.get(k, v) for k, v in CACHE_GRID.items()}, fixed


def _same_stream(a, b) -> bool:
    a, b = as_stream(a), as_stream(b)
    return a.shape == b.shape and torch.equal(a, b)


def adapt(model, valid_ids, test_ids, method: str, *, grid: dict | None = None, bptt: int = 35,
          clip: float = 0.25, train_ids=None) -> dict:
    """Tune `method` (cache | dynamic | dynamic+cache) on the valid stream, then score the test stream once with
    the choice.  dynamic+cache: the dynamic settings are chosen first, then the cache's on the hidden states of
    dynamic evaluation's valid pass with those settings.

    Returns {method, settings, valid_ppl, test_ppl, base_valid_ppl, base_test_ppl, grid (rows with valid_ppl),
    tune_s, test_s, valid_log_probs, test_log_probs}; base PPLs are the model's own single-stream ones
    (stream.stream_states); valid_log_probs are valid's at the chosen settings (what a mixture fits its weights
    on), from the tuning passes themselves: valid is not read again.  train_ids: the TRAINING stream, needed by
    dynamic evaluation's rule rms only (its gradient statistics; refused if it is the valid or test stream)."""
    if method not in METHODS:
        raise LmgridError(f"adapt: method {method!r} is not one of {', '.join(METHODS)}")
    t0 = time.time()
    segment = stream_segment(model, None, bptt)
    dyn_grid, cache_grid, fixed = _split_grid(grid, method, model, segment)
    stats_of = None
    if fixed.get("rule") == "rms":
        if train_ids is None:
            raise LmgridError(f"adapt: {method} with rule rms needs the training split (its gradient statistics)")
        if _same_stream(train_ids, valid_ids) or _same_stream(train_ids, test_ids):
            raise LmgridError("adapt: rule rms's gradient statistics must come from the training split, and the "
                              "stream given as train is the valid or test stream")
        train_tokens, per_segment = fixed["train_tokens"], {}

        def stats_of(seg: int):  # MS_g of one segment length, computed once (on train only)
            if seg not in per_segment:
                per_segment[seg] = gradient_stats(model, train_ids, stream_segment(model, seg, bptt), train_tokens)
            return per_segment[seg]

    def dynamic_args(point: dict) -> dict:
        """dynamic_states' keywords for a grid point: {lr, segment} (sgd), or with rule, decay and MS_g (rms)."""
        if stats_of is None:
            return dict(point)
        return {**point, "rule": "rms", "stats": stats_of(point["segment"])}

    _, base_logp, _ = valid_states = stream_states(model, valid_ids, segment=segment)
    settings, rows = {}, []
    if "dynamic" in method:
        best = {"ppl": float("inf")}

        def dynamic_ppl(point: dict) -> float:
            states = dynamic_states(model, valid_ids, clip=clip, bptt=bptt, **dynamic_args(point))
            ppl = perplexity_of(states[1].numpy())
            if ppl < best["ppl"]:  # the first of equals, as choose_on_valid picks: its states serve the cache
                best.update(ppl=ppl, states=states)
            return ppl

        settings, rows = choose_on_valid(dynamic_ppl, grid_points(dyn_grid))
        valid_states = best["states"]
        if fixed:  # rule rms: recorded with the choice (rule sgd's records stay {lr, segment}, as before)
            settings = {**fixed, **settings}
            rows = [{**fixed, **r} for r in rows]
    if "cache" in method:
        cached, cache_rows = choose_on_valid(lambda p: perplexity_of(cache_mix(*valid_states, **p)),
                                             grid_points(cache_grid))
        rows += [{**settings, **r} for r in cache_rows]
        settings = {**settings, **cached}
        valid_logp = cache_mix(*valid_states, **cached)
    else:
        valid_logp = valid_states[1].numpy()
    tune_s = time.time() - t0
    t1 = time.time()
    # The one adapted pass over test, with the settings valid chose.
    if method == "cache":
        test_logp = cache_logprobs(model, test_ids, segment=segment, **settings)
    elif method == "dynamic":
        test_logp = dynamic_logprobs(model, test_ids, clip=clip, bptt=bptt,
                                     **dynamic_args({k: settings[k] for k in dyn_grid}))
    else:
        dyn = dynamic_args({k: settings[k] for k in dyn_grid})
        test_logp = cache_mix(*dynamic_states(model, test_ids, clip=clip, bptt=bptt, **dyn),
                              **{k: settings[k] for k in CACHE_GRID})
    test_s = time.time() - t1
    _, base_test_logp, _ = stream_states(model, test_ids, segment=segment)
    return {"method": method, "settings": settings, "valid_ppl": perplexity_of(valid_logp),
            "test_ppl": perplexity_of(test_logp), "base_valid_ppl": perplexity_of(base_logp),
            "base_test_ppl": perplexity_of(base_test_logp), "grid": rows,
            "tune_s": round(tune_s, 3), "test_s": round(test_s, 3), "valid_log_probs": valid_logp,
            "test_log_probs": test_logp}
