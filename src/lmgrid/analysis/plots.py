"""Paper-ready figures of one study, each written as PDF (vector, for LaTeX) and PNG (for the report).

Every figure is made at the size it is printed: one column of a two-column paper (COLUMN_IN) or the full text
width (FULL_IN), with 7-8 pt text (PAPER_STYLE, the one place that sets sizes and fonts) and TrueType (Type 42)
fonts in the PDF, as the ACL and IEEE checkers ask.  Axes are labelled in words with units; legends use the display
names of analysis.names (n-gram models first, in a fixed order).  No figure carries a title: that is the
caption's job (workflow/report/*.rst); panel labels say in words what a panel shows.  The gate figures are in
analysis.gate_plots.  Means are over seeds; error
bars and bands only where a point rests on 2 or more seeds.  Layers are numbered from 1.
"""
from __future__ import annotations

import functools
import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
import pandas as pd  # noqa: E402

from lmgrid.common.fileio import atomic_write  # noqa: E402
from lmgrid.analysis import names, palette  # noqa: E402

NGRAM_STYLE = {"addk": ":", "katz": "-.", "kn": "--", "mkn": (0, (7, 2))}
# One colour and marker per model id, the same in every figure (analysis.palette).
MODEL_COLOURS = palette.MODEL_COLOURS
# Printed widths (inches): one column and the full text width of a two-column paper.  The narrower of ACL's and
# IEEE's: ACL's column is 3.03 in (7.7 cm) and its text 6.3 in (16 cm); IEEE's are 3.5 and 7.16 in.
COLUMN_IN, FULL_IN = 3.03, 6.3
# Every figure is drawn and saved under these settings: text at 7-8 pt at the printed size, TrueType (Type 42)
# fonts in PDF and PostScript (Type 3 fonts are rejected by the ACL and IEEE checkers), thin lines, and the
# constrained layout, which keeps labels and outside legends within the figure's own size.
PAPER_STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7,
               "xtick.labelsize": 7, "ytick.labelsize": 7, "pdf.fonttype": 42, "ps.fonttype": 42,
               "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5, "axes.linewidth": 0.6,
               "lines.linewidth": 1.2, "lines.markersize": 3.5, "errorbar.capsize": 2,
               "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
               "legend.handlelength": 2.2, "figure.dpi": 100, "savefig.dpi": 200,
               "figure.constrained_layout.use": True}
PPL_LABEL = "test perplexity (PPL)"
NSTEP_LABEL = "context length n (tokens)"
LAYERS_LABEL = "layers"
# Lines within this fraction of the best line's test PPL at every x are "close": they get a second panel with
# their distance from the best in percent, where a 0.5 PPL gap that the first panel's scale hides is plain.
CLOSE_FRACTION = 0.25


def paper_style(draw):
    """Run a figure function under PAPER_STYLE: sizes, fonts and line widths are read when each artist is made."""
    @functools.wraps(draw)
    def wrapped(*args, **kwargs):
        with plt.rc_context(PAPER_STYLE):
            return draw(*args, **kwargs)
    return wrapped


def figure(width: float, height: float, nrows: int = 1, ncols: int = 1, **kw):
    """A figure of the printed size (inches) under PAPER_STYLE; (fig, list of axes)."""
    with plt.rc_context(PAPER_STYLE):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained", **kw)
    return fig, list(axes.flat)


def save(fig, stem: str, exts=("pdf", "png")) -> list[str]:
    """Write stem.pdf and stem.png atomically at the figure's own size, without timestamps (the same data gives the
    same bytes); PAPER_STYLE applies while saving too (the PDF font type is read then)."""
    paths = []
    meta = {"pdf": {"CreationDate": None, "ModDate": None}, "png": {"Software": None}}
    with plt.rc_context(PAPER_STYLE):
        for ext in exts:
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, metadata=meta[ext])
            with atomic_write(f"{stem}.{ext}", "wb") as fh:
                fh.write(buf.getvalue())
            paths.append(f"{stem}.{ext}")
    plt.close(fig)
    return paths


def _series_label(row, parts: list[str]) -> str:
    out = [names.display(row["model"])]
    if "layers" in parts:
        out.append(f"{row['layers']} layer{'s' if row['layers'] != 1 else ''}")
    if "n_step" in parts:
        out.append("stream" if row["regime"] == "stream" else f"n = {row['n_step']}")
    if "regime" in parts and "n_step" not in parts:
        out.append(row["regime"])
    return ", ".join(out)


def _series(df: pd.DataFrame, parts: list[str]) -> list[tuple[str, str, pd.DataFrame]]:
    """(label, model id, rows) per line, in the fixed model order (n-gram first), then layers, n_step, regime."""
    df = df.assign(series_label=[_series_label(r, parts) for _, r in df.iterrows()])
    first = df.drop_duplicates("series_label")
    order = sorted(first.itertuples(index=False), key=lambda r: (names.rank(r.model), r.layers, r.n_step, r.regime))
    return [(r.series_label, r.model, df[df["series_label"] == r.series_label].drop(columns="series_label"))
            for r in order]


