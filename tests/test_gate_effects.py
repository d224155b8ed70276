"""The statistics behind the gate and implementation findings (analysis.effects, analysis.positions), on planted
data with a known answer, each against a hand computation and with the mutation it kills run as a control."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lmgrid.analysis import effects, positions

N_STEPS = (2, 3, 5, 7, 9)
SEEDS = (1, 2, 3, 4, 5)


def planted_gates(mean_at, seeds=SEEDS, n_steps=N_STEPS, noise=0.002, gate="i", padfree_at=None) -> pd.DataFrame:
    """gates.csv rows (scope `position` and `all`) of LSTM runs whose gate mean at window position p of a run at
    n_step n is mean_at(n, p) plus noise; positions 0..n-2 (the window's input tokens), fewer tokens at the oldest
    positions (left padding), and the pooled row the count-weighted mean of the position rows, as neural.gates
    writes them.  With `padfree_at(n, p)`: padfree rows too, at min_context max(n_steps) - 1, 500 targets at every
    position (the same targets at every n), plus noise."""
    rng = np.random.default_rng(7)
    rows = []
    key = {"model": "lstm", "arch": "lstm", "impl": "torch", "layers": 1, "regime": "window", "layer": 0,
           "gate": gate, "std": 0.2, "frac_left_saturated": 0.0, "frac_right_saturated": 0.0}
    for seed in seeds:
        for n in n_steps:
            pos = list(range(n - 1))
            tokens = [1000 - 40 * (n - 2 - p) for p in pos]
            means = [mean_at(n, p) + noise * rng.standard_normal() for p in pos]
            for p, m, c in zip(pos, means, tokens):
                rows.append({**key, "seed": seed, "n_step": n, "scope": "position", "index": p, "mean": m, "count": c})
            if padfree_at is not None:
                for p in pos:
                    rows.append({**key, "seed": seed, "n_step": n, "scope": "padfree", "index": p,
                                 "mean": padfree_at(n, p) + noise * rng.standard_normal(), "count": 500,
                                 "min_context": max(n_steps) - 1})
            pooled = sum(m * c for m, c in zip(means, tokens)) / sum(tokens)
            rows.append({**key, "seed": seed, "n_step": n, "scope": "all", "index": -1, "mean": pooled,
                         "count": sum(tokens) * 8})
    return pd.DataFrame(rows)


def position_answer(gates: pd.DataFrame) -> tuple[str, str, str]:
    """(pooled direction, verdict at matched positions, pooled-trend verdict) of the one gate of `gates`."""
    t = effects.gate_family(gates)["trends"].iloc[0]
    return t["direction"], t["at_matched_positions"], t["position_profile"]


def test_a_gate_set_by_position_alone_has_no_nstep_effect_at_matched_positions(monkeypatch):
    """A planted gate that depends on the window position only (0.30 + 0.02 per position): pooled over the window it
    rises with n_step (the confound: a longer window holds more late positions; the pooled analysis is the negative
    control that must see a slope), at the positions every n_step shares and at each position on its own it does not
    change, and the pooled trend is called a position profile.  A gate set by n_step alone is called an n_step
    effect at matched positions (the positive control).  Mutation killed, run here: "matched positions" that pool
    every position of each run (shared_positions returning all of them) see the pooled slope again."""
    by_position = planted_gates(lambda n, p: 0.30 + 0.02 * p)
    fam = effects.gate_family(by_position)
    t = fam["trends"].iloc[0]
    assert (t["direction"], t["at_matched_positions"], t["position_profile"]) == (
        "rises", "no clear change", "a position profile")
    assert t["matched_positions"] == "0" and abs(t["matched_slope"]) < 0.001 < t["slope_per_nstep"]
    assert t["profile_slope"] == pytest.approx(t["slope_per_nstep"], abs=1e-3)
    start = fam["positions"][fam["positions"]["align"] == "start"]
    assert set(start["verdict"]) == {"no clear trend"}

    by_window = planted_gates(lambda n, p: 0.30 + 0.01 * n)
    assert position_answer(by_window) == ("rises", "rises", "beyond the position profile")

    monkeypatch.setattr(positions, "shared_positions", lambda g: sorted(g["position"].unique()))
    assert position_answer(by_position)[1] == "rises"  # the mutant reads the confound as a window effect


def holm_by_hand(p) -> list[float]:
    """Holm's adjustment written out here, independently of effects.holm: the i-th smallest of the m real p-values
    (0-based) times m - i, capped at 1, then never falling along that order; NaN stays NaN."""
    real = sorted((v, i) for i, v in enumerate(p) if not math.isnan(v))
    out, running = [math.nan] * len(p), 0.0
    for rank, (v, i) in enumerate(real):
        running = max(running, min(1.0, (len(real) - rank) * v))
        out[i] = running
    return out


def test_holm_against_a_hand_computation(monkeypatch):
    """Holm's step-down adjustment of p = (0.01, 0.04, 0.03, 0.005, NaN), by hand: sorted 0.005 x 4 = 0.02,
    0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 raised to 0.06 (adjusted p never fall along the order); the
    NaN is no test.  Mutations killed, each applied to the real effects.holm and run here as a control: Holm without
    the running maximum (its `max(running, x)` made `x`), and Bonferroni (its step-down rank i held at 0, so every p
    is multiplied by m)."""
    p = [0.01, 0.04, 0.03, 0.005, math.nan]
    want = [0.03, 0.06, 0.06, 0.02, math.nan]
    assert holm_by_hand(p) == pytest.approx(want, nan_ok=True)
    assert effects.holm(p) == pytest.approx(want, nan_ok=True)

    # The mutants run effects.holm's own body: a module global named like a builtin shadows it there.  Should holm
    # stop using max or enumerate, these controls stop biting and the asserts below say so.
    monkeypatch.setattr(effects, "max", lambda running, x: x, raising=False)  # no running maximum
    assert effects.holm(p) == pytest.approx([0.03, 0.04, 0.06, 0.02, math.nan], nan_ok=True)
    assert effects.holm(p) != pytest.approx(want, nan_ok=True)
    monkeypatch.undo()
    monkeypatch.setattr(effects, "enumerate", lambda xs: ((0, x) for x in xs), raising=False)  # Bonferroni
    assert effects.holm(p) == pytest.approx([0.04, 0.16, 0.12, 0.02, math.nan], nan_ok=True)
    assert effects.holm(p) != pytest.approx(want, nan_ok=True)


# The tests of a gate family (effects.gate_family), as (table, raw p column, Holm-adjusted column).
FAMILY_TESTS = [("trends", "slope_p", "slope_p_holm"), ("trends", "p_value", "kendall_p_holm"),
                ("trends", "matched_p", "matched_p_holm"), ("trends", "end_matched_p", "end_matched_p_holm"),
                ("trends", "beyond_p", "beyond_p_holm"), ("trends", "padfree_p", "padfree_p_holm"),
                ("trends", "padfree_matched_p", "padfree_matched_p_holm"),
                ("trends", "padfree_end_p", "padfree_end_p_holm"), ("steps", "p", "p_holm"),
                ("positions", "p", "p_holm")]


def family_problems(fam: dict) -> list[str]:
    """gate_family's adjusted p-values against Holm by hand over the whole family (every test of every table at
    once), and the step and position verdicts against those adjusted p (a claim only where p_H < ALPHA)."""
    raw = [v for table, col, _ in FAMILY_TESTS for v in fam[table][col].astype(float)]
    want = iter(holm_by_hand(raw))
    out = []
    for table, col, adj in FAMILY_TESTS:
        for i, got in enumerate(fam[table][adj].astype(float)):
            w = next(want)
            if got != pytest.approx(w, rel=1e-9, nan_ok=True):
                out.append(f"{table}.{adj}[{i}] = {got:.6g}, Holm over the family gives {w:.6g}")
    for table, none in (("steps", "no clear change"), ("positions", "no clear trend")):
        for p_h, v in zip(fam[table]["p_holm"], fam[table]["verdict"]):
            if (p_h < effects.ALPHA) == (v == none):
                out.append(f"{table}: verdict {v!r} at p_H {p_h:.4g}")
    return out


def test_gate_verdicts_rest_on_holm_over_the_whole_family(monkeypatch):
    """A planted gate that rises with n_step and with window position, noisy enough that some position slopes have a
    raw p below 0.05 and a Holm-adjusted one above: gate_family's every adjusted p is Holm over the whole family
    (hand computation, holm_by_hand), and those positions get no claim.  Mutations killed, each applied to the real
    code (effects.holm replaced in the module that gate_family calls it from) and run here as controls: no
    adjustment (the raw p: those positions are claimed to rise), and Bonferroni (every p times m)."""
    gates = planted_gates(lambda n, p: 0.30 + 0.004 * n + 0.01 * p, noise=0.01)
    fam = effects.gate_family(gates)
    assert family_problems(fam) == []
    decided_by_holm = fam["positions"][(fam["positions"]["p"] < effects.ALPHA)
                                       & (fam["positions"]["p_holm"] >= effects.ALPHA)]
    assert len(decided_by_holm) and set(decided_by_holm["verdict"]) == {"no clear trend"}

    monkeypatch.setattr(effects, "holm", lambda p: np.asarray(p, dtype=float))  # no adjustment
    unadjusted = effects.gate_family(gates)
    assert family_problems(unadjusted) != []
    assert "rises" in set(unadjusted["positions"].loc[decided_by_holm.index, "verdict"])
    monkeypatch.setattr(effects, "holm", lambda p: np.minimum(1.0, np.asarray(p, dtype=float)
                                                              * np.count_nonzero(~np.isnan(p))))  # Bonferroni
    assert family_problems(effects.gate_family(gates)) != []


def test_steps_use_welch_and_an_up_and_down_shape_is_non_monotone(monkeypatch):
    """Each n_step against the next: the difference of the means with the Welch interval and Welch-Satterthwaite df,
    recomputed by hand (unequal spreads: seeds vary more at n_step 5); a planted shape that rises 2→5 and falls back
    5→9 (symmetric, so its slope is near 0) is `non-monotone`.  Mutations killed, run here: equal-variance
    (Student) steps, whose df is n1 + n2 - 2 = 8; and the non-monotone rule removed, which leaves the shape to the
    slope test."""
    rng = np.random.default_rng(3)
    spread = {2: 0.002, 5: 0.02, 9: 0.002}
    level = {2: 0.30, 5: 0.50, 9: 0.30}
    noise = {(s, n): spread[n] * rng.standard_normal() for s in SEEDS for n in level}
    gates = planted_gates(lambda n, p: level[n], n_steps=(2, 5, 9), noise=0.0)
    gates["mean"] += [noise[(s, n)] for s, n in zip(gates["seed"], gates["n_step"])]
    steps = effects.gate_family(gates)["steps"]

    def hand(a, b):
        x = gates[(gates["scope"] == "all") & (gates["n_step"] == a)]["mean"].tolist()
        y = gates[(gates["scope"] == "all") & (gates["n_step"] == b)]["mean"].tolist()
        va, vb = statistics.variance(x) / len(x), statistics.variance(y) / len(y)
        df = (va + vb) ** 2 / (va ** 2 / (len(x) - 1) + vb ** 2 / (len(y) - 1))
        d = statistics.fmean(y) - statistics.fmean(x)
        half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
        return d, d - half, d + half, df

    def problems(steps):
        out = []
        for (a, b), row in zip(((2, 5), (5, 9)), steps.itertuples()):
            got = (row.diff, row.ci_low, row.ci_high, row.df)
            if got != pytest.approx(hand(a, b), rel=1e-6):
                out.append(f"{a}→{b}: {got} against {hand(a, b)}")
        return out

    assert problems(steps) == []
    trend = effects.gate_family(gates)["trends"].iloc[0]
    assert trend["direction"] == "non-monotone" and list(steps["verdict"]) == ["up", "down"]

    real_welch = effects.welch
    monkeypatch.setattr(effects, "welch", lambda a, b: (*real_welch(a, b)[:4], float(len(a) + len(b) - 2)))
    assert problems(effects.gate_family(gates)["steps"]) != []  # Student's df: the mutant is caught
    monkeypatch.setattr(effects, "welch", real_welch)
    monkeypatch.setattr(effects, "non_monotone", lambda verdicts: False)
    assert effects.gate_family(gates)["trends"].iloc[0]["direction"] != "non-monotone"


def impl_runs() -> pd.DataFrame:
    """Test PPL of four LSTM impls over 4 seeds (made-up numbers, paired by seed), one n_step 5 cell."""
    ppl = {"torch": [300.0, 302.0, 305.0, 299.0], "cell": [300.5, 301.5, 305.5, 299.0],
           "concat": [304.0, 307.0, 309.5, 303.0], "cellonebias": [304.5, 306.0, 310.0, 304.0]}
    return pd.DataFrame([{"arch": "lstm", "impl": impl, "model": f"lstm/{impl}", "n_step": 5, "layers": 1,
                          "regime": "window", "seed": seed, "test_ppl": v}
                         for impl, values in ppl.items() for seed, v in zip((1, 2, 3, 4), values)])


def impl_problems(runs: pd.DataFrame, got: pd.DataFrame) -> list[str]:
    """impl_differences' table against a hand computation: each impl against torch once (no pair of two non-default
    impls), the paired mean difference, its t interval with df = seeds - 1, p, and Holm over the three contrasts."""
    out = []
    if {(a, b) for a, b in zip(got["impl_a"], got["impl_b"])} != {("torch", "cell"), ("torch", "concat"),
                                                                   ("torch", "cellonebias")}:
        out.append(f"pairs {sorted(zip(got['impl_a'], got['impl_b']))}")
        return out
    ref = runs[runs["impl"] == "torch"].set_index("seed")["test_ppl"]
    ps = {}
    for impl in ("cell", "concat", "cellonebias"):
        d = (runs[runs["impl"] == impl].set_index("seed")["test_ppl"] - ref).tolist()
        m, se = statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d))
        half = stats.t.ppf(0.975, len(d) - 1) * se
        ps[impl] = 2 * stats.t.sf(abs(m / se), len(d) - 1)
        row = got[got["impl_b"] == impl].iloc[0]
        if (row["diff_b_minus_a"], row["ci_low"], row["ci_high"], row["df"], row["p"]) != pytest.approx(
                (m, m - half, m + half, 3, ps[impl]), rel=1e-6):
            out.append(f"{impl}: {row.to_dict()}")
    order = sorted(ps, key=ps.get)
    holm = {}
    for i, impl in enumerate(order):
        holm[impl] = min(1.0, max([(3 - i) * ps[impl]] + [holm[o] for o in order[:i]]))
    for impl, want in holm.items():
        if got[got["impl_b"] == impl]["p_holm"].iloc[0] != pytest.approx(want, rel=1e-6):
            out.append(f"{impl}: p_holm {got[got['impl_b'] == impl]['p_holm'].iloc[0]} against {want}")
    return out


def test_impl_differences_against_a_hand_computation(monkeypatch):
    """impl_differences (analysis.effects): each impl against nn.LSTM once, paired by seed, t interval (df 3), p and
    Holm over the contrasts, recomputed by hand.  Mutations killed, run here as controls: every pair of impls (the
    old table, where "concat vs cell" repeated "concat vs torch"), no Holm adjustment, and a normal (z) interval in
    place of the t interval."""
    import itertools

    runs = impl_runs()
    assert impl_problems(runs, effects.impl_differences(runs)) == []
    got = effects.impl_differences(runs).set_index("impl_b")
    assert got.loc["concat", "verdict"] == "concat higher" and got.loc["cell", "verdict"] == "no clear difference"

    every_pair = pd.DataFrame([{"impl_a": a, "impl_b": b} for a, b in itertools.combinations(
        ["torch", "cell", "concat", "cellonebias"], 2)])
    assert impl_problems(runs, every_pair) != []
    monkeypatch.setattr(effects, "holm", lambda p: np.asarray(p, dtype=float))
    assert impl_problems(runs, effects.impl_differences(runs)) != []
    monkeypatch.undo()
    monkeypatch.setattr(effects, "t_interval", lambda v: (np.mean(v) - 1.96 * stats.sem(v),
                                                          np.mean(v) + 1.96 * stats.sem(v)))
    assert impl_problems(runs, effects.impl_differences(runs)) != []


def test_the_bias_ablation_verdict_reads_the_one_bias_cell():
    """The findings' bias ablation: concat above nn.LSTM, the cell without its second bias with it and the cell not:
    "accounts for it".  Control, run here: the same table with the one-bias cell's numbers set to the cell's (the
    mutation "the ablation reads the cell instead of the one-bias cell", or a one-bias cell that trains like the
    cell) must say it does not account for it."""
    from lmgrid.analysis import findings

    runs = impl_runs()
    (text,) = findings._ablation_sentences(effects.impl_differences(runs))
    assert "accounts for it" in text and "does not" not in text
    like_cell = runs.copy()
    cell = runs[runs["impl"] == "cell"]["test_ppl"].to_numpy()
    like_cell.loc[like_cell["impl"] == "cellonebias", "test_ppl"] = cell
    (text,) = findings._ablation_sentences(effects.impl_differences(like_cell))
    assert "does not account for it" in text


def test_end_aligned_lags_count_back_from_the_predicted_word(monkeypatch):
    """A planted gate set by the distance from the predicted word alone (0.30 + 0.02 per lag, lag 1 = the last
    input): end-aligned, at the lags every n shares and at each lag on its own, n changes nothing; start-aligned,
    position 0 moves away from the target as n grows, so the start-aligned matched slope sees a (spurious) rise.  A
    gate set by n alone is an n effect end-aligned too (the positive control).  Mutation killed, run here: end
    alignment replaced by start alignment (positions.aligned returning the rows as written): the lag-only gate then
    reads as an n effect at the "matched lags"."""
    by_lag = planted_gates(lambda n, p: 0.30 + 0.02 * (n - 1 - p))
    fam = effects.gate_family(by_lag)
    t = fam["trends"].iloc[0]
    assert t["end_matched_positions"] == "1" and t["at_matched_lags"] == "no clear change"
    assert abs(t["end_matched_slope"]) < 0.001 and t["at_matched_positions"] == "rises"
    end = fam["positions"][(fam["positions"]["align"] == "end") & (fam["positions"]["subset"] == "all")]
    assert len(end) and set(end["verdict"]) == {"no clear trend"}
    lags = positions.aligned(positions.position_rows(by_lag), "end")
    assert (lags[lags["index"] == lags["n_step"] - 2]["position"] == 1).all()  # the last input is lag 1 at every n
    by_n = planted_gates(lambda n, p: 0.30 + 0.01 * n)
    assert effects.gate_family(by_n)["trends"].iloc[0]["at_matched_lags"] == "rises"

    monkeypatch.setattr(positions, "aligned", lambda rows, align: rows)  # the mutation: start alignment
    assert effects.gate_family(by_lag)["trends"].iloc[0]["at_matched_lags"] == "rises"


def test_padding_free_analysis_reads_the_same_targets_at_every_n(monkeypatch):
    """The padding-free analysis reads each run's padfree rows at min_context = the study's largest n - 1, so every
    n is measured on the same targets: a planted gate whose position rows (every target with a real token there)
    rise with n only because the targets behind them change, while on the padding-free targets it is flat, is
    'rises' pooled and 'no clear change' padding-free.  Mutation killed, run here: per-n subsets (each run's padfree
    rows at its own n - 1, whose targets differ by n, planted here with a rise): the padding-free verdict rises."""
    gates = planted_gates(lambda n, p: 0.30 + 0.01 * n, padfree_at=lambda n, p: 0.40)
    n_max = max(N_STEPS)
    per_n = []  # the rows a per-n subset would read: padded-free for the run's own window only, targets vary by n
    for (seed, n), run in gates[gates["scope"] == "padfree"].groupby(["seed", "n_step"]):
        if n < n_max:
            per_n.append(run.assign(min_context=n - 1, mean=0.30 + 0.01 * n, count=900 - 40 * n))
    gates = pd.concat([gates, *per_n], ignore_index=True)
    rows = positions.padfree_rows(gates)
    assert set(rows["min_context"]) == {n_max - 1} and set(rows["tokens"]) == {500}
    t = effects.gate_family(gates)["trends"].iloc[0]
    assert t["direction"] == "rises" and t["padding_free"] == "no clear change"
    assert t["padding_free_at_matched_lags"] == "no clear change" and t["padfree_targets"] == 500

    def per_n_subsets(g):  # the mutant: each run's own padding-free rows
        d = g[(g["scope"] == "padfree") & (g["min_context"] == g["n_step"] - 1)]
        return d.assign(position=d["index"].astype(int), tokens=d["count"].astype(float))

    monkeypatch.setattr(positions, "padfree_rows", per_n_subsets)
    assert effects.gate_family(gates)["trends"].iloc[0]["padding_free"] == "rises"


def interval_problems(fam: dict) -> list[str]:
    """Every Holm verdict of the family against the simultaneous interval printed beside it: an interval that
    excludes 0 must sit beside a claim (never beside 'no clear ...')."""
    out = []
    checks = [("steps", "diff", "sim", "verdict"), ("positions", "slope", "sim", "verdict")]
    checks += [("trends", f"{p}_slope", f"{p}_sim", v) for v, p in effects.VERDICTS.items()]
    for table, _, sim, verdict in checks:
        f = fam[table]
        excludes = (f[f"{sim}_low"] > 0) | (f[f"{sim}_high"] < 0)
        for i in f.index[excludes & f[verdict].str.startswith("no clear")]:
            out.append(f"{table}[{i}]: [{f.loc[i, sim + '_low']:.4g}, {f.loc[i, sim + '_high']:.4g}] beside "
                       f"{f.loc[i, verdict]!r}")
    return out


def test_the_printed_interval_agrees_with_the_holm_verdict(monkeypatch, tmp_path):
    """Noisy planted data where some position slopes have a raw p below 0.05 and a Holm-adjusted one above: their
    marginal 95% intervals exclude 0, the simultaneous ones printed beside the verdicts do not, and every interval
    that excludes 0 sits beside a claim; the printed table shows the simultaneous interval (hand computation:
    est ± t(1 - 0.05/(2m), df)·se).  Mutation killed, run here: unadjusted intervals (effects.simultaneous returning
    the marginal interval): an interval that excludes 0 then sits beside 'no clear trend'."""
    from lmgrid.analysis import findings

    gates = planted_gates(lambda n, p: 0.30 + 0.004 * n + 0.01 * p, noise=0.01)
    fam = effects.gate_family(gates)
    pp = fam["positions"]
    holm_only = pp[(pp["p"] < effects.ALPHA) & (pp["p_holm"] >= effects.ALPHA)]
    assert len(holm_only) and ((holm_only["ci_low"] > 0) | (holm_only["ci_high"] < 0)).any()
    assert interval_problems(fam) == []
    r = pp.iloc[0]
    m = int(r["family_tests"])
    se = (r["ci_high"] - r["slope"]) / stats.t.ppf(0.975, r["df"])
    half = stats.t.ppf(1 - 0.05 / (2 * m), r["df"]) * se
    assert (r["sim_low"], r["sim_high"]) == pytest.approx((r["slope"] - half, r["slope"] + half), rel=1e-9)
    paths = [[str(tmp_path / f"{x}.{e}") for e in ("csv", "md", "tex", "html")] for x in ("ge", "gm", "gp")]
    findings.write_gate_tables("s", gates, paths[0], paths[1], None, paths[2])
    assert f"[{r['sim_low']:+.4f}, {r['sim_high']:+.4f}]" in (tmp_path / "gp.md").read_text()
    impl = effects.impl_differences(impl_runs())  # the implementation contrasts print theirs the same way
    excludes = (impl["sim_low"] > 0) | (impl["sim_high"] < 0)
    assert not (excludes & (impl["verdict"] == "no clear difference")).any() and excludes.any()

    monkeypatch.setattr(effects, "simultaneous", lambda est, lo, hi, df, m: (np.asarray(lo, float),
                                                                             np.asarray(hi, float)))
    assert interval_problems(effects.gate_family(gates)) != []
