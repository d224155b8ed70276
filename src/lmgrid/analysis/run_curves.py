"""Each run's valid PPL after every epoch, one line per run: where each run was when it stopped, and why.

`valid_curves.{pdf,png}` of every study with neural runs (lmgrid.analysis.layout): one line per run (colour: the
model, shaded by configuration, line style: the seed) and its last epoch marked by how the run ended (metrics.json
`stopped_because`): a circle for `plateau` (converged by the schedule's rule), a cross for `budget` (the epoch cap
came first; it may still have been improving), a diamond for `budget-schedule` (train.budget_tokens trained: the
designed end of a budget schedule).  Kept apart from plots.curves, which averages over seeds.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from lmgrid.analysis import names, palette, plots

END_MARKERS = {"plateau": ("o", "plateau (converged)"), "budget": ("X", "budget (epoch cap reached)"),
               "budget-schedule": ("D", "budget schedule (its designed end)")}
OTHER_END = ("s", "other end")
SEED_STYLES = ("-", "--", ":", "-.")
CONFIG_KEYS = ["model", "n_step", "layers", "regime"]


def run_series(logs: pd.DataFrame, runs: pd.DataFrame) -> list[tuple[tuple, int, pd.DataFrame, str]]:
    """(configuration, seed, that run's log rows by epoch, its stop reason) per neural run, in the fixed model
    order, then layers, n_step, regime, seed."""
    out = []
    for _, run in runs[runs["impl"] != "ngram"].iterrows():
        config = tuple(run[k] for k in CONFIG_KEYS)
        mine = (logs[CONFIG_KEYS + ["seed"]] == [*config, run["seed"]]).all(axis=1)
        out.append((config, int(run["seed"]), logs[mine].sort_values("epoch"), str(run.get("stopped_because") or "")))
    return sorted(out, key=lambda s: (names.rank(s[0][0]), s[0][2], s[0][1], s[0][3], s[1]))


def valid_curves(logs: pd.DataFrame, runs: pd.DataFrame, stem: str) -> list[str]:
    series = run_series(logs, runs)
    configs = list(dict.fromkeys(config for config, *_ in series))
    varying = [k for i, k in enumerate(CONFIG_KEYS[1:], 1) if len({c[i] for c in configs}) > 1]
    seeds = sorted({seed for _, seed, _, _ in series})
    # colour: the model's own (analysis.palette), its other configurations darker or lighter shades of it; a
    # colour cycle ran out at 10 of a study's 15 configurations and coloured models by their place in the list
    per_model = [sum(d[0] == c[0] for d in configs[:i]) for i, c in enumerate(configs)]
    colours = {c: palette.variant(c[0], k) for c, k in zip(configs, per_model)}
    fig, (ax,) = plots.figure(plots.FULL_IN, 3.0)
    with plt.rc_context(plots.PAPER_STYLE):
        ends = set()
        for config, seed, log, stop in series:
            row = dict(zip(CONFIG_KEYS, config))
            label = f"{plots._series_label(row, varying)}, seed {seed}"
            ax.plot(log["epoch"], log["valid_ppl"], ls=SEED_STYLES[seeds.index(seed) % len(SEED_STYLES)],
                    color=colours[config], label=label)
            marker = END_MARKERS.get(stop, OTHER_END)
            ends.add(marker)
            if len(log):
                ax.plot(log["epoch"].iloc[-1], log["valid_ppl"].iloc[-1], marker=marker[0], ms=5, ls="none",
                        color=colours[config], markeredgecolor="black", markeredgewidth=0.5)
        plots._log_if_wide(ax, list(logs["valid_ppl"]))
        ax.set_xlabel("epoch")
        ax.set_ylabel("valid perplexity (PPL)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        handles = ax.get_legend_handles_labels()[0] + [
            Line2D([], [], marker=m, ls="none", color="grey", markeredgecolor="black", label=what)
            for m, what in sorted(ends, key=lambda e: e[1])]
        plots._figure_legend(fig, handles, below=False)
    return plots.save(fig, stem)
