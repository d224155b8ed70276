"""Paper-ready figures of one study, each written as PDF (vector, for LaTeX) and PNG (for the report).

Every figure has labelled axes, a legend and fonts readable at single-column width.  Means are over
seeds; error bars are the sample std over seeds (none with a single seed).
"""
from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
import pandas as pd  # noqa: E402

from ..errors import atomic_write  # noqa: E402
from ..gate_facts import saturation_bounds  # noqa: E402

GATE_NAMES = {"i": "input gate i", "f": "forget gate f", "o": "output gate o", "g": "candidate g",
              "z": "update gate z", "r": "reset gate r"}
GATE_ORDER = ["i", "f", "o", "g", "z", "r"]
NGRAM_STYLE = {"addk": ":", "katz": "-.", "kn": "--", "mkn": (0, (7, 2))}
NGRAM_MARKER = {"addk": "v", "katz": "^", "kn": "s", "mkn": "D"}
STYLE = {"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10, "legend.fontsize": 8,
         "xtick.labelsize": 9, "ytick.labelsize": 9, "axes.grid": True, "grid.alpha": 0.3,
         "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100}
PPL_LABEL = "Test perplexity (PPL, per token)"
NSTEP_LABEL = "n_step: window length in tokens (n-gram order)"


def _colours(labels) -> dict:
    cmap = plt.get_cmap("tab10")
    return {lab: cmap(i % 10) for i, lab in enumerate(sorted(set(labels)))}


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
    out = [row["model"]]
    if "layers" in parts:
        out.append(f"{row['layers']} layer{'s' if row['layers'] != 1 else ''}")
    if "n_step" in parts:
        out.append("stream" if row["regime"] == "stream" else f"n={row['n_step']}")
    if "regime" in parts and "n_step" not in parts:
        out.append(row["regime"])
    return ", ".join(out)


def _oracle_line(ax, oracle_ppl):
    if oracle_ppl is not None:
        ax.axhline(oracle_ppl, color="black", ls=":", lw=1.2, label=f"oracle ({oracle_ppl:.1f})")


def _log_if_wide(ax, values):
    """A log y axis when the values span more than 4x, with plain numbers (20, 50, 100) as labels."""
    values = [v for v in values if v and not math.isnan(v)]
    if values and max(values) / min(values) > 4:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.FuncFormatter(
            lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" and max(values) / min(values) < 30 else ""))


def _legend(ax, n_items: int, outside: bool = False):
    if outside:  # beside the axes: never hides a line or the oracle
        ax.legend(frameon=False, ncol=1 if n_items <= 14 else 2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(frameon=False, ncol=1 if n_items <= 8 else 2, loc="best")


def ppl_vs_nstep(summary: pd.DataFrame, oracle_ppl: float | None, stem: str, title: str) -> list[str]:
    df = summary[summary["regime"] == "window"]
    parts = ["layers"] if df["layers"].nunique() > 1 else []
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 4.0))
        series = df.assign(series=[_series_label(r, parts) for _, r in df.iterrows()])
        colours = _colours(series["series"])
        for name, g in series.groupby("series", sort=True):
            g = g.sort_values("n_step")
            ngram = g["arch"].iloc[0] in NGRAM_STYLE
            ax.errorbar(g["n_step"], g["test_ppl_mean"], yerr=g["test_ppl_std"].fillna(0), capsize=3,
                        ls=NGRAM_STYLE.get(g["arch"].iloc[0], "-"), marker=NGRAM_MARKER.get(g["arch"].iloc[0], "o"),
                        ms=4,
                        color=colours[name], label=name)
        _oracle_line(ax, oracle_ppl)
        _log_if_wide(ax, list(df["test_ppl_mean"]) + ([oracle_ppl] if oracle_ppl else []))
        ax.set_xticks(sorted(df["n_step"].unique()))
        ax.set_xlabel(NSTEP_LABEL)
        ax.set_ylabel(PPL_LABEL)
        ax.set_title(title)
        _legend(ax, series["series"].nunique() + (oracle_ppl is not None), outside=True)
        return save(fig, stem)


def ppl_vs_layers(summary: pd.DataFrame, oracle_ppl: float | None, stem: str, title: str) -> list[str]:
    df = summary[~summary["arch"].isin(list(NGRAM_STYLE))]
    parts = ["n_step"] if df["n_step"].nunique() > 1 else []
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.0, 4.0))
        series = df.assign(series=[_series_label(r, parts) for _, r in df.iterrows()])
        colours = _colours(series["series"])
        for name, g in series.groupby("series", sort=True):
            g = g.sort_values("layers")
            ax.errorbar(g["layers"], g["test_ppl_mean"], yerr=g["test_ppl_std"].fillna(0), capsize=3, marker="o",
                        ms=4, color=colours[name], label=name)
        _oracle_line(ax, oracle_ppl)
        _log_if_wide(ax, list(df["test_ppl_mean"]) + ([oracle_ppl] if oracle_ppl else []))
        ax.set_xticks(sorted(df["layers"].unique()))
        ax.set_xlabel("Number of layers")
        ax.set_ylabel(PPL_LABEL)
        ax.set_title(title)
        _legend(ax, series["series"].nunique() + (oracle_ppl is not None), outside=True)
        return save(fig, stem)


