"""The study's statistical tables and its findings, written from the run's own results (never by hand).

* gates_effect.{csv,md,tex,html}: the trend of each gate's mean with n_step (lmgrid.aggregate.effects.gate_trends);
* gate_means.{csv,md,tex,html}: each gate's mean per n_step with its 95% interval over seeds;
* findings.{md,html}: one sentence per claim a reader would draw, each with the number and interval it rests on,
  made from the tables above, the implementation comparison and the PPL table; nothing is claimed that an
  interval does not support.
"""
from __future__ import annotations

import math
import re
from html import escape

import pandas as pd

from ..errors import atomic_write
from . import effects, names
from .tables import fit_latex, html_page, latex_escape, plain_width

PCT = int(effects.CONFIDENCE * 100)
SLOPE_METHOD = (f"slope: each seed's least-squares slope of its runs' gate means on n_step (per context word), "
                f"mean over seeds with its {PCT}% t interval over seeds; rises / falls when the interval excludes 0")
TREND_METHOD = ("Kendall's tau-b between n_step and each run's gate mean over all runs (a rank trend test for "
                f"ordered groups), two-sided, level {effects.ALPHA:g}, which decides the direction only for one seed; "
                f"each n_step against the next: difference of the means with its {PCT}% Welch interval over seeds "
                "(steps that rise and fall, each interval excluding 0, make a trend non-monotone)")


def _ci(lo: float, hi: float, fmt: str = "+.3f") -> str:
    return "–" if math.isnan(lo) else f"[{lo:{fmt}}, {hi:{fmt}}]"


TEXT_COLUMNS = {"Model", "Gate", "Direction", "Step"}  # left-aligned; numbers right-aligned
HEADS = {"model": "Model", "layer": "Layer", "gate": "Gate", "seeds": "Seeds", "direction": "Direction",
         "step": "Step", "mean": "Mean"}


def _latex(show: pd.DataFrame, caption: str, label: str) -> str:
    show = show.rename(columns=HEADS)
    tex = (show.style.hide(axis="index").format(escape="latex").format_index(escape="latex", axis=1)
           .to_latex(hrules=True, caption=latex_escape(caption).replace("%", r"\%"), label=label, position="t",
                     position_float="centering",
                     column_format="".join("l" if c in TEXT_COLUMNS else "r" for c in show.columns)))
    tex = fit_latex(tex, plain_width(show))
    tex = re.sub(r"(?<![\w.])-(?=\d)", "$-$", tex)  # a minus sign, not a hyphen
    return tex.replace("→", r"$\to$").replace("τ", r"$\tau$").replace("Δ", r"$\Delta$") + "\n"


def _write_four(df_csv: pd.DataFrame, show: pd.DataFrame, title: str, note: str, label: str, paths,
                tex_parts: list[tuple[pd.DataFrame, str, str]] | None = None) -> None:
    """CSV (raw ids, all digits), Markdown and HTML (`show`, one table) and LaTeX: `show` again, or `tex_parts`
    (table, caption, label) when one table would be too wide for a column."""
    csv_path, md_path, tex_path, html_path = paths
    df_csv = df_csv.copy()
    df_csv.insert(1, "model_name", df_csv["model"].map(names.display))
    with atomic_write(csv_path) as fh:
        df_csv.to_csv(fh, index=False, float_format="%.6g")
    show = show.rename(columns=HEADS)
    body = show.to_markdown(index=False, disable_numparse=True) if len(show) else "(no gate statistics)"
    with atomic_write(md_path) as fh:
        fh.write(f"## {title}\n\n{note}\n\n{body}\n")
    parts = tex_parts or [(show, f"{title}. {note}", label)]
    with atomic_write(tex_path) as fh:
        fh.write("\n".join(_latex(*part) for part in parts))
    with atomic_write(html_path) as fh:
        fh.write(html_page(title, [f"<p>{escape(note)}</p>", show.to_html(index=False, border=0)]))


STEP = re.compile(r"(\d+)→(\d+): ([+-]\d+\.\d+)(?: \[([+-]\d+\.\d+), ([+-]\d+\.\d+)\])?")