def _variants(series: list[tuple[str, str, pd.DataFrame]]) -> dict:
    """Label -> its place among the lines of its own model (0 for the first or only one)."""
    seen: dict[str, int] = {}
    out = {}
    for label, model, _ in series:
        out[label] = seen.get(model, 0)
        seen[model] = out[label] + 1
    return out


def _colours(series: list[tuple[str, str, pd.DataFrame]]) -> dict:
    """Label -> colour: the model's own colour (analysis.palette), never one taken in line order, so a model keeps
    its colour in every figure; a model's 2nd, 3rd, ... line a darker or lighter shade of it."""
    return {label: palette.variant(model, k) for (label, model, _), k in zip(series, _variants(series).values())}


def _bars(ax, x, y, spread, seeds, **kw):
    """A line with error bars only where a point rests on 2 or more seeds (one seed: no bar, no cap)."""
    spread = spread if isinstance(spread, list) else [spread, spread]
    many = pd.Series(seeds, index=y.index).fillna(1) >= 2
    if many.any():
        err = [s.where(many, 0).fillna(0) for s in spread]
        return ax.errorbar(x, y, yerr=err, **kw)
    return ax.errorbar(x, y, **kw)


def _oracle_line(ax, oracle_ppl):
    if oracle_ppl is not None:
        return ax.axhline(oracle_ppl, color="black", ls=":", lw=1.0, label=f"Oracle ({oracle_ppl:.1f})")
    return None


def _log_if_wide(ax, values):
    """A log y axis when the values span more than 4x, with plain numbers (20, 50, 100) as labels."""
    values = [v for v in values if v and not math.isnan(v)]
    if values and max(values) / min(values) > 4:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" and max(values) / min(values) < 30 else ""))


def _figure_legend(fig, handles, below: bool) -> None:
    """One legend for the whole figure, outside the axes (it never hides a line): below a column-wide figure,
    beside a full-width one."""
    if below:
        fig.legend(handles=handles, loc="outside lower center", ncol=2)
    else:
        fig.legend(handles=handles, loc="outside right upper", ncol=1 if len(handles) <= 14 else 2)


def close_lines(df: pd.DataFrame, x: str, series: list[tuple[str, str, pd.DataFrame]]) -> list[str]:
    """Labels of the lines whose mean valid PPL is within CLOSE_FRACTION of the best line's at every x where they have
    a point (the best line included), in series order; [] when fewer than two lines are that close.  Picked on valid,
    never test: the zoom is a choice of models, and test PPL is only drawn, not used to choose."""
    means = pd.DataFrame({label: g.set_index(x)["valid_ppl_mean"] for label, _, g in series})
    gap = means.div(means.min(axis=1), axis=0) - 1
    close = [label for label in means.columns if (gap[label].dropna() <= CLOSE_FRACTION).all()]
    return close if len(close) >= 2 else []


def _ppl_against(df: pd.DataFrame, x: str, parts: list[str], oracle_ppl, xlabel: str, stem: str,
                 column: bool = False) -> list[str]:
    """Test PPL against `x`, one line per model (panel a).  When two or more lines are close to the best
    (close_lines), a second panel (b) shows them as the percentage above the best line at each x, so models that
    one scale would draw on top of each other stay apart; the figure is then full width, else a column wide.
    `column`: always a column wide, the two panels one above the other (the version for a one-column paper)."""
    series = _series(df, parts)
    close = close_lines(df, x, series)
    colours, variants = _colours(series), _variants(series)
    xs = sorted(df[x].unique())
    n_items = len(series) + (oracle_ppl is not None)
    legend_h = 0.14 * math.ceil(n_items / 2)
    if close and column:
        fig, (ax, ax_b) = figure(COLUMN_IN, 4.2 + legend_h, 2, 1)
    elif close:
        fig, (ax, ax_b) = figure(FULL_IN, 2.5, 1, 2)
    else:
        fig, (ax,) = figure(COLUMN_IN, 2.3 + legend_h)
    best = df.groupby(x)["test_ppl_mean"].min()
    handles = []
    for label, model, g in series:
        g = g.sort_values(x)
        # a model's 2nd, 4th, ... line: hollow markers, beside the shade of its colour (two cues, not one)
        style = {"ls": NGRAM_STYLE.get(g["arch"].iloc[0], "-"), "marker": palette.marker(model),
                 "color": colours[label], "label": label}
        if variants[label] % 2:
            style["mfc"] = "white"
        handles.append(_bars(ax, g[x], g["test_ppl_mean"], g["test_ppl_std"], g["seeds"], **style))
        if label in close:
            scale = 100 / best.reindex(g[x]).to_numpy()
            _bars(ax_b, g[x], (g["test_ppl_mean"] * scale - 100), g["test_ppl_std"] * scale, g["seeds"], **style)
    oracle = _oracle_line(ax, oracle_ppl)
    _log_if_wide(ax, list(df["test_ppl_mean"]) + ([oracle_ppl] if oracle_ppl else []))
    ax.set_xticks(xs)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(PPL_LABEL)
    if close:
        ax.set_title("(a) every model", loc="left")
        ax_b.set_title("(b) the closest models", loc="left")
        ax_b.set_xticks(xs)
        ax_b.set_xlabel(xlabel)
        ax_b.set_ylabel("test PPL above the best (%)")
        ax_b.axhline(0, color="grey", lw=0.6)
    handles += [oracle] if oracle else []
    _figure_legend(fig, handles, below=column or not close)
    return save(fig, stem)


