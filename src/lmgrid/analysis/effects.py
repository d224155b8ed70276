"""What the gates and the implementations show, with uncertainty over seeds, in forms a referee accepts.

Gate values come from gates.csv (window regime), which holds only gate values that have an effect
(lmgrid.neural.gates: the forget gate where the cell state it multiplies is zero is left out, as is padding).

* `gate_means_by_nstep`: per model, layer, gate and n_step, the mean over seeds of each run's gate mean (scope
  `all`, pooled over the window's positions), with the 95% t interval over seeds (df = seeds - 1; none with one
  seed); `gate_position_means` likewise per window position.
* `gate_family`: does the gate change with n_step, and is that the window's size or the position it is read at?
  - pooled slope (the question as asked, "does the mean rise as the window grows?"): each seed's least-squares
    slope of its runs' pooled gate means on n_step, then the mean of those slopes with the 95% t interval over
    seeds and a one-sample t test (df = seeds - 1).  Seeds are the independent replicates; a fit over all runs
    would count the n_steps of one seed as independent;
  - matched positions (analysis.positions): the same slope test on each run's mean over the window positions
    every n_step shares, and on each position separately; and the slope the position profile alone predicts,
    with the pooled slope minus it ("beyond the position profile") tested the same way;
  - each n_step against the next: the difference of the means with its 95% Welch interval (Welch-Satterthwaite
    df, scipy.stats.ttest_ind(equal_var=False)); steps that significantly rise and fall make a trend
    `non-monotone` whatever the slope says;
  - Kendall's tau-b between n_step and the runs' gate means over every run, two-sided (scipy.stats.kendalltau),
    a rank check that decides the direction only for a single seed (no interval over seeds).
  - end-aligned (analysis.positions.aligned): the matched and per-place slope tests with places counted back from
    the predicted word (lag 1 = the last input at every n), beside the start-aligned ones;
  - padding-free (analysis.positions.padfree_rows): the pooled, matched-start and matched-end slope tests and the
    per-place ones on the targets whose window has no padding at any n of the study (the same targets at every n).
  All of a study's gate tests are one family (FAMILY), Holm-adjusted (`holm`); every verdict reads the adjusted
  p < 0.05.  The marginal 95% intervals stay in the tables' CSVs (ci_*); beside a verdict the simultaneous ones
  (`simultaneous`, sim_*) are printed, with their method, df and the family size m.
* `impl_differences`: each implementation of an architecture against its default (torch = nn.LSTM), on test PPL,
  paired by seed (same seed = same initial weights, see lmgrid.models): mean difference, 95% paired t interval
  (df = seeds - 1) and p, Holm-adjusted over the family of those contrasts.  Each pair once: with torch, cell and
  concat, "concat vs cell" would repeat "concat vs torch" (cell and torch are the same parameterisation).
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


def t_test(values) -> tuple[float, float, float, float, int]:
    """One-sample t test of `values` against 0: mean, 95% t interval, two-sided p and df = len - 1 (NaN and df 0
    with fewer than 2 values; identical values: a zero-width interval, p 0 unless they are 0)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return (float(values.mean()) if len(values) else math.nan), math.nan, math.nan, math.nan, 0
    lo, hi = t_interval(values)
    if np.all(values == values[0]):
        return float(values[0]), lo, hi, float(values[0] == 0), len(values) - 1
    return float(values.mean()), lo, hi, float(stats.ttest_1samp(values, 0.0).pvalue), len(values) - 1


