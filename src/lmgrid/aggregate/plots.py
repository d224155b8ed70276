"""Paper-ready figures of one study, each written as PDF (vector, for LaTeX) and PNG (for the report).

Every figure has labelled axes, a legend with the display names of aggregate.names (n-gram models first, in a
fixed order) and fonts readable at single-column width.  No figure carries a title: that is the caption's job
(workflow/report/*.rst); panel labels that tell panels apart stay.  Means are over seeds; error bars and bands
only where a point rests on 2 or more seeds.  Layers are numbered from 1.
"""
from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
import pandas as pd  # noqa: E402

from ..errors import atomic_write  # noqa: E402
from ..gate_facts import saturation_bounds  # noqa: E402
from . import names  # noqa: E402

GATE_NAMES = {"i": "input gate i", "f": "forget gate f", "o": "output gate o", "g": "candidate g",
              "z": "update gate z", "r": "reset gate r"}
GATE_ORDER = ["i", "f", "o", "g", "z", "r"]
NGRAM_STYLE = {"addk": ":", "katz": "-.", "kn": "--", "mkn": (0, (7, 2))}
NGRAM_MARKER = {"addk": "v", "katz": "^", "kn": "s", "mkn": "D"}
# One colour per model id, in the order of names.DISPLAY, so a model has the same colour in every figure.
MODEL_COLOURS = dict(zip(names.DISPLAY, [*(plt.get_cmap("tab10")(i) for i in range(10)), "#393b79", "#8c6d31"]))
STYLE = {"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "legend.fontsize": 8,
         "xtick.labelsize": 9, "ytick.labelsize": 9, "axes.grid": True, "grid.alpha": 0.3,
         "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100}
PPL_LABEL = "Test perplexity (PPL, per token)"
NSTEP_LABEL = "n_step: window length in tokens (n-gram order)"
OUTLIER_FACTOR = 3.0  # a line this many times the median of the others (at some x) gets its own panel


def save(fig, stem: str, exts=("pdf", "png"), dpi: int = 200) -> list[str]:
    """Write stem.pdf and stem.png atomically, without timestamps (the same data gives the same bytes)."""
    paths = []
    meta = {"pdf": {"CreationDate": None, "ModDate": None}, "png": {"Software": None}}
    for ext in exts:
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=dpi, bbox_inches="tight", metadata=meta[ext])
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
        out.append("stream" if row["regime"] == "stream" else f"n={row['n_step']}")
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


def _colours(series: list[tuple[str, str, pd.DataFrame]]) -> dict:
    """Label -> colour: the model's fixed colour when each model has one line, else tab10 in line order."""
    models = [m for _, m, _ in series]
    if len(set(models)) == len(models) and all(m in MODEL_COLOURS for m in models):
        return {label: MODEL_COLOURS[m] for label, m, _ in series}
    cmap = plt.get_cmap("tab10")
    return {label: cmap(i % 10) for i, (label, _, _) in enumerate(series)}


def _bars(ax, x, y, spread, seeds, **kw):
    """A line with error bars only where a point rests on 2 or more seeds (one seed: no bar, no cap)."""
    spread = spread if isinstance(spread, list) else [spread, spread]
    many = pd.Series(seeds, index=y.index).fillna(1) >= 2
    if many.any():
        err = [s.where(many, 0).fillna(0) for s in spread]
        return ax.errorbar(x, y, yerr=err, capsize=3, **kw)
    return ax.errorbar(x, y, **kw)


def _oracle_line(ax, oracle_ppl):
    if oracle_ppl is not None:
        return ax.axhline(oracle_ppl, color="black", ls=":", lw=1.2, label=f"Oracle ({oracle_ppl:.1f})")
    return None


def _log_if_wide(ax, values):
    """A log y axis when the values span more than 4x, with plain numbers (20, 50, 100) as labels."""
    values = [v for v in values if v and not math.isnan(v)]
    if values and max(values) / min(values) > 4:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" and max(values) / min(values) < 30 else ""))


def _legend(ax, n_items: int, outside: bool = False, handles=None):
    kw = {"handles": handles} if handles else {}
    if outside:  # beside the axes: never hides a line or the oracle
        ax.legend(frameon=False, ncol=1 if n_items <= 14 else 2, loc="upper left", bbox_to_anchor=(1.01, 1.0), **kw)
    else:
        ax.legend(frameon=False, ncol=1 if n_items <= 8 else 2, loc="best", **kw)


def outliers(df: pd.DataFrame, x: str, series: list[tuple[str, str, pd.DataFrame]]) -> list[str]:
    """Labels of the lines set apart: at some x their mean test PPL is more than OUTLIER_FACTOR times the median
    of the other lines' means at that x (never every line)."""
    means = pd.DataFrame({label: g.set_index(x)["test_ppl_mean"] for label, _, g in series})
    out = [label for label in means.columns
           if (means[label] > OUTLIER_FACTOR * means.drop(columns=label).median(axis=1)).any()]
    return out if len(out) < len(means.columns) else []


