"""The gate figures of a study, in the paper style of analysis.plots (sizes, fonts, saving, error bars): the gate
means against n_step, against the window position (one line per n_step), and per-unit saturation."""
from __future__ import annotations

import math

import pandas as pd

from lmgrid.run.gate_facts import saturation_bounds
from lmgrid.analysis import names, palette, plots  # first: plots selects the Agg backend before pyplot loads

import matplotlib.pyplot as plt  # noqa: E402

GATE_NAMES = {"i": "input gate i", "f": "forget gate f", "o": "output gate o", "g": "candidate g",
              "z": "update gate z", "r": "reset gate r"}
GATE_ORDER = ["i", "f", "o", "g", "z", "r"]


def _gate_panels(df: pd.DataFrame, layer_first: bool) -> list[tuple[int, str]]:
    rank = {g: i for i, g in enumerate(GATE_ORDER)}
    panels = {(int(layer), gate) for layer, gate in zip(df["layer"], df["gate"])}
    return sorted(panels, key=lambda p: (p[0], rank.get(p[1], 99)) if layer_first else (rank.get(p[1], 99), p[0]))


@plots.paper_style
def gate_means(gates: pd.DataFrame, stem: str, column: bool = False) -> list[str]:
    """Mean gate activation against n_step (gate values with an effect only), one panel per gate and layer
    (layers from 1); error bars: the 95% t interval over seeds (none with one seed).  One legend for the figure.
    `column`: a column wide, two panels a row (the version for a one-column paper)."""
    from lmgrid.analysis.effects import gate_means_by_nstep

    df = gate_means_by_nstep(gates)
    raw = gates[(gates["scope"] == "all") & (gates["regime"] == "window")]
    parts = ["layers"] if raw["layers"].nunique() > 1 else []
    panels = _gate_panels(df, layer_first=False)
    series = plots._series(df.assign(regime="window"), parts)
    legend_cols = 2 if column else 4
    fig, axes = plots._grid(len(panels), 1.6, ncols_max=4, extra_h=0.15 * math.ceil(len(series) / legend_cols),
                            column=column)
    colours = plots._colours(series)
    markers = {name: palette.marker(model) for name, model, _ in series}
    handles = {}
    # two panels a column wide leave about 16 characters a title line: the layer goes on a line of its own
    sep = "\n" if column else ", "
    for ax, (layer, gate) in zip(axes, panels):
        p = df[(df["layer"] == layer) & (df["gate"] == gate)].assign(regime="window")
        for name, _, per in plots._series(p, parts):
            yerr = [per["mean"] - per["ci_low"], per["ci_high"] - per["mean"]]
            handles[name] = plots._bars(ax, per["n_step"], per["mean"], yerr, per["seeds"], marker=markers[name],
                                        color=colours[name], label=name)
        ax.set_title(f"{GATE_NAMES.get(gate, gate)}{sep}layer {layer + 1}")
        ax.set_xticks(sorted(p["n_step"].unique()))
    fig.supxlabel(plots.NSTEP_LABEL, fontsize=plots.PAPER_STYLE["axes.labelsize"])
    fig.supylabel("mean gate activation", fontsize=plots.PAPER_STYLE["axes.labelsize"])
    fig.legend(handles=[handles[n] for n, _, _ in series if n in handles], loc="outside upper center",
               ncol=min(len(handles), legend_cols))
    return plots.save(fig, stem)


ALIGN_LABELS = {"start": "start-aligned: position\n(0 = oldest input)",
                "end": "end-aligned: lag\n(1 = last input)"}