def welch(a, b) -> tuple[float, float, float, float, float]:
    """Mean of b minus mean of a: its 95% Welch interval, two-sided p and Welch-Satterthwaite df (NaN with fewer
    than 2 values on a side)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(b.mean() - a.mean())
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan, math.nan, math.nan
    if a.std() == 0 and b.std() == 0:
        return diff, diff, diff, float(diff == 0), float(len(a) + len(b) - 2)
    res = stats.ttest_ind(b, a, equal_var=False)
    ci = res.confidence_interval(CONFIDENCE)
    return diff, float(ci.low), float(ci.high), float(res.pvalue), float(res.df)


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (NaN: not a test, left out and left NaN): the i-th
    smallest of m is multiplied by m - i + 1, then made non-decreasing, capped at 1.  Rejecting where the adjusted
    p < ALPHA keeps the family-wise error rate at ALPHA."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, math.nan)
    ok = np.flatnonzero(~np.isnan(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    running = 0.0
    for i, idx in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[idx]))
        out[idx] = running
    return out


def seed_slopes(g: pd.DataFrame) -> pd.Series:
    """Per seed, the least-squares slope of the runs' gate means on n_step (seeds with fewer than 2 n_steps have
    none)."""
    def slope(s: pd.DataFrame) -> float:
        if s["n_step"].nunique() < 2:
            return math.nan
        return float(stats.linregress(s["n_step"].to_numpy(float), s["mean"].to_numpy(float)).slope)
    return g.groupby("seed")[["n_step", "mean"]].apply(slope).dropna()


def _slope_test(runs: pd.DataFrame) -> dict:
    """effects' slope test over the runs (seed, n_step, mean) of one quantity: per-seed slopes, t over seeds."""
    slopes = seed_slopes(runs) if len(runs) else pd.Series(dtype=float)
    mean, lo, hi, p, df = t_test(slopes)
    return {"slope": mean, "ci_low": lo, "ci_high": hi, "p": p, "df": df, "seeds": len(slopes)}


def _cols(prefix: str, t: dict) -> dict:
    """A slope test as trend columns <prefix>_slope, _ci_low, _ci_high, _df, _p."""
    return {f"{prefix}_{k}": t[k] for k in ("slope", "ci_low", "ci_high", "df", "p")}


def _verdict(mean: float, p_holm: float, up: str = "rises", down: str = "falls",
             none: str = "no clear trend") -> str:
    if math.isnan(p_holm):
        return "n/a"
    return (up if mean > 0 else down) if p_holm < ALPHA else none


