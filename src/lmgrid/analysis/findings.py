"""The study's statistical tables and its findings, written from the run's own results (never by hand).

* gates_effect.{csv,md,tex,html}: the trend of each gate with n_step, pooled over the window, at the window
  positions every n_step shares counted from the start (start-aligned) and at the lags every n_step shares counted
  back from the predicted word (end-aligned), the same on padding-free targets only, and whether the pooled trend is
  a position profile (effects.gate_family), and gate_steps.tex: its step changes (each n_step against the next) as
  a LaTeX table of their own;
* gate_positions.{csv,md,tex,html}: the slope on n_step at each window position and each lag on its own;
* gate_means.{csv,md,tex,html}: each gate's mean per n_step with its 95% interval over seeds;
Every p-value of those tables is Holm-adjusted over the study's gate tests (effects.FAMILY); the interval beside a
Holm verdict is the simultaneous one (effects.simultaneous), printed with its method, df and family size m.

Every .tex file holds one table with a short caption; the Markdown and HTML files carry the method in full.
* findings.{md,html}: one sentence per claim a reader would draw, each with the number and interval it rests on,
  made from the tables above, the implementation comparison and the PPL table; nothing is claimed that an
  interval does not support.
"""
from __future__ import annotations

import math
import re
from html import escape

import pandas as pd

from lmgrid.common.fileio import atomic_write
from lmgrid.analysis import effects, names
from lmgrid.analysis.tables import fit_tex, html_page, latex_escape

PCT = int(effects.CONFIDENCE * 100)
SLOPE_METHOD = (f"pooled slope: each seed's least-squares slope of its runs' gate means (over the whole window) on "
                f"n_step (per context word), mean over seeds with its {PCT}% t interval and a one-sample t test "
                "(df = seeds - 1)")
MATCHED_METHOD = ("matched positions: the same slope test on each run's gate mean over the window positions every "
                  "n_step shares (positions count from the window's oldest input token, 0), and on each position "
                  "on its own (gate_positions); profile: the slope the seed's position profile (its largest n_step) "
                  "predicts from each run's position counts alone, and beyond: the pooled slope minus it, t tested")
TREND_METHOD = ("Kendall's tau-b between n_step and each run's gate mean over all runs (a rank trend test for "
                "ordered groups), two-sided, which decides the direction only for one seed; each n_step against "
                f"the next: difference of the means with its {PCT}% Welch interval (Welch-Satterthwaite df) "
                "(steps that significantly rise and fall make a trend non-monotone)")
END_METHOD = ("end-aligned: the same matched slope test with window places counted back from the predicted token "
              "(lag 1 = the last input token, at every n), at the lags every n shares, and each lag on its own; "
              "start-aligned position 1 is the last input at n = 3 but seven steps before the prediction at n = 9")
PADFREE_METHOD = ("padding-free: only targets with at least N - 1 words before them in their sentence (N = the "
                  "study's largest n), so that no window of any n holds padding and every n is measured on the same "
                  "targets (gates.csv scope padfree); the pooled slope over those targets, and the matched slopes at "
                  "start positions and at end lags")
HOLM = (f"Multiplicity: {effects.FAMILY}; a verdict needs the Holm-adjusted p (p_H) < {effects.ALPHA:g}; the "
        f"intervals beside verdicts are simultaneous {PCT}% ones (Bonferroni, level 1 - {effects.ALPHA:g}/m over "
        "the m tests of the family): one that excludes 0 always sits beside a claim; a claim marked 'step-down' is "
        "one Holm makes where the Bonferroni interval still holds 0")
ONE_SEED = "n/a (one seed)"  # where an interval over seeds cannot exist


def _ci(lo: float, hi: float, fmt: str = "+.3f", missing: str = "n/a") -> str:
    return missing if math.isnan(lo) else f"[{lo:{fmt}}, {hi:{fmt}}]"