def _ppl_against(df: pd.DataFrame, x: str, parts: list[str], oracle_ppl, xlabel: str, stem: str) -> list[str]:
    """Test PPL against `x`, one line per model; lines OUTLIER_FACTOR off the rest go to a right panel (b) with
    its own y axis, so the compared models keep a readable scale."""
    series = _series(df, parts)
    apart = outliers(df, x, series) if len(series) > 2 else []
    colours = _colours(series)
    with plt.rc_context(STYLE):
        if apart:
            fig, (ax, ax_b) = plt.subplots(1, 2, figsize=(7.4, 4.0), gridspec_kw={"width_ratios": [3, 1.2]})
        else:
            fig, ax = plt.subplots(figsize=(6.0, 4.0))
        handles = []
        for label, model, g in series:
            g = g.sort_values(x)
            target = ax_b if label in apart else ax
            handles.append(_bars(target, g[x], g["test_ppl_mean"], g["test_ppl_std"], g["seeds"],
                                 ls=NGRAM_STYLE.get(g["arch"].iloc[0], "-"), ms=4,
                                 marker=NGRAM_MARKER.get(g["arch"].iloc[0], "o"), color=colours[label], label=label))
        oracle = _oracle_line(ax, oracle_ppl)
        kept = df[~df.index.isin([i for label, _, g in series if label in apart for i in g.index])]
        _log_if_wide(ax, list(kept["test_ppl_mean"]) + ([oracle_ppl] if oracle_ppl else []))
        ax.set_xticks(sorted(df[x].unique()))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(PPL_LABEL)
        if apart:
            ax.set_title("(a)", loc="left")
            ax_b.set_title(f"(b) > {OUTLIER_FACTOR:g}x median, own scale", loc="left")
            ax_b.set_xticks(sorted(df[x].unique()))
            ax_b.set_xlabel(x)
            _log_if_wide(ax_b, list(df.loc[~df.index.isin(kept.index), "test_ppl_mean"]))
        handles += [oracle] if oracle else []
        _legend(ax_b if apart else ax, len(handles), outside=True, handles=handles)
        return save(fig, stem)


def ppl_vs_nstep(summary: pd.DataFrame, oracle_ppl: float | None, stem: str) -> list[str]:
    df = summary[summary["regime"] == "window"]
    return _ppl_against(df, "n_step", ["layers"] if df["layers"].nunique() > 1 else [], oracle_ppl, NSTEP_LABEL,
                        stem)


def ppl_vs_layers(summary: pd.DataFrame, oracle_ppl: float | None, stem: str) -> list[str]:
    df = summary[~summary["arch"].isin(list(NGRAM_STYLE))]
    return _ppl_against(df, "layers", ["n_step"] if df["n_step"].nunique() > 1 else [], oracle_ppl,
                        "Number of layers", stem)


def _grid(n: int, ncols_max: int = 3, w: float = 3.2, h: float = 2.7):
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def curves(logs: pd.DataFrame, stem: str) -> list[str]:
    """Valid (solid) and train (dashed) PPL per epoch, one panel per model (titled by its display name, in the
    fixed order) on a shared y axis, mean over seeds; with 2 or more seeds a shaded band: the seeds' min-max of
    valid PPL."""
    varying = [c for c in ("n_step", "layers", "regime") if logs[c].nunique() > 1]
    models = names.ordered(logs["model"])
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(models))
        for ax in axes[1:]:
            ax.sharey(axes[0])
        for ax, model in zip(axes, models):
            series = _series(logs[logs["model"] == model], varying)
            colours = _colours(series) if len(series) > 1 else {series[0][0]: MODEL_COLOURS.get(model, "C0")}
            for name, _, s in series:
                by_epoch = s.groupby("epoch")
                m = by_epoch[["train_ppl", "valid_ppl"]].mean()
                short = name.split(", ", 1)[1] if ", " in name else None
                ax.plot(m.index, m["valid_ppl"], "-", marker="o", ms=3, color=colours[name],
                        label=f"{short}" if short else "valid")
                ax.plot(m.index, m["train_ppl"], "--", color=colours[name], alpha=0.7,
                        label=None if short else "train")
                if s["seed"].nunique() > 1:
                    ax.fill_between(m.index, by_epoch["valid_ppl"].min(), by_epoch["valid_ppl"].max(),
                                    color=colours[name], alpha=0.15, lw=0)
            _log_if_wide(ax, list(logs["valid_ppl"]) + list(logs["train_ppl"]))
            ax.set_title(names.display(model))
            ax.set_xlabel("Epoch")
            ax.set_ylabel("Perplexity (PPL)" if axes.index(ax) % min(len(models), 3) == 0 else "")
            ax.xaxis.get_major_locator().set_params(integer=True)
            handles, labels = ax.get_legend_handles_labels()
            if ax is axes[0] and len(series) > 1:  # which line style is which split, once
                handles += [Line2D([], [], color="grey", ls="-", marker="o", ms=3),
                            Line2D([], [], color="grey", ls="--")]
                labels += ["valid", "train"]
            ax.legend(handles, labels, frameon=False, ncol=1 if len(labels) <= 8 else 2, loc="best")
        fig.tight_layout()
        return save(fig, stem)


