"""The equal-compute figure (lmgrid.analysis.budget): test PPL against compute, one line per architecture through
the widths chosen on valid (the caller passes budget.chosen(table)), each point labelled with its width.

Panel (a): x = the training CPU-minutes the runs measured (mean over seeds; this machine's); panel (b): x = the
training FLOPs they spent (the analytic count, the same on every machine).  Both axes log: the budgets are spaced by
factors.  Each point is a budget, its error bar the 95% t interval over seeds (asymmetric only in rounding; none
from one seed).  The n-gram rows are horizontal lines (their estimation costs a fraction of any budget).  Colours,
markers and line styles as in every other figure (analysis.palette, analysis.plots)."""
from __future__ import annotations

import math

import pandas as pd

from lmgrid.analysis import names, palette
from matplotlib import ticker

from lmgrid.analysis.plots import (FULL_IN, NGRAM_STYLE, PPL_LABEL, _figure_legend, _log_if_wide, figure,
                                   paper_style, save)

AXES = (("cpu_min_mean", "training CPU-minutes (this machine)", "(a) against CPU time"),
        ("train_flops_mean", "training FLOPs (analytic count)", "(b) against FLOPs"))


def _interval(g: pd.DataFrame) -> list[pd.Series]:
    """The t interval as [below, above] the mean; 0 where a point has no interval (one seed)."""
    return [(g["test_ppl_mean"] - g["test_ppl_ci_low"]).fillna(0), (g["test_ppl_ci_high"] - g["test_ppl_mean"]).fillna(0)]


@paper_style
def ppl_vs_compute(table: pd.DataFrame, refs: pd.DataFrame, stem: str) -> list[str]:
    fig, axes = figure(FULL_IN, 2.6, 1, 2)
    handles = []
    for model in names.ordered(table["model"]):
        g = table[table["model"] == model].sort_values("budget_flops")
        for k, (ax, (x, _, _)) in enumerate(zip(axes, AXES)):
            line = ax.errorbar(g[x], g["test_ppl_mean"], yerr=_interval(g), color=palette.colour(model),
                               marker=palette.marker(model), ls="-", label=names.display(model))
            if k == 0:
                handles.append(line)
            if "width" in g:  # which width valid chose at each budget: the line may change width along the way
                for xv, yv, w in zip(g[x], g["test_ppl_mean"], g["width"]):
                    ax.annotate(f"{w:g}", (xv, yv), xytext=(3, 3), textcoords="offset points", fontsize=5,
                                color=palette.colour(model))
    refs = refs.sort_values(["model", "n_step"])
    for r, shade in zip(refs.itertuples(), refs.groupby("model").cumcount()):  # a model's orders: shades of its colour
        for k, ax in enumerate(axes):
            line = ax.axhline(r.test_ppl, color=palette.variant(r.model, shade), ls=NGRAM_STYLE.get(r.model, "--"),
                              lw=0.9, label=r.display)
            if k == 0:
                handles.append(line)
    values = list(table["test_ppl_mean"]) + list(refs["test_ppl"])
    for ax, (_, xlabel, title) in zip(axes, AXES):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 1, 2, 5, 10, ...: the budgets
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))     # span < 10x, few decades
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(PPL_LABEL)
        ax.set_title(title, loc="left")
        _log_if_wide(ax, [v for v in values if not math.isnan(v)])
    _figure_legend(fig, handles, below=False)
    return save(fig, stem)
