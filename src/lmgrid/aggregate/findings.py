"""The study's statistical tables and its findings, written from the run's own results (never by hand).

* gates_effect.{csv,md,tex,html}: the trend of each gate's mean with n_step (lmgrid.aggregate.effects.gate_trends),
  and gate_steps.tex: its step changes (each n_step against the next) as a LaTeX table of their own;
* gate_means.{csv,md,tex,html}: each gate's mean per n_step with its 95% interval over seeds;

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

from ..errors import atomic_write
from . import effects, names
from .tables import fit_tex, html_page, latex_escape

PCT = int(effects.CONFIDENCE * 100)
SLOPE_METHOD = (f"slope: each seed's least-squares slope of its runs' gate means on n_step (per context word), "
                f"mean over seeds with its {PCT}% t interval over seeds; rises / falls when the interval excludes 0")
TREND_METHOD = ("Kendall's tau-b between n_step and each run's gate mean over all runs (a rank trend test for "
                f"ordered groups), two-sided, level {effects.ALPHA:g}, which decides the direction only for one seed; "
                f"each n_step against the next: difference of the means with its {PCT}% Welch interval over seeds "
                "(steps that rise and fall, each interval excluding 0, make a trend non-monotone)")
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


STEP = re.compile(r"(\d+)→(\d+): ([+-]\d+\.\d+)(?: \[([+-]\d+\.\d+), ([+-]\d+\.\d+)\])?")


def _step_rows(trends: pd.DataFrame) -> pd.DataFrame:
    """The step changes of gate_trends (one string per gate) as one row per step, for a table a column wide."""
    rows = []
    for _, t in trends.iterrows():
        for a, b, diff, lo, hi in STEP.findall(t["step_changes"]):
            rows.append({"model": names.display(t["model"]), "layer": int(t["layer"]) + 1, "gate": t["gate"],
                         "step": f"{a}→{b}", "Δ mean": diff, f"{PCT}% CI": f"[{lo}, {hi}]" if lo else "n/a"})
    return pd.DataFrame(rows, columns=["model", "layer", "gate", "step", "Δ mean", f"{PCT}% CI"])


def write_gate_tables(name: str, gates: pd.DataFrame, trend_paths, means_paths,
                      steps_tex_path=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """gates_effect.* (the trend of each gate), gate_means.* (each gate's mean per n_step) and, when
    steps_tex_path is given, the step changes as a LaTeX table of their own (one table per .tex file)."""
    trends, means = effects.gate_trends(gates), effects.gate_means_by_nstep(gates)
    show = trends.assign(**{
        "model": trends["model"].map(names.display),
        "layer": trends["layer"] + 1,
        "mean at first → last n": [f"{a:.3f} → {b:.3f}" for a, b in zip(trends["gate_mean_first"],
                                                                        trends["gate_mean_last"])],
        f"slope per token, {PCT}% CI": [f"{m:+.4f} {_ci(lo, hi, '+.4f')}" for m, lo, hi in zip(
            trends["slope_per_nstep"], trends["slope_ci_low"], trends["slope_ci_high"])],
        "τ": trends["kendall_tau"].map(lambda v: f"{v:+.2f}"), "p": trends["p_value"].map(lambda v: f"{v:.3f}"),
        f"step changes, {PCT}% CI": trends["step_changes"],
    })[["model", "layer", "gate", "seeds", "n_steps", "mean at first → last n", f"slope per token, {PCT}% CI",
        "τ", "p", f"step changes, {PCT}% CI", "direction"]]
    title = f"Gate means against context length n, study {name}"
    note = (f"Gate values that have an effect only. {SLOPE_METHOD[0].upper()}{SLOPE_METHOD[1:]}. "
            f"Trend: {TREND_METHOD}. Layers count from 1.")
    trend_tex = show.drop(columns=[f"step changes, {PCT}% CI"]).rename(columns={
        "mean at first → last n": "first → last", f"slope per token, {PCT}% CI": "slope [95% CI]"})
    trend_caption = (f"Gate means against context length n: the mean at the first and last n, the slope per token "
                     f"of context (mean over seeds, {PCT}% t interval), Kendall's τ with its p-value, and the "
                     "direction the slope's interval supports.")
    _write_four(trends, show, title, note, trend_paths, (trend_tex, trend_caption, f"tab:{name}-gate-trends"))
    if steps_tex_path is not None:
        with atomic_write(steps_tex_path) as fh:
            fh.write(_latex(_step_rows(trends), f"Gate means, each context length n against the next: difference "
                            f"of the means (Δ mean) with its {PCT}% Welch interval over seeds.",
                            f"tab:{name}-gate-steps"))
    show = means.assign(model=means["model"].map(names.display), layer=means["layer"] + 1,
                        mean=means["mean"].map(lambda v: f"{v:.3f}"),
                        values_per_run=means["values_per_run"].map("{:,}".format),
                        **{f"{PCT}% CI": [_ci(a, b, ".3f") for a, b in zip(means["ci_low"], means["ci_high"])]})[
        ["model", "layer", "gate", "n_step", "seeds", "mean", f"{PCT}% CI", "values_per_run"]]
    _write_four(means, show, f"Gate means per context length n, study {name}",
                f"Mean over seeds of each run's gate mean, with the {PCT}% t interval over seeds (n/a with one "
                "seed); values per run: gate values with an effect per run (tokens x units). Layers count from 1.",
                means_paths,
                (show.drop(columns=["values_per_run"]), f"Mean gate activation per context length n, mean over "
                 f"seeds with its {PCT}% t interval (n/a with one seed).", f"tab:{name}-gate-means"))
    return trends, means


def _gate_sentences(trends: pd.DataFrame, means: pd.DataFrame) -> list[str]:
    out = []
    for _, t in trends.iterrows():
        m = means[(means["model"] == t["model"]) & (means["layer"] == t["layer"]) & (means["gate"] == t["gate"])]
        one = t["seeds"] < 2
        per_step = ", ".join(f"{int(r.n_step)}: {r.mean:.3f}" + ("" if one else f" {_ci(r.ci_low, r.ci_high, '.3f')}")
                             for r in m.itertuples())
        slope_ci = _ci(t["slope_ci_low"], t["slope_ci_high"], "+.4f", ONE_SEED)
        out.append(f"- **{names.display(t['model'])}, layer {int(t['layer']) + 1}, gate {t['gate']}**: "
                   f"{t['direction']} (slope {t['slope_per_nstep']:+.4f} per token of context, {PCT}% interval "
                   f"{slope_ci}; τ = {t['kendall_tau']:+.2f}, p = {t['p_value']:.3f}; "
                   f"{_count(int(t['runs']), 'run')} over {_count(int(t['seeds']), 'seed')}). "
                   f"Mean per n: {per_step}. Steps: {t['step_changes']}.")
    return out


def _impl_sentences(diffs: pd.DataFrame) -> list[str]:
    out = []
    for _, d in diffs.iterrows():
        a, b = (names.display(d["arch"] if i == "torch" else f"{d['arch']}/{i}") for i in (d["impl_a"], d["impl_b"]))
        out.append(f"- **{b} vs {a}** (n = {d['n_step']}, {_count(int(d['layers']), 'layer')}, "
                   f"{d['regime']}): test PPL {d['test_ppl_b']:.2f} vs {d['test_ppl_a']:.2f}, difference "
                   f"{d['diff_b_minus_a']:+.2f}, {PCT}% interval {_ci(d['ci_low'], d['ci_high'], '+.2f', ONE_SEED)}, "
                   f"over {_count(int(d['seeds']), 'paired seed')}: {d['verdict']}.")
    return out


def _ppl_sentences(runs: pd.DataFrame) -> list[str]:
    cells = ["model", "n_step", "layers", "regime"]
    best = runs.groupby(cells)["test_ppl"].agg(["mean", "count"]).sort_values("mean")
    if best.empty:
        return []
    (model, n_step, layers, regime), top = best.index[0], best.iloc[0]
    where = "stream" if regime == "stream" else f"n = {n_step}"
    stops = runs[runs["impl"] != "ngram"]
    out = [f"- Lowest test PPL: **{names.display(model)}** ({where}, {_count(int(layers), 'layer')}) at "
           f"{top['mean']:,.2f}, mean over {_count(int(top['count']), 'seed')} (the table gives every cell)."]
    if len(stops):
        counts = stops["stopped_because"].value_counts()
        before = int((stops["best_epoch"] < stops["epochs"]).sum()) if "best_epoch" in stops else 0
        out.append(f"- Training: {_count(len(stops), 'neural run')}; stopped by "
                   + ", ".join(f"{str(k).replace('_', ' ')} ({v})" for k, v in counts.items())
                   + f"; {before} of {len(stops)} had their best valid epoch before their last.")
    return out


def write_findings(name: str, runs: pd.DataFrame, trends: pd.DataFrame | None, means: pd.DataFrame | None,
                   md_path, html_path) -> None:
    """findings.md and findings.html: the same sections (a heading line, then one item per finding), as text."""
    sections = [("", _ppl_sentences(runs))]
    diffs = effects.impl_differences(runs)
    if len(diffs):
        sections.append(("Implementations (same seed = same initial weights; a difference is claimed only when its "
                         f"{PCT}% interval over paired seeds excludes 0)", _impl_sentences(diffs)))
    if trends is not None and len(trends):
        sections.append((f"Gates against context length n (the slope per token of context, mean over seeds with its "
                         f"{PCT}% t interval; Kendall's τ as a rank check; the gate tables give the method)",
                         _gate_sentences(trends, means)))
    intro = f"Generated from this run's results by lmgrid aggregate; intervals are {PCT}% over seeds."
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