def simultaneous(est, lo, hi, df, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The marginal 95% t intervals [lo, hi] (est ± t(0.975, df)·se) widened to the Bonferroni level 1 - ALPHA/m:
    est ± t(1 - ALPHA/(2m), df)·se, se read back from the marginal interval.

    Why Bonferroni beside Holm's verdicts: these m intervals hold their parameters all at once with probability
    >= 95%, and one excludes 0 only where Bonferroni rejects, which Holm (uniformly more powerful) then rejects too:
    an interval that excludes 0 never sits beside "no clear change".  The converse can fail: Holm's step-down may
    reject where the Bonferroni interval still touches 0 (the tables mark such a claim "step-down").  Intervals
    that agree with Holm both ways (Strassburger & Bretz 2008) give a rejected effect only its sign, never a size,
    so the sizes here are Bonferroni's."""
    est, lo, hi, df = (np.asarray(v, dtype=float) for v in (est, lo, hi, df))
    if m < 1 or est.size == 0:
        return np.full(est.shape, math.nan), np.full(est.shape, math.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = stats.t.ppf(1 - ALPHA / (2 * m), df) / stats.t.ppf(1 - ALPHA / 2, df)
        half = np.where(hi == lo, 0.0, (hi - est) * scale)
    return est - half, est + half


FAMILY = ("every gate test of the study (one family): per model, layer and gate, the pooled slope's t test, "
          "Kendall's τ, each step's Welch test, the slope at matched start positions and at matched end lags, the "
          "slope beyond the position profile, the padding-free slopes (pooled, matched start positions, matched "
          "end lags), and each position's and lag's slope (all targets and padding-free); Holm-adjusted over all "
          "of them")

# The slope tests of a trend row, by column prefix (pooled: slope_per_nstep / slope_*), each Holm-adjusted in the
# family and given its simultaneous interval <prefix>_sim_low/high.  start/end: matched start positions (0 = the
# oldest input) / matched end lags (1 = the last input); padfree: only targets with no padding at any n.
SLOPE_TESTS = ("matched", "end_matched", "beyond", "padfree", "padfree_matched", "padfree_end")


def _variant(gp: pd.DataFrame, prefix: str, align: str) -> dict:
    """The matched-place slope test of one gate's position rows `gp` in an alignment, as trend columns."""
    from lmgrid.analysis import positions as pos

    rows = pos.aligned(gp, align)
    return {f"{prefix}_positions": " ".join(map(str, pos.shared_positions(rows))),
            **_cols(prefix, _slope_test(pos.matched_means(rows)))}


def _places(gp: pd.DataFrame, key: dict, align: str, subset: str) -> list[dict]:
    """Each position (start) or lag (end) on its own: its slope test over the n_steps that have it."""
    from lmgrid.analysis import positions as pos

    out = []
    for place, at in pos.aligned(gp, align).groupby("position"):
        if at["n_step"].nunique() >= 2:
            out.append({**key, "align": align, "subset": subset, "position": int(place),
                        "n_steps": " ".join(map(str, sorted(at["n_step"].unique()))),
                        **_slope_test(at[["seed", "n_step", "mean"]])})
    return out


def _of_gate(rows: pd.DataFrame, model, layers, layer, gate) -> pd.DataFrame:
    return rows[(rows["model"] == model) & (rows["layers"] == layers) & (rows["layer"] == layer)
                & (rows["gate"] == gate)]


def gate_family(gates: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Every test of the gates against n_step, Holm-adjusted as one family (FAMILY): {"trends": one row per model,
    layer and gate (gates_effect), "steps": one row per n_step against the next, "positions": one row per window
    position (align start) or lag (align end), of all targets or the padding-free ones (subset)}.  Each test has
    its p (two-sided), df, p_holm and simultaneous interval (sim_low, sim_high; `simultaneous`); verdicts use
    p_holm."""
    from lmgrid.analysis import positions as pos

    df = _gate_rows(gates)
    prows, frows = pos.position_rows(gates), pos.padfree_rows(gates)
    trends, steps, per_pos = [], [], []
    for (model, layers, layer, _, gate), g in df.groupby(["model", "layers", "layer", "gate_rank", "gate"], sort=True):
        n_steps = sorted(int(s) for s in g["n_step"].unique())
        if len(n_steps) < 2:
            continue
        key = {"model": model, "layers": int(layers), "layer": int(layer), "gate": gate}
        tau, p = stats.kendalltau(g["n_step"].to_numpy(float), g["mean"].to_numpy(float))
        for a, b in itertools.pairwise(n_steps):
            diff, lo, hi, sp, sdf = welch(g.loc[g["n_step"] == a, "mean"], g.loc[g["n_step"] == b, "mean"])
            steps.append({**key, "step": f"{a}→{b}", "diff": diff, "ci_low": lo, "ci_high": hi, "p": sp, "df": sdf})
        pooled = _slope_test(g[["seed", "n_step", "mean"]])
        gp, fp = _of_gate(prows, model, layers, layer, gate), _of_gate(frows, model, layers, layer, gate)
        matched = _slope_test(pos.matched_means(gp))
        profile = pos.profile_pooled(gp)
        both = g[["seed", "n_step", "mean"]].merge(profile, on=["seed", "n_step"], suffixes=("", "_profile"))
        beyond = _slope_test(both.assign(mean=both["mean"] - both["mean_profile"]))
        explained = _slope_test(profile)
        for align in ("start", "end"):
            per_pos += _places(gp, key, align, "all") + _places(fp, key, align, "padding-free")
        by_step = g.groupby("n_step")["mean"].mean()
        trends.append({**key, "n_steps": " ".join(map(str, n_steps)), "seeds": int(g["seed"].nunique()),
                       "runs": len(g), "gate_mean_first": float(by_step.iloc[0]),
                       "gate_mean_last": float(by_step.iloc[-1]),
                       "slope_per_nstep": pooled["slope"], "slope_ci_low": pooled["ci_low"],
                       "slope_ci_high": pooled["ci_high"], "slope_df": pooled["df"], "slope_p": pooled["p"],
                       "kendall_tau": float(tau), "p_value": float(p),
                       "matched_positions": " ".join(map(str, pos.shared_positions(gp))), **_cols("matched", matched),
                       "profile_slope": explained["slope"], "profile_ci_low": explained["ci_low"],
                       "profile_ci_high": explained["ci_high"], **_cols("beyond", beyond),
                       **_variant(gp, "end_matched", "end"),
                       "padfree_targets": float(_padfree_targets(fp)), **_cols("padfree", _slope_test(
                           pos.pooled_means(fp))),
                       **_variant(fp, "padfree_matched", "start"), **_variant(fp, "padfree_end", "end")})
    trends = pd.DataFrame(trends, columns=TREND_COLUMNS)
    steps = pd.DataFrame(steps, columns=KEYS + ["step", "diff", "ci_low", "ci_high", "p", "df"])
    per_pos = pd.DataFrame(per_pos, columns=KEYS + ["align", "subset", "position", "n_steps", "slope", "ci_low",
                                                     "ci_high", "p", "df", "seeds"])
    # (table, p, p_holm, estimate, interval prefix or None for Kendall's τ, which has no interval)
    tests = ([(trends, "slope_p", "slope_p_holm", "slope_per_nstep", "slope"),
              (trends, "p_value", "kendall_p_holm", None, None)]
             + [(trends, f"{t}_p", f"{t}_p_holm", f"{t}_slope", t) for t in SLOPE_TESTS]
             + [(steps, "p", "p_holm", "diff", ""), (per_pos, "p", "p_holm", "slope", "")])
    raw = np.concatenate([frame[col].to_numpy(float) for frame, col, *_ in tests])
    adjusted, m = holm(raw), int(np.count_nonzero(~np.isnan(raw)))
    at = 0
    for frame, col, out, est, prefix in tests:
        frame[out] = adjusted[at:at + len(frame)]
        at += len(frame)
        if est is not None:
            ci = f"{prefix}_ci" if prefix else "ci"
            lo, hi = simultaneous(frame[est], frame[f"{ci}_low"], frame[f"{ci}_high"], frame[f"{prefix}_df" if prefix
                                                                                         else "df"], m)
            sim = f"{prefix}_sim" if prefix else "sim"
            frame[f"{sim}_low"], frame[f"{sim}_high"] = lo, hi
    for frame in (trends, steps, per_pos):
        frame["family_tests"] = m
    _directions(trends, steps, per_pos)
    return {"trends": trends, "steps": steps, "positions": per_pos}


def _padfree_targets(fp: pd.DataFrame) -> float:
    """The padding-free targets per run (each position of a run counts them once; the forget gate lacks position
    0): the mean over runs of a run's largest position count, NaN without padfree rows."""
    if fp.empty:
        return math.nan
    return float(fp.groupby(["seed", "n_step"])["tokens"].max().mean())


def _slope_columns(prefix: str, positions: bool = False) -> list[str]:
    return ([f"{prefix}_positions"] if positions else []) + [f"{prefix}_{k}" for k in ("slope", "ci_low", "ci_high",
                                                                                         "df", "p")]


TREND_COLUMNS = (KEYS[:1] + ["layers", "layer", "gate", "n_steps", "seeds", "runs", "gate_mean_first",
                             "gate_mean_last", "slope_per_nstep", "slope_ci_low", "slope_ci_high", "slope_df",
                             "slope_p", "kendall_tau", "p_value"]
                 + _slope_columns("matched", True) + ["profile_slope", "profile_ci_low", "profile_ci_high"]
                 + _slope_columns("beyond") + _slope_columns("end_matched", True) + ["padfree_targets"]
                 + _slope_columns("padfree") + _slope_columns("padfree_matched", True)
                 + _slope_columns("padfree_end", True))


def non_monotone(step_verdicts: pd.Series) -> bool:
    """A shape that significantly rises at one step and falls at another (Holm-adjusted step verdicts)."""
    return bool((step_verdicts == "up").any() and (step_verdicts == "down").any())


# The trend row's verdict columns beyond the pooled direction: (column, slope test prefix).
VERDICTS = {"at_matched_positions": "matched", "at_matched_lags": "end_matched", "padding_free": "padfree",
            "padding_free_at_matched_positions": "padfree_matched", "padding_free_at_matched_lags": "padfree_end"}
# The slopes on n_step whose difference between scales (the scale x n interaction, orchestration.scales) is tested:
# answer -> (slope, interval low, high, df columns of gates_effect.csv); files written before a column existed give
# n/a.  INTERACTION_LABELS: each answer as the pages name it.
INTERACTIONS = {
    "pooled": ("slope_per_nstep", "slope_ci_low", "slope_ci_high", "slope_df"),
    **{answer: (f"{p}_slope", f"{p}_ci_low", f"{p}_ci_high", f"{p}_df") for answer, p in
       (("matched", "matched"), ("end_aligned", "end_matched"), ("padding_free", "padfree"),
        ("padding_free_end_aligned", "padfree_end"))}}
INTERACTION_LABELS = {"pooled": "pooled", "matched": "start-aligned", "end_aligned": "end-aligned",
                      "padding_free": "padding-free", "padding_free_end_aligned": "padding-free end-aligned"}


def _directions(trends: pd.DataFrame, steps: pd.DataFrame, per_pos: pd.DataFrame) -> None:
    """Verdicts from Holm-adjusted p-values.  direction (pooled): `non-monotone` when a step rises and another falls
    (each significant), else the slope test's (several seeds) or Kendall's (one seed); VERDICTS: each slope test's;
    position_profile: whether the pooled trend is what the position profile predicts."""
    steps["verdict"] = [_verdict(d, p, "up", "down", "no clear change") for d, p in zip(steps["diff"], steps["p_holm"])]
    per_pos["verdict"] = [_verdict(m, p) for m, p in zip(per_pos["slope"], per_pos["p_holm"])]
    direction, profile = [], []
    for t in trends.itertuples():
        mine = steps[(steps["model"] == t.model) & (steps["layers"] == t.layers) & (steps["layer"] == t.layer)
                     & (steps["gate"] == t.gate)]["verdict"]
        if non_monotone(mine):
            d = "non-monotone"
        elif not math.isnan(t.slope_p_holm):
            d = _verdict(t.slope_per_nstep, t.slope_p_holm)
        elif not math.isnan(t.kendall_p_holm) and t.kendall_p_holm < ALPHA:
            d = "rises" if t.kendall_tau > 0 else "falls"
        else:
            d = "no monotone trend"
        direction.append(d)
        if d not in ("rises", "falls") or math.isnan(t.beyond_p_holm):
            profile.append("n/a" if math.isnan(t.beyond_p_holm) else "no pooled trend to explain")
        else:
            profile.append("beyond the position profile" if t.beyond_p_holm < ALPHA else "a position profile")
    trends["direction"], trends["position_profile"] = direction, profile
    for column, prefix in VERDICTS.items():
        trends[column] = [_verdict(m, p, none="no clear change") for m, p in
                          zip(trends[f"{prefix}_slope"], trends[f"{prefix}_p_holm"])]


def gate_trends(gates: pd.DataFrame) -> pd.DataFrame:
    """gate_family's trends: one row per model, layer and gate (gates_effect.csv)."""
    return gate_family(gates)["trends"]


def gate_position_means(gates: pd.DataFrame, align: str = "start", subset: str = "all") -> pd.DataFrame:
    """Per model, layer, gate, n_step and window position (align start: 0 = the oldest input) or lag (align end:
    1 = the last input), over every target (subset all) or the padding-free ones (padfree): mean over seeds of each
    run's mean there, with its 95% t interval over seeds (df = seeds - 1; none with one seed) (the gates_vs_position
    figures)."""
    from lmgrid.analysis.positions import position_means

    rows = []
    for (model, layers, layer, gate, n_step, position), g in position_means(gates, align, subset).groupby(
            ["model", "layers", "layer", "gate", "n_step", "position"], sort=True):
        lo, hi = t_interval(g["mean"])
        rows.append({"model": model, "layers": int(layers), "layer": int(layer), "gate": gate, "n_step": int(n_step),
                     "position": int(position), "seeds": int(g["seed"].nunique()), "mean": float(g["mean"].mean()),
                     "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows, columns=["model", "layers", "layer", "gate", "n_step", "position", "seeds", "mean",
                                       "ci_low", "ci_high"])


def impl_differences(runs: pd.DataFrame, metric: str = "test_ppl") -> pd.DataFrame:
    """Each implementation against its architecture's default (torch; else the first in name order) in the same
    cell (n_step, layers, regime), paired by seed: mean of (impl - default), its 95% paired t interval (df = shared
    seeds - 1) and p, with p_holm over every contrast of the table (one family); a difference is claimed only when
    p_holm < 0.05.  Each pair appears once, and no pair of two non-default impls is formed."""
    rows = []
    neural = runs[runs["impl"] != "ngram"]
    for (arch, n_step, layers, regime), g in neural.groupby(["arch", "n_step", "layers", "regime"], sort=True):
        impls = sorted(g["impl"].unique(), key=lambda i: (i != "torch", i))
        a = impls[0]
        pa = g[g["impl"] == a].set_index("seed")[metric]
        for b in impls[1:]:
            pb = g[g["impl"] == b].set_index("seed")[metric]
            seeds = sorted(set(pa.index) & set(pb.index))
            if not seeds:
                continue
            diff = (pb.loc[seeds] - pa.loc[seeds]).to_numpy(float)
            mean, lo, hi, p, df = t_test(diff)
            rows.append({"arch": arch, "n_step": int(n_step), "layers": int(layers), "regime": regime, "impl_a": a,
                         "impl_b": b, "seeds": len(seeds), f"{metric}_a": float(pa.loc[seeds].mean()),
                         f"{metric}_b": float(pb.loc[seeds].mean()), "diff_b_minus_a": mean,
                         "ci_low": lo, "ci_high": hi, "df": df, "p": p})
    out = pd.DataFrame(rows, columns=["arch", "n_step", "layers", "regime", "impl_a", "impl_b", "seeds",
                                      f"{metric}_a", f"{metric}_b", "diff_b_minus_a", "ci_low", "ci_high", "df", "p"])
    out["p_holm"] = holm(out["p"].to_numpy(float)) if len(out) else []
    # beside the Holm verdicts, the simultaneous intervals over the same contrasts (`simultaneous` says why)
    m = int(np.count_nonzero(~np.isnan(out["p"].to_numpy(float))))
    out["sim_low"], out["sim_high"] = (simultaneous(out["diff_b_minus_a"], out["ci_low"], out["ci_high"], out["df"], m)
                                       if len(out) else ([], []))
    out["family_tests"] = m
    out["verdict"] = [("one seed: no claim" if s < 2 else f"{b} higher" if ph < ALPHA and d > 0 else
                       f"{b} lower" if ph < ALPHA else "no clear difference")
                      for s, b, d, ph in zip(out["seeds"], out["impl_b"], out["diff_b_minus_a"], out["p_holm"])]
    return out