def _count(n: int, word: str) -> str:
    """'1 seed', '3 seeds'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


TEXT_COLUMNS = {"Model", "Gate", "Direction", "Step"}  # left-aligned; numbers right-aligned
HEADS = {"model": "Model", "layer": "Layer", "gate": "Gate", "seeds": "Seeds", "direction": "Direction",
         "step": "Step", "mean": "Mean", "n_step": "n", "n_steps": "n", "values_per_run": "Values per run"}


def _latex(show: pd.DataFrame, caption: str, label: str) -> str:
    show = show.rename(columns=HEADS)
    tex = (show.style.hide(axis="index").format(escape="latex").format_index(escape="latex", axis=1)
           .to_latex(hrules=True, caption=latex_escape(caption).replace("%", r"\%"), label=label, position="t",
                     position_float="centering",
                     column_format="".join("l" if c in TEXT_COLUMNS else "r" for c in show.columns)))
    tex = fit_tex(tex, show)
    tex = re.sub(r"(?<![\w.])-(?=\d)", "$-$", tex)  # a minus sign, not a hyphen
    tex = tex.replace("<0.", "$<$0.")  # p < 0.001: in text mode OT1 prints '<' as an inverted '!'
    return tex.replace("→", r"$\to$").replace("τ", r"$\tau$").replace("Δ", r"$\Delta$") + "\n"


def _write_four(df_csv: pd.DataFrame, show: pd.DataFrame, title: str, note: str, paths,
                tex: tuple[pd.DataFrame, str, str]) -> None:
    """CSV (raw ids, all digits), Markdown and HTML (`show` under the full `note`) and LaTeX: one table, `tex` =
    (table, short caption, label)."""
    csv_path, md_path, tex_path, html_path = paths
    df_csv = df_csv.copy()
    df_csv.insert(1, "model_name", df_csv["model"].map(names.display))
    with atomic_write(csv_path) as fh:
        df_csv.to_csv(fh, index=False, float_format="%.6g")
    show = show.rename(columns=HEADS)
    body = show.to_markdown(index=False, disable_numparse=True) if len(show) else "(no gate statistics)"
    with atomic_write(md_path) as fh:
        fh.write(f"## {title}\n\n{note}\n\n{body}\n")
    with atomic_write(tex_path) as fh:
        fh.write(_latex(*tex))
    with atomic_write(html_path) as fh:
        fh.write(html_page(title, [f"<p>{escape(note)}</p>", show.to_html(index=False, border=0)]))


def _step_rows(steps: pd.DataFrame) -> pd.DataFrame:
    """gate_family's steps for a table a column wide."""
    return pd.DataFrame({"model": steps["model"].map(names.display), "layer": steps["layer"] + 1,
                         "gate": steps["gate"], "step": steps["step"], "Δ mean": steps["diff"].map("{:+.3f}".format),
                         f"sim. {PCT}% CI": [_ci(a, b) for a, b in zip(steps["sim_low"], steps["sim_high"])],
                         "df": steps["df"].map(lambda v: f"{v:.1f}"), "p_H": steps["p_holm"].map(_p)},
                        columns=["model", "layer", "gate", "step", "Δ mean", f"sim. {PCT}% CI", "df", "p_H"])


# The pooled-trend verdicts (effects._directions) in a word, for the LaTeX table.
SHORT_PROFILE = {"a position profile": "profile", "beyond the position profile": "beyond",
                 "no pooled trend to explain": "no trend", "n/a": "n/a"}


