"""Choose an adaptation's settings on valid from a small grid, then score test once with them.

The grids (each point is a full pass over valid; the test split is read exactly once, after the choice):

* cache: window {100, 500, 2000} x theta {0.1, 0.3, 1.0} x lam {0.05, 0.1, 0.2}.  Grave et al. (2017) use windows
  of 100 to 2000 on PTB and Merity's AWD-LSTM code window 500, theta 1.0, lambda 0.1; theta scales dot products of
  hidden states whose size depends on the model, so it spans a decade.  Cheap: one model pass over valid gives
  every hidden state, and each (window, theta) is then one matrix product per chunk; lam costs nothing.
* dynamic: lr {1, 3, 10} x segment {10, 20}.  Each point is a forward and backward pass over valid with
  one SGD step per segment, so the grid stays small; the gradient is clipped to the run's own clip.  A stream
  transformer has one segment, its context_len.

* dynamic+cache: the dynamic grid first; then the cache grid on the hidden states that the chosen dynamic pass
  over valid scored with (kept from that pass: no extra pass).

Ties go to the first grid point in the order above (the smaller window, theta, lam, lr, segment).
"""
from __future__ import annotations

import itertools
import time

from lmgrid.errors import LmgridError

from .cache import cache_logprobs, cache_mix
from .dynamic import dynamic_logprobs, dynamic_states
from .stream import perplexity_of, stream_segment, stream_states

CACHE_GRID = {"window": (100, 500, 2000), "theta": (0.1, 0.3, 1.0), "lam": (0.05, 0.1, 0.2)}
DYNAMIC_GRID = {"lr": (1.0, 3.0, 10.0), "segment": (10, 20)}
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


def choose_on_valid(valid_ppl_of, points: list[dict]) -> tuple[dict, list[dict]]:
    """The point with the lowest valid PPL (the first on a tie) and every point's row {**point, valid_ppl}."""
    rows = [{**p, "valid_ppl": valid_ppl_of(p)} for p in points]
    best = min(range(len(rows)), key=lambda i: rows[i]["valid_ppl"])
    return dict(points[best]), rows


def _split_grid(grid: dict | None, method: str, model, segment: int) -> tuple[dict, dict]:
    """(dynamic grid, cache grid) of a method; a given grid's keys replace the defaults' (unknown keys refused)."""
    grid = dict(grid or {})
    known = {"cache": set(CACHE_GRID), "dynamic": set(DYNAMIC_GRID)}
    wanted = set().union(*(known[m] for m in method.split("+")))
    if set(grid) - wanted:
        raise LmgridError(f"adapt grid: {', '.join(sorted(set(grid) - wanted))} is not a setting of {method} "
                          f"(settings: {', '.join(sorted(wanted))})")
    dyn = {k: grid.get(k, v) for k, v in DYNAMIC_GRID.items()}
    if model.cfg.arch == "transformer":
        dyn["segment"] = (segment,)
    return dyn, {k: grid.get(k, v) for k, v in CACHE_GRID.items()}


def adapt(model, valid_ids, test_ids, method: str, *, grid: dict | None = None, bptt: int = 35,
          clip: float = 0.25) -> dict:
    """Tune `method` (cache | dynamic | dynamic+cache) on the valid stream, then score the test stream once with
    the choice.  dynamic+cache: the dynamic settings are chosen first, then the cache's on the hidden states of
    dynamic evaluation's valid pass with those settings.

    Returns {method, settings, valid_ppl, test_ppl, base_valid_ppl, base_test_ppl, grid (rows with valid_ppl),
    tune_s, test_s, valid_log_probs, test_log_probs}; base PPLs are the model's own single-stream ones
    (stream.stream_states); valid_log_probs are valid's at the chosen settings (what a mixture fits its weights
    on), from the tuning passes themselves: valid is not read again."""
    if method not in METHODS:
        raise LmgridError(f"adapt: method {method!r} is not one of {', '.join(METHODS)}")
    t0 = time.time()
    segment = stream_segment(model, None, bptt)
    dyn_grid, cache_grid = _split_grid(grid, method, model, segment)
    _, base_logp, _ = valid_states = stream_states(model, valid_ids, segment=segment)
    settings, rows = {}, []
    if "dynamic" in method:
        best = {"ppl": float("inf")}

        def dynamic_ppl(point: dict) -> float:
            states = dynamic_states(model, valid_ids, clip=clip, bptt=bptt, **point)
            ppl = perplexity_of(states[1].numpy())
            if ppl < best["ppl"]:  # the first of equals, as choose_on_valid picks: its states serve the cache
                best.update(ppl=ppl, states=states)
            return ppl

        settings, rows = choose_on_valid(dynamic_ppl, grid_points(dyn_grid))
        valid_states = best["states"]
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
        test_logp = dynamic_logprobs(model, test_ids, clip=clip, bptt=bptt, **settings)
    else:
        dyn = {k: settings[k] for k in DYNAMIC_GRID}
        test_logp = cache_mix(*dynamic_states(model, test_ids, clip=clip, bptt=bptt, **dyn),
                              **{k: settings[k] for k in CACHE_GRID})
    test_s = time.time() - t1
    _, base_test_logp, _ = stream_states(model, test_ids, segment=segment)
    return {"method": method, "settings": settings, "valid_ppl": perplexity_of(valid_logp),
            "test_ppl": perplexity_of(test_logp), "base_valid_ppl": perplexity_of(base_logp),
            "base_test_ppl": perplexity_of(base_test_logp), "grid": rows,
            "tune_s": round(tune_s, 3), "test_s": round(test_s, 3), "valid_log_probs": valid_logp,
            "test_log_probs": test_logp}