@paper_style
def ppl_vs_nstep(summary: pd.DataFrame, oracle_ppl: float | None, stem: str, column: bool = False) -> list[str]:
    df = summary[summary["regime"] == "window"]
    return _ppl_against(df, "n_step", ["layers"] if df["layers"].nunique() > 1 else [], oracle_ppl, NSTEP_LABEL,
                        stem, column)


@paper_style
def ppl_vs_layers(summary: pd.DataFrame, oracle_ppl: float | None, stem: str, column: bool = False) -> list[str]:
    df = summary[~summary["arch"].isin(list(NGRAM_STYLE))]
    return _ppl_against(df, "layers", ["n_step"] if df["n_step"].nunique() > 1 else [], oracle_ppl, LAYERS_LABEL,
                        stem, column)


def _grid(n: int, panel_h: float, ncols_max: int = 3, extra_h: float = 0.0, column: bool = False):
    """n panels in rows of ncols_max (or one fewer, above 3, when that leaves fewer empty places): a column wide for
    one or two panels, else the full width.  `column`: a column wide whatever n, two panels a row."""
    ncols_max = min(ncols_max, 2) if column else ncols_max
    choices = (ncols_max, ncols_max - 1) if ncols_max > 3 else (ncols_max,)
    ncols = n if n <= ncols_max else min(choices, key=lambda c: (-n % c, -c))
    nrows = math.ceil(n / ncols)
    fig, axes = figure(COLUMN_IN if ncols <= 2 else FULL_IN, panel_h * nrows + extra_h, nrows, ncols)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


@paper_style
def curves(logs: pd.DataFrame, stem: str) -> list[str]:
    """Valid (solid) and train (dashed) PPL per epoch, one panel per model (titled by its display name, in the
    fixed order) on a shared y axis, mean over seeds; with 2 or more seeds a shaded band: the seeds' min-max of
    valid PPL."""
    varying = [c for c in ("n_step", "layers", "regime") if logs[c].nunique() > 1]
    models = names.ordered(logs["model"])
    fig, axes = _grid(len(models), 1.7)
    ncols = min(len(models), 3)
    for ax in axes[1:]:
        ax.sharey(axes[0])
    for i, (ax, model) in enumerate(zip(axes, models)):
        series = _series(logs[logs["model"] == model], varying)
        colours = _colours(series)
        for name, _, s in series:
            by_epoch = s.groupby("epoch")
            m = by_epoch[["train_ppl", "valid_ppl"]].mean()
            short = name.split(", ", 1)[1] if ", " in name else None
            ax.plot(m.index, m["valid_ppl"], "-", marker="o", ms=2.5, color=colours[name],
                    label=f"{short}" if short else "valid")
            ax.plot(m.index, m["train_ppl"], "--", color=colours[name], alpha=0.7, label=None if short else "train")
            if s["seed"].nunique() > 1:
                ax.fill_between(m.index, by_epoch["valid_ppl"].min(), by_epoch["valid_ppl"].max(),
                                color=colours[name], alpha=0.15, lw=0)
        _log_if_wide(ax, list(logs["valid_ppl"]) + list(logs["train_ppl"]))
        ax.set_title(names.display(model))
        ax.set_xlabel("epoch" if i >= len(models) - ncols else "")
        ax.set_ylabel("perplexity (PPL)" if i % ncols == 0 else "")
        ax.xaxis.get_major_locator().set_params(integer=True)
        handles, labels = ax.get_legend_handles_labels()
        if i == 0 and len(series) > 1:  # which line style is which split, once
            handles += [Line2D([], [], color="grey", ls="-", marker="o", ms=2.5), Line2D([], [], color="grey", ls="--")]
            labels += ["valid", "train"]
        ax.legend(handles, labels, ncol=1 if len(labels) <= 6 else 2, loc="best", handlelength=1.6)
    return save(fig, stem)


@paper_style
def run_curve(log: pd.DataFrame, stem: str, title: str) -> list[str]:
    """One run's train and valid PPL per epoch (the MLflow artifact beside log.csv), a column wide."""
    fig, (ax,) = figure(COLUMN_IN, 2.4)
    ax.plot(log["epoch"], log["train_ppl"], "--", marker="o", label="train")
    ax.plot(log["epoch"], log["valid_ppl"], "-", marker="o", label="valid")
    _log_if_wide(ax, list(log["train_ppl"]) + list(log["valid_ppl"]))
    ax.set_xlabel("epoch")
    ax.set_ylabel("perplexity (PPL)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title)
    ax.legend()
    return save(fig, stem, exts=("png",))


__all__ = ["ppl_vs_nstep", "ppl_vs_layers", "curves", "run_curve", "save", "figure",
           "PAPER_STYLE", "COLUMN_IN", "FULL_IN"]
