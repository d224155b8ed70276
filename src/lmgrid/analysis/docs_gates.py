"""The gate answers a docs block can render from a snapshot (lmgrid.analysis.docs_render): `gates:<study>` (the study's
gates_effect.csv) and `scales` (scales/gates.csv, the scale x n interaction).

Each slope is printed with its simultaneous 95% interval (Bonferroni over the study's gate tests, the interval that
agrees with the Holm verdict beside it: analysis.effects.simultaneous) and its Holm-adjusted p; the verdict words
are the ones analysis.effects / analysis.positions / orchestration.scales wrote.  Nothing here computes a verdict.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from lmgrid.analysis.docs_io import blank as _blank, read_csv as _read, slope_text
from lmgrid.analysis.effects import INTERACTION_LABELS as LABELS
from lmgrid.common.errors import LmgridError
from lmgrid.common.units import markdown_table

# answer label -> (slope, simultaneous low, high, Holm p, verdict, the positions or lags it reads) in gates_effect.csv
ANSWERS = {
    "pooled": ("slope_per_nstep", "slope_sim_low", "slope_sim_high", "slope_p_holm", "direction",
                               None),
    "start-aligned": ("matched_slope", "matched_sim_low", "matched_sim_high", "matched_p_holm", "at_matched_positions",
                      "matched_positions"),
    "end-aligned": (
        "end_matched_slope", "end_matched_sim_low", "end_matched_sim_high", "end_matched_p_holm", "at_matched_lags",
        "end_matched_positions"),
    "padding-free": ("padfree_slope", "padfree_sim_low", "padfree_sim_high", "padfree_p_holm",
                                     "padding_free", None),
    "padding-free end-aligned": ("padfree_end_slope", "padfree_end_sim_low", "padfree_end_sim_high",
                                  "padfree_end_p_holm", "padding_free_at_matched_lags", "padfree_end_positions"),
}


def _col(t: pd.DataFrame, name: str | None) -> list:
    """A column, or blanks for a file written before it existed (the renderer says n/a rather than failing)."""
    return list(t[name]) if name and name in t.columns else [math.nan] * len(t)


def gates(snap: Path, study: str) -> str:
    """studies/<study>/gates_effect.csv: per gate, the slope of its mean on n_step (per context word) and the
    verdict, pooled over the window, end-aligned, on the padding-free targets, and both."""
    if not study:
        raise LmgridError("lmgrid:render gates needs the study's name: gates:<study>")
    t = _read(snap, f"studies/{study}/gates_effect.csv")
    show = {"model": t["model_name"], "layer": (t["layer"] + 1).astype(str), "gate": t["gate"],
            "seeds": t["seeds"].astype(str), "n": t["n_steps"].astype(str)}
    for label, (m, lo, hi, p, verdict, where) in ANSWERS.items():
        where_col = _col(t, where)
        show[f"{label} slope"] = [
            slope_text(*v) + ("" if _blank(w) else f" (at {w})")
            for *v, w in zip(_col(t, m), _col(t, lo), _col(t, hi), _col(t, p), where_col)]
        show[label] = ["n/a" if _blank(v) else str(v) for v in _col(t, verdict)]
    note = ("Slope of the gate's mean on n_step, per context word: mean over seeds, its simultaneous 95% interval "
            "(Bonferroni over the study's gate tests, agreeing with Holm) and Holm-adjusted p (p_H); pooled over the "
            "window, start-aligned at the window positions every n shares (counted from the window's start), "
            "end-aligned at the lags back from the predicted word that every n shares (at ...), on the "
            "padding-free targets (a full window at every n of the study), and both.")
    return note + "\n\n" + markdown_table(pd.DataFrame(show))


def scales(snap: Path, _arg: str = "") -> str:
    """scales/gates.csv: per gate, whether the slope on n differs between the scales (scale x n, Welch over the two
    scales' seeds, Holm over the comparison), for each answer orchestration.scales tests."""
    t = _read(snap, "scales/gates.csv")
    show = {"model": t["model"], "layer": (t["layer"] + 1).astype(str), "gate": t["gate"], "scale": t["scale"],
            "seeds": t["seeds"].astype(str)}
    for answer, label in LABELS.items():
        diff = [slope_text(*v) for v in zip(_col(t, f"{answer}_diff"), _col(t, f"{answer}_diff_sim_low"),
                                             _col(t, f"{answer}_diff_sim_high"), _col(t, f"{answer}_diff_p_holm"))]
        verdicts = _col(t, f"interaction_{answer}")
        show[f"{label}: Δ slope"] = [
            "" if d == "n/a" else d for d in diff]
        show[f"{label}"] = ["n/a" if _blank(v) else str(v) for v in verdicts]
    note = ("Scale x n: each scale's slope on n_step minus the reference scale's (the row marked reference), Welch "
            "over the two scales' seeds, its simultaneous 95% interval and Holm-adjusted p over every such test of "
            "the comparison; per answer (pooled, start-aligned positions, end-aligned lags, padding-free, both).")
    return note + "\n\n" + markdown_table(pd.DataFrame(show))


TABLES = {"gates": gates, "scales": scales}
