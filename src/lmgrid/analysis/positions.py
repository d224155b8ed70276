"""Gates compared at matched window positions: does the window's size change a gate where it is read at the same
place, or does the pooled gate mean move with n_step only because a longer window reads more late positions?

gates.csv holds, per run, gate and layer, the mean over every counted value at each window position (scope
`position`, index 0 = the window's oldest input token, count = tokens at that position).  A gate at position t has
seen t + 1 inputs since the zero state whatever n_step is, so at one position n_step acts only through the trained
weights (and which tokens sit there); the pooled mean (scope `all`) also averages over a set of positions that grows
with n_step (at n_step 3 every counted forget-gate value sits at position 1, at 9 they spread over 1 to 7).

* `matched_means`: per run, the count-weighted mean over the positions every n_step of the gate shares
  (`shared_positions`; with n_step 2 in the grid that is position 0, for the forget gate position 1);
* `position_means`: per run and position, the position rows themselves (each position on its own);
* `profile_pooled`: per run, the pooled mean that the position profile alone predicts: the seed's profile, read
  from its run at the largest n_step (which holds every position), weighted by this run's own position counts.  Its
  slope on n_step is the part of the pooled slope that the position composition explains; the pooled slope minus it
  is what n_step changes beyond position.

Two confounds of the start-aligned positions, and the analyses that remove them (issue 44):
* alignment: position 1 is the last input at n_step 3 but seven steps before the prediction at n_step 9.
  `aligned(rows, "end")` counts back from the predicted token instead: lag 1 = the last input token (position
  n_step - 2), lag n_step - 1 = the oldest; the functions above then match lags, not start positions.  Both are
  kept, labelled `start` (position, 0 = oldest input) and `end` (lag, 1 = last input);
* padding: `position` rows count real tokens only, so the targets behind a position differ by n_step (a longer
  window drops more short-context targets from its early positions).  `padfree_rows` reads the padding-free rows
  instead (gates.csv scope `padfree`): only targets with at least N - 1 words before them in their sentence, N the
  study's largest n_step, so no window of any n holds padding and every n is measured on the same targets.

The slopes, intervals and tests over seeds are effects.py's (effects.seed_slopes, effects.t_test).
"""
from __future__ import annotations

import pandas as pd

RUN = ["model", "layers", "layer", "gate", "seed", "n_step"]


def position_rows(gates: pd.DataFrame) -> pd.DataFrame:
    """The window regime's per-position rows, with `position` (the gates.csv index) and `tokens` (its count)."""
    df = gates[(gates["scope"] == "position") & (gates["regime"] == "window")]
    return df.assign(position=df["index"].astype(int), tokens=df["count"].astype(float))


def padfree_rows(gates: pd.DataFrame) -> pd.DataFrame:
    """The padding-free per-position rows of the study: scope `padfree` at min_context = (the study's largest window
    n_step) - 1, with `position` and `tokens` as position_rows; empty when the runs' gates.csv predate them."""
    window = gates[gates["regime"] == "window"]
    if window.empty or "min_context" not in window.columns:
        return window.iloc[0:0].assign(position=[], tokens=[])
    df = window[(window["scope"] == "padfree") & (window["min_context"] == int(window["n_step"].max()) - 1)]
    return df.assign(position=df["index"].astype(int), tokens=df["count"].astype(float))


def aligned(rows: pd.DataFrame, align: str) -> pd.DataFrame:
    """Position rows in an alignment: `start` as written (position, 0 = the oldest input), or `end`: `position`
    replaced by the lag back from the predicted token (1 = the last input, n_step - 1 = the oldest)."""
    if align == "start":
        return rows
    if align != "end":
        raise ValueError(f"align: {align!r} (expected start or end)")
    return rows.assign(position=rows["n_step"].astype(int) - 1 - rows["position"])


def pooled_means(g: pd.DataFrame) -> pd.DataFrame:
    """Per run (seed, n_step) of one gate's position rows: the count-weighted mean over every position (`mean`)."""
    if g.empty:
        return pd.DataFrame(columns=["seed", "n_step", "mean"])
    return (g.assign(w=g["mean"] * g["tokens"]).groupby(["seed", "n_step"])[["w", "tokens"]].sum()
            .pipe(lambda s: (s["w"] / s["tokens"]).rename("mean")).reset_index())


def shared_positions(g: pd.DataFrame) -> list[int]:
    """The positions that every n_step of one gate's position rows (`g`) has, in every run."""
    per_run = g.groupby(["seed", "n_step"])["position"].agg(frozenset)
    return sorted(frozenset.intersection(*per_run)) if len(per_run) else []


def matched_means(g: pd.DataFrame) -> pd.DataFrame:
    """Per run (seed, n_step) of one gate: the count-weighted mean over the shared positions (`mean`), or an empty
    frame when none is shared."""
    return pooled_means(g[g["position"].isin(shared_positions(g))])


def profile_pooled(g: pd.DataFrame) -> pd.DataFrame:
    """Per run (seed, n_step) of one gate: the pooled mean its position counts give under the seed's profile at the
    largest n_step (`mean`); runs with a position the profile lacks are left out."""
    rows = []
    for seed, s in g.groupby("seed"):
        top = s[s["n_step"] == s["n_step"].max()].set_index("position")["mean"]
        for n_step, run in s.groupby("n_step"):
            if not run["position"].isin(top.index).all():
                continue
            w = run["tokens"].to_numpy()
            rows.append({"seed": seed, "n_step": n_step,
                         "mean": float((top.loc[run["position"]].to_numpy() * w).sum() / w.sum())})
    return pd.DataFrame(rows, columns=["seed", "n_step", "mean"])


def position_means(gates: pd.DataFrame, align: str = "start", subset: str = "all") -> pd.DataFrame:
    """Per model, layer, gate, n_step and position (in `align`): the runs' position rows, of every target with a real
    token there (`all`) or of the padding-free targets (`padfree`) (intervals: effects.gate_position_means)."""
    rows = position_rows(gates) if subset == "all" else padfree_rows(gates)
    return aligned(rows, align)[RUN + ["position", "mean", "tokens"]]