def _step_rows(trends: pd.DataFrame) -> pd.DataFrame:
    """The step changes of gate_trends (one string per gate) as one row per step, for a table a column wide."""
    rows = []
    for _, t in trends.iterrows():
        for a, b, diff, lo, hi in STEP.findall(t["step_changes"]):
            rows.append({"model": names.display(t["model"]), "layer": int(t["layer"]) + 1, "gate": t["gate"],
                         "step": f"{a}→{b}", "Δ mean": diff, f"{PCT}% CI": f"[{lo}, {hi}]" if lo else "–"})
    return pd.DataFrame(rows, columns=["model", "layer", "gate", "step", "Δ mean", f"{PCT}% CI"])


def write_gate_tables(name: str, gates: pd.DataFrame, trend_paths, means_paths) -> tuple[pd.DataFrame, pd.DataFrame]:
    trends, means = effects.gate_trends(gates), effects.gate_means_by_nstep(gates)
    show = trends.assign(**{
        "model": trends["model"].map(names.display),
        "layer": trends["layer"] + 1,
        "mean at first → last n_step": [f"{a:.3f} → {b:.3f}" for a, b in zip(trends["gate_mean_first"],
                                                                             trends["gate_mean_last"])],
        f"slope per n_step, {PCT}% CI": [f"{m:+.4f} {_ci(lo, hi, '+.4f')}" for m, lo, hi in zip(
            trends["slope_per_nstep"], trends["slope_ci_low"], trends["slope_ci_high"])],
        "τ": trends["kendall_tau"].map(lambda v: f"{v:+.2f}"), "p": trends["p_value"].map(lambda v: f"{v:.3f}"),
        f"step changes, {PCT}% CI": trends["step_changes"],
    })[["model", "layer", "gate", "seeds", "n_steps", "mean at first → last n_step", f"slope per n_step, {PCT}% CI",
        "τ", "p",
        f"step changes, {PCT}% CI", "direction"]]
    title = f"Gate means against n_step, study {name}"
    note = (f"Gate values that have an effect only (docs/contracts.md). {SLOPE_METHOD[0].upper()}{SLOPE_METHOD[1:]}. "
            f"Trend: {TREND_METHOD}. Layers count from 1.")
    # LaTeX: the trend (first → last, tau, p, direction) and the step changes as two tables, each a column wide.
    trend_tex = show.drop(columns=[f"step changes, {PCT}% CI"]).rename(columns={
        "mean at first → last n_step": "first → last", "n_steps": "n_step", f"slope per n_step, {PCT}% CI": "slope"})
    tex_parts = [(trend_tex, f"{title}: the trend. {note} first → last: the mean at the first and the last n_step.",
                  f"tab:{name}-gate-trends"),
                 (_step_rows(trends), f"{title}: each n_step against the next, the difference of the means (Δ mean) "
                  f"with its {PCT}% Welch interval over seeds (none with one seed). Layers count from 1.",
                  f"tab:{name}-gate-steps")]
    _write_four(trends, show, title, note, f"tab:{name}-gate-trends", trend_paths, tex_parts)
    show = means.assign(model=means["model"].map(names.display), layer=means["layer"] + 1,
                        mean=means["mean"].map(lambda v: f"{v:.3f}"),
                        **{f"{PCT}% CI": [_ci(a, b, ".3f") for a, b in zip(means["ci_low"], means["ci_high"])]})[
        ["model", "layer", "gate", "n_step", "seeds", "mean", f"{PCT}% CI", "values_per_run"]]
    _write_four(means, show, f"Gate means per n_step, study {name}",
                f"Mean over seeds of each run's gate mean, with the {PCT}% t interval over seeds (none with one "
                "seed); values_per_run: gate values with an effect per run (tokens x units). Layers count from 1.",
                f"tab:{name}-gate-means", means_paths)
    return trends, means