def _grid(n: int, ncols_max: int = 3, w: float = 3.2, h: float = 2.7):
    ncols = min(n, ncols_max)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def curves(logs: pd.DataFrame, stem: str, title: str) -> list[str]:
    """Valid (solid) and train (dashed) PPL per epoch, one panel per model on a shared y axis, mean over
    seeds; the shaded band is the seeds' min-max of valid PPL."""
    varying = [c for c in ("n_step", "layers", "regime") if logs[c].nunique() > 1]
    models = sorted(logs["model"].unique())
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(models))
        for ax in axes[1:]:
            ax.sharey(axes[0])
        for ax, model in zip(axes, models):
            g = logs[logs["model"] == model]
            g = g.assign(series=[_series_label(r, varying) for _, r in g.iterrows()])
            colours = _colours(g["series"])
            for name, s in g.groupby("series", sort=True):
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
            ax.set_title(model)
            ax.set_xlabel("Epoch")
            ax.set_ylabel("Perplexity (PPL)" if axes.index(ax) % min(len(models), 3) == 0 else "")
            ax.xaxis.get_major_locator().set_params(integer=True)
            _legend(ax, g["series"].nunique())
        fig.suptitle(f"{title} (solid: valid, dashed: train; band: seed min-max)")
        fig.tight_layout()
        return save(fig, stem)


def gate_means(gates: pd.DataFrame, stem: str, title: str) -> list[str]:
    """Mean gate activation against n_step (gate values with an effect only), one panel per gate and layer; error
    bars: the 95% t interval over seeds (none with one seed)."""
    from .effects import gate_means_by_nstep

    df = gate_means_by_nstep(gates)
    raw = gates[(gates["scope"] == "all") & (gates["regime"] == "window")]
    parts = ["layers"] if raw["layers"].nunique() > 1 else []
    panels = sorted({(int(l), g) for l, g in zip(df["layer"], df["gate"])},
                    key=lambda p: (GATE_ORDER.index(p[1]) if p[1] in GATE_ORDER else 99, p[0]))
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(panels), ncols_max=4)
        df = df.assign(series=[_series_label(r, parts) for _, r in df.iterrows()])
        colours = _colours(df["series"])
        for ax, (layer, gate) in zip(axes, panels):
            p = df[(df["layer"] == layer) & (df["gate"] == gate)]
            for name, per in p.groupby("series", sort=True):
                yerr = [(per["mean"] - per["ci_low"]).fillna(0), (per["ci_high"] - per["mean"]).fillna(0)]
                ax.errorbar(per["n_step"], per["mean"], yerr=yerr, capsize=3, marker="o", ms=4,
                            color=colours[name], label=name)
            ax.set_title(f"{GATE_NAMES.get(gate, gate)}, layer {layer + 1}")
            ax.set_xticks(sorted(p["n_step"].unique()))
            ax.set_xlabel("n_step (window length, tokens)")
            ax.set_ylabel("Mean activation")
            _legend(ax, p["series"].nunique())
        fig.suptitle(f"{title} (error bars: 95% interval over seeds)")
        fig.tight_layout()
        return save(fig, stem)


def saturation(gates: pd.DataFrame, stem: str, title: str) -> list[str]:
    """Per-unit fraction of time left-saturated (< 0.1; g: < -0.9) against right-saturated (> 0.9), after
    Karpathy, Johnson & Fei-Fei (2015), one panel per gate and layer; the first seed of each cell."""
    df = gates[gates["scope"] == "unit"]
    df = df[df["seed"] == df.groupby(["n_step", "layers", "regime"])["seed"].transform("min")]
    varying = [c for c in ("n_step", "layers", "regime") if df[c].nunique() > 1] or ["n_step"]
    panels = sorted({(int(l), g) for l, g in zip(df["layer"], df["gate"])},
                    key=lambda p: (p[0], GATE_ORDER.index(p[1]) if p[1] in GATE_ORDER else 99))
    with plt.rc_context(STYLE):
        n_gates = len({g for _, g in panels}) or 1
        fig, axes = _grid(max(len(panels), 1), ncols_max=n_gates, w=3.0, h=3.0)
        series = df.assign(series=[_series_label(r, varying).split(", ", 1)[-1] for _, r in df.iterrows()])
        names = sorted(series["series"].unique(), key=lambda s: [int(t) if t.isdigit() else t for t in
                                                                 s.replace("=", " ").split()])
        cmap = plt.get_cmap("viridis")
        colours = {n: cmap(i / max(len(names) - 1, 1)) for i, n in enumerate(names)}
        for ax, (layer, gate) in zip(axes, panels):
            p = series[(series["layer"] == layer) & (series["gate"] == gate)]
            for name in names:
                s = p[p["series"] == name]
                ax.scatter(s["frac_left_saturated"], s["frac_right_saturated"], s=10, alpha=0.7, color=colours[name],
                           label=name, edgecolors="none")
            ax.plot([0, 1], [1, 0], color="grey", lw=0.8, ls=":")
            ax.set_xlim(-0.02, 1.02)
            ax.set_ylim(-0.02, 1.02)
            ax.set_aspect("equal")
            ax.set_title(f"{GATE_NAMES.get(gate, gate)}, layer {layer}")
            low, high = saturation_bounds(gate)
            ax.set_xlabel(f"Fraction of steps < {low:g}")
            ax.set_ylabel(f"Fraction of steps > {high:g}")
        if panels:
            axes[0].legend(frameon=False, markerscale=1.5, loc="upper right")
        fig.suptitle(title)
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