def gate_means(gates: pd.DataFrame, stem: str) -> list[str]:
    """Mean gate activation against n_step (gate values with an effect only), one panel per gate and layer
    (layers from 1); error bars: the 95% t interval over seeds (none with one seed)."""
    from .effects import gate_means_by_nstep

    df = gate_means_by_nstep(gates)
    raw = gates[(gates["scope"] == "all") & (gates["regime"] == "window")]
    parts = ["layers"] if raw["layers"].nunique() > 1 else []
    panels = sorted({(int(l), g) for l, g in zip(df["layer"], df["gate"])},
                    key=lambda p: (GATE_ORDER.index(p[1]) if p[1] in GATE_ORDER else 99, p[0]))
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(panels), ncols_max=4)
        colours = _colours(_series(df.assign(regime="window"), parts))
        for ax, (layer, gate) in zip(axes, panels):
            p = df[(df["layer"] == layer) & (df["gate"] == gate)].assign(regime="window")
            for name, _, per in _series(p, parts):
                yerr = [per["mean"] - per["ci_low"], per["ci_high"] - per["mean"]]
                _bars(ax, per["n_step"], per["mean"], yerr, per["seeds"], marker="o", ms=4, color=colours[name],
                      label=name)
            ax.set_title(f"{GATE_NAMES.get(gate, gate)}, layer {layer + 1}")
            ax.set_xticks(sorted(p["n_step"].unique()))
            ax.set_xlabel("n_step (window length, tokens)")
            ax.set_ylabel("Mean activation")
            _legend(ax, len(ax.get_legend_handles_labels()[0]))
        fig.tight_layout()
        return save(fig, stem)


def saturation(gates: pd.DataFrame, stem: str) -> list[str]:
    """Per-unit fraction of time left-saturated (< 0.1; g: < -0.9) against right-saturated (> 0.9), after
    Karpathy, Johnson & Fei-Fei (2015), one panel per gate and layer (layers from 1); the first seed of each
    cell."""
    df = gates[gates["scope"] == "unit"]
    df = df[df["seed"] == df.groupby(["n_step", "layers", "regime"])["seed"].transform("min")]
    varying = [c for c in ("n_step", "layers", "regime") if df[c].nunique() > 1] or ["n_step"]
    panels = sorted({(int(l), g) for l, g in zip(df["layer"], df["gate"])},
                    key=lambda p: (p[0], GATE_ORDER.index(p[1]) if p[1] in GATE_ORDER else 99))
    with plt.rc_context(STYLE):
        n_gates = len({g for _, g in panels}) or 1
        fig, axes = _grid(max(len(panels), 1), ncols_max=n_gates, w=3.0, h=3.0)
        series = df.assign(series=[_series_label(r, varying).split(", ", 1)[-1] for _, r in df.iterrows()])
        labels = sorted(series["series"].unique(), key=lambda s: [int(t) if t.isdigit() else t for t in
                                                                  s.replace("=", " ").split()])
        cmap = plt.get_cmap("viridis")
        colours = {n: cmap(i / max(len(labels) - 1, 1)) for i, n in enumerate(labels)}
        for ax, (layer, gate) in zip(axes, panels):
            p = series[(series["layer"] == layer) & (series["gate"] == gate)]
            for name in labels:
                s = p[p["series"] == name]
                ax.scatter(s["frac_left_saturated"], s["frac_right_saturated"], s=10, alpha=0.7, color=colours[name],
                           label=name, edgecolors="none")
            ax.plot([0, 1], [1, 0], color="grey", lw=0.8, ls=":")
            ax.set_xlim(-0.02, 1.02)
            ax.set_ylim(-0.02, 1.02)
            ax.set_aspect("equal")
            ax.set_title(f"{GATE_NAMES.get(gate, gate)}, layer {layer + 1}")
            low, high = saturation_bounds(gate)
            ax.set_xlabel(f"Fraction of steps < {low:g}")
            ax.set_ylabel(f"Fraction of steps > {high:g}")
        if panels:
            axes[0].legend(frameon=False, markerscale=1.5, loc="upper right")
        fig.tight_layout()
        return save(fig, stem)


def run_curve(log: pd.DataFrame, stem: str, title: str) -> list[str]:
    """One run's train and valid PPL per epoch (the MLflow artifact beside log.csv)."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(5.0, 3.4))
        ax.plot(log["epoch"], log["train_ppl"], "--", marker="o", ms=3, label="train")
        ax.plot(log["epoch"], log["valid_ppl"], "-", marker="o", ms=3, label="valid")
        _log_if_wide(ax, list(log["train_ppl"]) + list(log["valid_ppl"]))
        ax.set_xlabel("Epoch")
        ax.set_ylabel("Perplexity (PPL)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_title(title)
        ax.legend(frameon=False)
        return save(fig, stem, exts=("png",), dpi=110)


__all__ = ["ppl_vs_nstep", "ppl_vs_layers", "curves", "gate_means", "saturation", "run_curve", "save"]