def _gate_sentences(trends: pd.DataFrame, means: pd.DataFrame) -> list[str]:
    out = []
    for _, t in trends.iterrows():
        m = means[(means["model"] == t["model"]) & (means["layer"] == t["layer"]) & (means["gate"] == t["gate"])]
        per_step = ", ".join(f"{int(r.n_step)}: {r.mean:.3f} {_ci(r.ci_low, r.ci_high, '.3f')}" for r in m.itertuples())
        out.append(f"- **{names.display(t['model'])}, layer {int(t['layer']) + 1}, gate {t['gate']}**: {t['direction']} "
                   f"(slope {t['slope_per_nstep']:+.4f} per n_step {_ci(t['slope_ci_low'], t['slope_ci_high'], '+.4f')}; "
                   f"τ = {t['kendall_tau']:+.2f}, p = {t['p_value']:.3f}, {t['runs']} runs over {t['seeds']} seeds). "
                   f"Means per n_step: {per_step}. Steps: {t['step_changes']}.")
    return out


def _impl_sentences(diffs: pd.DataFrame) -> list[str]:
    out = []
    for _, d in diffs.iterrows():
        a, b = (names.display(d["arch"] if i == "torch" else f"{d['arch']}/{i}") for i in (d["impl_a"], d["impl_b"]))
        out.append(f"- **{b} vs {a}** (n_step {d['n_step']}, {d['layers']} layer(s), "
                   f"{d['regime']}): test PPL {d['test_ppl_b']:.2f} vs {d['test_ppl_a']:.2f}, difference "
                   f"{d['diff_b_minus_a']:+.2f} {_ci(d['ci_low'], d['ci_high'], '+.2f')} over {d['seeds']} "
                   f"paired seed(s): {d['verdict']}.")
    return out


def _ppl_sentences(runs: pd.DataFrame) -> list[str]:
    cells = ["model", "n_step", "layers", "regime"]
    best = runs.groupby(cells)["test_ppl"].agg(["mean", "count"]).sort_values("mean")
    if best.empty:
        return []
    (model, n_step, layers, regime), top = best.index[0], best.iloc[0]
    where = "stream" if regime == "stream" else f"n_step {n_step}"
    stops = runs[runs["impl"] != "ngram"]
    out = [f"- Lowest test PPL: **{names.display(model)}** ({where}, {layers} layer(s)) at {top['mean']:.2f}, mean over "
           f"{int(top['count'])} seed(s) (the table gives every cell)."]
    if len(stops):
        counts = stops["stopped_because"].value_counts()
        before = int((stops["best_epoch"] < stops["epochs"]).sum()) if "best_epoch" in stops else 0
        out.append(f"- Training: {len(stops)} neural runs; stopped by "
                   + ", ".join(f"{k} ({v})" for k, v in counts.items())
                   + f"; {before} of {len(stops)} had their best valid epoch before their last.")
    return out


def write_findings(name: str, runs: pd.DataFrame, trends: pd.DataFrame | None, means: pd.DataFrame | None,
                   md_path, html_path) -> None:
    lines = [f"## Findings of study `{name}`", "",
             "Generated from this run's results by `lmgrid aggregate`; intervals are 95% over seeds.", ""]
    lines += _ppl_sentences(runs)
    diffs = effects.impl_differences(runs)
    if len(diffs):
        lines += ["", "**Implementations** (same seed = same initial weights; a difference is claimed only when "
                  "its interval excludes 0):"] + _impl_sentences(diffs)
    if trends is not None and len(trends):
        lines += ["", f"**Gates against n_step** ({SLOPE_METHOD}; trend: {TREND_METHOD}):"] + _gate_sentences(trends, means)
    text = "\n".join(lines) + "\n"
    with atomic_write(md_path) as fh:
        fh.write(text)
    items = "".join(f"<li>{escape(line[2:]).replace('**', '')}</li>" for line in lines if line.startswith("- "))
    heads = [escape(line.replace("**", "")) for line in lines[2:3]]
    with atomic_write(html_path) as fh:
        fh.write(html_page(f"Findings of study {name}", [f"<p>{heads[0]}</p>", f"<ul>{items}</ul>"]))
