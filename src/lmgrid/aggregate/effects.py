"""What the gates and the implementations show, with uncertainty over seeds, in forms a referee accepts.

Gate values come from gates.csv (scope `all`, window regime), which holds only gate values that have an effect
(lmgrid.neural.gates: the forget gate where the cell state it multiplies is zero is left out, as is padding).

* `gate_means_by_nstep`: per model, layer, gate and n_step, the mean over seeds of each run's gate mean, with the
  95% t interval over seeds (df = seeds - 1; none with one seed).
* `gate_trends`: does the gate mean change with n_step, and by how much?
  - the slope answers the question as asked ("does the mean rise as the window grows?"): each seed's least-squares
    slope of its runs' gate means on n_step (gate-mean units per context word), then the mean of those slopes with
    the 95% t interval over seeds (df = seeds - 1). Seeds are the independent replicates; a pooled fit over all
    runs would count the n_steps of one seed as independent and give a narrower interval. `rises` / `falls` when
    the interval excludes 0, else `no clear trend`;
  - with a handful of n_step values the shape need not be a line, so each n_step is also set against the next:
    the difference of mean gate values with a 95% Welch interval over seeds (scipy.stats.ttest_ind(
    equal_var=False)); a shape whose steps go up somewhere and down elsewhere, each interval excluding 0, is
    called `non-monotone` whatever the slope says;
  - Kendall's tau-b between n_step and the runs' gate means, over every run (seeds x n_steps), with its two-sided
    p-value (scipy.stats.kendalltau; ties in n_step make it the Jonckheere-Terpstra-type trend test for ordered
    groups), is reported beside them as a rank check, and decides the direction only for a single seed (no
    interval over seeds): `rises` / `falls` when p < 0.05, else `no monotone trend`.
* `impl_differences`: the same architecture's implementations (same seed = same initial weights, see
  lmgrid.models) compared on test PPL, paired by seed: mean difference and 95% t interval; a difference is
  claimed only when the interval excludes 0.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
GATE_ORDER = "ifogzr"  # LSTM i f o g, then GRU z r
KEYS = ["model", "layers", "layer", "gate"]


def t_interval(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return math.nan, math.nan
    if np.all(values == values[0]):
        return float(values[0]), float(values[0])
    lo, hi = stats.t.interval(CONFIDENCE, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    return float(lo), float(hi)


def _gate_rows(gates: pd.DataFrame) -> pd.DataFrame:
    df = gates[(gates["scope"] == "all") & (gates["regime"] == "window")]
    return df.assign(gate_rank=df["gate"].map(lambda g: GATE_ORDER.find(g) % 99))


def gate_means_by_nstep(gates: pd.DataFrame) -> pd.DataFrame:
    df = _gate_rows(gates)
    rows = []
    for (model, layers, layer, _, gate, n_step), g in df.groupby(
            ["model", "layers", "layer", "gate_rank", "gate", "n_step"], sort=True):
        lo, hi = t_interval(g["mean"])
        rows.append({"model": model, "layers": int(layers), "layer": int(layer), "gate": gate, "n_step": int(n_step),
                     "seeds": int(g["seed"].nunique()), "mean": float(g["mean"].mean()), "ci_low": lo,
                     "ci_high": hi, "values_per_run": int(g["count"].mean())})
    return pd.DataFrame(rows, columns=["model", "layers", "layer", "gate", "n_step", "seeds", "mean", "ci_low",
                                       "ci_high", "values_per_run"])


def _step_change(a: pd.Series, b: pd.Series) -> tuple[float, float, float]:
    """Mean of b minus mean of a, and its 95% Welch interval (NaN with fewer than 2 values on a side)."""
    diff = float(b.mean() - a.mean())
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan
    if a.std() == 0 and b.std() == 0:
        return diff, diff, diff
    ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval(CONFIDENCE)
    return diff, float(ci.low), float(ci.high)


def seed_slopes(g: pd.DataFrame) -> pd.Series:
    """Per seed, the least-squares slope of the runs' gate means on n_step (seeds with fewer than 2 n_steps have
    none)."""
    def slope(s: pd.DataFrame) -> float:
        if s["n_step"].nunique() < 2:
            return math.nan
        return float(stats.linregress(s["n_step"].to_numpy(float), s["mean"].to_numpy(float)).slope)
    return g.groupby("seed")[["n_step", "mean"]].apply(slope).dropna()


def gate_trends(gates: pd.DataFrame) -> pd.DataFrame:
    df = _gate_rows(gates)
    rows = []
    for (model, layers, layer, _, gate), g in df.groupby(["model", "layers", "layer", "gate_rank", "gate"], sort=True):
        steps = sorted(int(s) for s in g["n_step"].unique())
        if len(steps) < 2:
            continue
        tau, p = stats.kendalltau(g["n_step"].to_numpy(float), g["mean"].to_numpy(float))
        tau, p = float(tau), float(p)
        changes, ups, downs = [], 0, 0
        for a, b in itertools.pairwise(steps):
            diff, lo, hi = _step_change(g.loc[g["n_step"] == a, "mean"], g.loc[g["n_step"] == b, "mean"])
            changes.append(f"{a}→{b}: {diff:+.3f}" + (f" [{lo:+.3f}, {hi:+.3f}]" if not math.isnan(lo) else ""))
            ups += lo > 0
            downs += hi < 0
        slopes = seed_slopes(g)
        slope_lo, slope_hi = t_interval(slopes)
        if ups and downs:
            direction = "non-monotone"
        elif not math.isnan(slope_lo):
            direction = "rises" if slope_lo > 0 else "falls" if slope_hi < 0 else "no clear trend"
        elif not math.isnan(p) and p < ALPHA:
            direction = "rises" if tau > 0 else "falls"
        else:
            direction = "no monotone trend"
        by_step = g.groupby("n_step")["mean"].mean()
        rows.append({"model": model, "layers": int(layers), "layer": int(layer), "gate": gate,
                     "n_steps": " ".join(map(str, steps)), "seeds": int(g["seed"].nunique()), "runs": len(g),
                     "gate_mean_first": float(by_step.iloc[0]), "gate_mean_last": float(by_step.iloc[-1]),
                     "slope_per_nstep": float(slopes.mean()) if len(slopes) else math.nan,
                     "slope_ci_low": slope_lo, "slope_ci_high": slope_hi,
                     "kendall_tau": tau, "p_value": p, "step_changes": "; ".join(changes), "direction": direction})
    return pd.DataFrame(rows, columns=["model", "layers", "layer", "gate", "n_steps", "seeds", "runs",
                                       "gate_mean_first", "gate_mean_last", "slope_per_nstep", "slope_ci_low",
                                       "slope_ci_high", "kendall_tau", "p_value", "step_changes", "direction"])


def impl_differences(runs: pd.DataFrame, metric: str = "test_ppl") -> pd.DataFrame:
    """Every pair of implementations of one architecture in the same cell (n_step, layers, regime), paired by
    seed: mean of (b - a) with its 95% t interval over the shared seeds."""
    rows = []
    neural = runs[runs["impl"] != "ngram"]
    for (arch, n_step, layers, regime), g in neural.groupby(["arch", "n_step", "layers", "regime"], sort=True):
        impls = sorted(g["impl"].unique(), key=lambda i: (i != "torch", i))
        for a, b in itertools.combinations(impls, 2):
            pa = g[g["impl"] == a].set_index("seed")[metric]
            pb = g[g["impl"] == b].set_index("seed")[metric]
            seeds = sorted(set(pa.index) & set(pb.index))
            if not seeds:
                continue
            diff = (pb.loc[seeds] - pa.loc[seeds]).to_numpy(float)
            lo, hi = t_interval(diff)
            verdict = ("one seed: no claim" if len(seeds) < 2 else
                       f"{b} higher" if lo > 0 else f"{b} lower" if hi < 0 else "no clear difference")
            rows.append({"arch": arch, "n_step": int(n_step), "layers": int(layers), "regime": regime, "impl_a": a,
                         "impl_b": b, "seeds": len(seeds), f"{metric}_a": float(pa.loc[seeds].mean()),
                         f"{metric}_b": float(pb.loc[seeds].mean()), "diff_b_minus_a": float(diff.mean()),
                         "ci_low": lo, "ci_high": hi, "verdict": verdict})
    return pd.DataFrame(rows)