def _p(p: float) -> str:
    return "n/a" if math.isnan(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def _sim(m: float, lo: float, hi: float, df, family: int, p_holm: float, words: bool = False) -> str:
    """A Holm-verdict's estimate with its simultaneous interval (effects.simultaneous): '+0.0123 [+0.0100, +0.0150]
    (t, df 4, m 120)', ' step-down' added where Holm claims and the interval holds 0."""
    if math.isnan(m):
        return "n/a"
    if math.isnan(lo):
        return f"{m:+.4f}" + (f", simultaneous {PCT}% interval {ONE_SEED}" if words else "")
    step_down = " step-down" if p_holm < effects.ALPHA and lo <= 0 <= hi else ""
    where = f" (t, df {df:.3g}, m {int(family)}{step_down})"
    return f"{m:+.4f}" + (f", simultaneous {PCT}% interval " if words else " ") + _ci(lo, hi, "+.4f") + where


def _slope(m: float, lo: float, hi: float, df, words: bool = False) -> str:
    """'+0.0123 [+0.0100, +0.0150] (t, df 4)'; with `words` (findings) '+0.0123, 95% interval [...] (t, df 4)' or
    '+0.0123, 95% interval n/a (one seed)'."""
    if words:
        return (f"{m:+.4f}, {PCT}% interval " + (ONE_SEED if math.isnan(lo) else
                                                   f"{_ci(lo, hi, '+.4f')} (t, df {int(df)})"))
    return f"{m:+.4f}" + ("" if math.isnan(lo) else f" {_ci(lo, hi, '+.4f')} (t, df {int(df)})")


def step_changes(steps: pd.DataFrame) -> str:
    """One gate's steps as one string: 'a→b: +d [lo, hi] (Welch, df 3.1, p_H 0.8)', the interval simultaneous."""
    return "; ".join(f"{r.step}: {r.diff:+.3f}" + ("" if math.isnan(r.sim_low) else
                     f" {_ci(r.sim_low, r.sim_high)} (Welch, df {r.df:.1f}, p_H {_p(r.p_holm)}{_step_down(r)})")
                     for r in steps.itertuples())


def _step_down(r) -> str:
    """', step-down' where Holm claims a change whose simultaneous (Bonferroni) interval still holds 0."""
    return ", step-down" if r.p_holm < effects.ALPHA and r.sim_low <= 0 <= r.sim_high else ""


def _of(frame: pd.DataFrame, t) -> pd.DataFrame:
    return frame[(frame["model"] == t["model"]) & (frame["layer"] == t["layer"]) & (frame["gate"] == t["gate"])
                 & (frame["layers"] == t["layers"])]


def write_gate_tables(name: str, gates: pd.DataFrame, trend_paths, means_paths, steps_tex_path=None,
                      positions_paths=None) -> tuple[dict, pd.DataFrame]:
    """gates_effect.* (the trend of each gate, pooled and at matched positions), gate_means.* (each gate's mean per
    n_step), and when their paths are given the step changes as a LaTeX table of their own (one table per .tex
    file) and gate_positions.* (each window position's slope on n_step).  Returns (effects.gate_family, means)."""
    family, means = effects.gate_family(gates), effects.gate_means_by_nstep(gates)
    trends, steps = family["trends"], family["steps"]
    trends = trends.assign(step_changes=[step_changes(_of(steps, t)) for _, t in trends.iterrows()])
    family["trends"] = trends
    fam_m = trends["family_tests"] if len(trends) else []
    sim = {prefix: [_sim(*v) for v in zip(trends[est], trends[f"{prefix}_sim_low"], trends[f"{prefix}_sim_high"],
                                          trends[f"{prefix}_df"], fam_m, trends[f"{prefix}_p_holm"])]
           for prefix, est in [("slope", "slope_per_nstep")] + [(t, f"{t}_slope") for t in effects.SLOPE_TESTS]}
    show = trends.assign(**{
        "model": trends["model"].map(names.display),
        "layer": trends["layer"] + 1,
        "mean at first → last n": [f"{a:.3f} → {b:.3f}" for a, b in zip(trends["gate_mean_first"],
                                                                        trends["gate_mean_last"])],
        f"pooled slope, sim. {PCT}% CI": sim["slope"], "p_H": trends["slope_p_holm"].map(_p),
        "start positions": trends["matched_positions"],
        f"start-aligned slope, sim. {PCT}% CI": sim["matched"], "start p_H": trends["matched_p_holm"].map(_p),
        "end lags": trends["end_matched_positions"],
        f"end-aligned slope, sim. {PCT}% CI": sim["end_matched"], "end p_H": trends["end_matched_p_holm"].map(_p),
        "padding-free targets per run": trends["padfree_targets"].map(lambda v: "n/a" if math.isnan(v) else
                                                                     f"{v:,.0f}"),
        f"padding-free pooled slope, sim. {PCT}% CI": sim["padfree"],
        "padding-free p_H": trends["padfree_p_holm"].map(_p),
        f"padding-free start-aligned, sim. {PCT}% CI": sim["padfree_matched"],
        "padding-free start p_H": trends["padfree_matched_p_holm"].map(_p),
        f"padding-free end-aligned, sim. {PCT}% CI": sim["padfree_end"],
        "padding-free end p_H": trends["padfree_end_p_holm"].map(_p),
        "profile slope": trends["profile_slope"].map(lambda v: f"{v:+.4f}"),
        f"beyond profile, sim. {PCT}% CI": sim["beyond"],
        "beyond p_H": trends["beyond_p_holm"].map(_p),
        "τ (p_H)": [f"{v:+.2f} ({_p(p)})" for v, p in zip(trends["kendall_tau"], trends["kendall_p_holm"])],
        f"step changes, sim. {PCT}% CI": trends["step_changes"],
    })[["model", "layer", "gate", "seeds", "n_steps", "mean at first → last n", f"pooled slope, sim. {PCT}% CI",
        "p_H", "direction", "start positions", f"start-aligned slope, sim. {PCT}% CI", "start p_H",
        "at_matched_positions", "end lags", f"end-aligned slope, sim. {PCT}% CI", "end p_H", "at_matched_lags",
        "padding-free targets per run", f"padding-free pooled slope, sim. {PCT}% CI", "padding-free p_H",
        "padding_free", f"padding-free start-aligned, sim. {PCT}% CI", "padding-free start p_H",
        "padding_free_at_matched_positions", f"padding-free end-aligned, sim. {PCT}% CI", "padding-free end p_H",
        "padding_free_at_matched_lags", "profile slope", f"beyond profile, sim. {PCT}% CI", "beyond p_H",
        "position_profile", "τ (p_H)", f"step changes, sim. {PCT}% CI"]].rename(columns={
            "at_matched_positions": "start-aligned", "at_matched_lags": "end-aligned",
            "padding_free": "padding-free", "padding_free_at_matched_positions": "padding-free start-aligned",
            "padding_free_at_matched_lags": "padding-free end-aligned", "position_profile": "pooled trend"})
    title = f"Gate means against context length n, study {name}"
    note = (f"Gate values that have an effect only. {SLOPE_METHOD[0].upper()}{SLOPE_METHOD[1:]}. "
            f"{MATCHED_METHOD[0].upper()}{MATCHED_METHOD[1:]} (start-aligned). "
            f"{END_METHOD[0].upper()}{END_METHOD[1:]}. {PADFREE_METHOD[0].upper()}{PADFREE_METHOD[1:]}. "
            f"Trend: {TREND_METHOD}. {HOLM}. Layers count from 1.")

    def brief(prefix: str, est: str) -> list[str]:  # the LaTeX table's '+0.0123 [+0.0100, +0.0150]'
        return ["n/a" if math.isnan(m) else _slope(m, lo, hi, 0).split(" (")[0] for m, lo, hi in zip(
            trends[est], trends[f"{prefix}_sim_low"], trends[f"{prefix}_sim_high"])]

    trend_tex = show[["model", "layer", "gate", "p_H", "start p_H", "end p_H", "padding-free end p_H"]].assign(**{
        "pooled [sim. 95% CI]": brief("slope", "slope_per_nstep"),
        "start [sim. 95% CI]": brief("matched", "matched_slope"),
        "end [sim. 95% CI]": brief("end_matched", "end_matched_slope"),
        "pad-free end [sim. 95% CI]": brief("padfree_end", "padfree_end_slope"),
    })[["model", "layer", "gate", "pooled [sim. 95% CI]", "p_H", "start [sim. 95% CI]", "start p_H",
        "end [sim. 95% CI]", "end p_H", "pad-free end [sim. 95% CI]", "padding-free end p_H"]].rename(
        columns={"padding-free end p_H": "pad-free end p_H"})
    dfs = sorted(set(trends["slope_df"]))
    m_txt = f"m = {int(trends['family_tests'].iloc[0])}" if len(trends) else "m tests"
    trend_caption = (f"Gate slope per token of context: pooled, at the start positions (0 = oldest input) and end "
                     f"lags (1 = last input) every n shares, and end-aligned on padding-free targets; mean over "
                     f"seeds, simultaneous {PCT}% t intervals (Bonferroni, {m_txt}; df "
                     + (f"{dfs[0]}" if len(dfs) == 1 else "= seeds - 1") + "); p_H: Holm.")
    _write_four(trends, show, title, note, trend_paths, (trend_tex, trend_caption, f"tab:{name}-gate-trends"))
    if steps_tex_path is not None:
        with atomic_write(steps_tex_path) as fh:
            fh.write(_latex(_step_rows(steps), f"Gate means, each context length n against the next: difference "
                            f"of the means (Δ mean) with its {PCT}% Welch interval, Welch-Satterthwaite df and "
                            "Holm-adjusted p (p_H).", f"tab:{name}-gate-steps"))
    if positions_paths is not None:
        pp = family["positions"]
        place = [f"position {v}" if a == "start" else f"lag {v}" for a, v in zip(pp["align"], pp["position"])]
        show_p = pp.assign(model=pp["model"].map(names.display), layer=pp["layer"] + 1, place=place,
                           **{f"slope, sim. {PCT}% CI": [_sim(*v) for v in zip(
                               pp["slope"], pp["sim_low"], pp["sim_high"], pp["df"], pp["family_tests"],
                               pp["p_holm"])],
                              "p_H": pp["p_holm"].map(_p)})[
            ["model", "layer", "gate", "align", "subset", "place", "n_steps", "seeds", f"slope, sim. {PCT}% CI",
             "p_H", "verdict"]]
        _write_four(pp, show_p.rename(columns={"n_steps": "n with this place"}),
                    f"Gate at each window position and lag against context length n, study {name}",
                    "Per window place, the n_steps whose windows have it, counted two ways: align start, position "
                    "(0 = the window's oldest input token), and align end, lag (1 = the last input token, the one "
                    "just before the predicted word); subset all: every target with a real token there, "
                    f"padding-free: {PADFREE_METHOD.split(': ', 1)[1].split('; the pooled')[0]}. "
                    f"{SLOPE_METHOD.replace('(over the whole window)', 'at that place')}. {HOLM}. "
                    "Layers count from 1.", positions_paths,
                    (show_p.drop(columns=["n_steps"]), f"Gate slope per token of context at each window place: "
                     f"start-aligned position (0 = oldest) and end-aligned lag (1 = last input), all targets and "
                     f"padding-free ones; mean over seeds with its simultaneous {PCT}% t interval (Bonferroni over "
                     "the family) and Holm-adjusted p (p_H).", f"tab:{name}-gate-positions"))
    show = means.assign(model=means["model"].map(names.display), layer=means["layer"] + 1,
                        mean=means["mean"].map(lambda v: f"{v:.3f}"),
                        values_per_run=means["values_per_run"].map("{:,}".format),
                        **{f"{PCT}% CI": [_ci(a, b, ".3f") for a, b in zip(means["ci_low"], means["ci_high"])]})[
        ["model", "layer", "gate", "n_step", "seeds", "mean", f"{PCT}% CI", "values_per_run"]]
    _write_four(means, show, f"Gate means per context length n, study {name}",
                f"Mean over seeds of each run's gate mean (pooled over the window), with the {PCT}% t interval "
                "over seeds (df = seeds - 1; n/a with one seed); values per run: gate values with an effect per run "
                "(tokens x units). Layers count from 1.", means_paths,
                (show.drop(columns=["values_per_run"]), f"Mean gate activation per context length n, mean over "
                 f"seeds with its {PCT}% t interval (df = seeds - 1; n/a with one seed).", f"tab:{name}-gate-means"))
    return family, means


def _gate_sentences(trends: pd.DataFrame, means: pd.DataFrame) -> list[str]:
    out = [_confound_summary(trends)] if len(trends) else []
    for _, t in trends.iterrows():
        m = _of(means, t)
        one = t["seeds"] < 2
        per_step = ", ".join(f"{int(r.n_step)}: {r.mean:.3f}" + ("" if one else f" {_ci(r.ci_low, r.ci_high, '.3f')}")
                             for r in m.itertuples())
        per_step = per_step if one else f"(marginal {PCT}% t intervals, df = seeds - 1) {per_step}"

        def sim(prefix: str, est: str) -> str:
            return _sim(t[est], t[f"{prefix}_sim_low"], t[f"{prefix}_sim_high"], t[f"{prefix}_df"],
                        t["family_tests"], t[f"{prefix}_p_holm"], True)

        def where(col: str, word: str) -> str:
            v = t[col] if isinstance(t[col], str) else ""
            return f"{word}{'s' if ' ' in v else ''} {v or 'none'}"

        padfree = ("no padding-free rows (gates.csv written before them)" if math.isnan(t["padfree_targets"]) else
                   f"{t['padfree_targets']:,.0f} targets per run, the same at every n: pooled {t['padding_free']} "
                   f"(slope {sim('padfree', 'padfree_slope')}, p_H {_p(t['padfree_p_holm'])}); end-aligned "
                   f"({where('padfree_end_positions', 'lag')}): {t['padding_free_at_matched_lags']} (slope "
                   f"{sim('padfree_end', 'padfree_end_slope')}, p_H {_p(t['padfree_end_p_holm'])}); start-aligned "
                   f"({where('padfree_matched_positions', 'position')}): {t['padding_free_at_matched_positions']} "
                   f"(slope {sim('padfree_matched', 'padfree_matched_slope')}, p_H "
                   f"{_p(t['padfree_matched_p_holm'])})")
        out.append(f"- **{names.display(t['model'])}, layer {int(t['layer']) + 1}, gate {t['gate']}**: pooled over "
                   f"the window: {t['direction']} (slope {sim('slope', 'slope_per_nstep')} per token of context, "
                   f"p_H {_p(t['slope_p_holm'])}; τ = {t['kendall_tau']:+.2f}, p_H {_p(t['kendall_p_holm'])}; "
                   f"{_count(int(t['runs']), 'run')} over {_count(int(t['seeds']), 'seed')}). Start-aligned, at a "
                   f"fixed window position ({where('matched_positions', 'position')}, counted from the oldest input "
                   f"and shared by every n): {t['at_matched_positions']} (slope {sim('matched', 'matched_slope')}, "
                   f"p_H {_p(t['matched_p_holm'])}). End-aligned, at a fixed distance from the predicted word "
                   f"({where('end_matched_positions', 'lag')}, 1 = the last input): {t['at_matched_lags']} (slope "
                   f"{sim('end_matched', 'end_matched_slope')}, p_H {_p(t['end_matched_p_holm'])}). Padding-free: "
                   f"{padfree}. Position profile: it alone predicts a slope of {t['profile_slope']:+.4f}, the rest "
                   f"is {sim('beyond', 'beyond_slope')}, p_H {_p(t['beyond_p_holm'])}; so the pooled trend: "
                   f"{t['position_profile']}. Mean per n: {per_step}. Steps: {t['step_changes']}.")
    return out


CLAIMS = ("rises", "falls")


def _confound_summary(trends: pd.DataFrame) -> str:
    """One line per study: how many of the pooled trends hold when both confounds are removed (padding-free and
    end-aligned: the same targets, read at the same distance from the predicted word at every n)."""
    pooled = trends["direction"].isin(CLAIMS)
    clean = trends["padding_free_at_matched_lags"].isin(CLAIMS)
    kept = pooled & (trends["padding_free_at_matched_lags"] == trends["direction"])
    has_padfree = ~trends["padfree_targets"].isna()
    if not has_padfree.any():
        return (f"- **Without the confounds**: not measured here (the runs' gates.csv predate the padding-free "
                f"rows); {int(pooled.sum())} of {_count(len(trends), 'gate')} change pooled over the window, which "
                "mixes start-aligned positions with padding that differs by n.")
    gone = ", ".join(f"{names.display(t.model)} l{int(t.layer) + 1} {t.gate}" for t in
                     trends[pooled & ~kept & has_padfree].itertuples()) or "none"
    new = ", ".join(f"{names.display(t.model)} l{int(t.layer) + 1} {t.gate}" for t in
                    trends[clean & ~pooled].itertuples()) or "none"
    return (f"- **Without the confounds** (padding-free targets, the same at every n, read at the lags every n "
            f"shares, counted back from the predicted word; Holm over the family): {int(pooled.sum())} of "
            f"{_count(len(trends), 'gate')} change with n pooled over the window; {int(kept.sum())} of them change "
            f"the same way without the confounds, {int(clean.sum())} in all do. Pooled trends that do not survive: "
            f"{gone}; changes seen only without the confounds: {new}.")


def _impl_sentences(diffs: pd.DataFrame) -> list[str]:
    out = []
    for _, d in diffs.iterrows():
        a, b = (names.display(d["arch"] if i == "torch" else f"{d['arch']}/{i}") for i in (d["impl_a"], d["impl_b"]))
        ci = _ci(d["sim_low"], d["sim_high"], "+.2f", ONE_SEED)
        step_down = ", step-down" if d["p_holm"] < effects.ALPHA and d["sim_low"] <= 0 <= d["sim_high"] else ""
        method = "" if math.isnan(d["sim_low"]) else (f" (paired t, df {int(d['df'])}, m {int(d['family_tests'])}, "
                                                      f"p_H {_p(d['p_holm'])}{step_down})")
        out.append(f"- **{b} vs {a}** (n = {d['n_step']}, {_count(int(d['layers']), 'layer')}, "
                   f"{d['regime']}): test PPL {d['test_ppl_b']:.2f} vs {d['test_ppl_a']:.2f}, difference "
                   f"{d['diff_b_minus_a']:+.2f}, simultaneous {PCT}% interval {ci}{method}, "
                   f"over {_count(int(d['seeds']), 'paired seed')}: {d['verdict']}.")
    return out


def _ablation_sentences(diffs: pd.DataFrame) -> list[str]:
    """The bias ablation (models/lstm.py): does the cell without its second bias (cellonebias) move away from
    nn.LSTM as concat does?  Read from the contrasts' Holm verdicts, per cell of the grid that has all three."""
    out = []
    for (arch, n_step, layers, regime), d in diffs.groupby(["arch", "n_step", "layers", "regime"]):
        v = d.set_index("impl_b")
        if not {"concat", "cellonebias"} <= set(v.index) or (v["seeds"] < 2).any():
            continue
        concat, onebias = v.loc["concat"], v.loc["cellonebias"]
        cell = v.loc["cell"] if "cell" in v.index else None
        claimed = concat["p_holm"] < effects.ALPHA
        same = onebias["p_holm"] < effects.ALPHA and (onebias["diff_b_minus_a"] > 0) == (concat["diff_b_minus_a"] > 0)
        cell_clear = cell is None or cell["p_holm"] >= effects.ALPHA
        answer = ("no concat gap to explain" if not claimed else
                  "the bias parameterisation accounts for it: without its second bias the cell moves as concat does"
                  if same and cell_clear else
                  "the bias parameterisation does not account for it: the cell without its second bias does not "
                  "move as concat does" if not same else
                  "not settled: the cell with both biases also differs from nn.LSTM")
        out.append(f"- **Bias ablation** (n = {n_step}, {_count(int(layers), 'layer')}, {regime}): concat "
                   f"{concat['diff_b_minus_a']:+.2f} (p_H {_p(concat['p_holm'])}), the cell without its second bias "
                   f"{onebias['diff_b_minus_a']:+.2f} (p_H {_p(onebias['p_holm'])})"
                   + ("" if cell is None else f", the cell {cell['diff_b_minus_a']:+.2f} (p_H {_p(cell['p_holm'])})")
                   + f" test PPL against nn.LSTM: {answer}.")
    return out


# The column the study's best cell is chosen on: valid, never test (issue 44); its test PPL is then only reported.
SELECT_ON = "valid_ppl"


def _ppl_sentences(runs: pd.DataFrame) -> list[str]:
    """The study's best cell, chosen on valid: the cell (model, n_step, layers, regime) with the lowest valid PPL
    averaged over its seeds (the first in the cells' order on a tie), with that cell's mean test PPL; then how the
    neural runs stopped."""
    cells = ["model", "n_step", "layers", "regime"]
    groups = runs.groupby(cells)
    best = (groups[["valid_ppl", "test_ppl"]].mean().assign(count=groups.size())
            .sort_values(SELECT_ON, kind="stable"))
    if best.empty:
        return []
    (model, n_step, layers, regime), top = best.index[0], best.iloc[0]
    where = "stream" if regime == "stream" else f"n = {n_step}"
    stops = runs[runs["impl"] != "ngram"]
    out = [f"- Best cell, chosen on valid (lowest mean valid PPL): **{names.display(model)}** ({where}, "
           f"{_count(int(layers), 'layer')}): valid PPL {top['valid_ppl']:,.2f}, test PPL {top['test_ppl']:,.2f}, "
           f"mean over {_count(int(top['count']), 'seed')} (the table gives every cell)."]
    if len(stops):
        counts = stops["stopped_because"].value_counts()
        before = int((stops["best_epoch"] < stops["epochs"]).sum()) if "best_epoch" in stops else 0
        out.append(f"- Training: {_count(len(stops), 'neural run')}; stopped by "
                   + ", ".join(f"{str(k).replace('_', ' ')} ({v})" for k, v in counts.items())
                   + f"; {before} of {len(stops)} had their best valid epoch before their last.")
    return out


def write_findings(name: str, runs: pd.DataFrame, family: dict | None, means: pd.DataFrame | None,
                   md_path, html_path) -> None:
    """findings.md and findings.html: the same sections (a heading line, then one item per finding), as text."""
    sections = [("", _ppl_sentences(runs))]
    diffs = effects.impl_differences(runs)
    if len(diffs):
        sections.append(("Implementations, each against nn.LSTM/nn.GRU once (same seed = same initial weights; "
                         f"paired t over seeds; a difference is claimed only when its p, Holm-adjusted over these "
                         f"contrasts (p_H), is below 0.05; the intervals are simultaneous {PCT}% ones over the m "
                         "contrasts (Bonferroni), so one that excludes 0 is always beside a claim)",
                         _impl_sentences(diffs) + _ablation_sentences(diffs)))
    trends = family["trends"] if family is not None else None
    if trends is not None and len(trends):
        sections.append((f"Gates against context length n, pooled over the window, at matched start-aligned "
                         "positions, at matched end-aligned lags, and on padding-free targets (slopes per token of "
                         f"context, mean over seeds; {HOLM}; the gate tables give the method)",
                         _gate_sentences(trends, means)))
    intro = (f"Generated from this run's results by lmgrid aggregate; intervals are {PCT}% over seeds, each with its "
             "method and degrees of freedom.")
    lines = [f"## Findings of study {name}", "", intro, ""]
    for head, items in sections:
        lines += ([f"**{head}**:", ""] if head else []) + items + [""]
    with atomic_write(md_path) as fh:
        fh.write("\n".join(lines))
    body = [f"<p>{escape(intro)}</p>"]
    for head, items in sections:
        body += ([f"<h3>{escape(head)}</h3>"] if head else []) + [
            "<ul>" + "".join(f"<li>{escape(item[2:]).replace('**', '')}</li>" for item in items) + "</ul>"]
    with atomic_write(html_path) as fh:
        fh.write(html_page(f"Findings of study {name}", body))