@plots.paper_style
def gate_positions(gates: pd.DataFrame, stem: str) -> list[str]:
    """Mean gate activation against where in the window it is read, one line per n_step, two panels per model, gate
    and layer (layers from 1): start-aligned (x: window position, 0 = the window's oldest input token) and
    end-aligned (x: lag back from the predicted word, 1 = the last input, drawn on the right so that both panels put
    the last input there); error bars: the 95% t interval over seeds (df = seeds - 1; none with one seed).  Start-
    aligned lines that lie on each other and rise with position make a pooled trend with n_step a position profile
    (analysis.positions); end-aligned lines apart at one lag are an n effect at the same distance from the target.
    One legend for the figure."""
    from lmgrid.analysis.effects import gate_position_means

    df = pd.concat([gate_position_means(gates, align).assign(align=align) for align in ALIGN_LABELS],
                   ignore_index=True)
    rank = {g: i for i, g in enumerate(GATE_ORDER)}
    panels = sorted({(m, int(layers), int(layer), g, a) for m, layers, layer, g, a in
                     zip(df["model"], df["layers"], df["layer"], df["gate"], df["align"])},
                    key=lambda p: (names.rank(p[0]), p[1], rank.get(p[3], 99), p[2], p[4] == "end"))
    steps = sorted(df["n_step"].unique())
    cmap = plt.get_cmap("viridis")
    colours = {n: cmap(i / max(len(steps) - 1, 1)) for i, n in enumerate(steps)}
    # A title names only what differs between panels: four full-width columns leave about 20 characters a title,
    # and "LSTM: candidate g, layer 1" of a one-layer study overran the figure's right edge.  Several depths mean
    # several layers too, so the depth is only ever added to a layer that is named.
    many_depths = df["layers"].nunique() > 1
    many_layers = df["layer"].nunique() > 1
    fig, axes = plots._grid(len(panels), 1.6, ncols_max=4, extra_h=0.15)
    handles = {}
    for ax, (model, layers, layer, gate, align) in zip(axes, panels):
        p = df[(df["model"] == model) & (df["layers"] == layers) & (df["layer"] == layer) & (df["gate"] == gate)
               & (df["align"] == align)]
        for n, per in p.groupby("n_step"):
            yerr = [per["mean"] - per["ci_low"], per["ci_high"] - per["mean"]]
            handles[n] = plots._bars(ax, per["position"], per["mean"], yerr, per["seeds"], marker="o", ms=2.5,
                                     color=colours[n], label=f"n = {n}")
        where = f", layer {layer + 1}" if many_layers else ""
        where += f" of {layers}" if many_depths else ""
        ax.set_title(f"{names.display(model)}: {GATE_NAMES.get(gate, gate)}{where}")
        ax.set_xlabel(ALIGN_LABELS[align], fontsize=plots.PAPER_STYLE["xtick.labelsize"])
        if align == "end":
            ax.invert_xaxis()
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.supylabel("mean gate activation", fontsize=plots.PAPER_STYLE["axes.labelsize"])
    # six entries fit across four panels, three across the two of a one-gate study
    fig.legend(handles=[handles[n] for n in steps if n in handles], loc="outside upper center",
               ncol=min(len(handles), 6 if len(panels) >= 4 else 3))
    return plots.save(fig, stem)


@plots.paper_style
def saturation(gates: pd.DataFrame, stem: str) -> list[str]:
    """Per-unit fraction of time left-saturated (< 0.1; g: < -0.9) against right-saturated (> 0.9), after
    Karpathy, Johnson & Fei-Fei (2015), one panel per gate and layer (layers from 1); the first seed of each
    cell."""
    df = gates[gates["scope"] == "unit"]
    df = df[df["seed"] == df.groupby(["n_step", "layers", "regime"])["seed"].transform("min")]
    varying = [c for c in ("n_step", "layers", "regime") if df[c].nunique() > 1] or ["n_step"]
    panels = _gate_panels(df, layer_first=True)
    n_gates = len({g for _, g in panels}) or 1
    fig, axes = plots._grid(max(len(panels), 1), 1.85, ncols_max=n_gates, extra_h=0.2)
    series = df.assign(series=[plots._series_label(r, varying).split(", ", 1)[-1] for _, r in df.iterrows()])
    labels = sorted(series["series"].unique(), key=lambda s: [int(t) if t.isdigit() else t for t in
                                                              s.replace("=", " ").split()])
    cmap = plt.get_cmap("viridis")
    colours = {n: cmap(i / max(len(labels) - 1, 1)) for i, n in enumerate(labels)}
    for i, (ax, (layer, gate)) in enumerate(zip(axes, panels)):
        p = series[(series["layer"] == layer) & (series["gate"] == gate)]
        for name in labels:
            s = p[p["series"] == name]
            ax.scatter(s["frac_left_saturated"], s["frac_right_saturated"], s=6, alpha=0.7, color=colours[name],
                       label=name, edgecolors="none")
        ax.plot([0, 1], [1, 0], color="grey", lw=0.6, ls=":")
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_aspect("equal")
        ax.set_title(f"{GATE_NAMES.get(gate, gate)}, layer {layer + 1}")
        low, high = saturation_bounds(gate)
        # on two lines: a 3.03-inch column of two panels has no room for it on one
        ax.set_xlabel(f"fraction of steps\n< {low:g}")
        ax.set_ylabel(f"fraction of steps > {high:g}" if i % n_gates == 0 else "")
    if panels:
        handles, names_ = axes[0].get_legend_handles_labels()
        fig.legend(handles, names_, loc="outside lower center", ncol=min(len(labels), 6), markerscale=1.5)
    return plots.save(fig, stem)
