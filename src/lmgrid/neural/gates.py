"""Gate statistics of LSTM (i, f, o, g) and GRU (z, r) runs on the test split, written to gates.csv.

For each layer and gate: mean, standard deviation and two saturation fractions, over every unit and every time
step whose *input is a real token*; per unit (for a scatter plot of left- against right-saturation); and in the
window regime per position in the window (0 = oldest token), with the number of real tokens each position holds.

What counts: the window regime's left padding (<s> before the start of a sentence) and the stream regime's tail
padding are not tokens of the text, so the gates they produce are left out.  Averaging over them would make the
gates-against-n_step study measure the padding share (22% of window positions at n_step 5, 39% at 9 on the
default corpus) rather than the gates.

Saturation (after Karpathy, Johnson & Fei-Fei 2015, "Visualizing and Understanding Recurrent Networks"): a
sigmoid gate (i, f, o, z, r; range 0..1) is left-saturated below 0.1 and right-saturated above 0.9; the tanh
candidate g (range -1..1) is left-saturated below -0.9 and right-saturated above 0.9, i.e. |g| > 0.9.
Sums are accumulated in float64 on the model's device over the whole split, and copied to the host once.
"""
from __future__ import annotations

import csv
import io

import torch

from lmgrid.errors import atomic_write
from lmgrid.gate_facts import saturation_bounds

from .data import IGNORE

COLUMNS = ["scope", "layer", "gate", "index", "mean", "std", "frac_left_saturated", "frac_right_saturated",
           "count"]
GATED_ARCHS = ("lstm", "gru")


class _Sums:
    """sum, sum of squares, #left- and #right-saturated, reduced over the dims not kept; on the device."""

    def __init__(self, gate: str):
        self.low, self.high = saturation_bounds(gate)
        self.s = self.s2 = self.lo = self.hi = None

    def add(self, acts: torch.Tensor, weight: torch.Tensor, dims: tuple[int, ...]) -> None:
        a = acts.double()
        parts = ((a * weight).sum(dims), (a * a * weight).sum(dims), ((acts < self.low) * weight).sum(dims),
                 ((acts > self.high) * weight).sum(dims))
        if self.s is None:
            self.s, self.s2, self.lo, self.hi = parts
        else:
            self.s, self.s2, self.lo, self.hi = (old + new for old, new in zip((self.s, self.s2, self.lo, self.hi),
                                                                               parts))

    def cpu(self) -> "_Sums":
        self.s, self.s2, self.lo, self.hi = (t.cpu() for t in (self.s, self.s2, self.lo, self.hi))
        return self

    def rows(self, count: torch.Tensor):
        count = count.clamp_min(1)  # a position no real token reaches has all sums 0: report 0, count 0
        mean = self.s / count
        std = (self.s2 / count - mean * mean).clamp_min(0).sqrt()
        return mean, std, self.lo / count, self.hi / count


def real_token_mask(x: torch.Tensor, y: torch.Tensor, regime: str, bos: int) -> torch.Tensor:
    """1.0 where the input is a real token: not the window's <s> left padding, not the stream's tail padding."""
    if regime == "window":
        return (x != bos).double()
    return (y != IGNORE).double()


@torch.no_grad()
def collect(model, batches, regime: str, device, bos: int) -> list[dict]:
    """gates.csv rows for `model` over `batches` (inputs, targets) of the test split; `bos` is the <s> id."""
    model.eval()
    per_unit: dict[str, _Sums] = {}
    per_pos: dict[str, _Sums] = {}
    positions = torch.zeros((), dtype=torch.float64, device=device)  # real (batch, time) cells
    pos_count = None  # window: real tokens at each position
    state = None
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        _, new_state, gates = model(x, state if regime == "stream" else None, return_gates=True)
        state = new_state
        mask = real_token_mask(x, y, regime, bos)
        weight = mask[None, :, :, None]  # [1, B, T, 1] against gates [L, B, T, H]
        positions += mask.sum()
        for name, acts in gates.items():
            per_unit.setdefault(name, _Sums(name)).add(acts, weight, (1, 2))  # -> [L, H]
            if regime == "window":
                per_pos.setdefault(name, _Sums(name)).add(acts, weight, (1, 3))  # -> [L, T]
        if regime == "window":
            pos_count = mask.sum(0) if pos_count is None else pos_count + mask.sum(0)
    positions = float(positions)
    rows = []
    for name, sums in per_unit.items():
        sums.cpu()
        L, H = sums.s.shape
        mean_u, std_u, lo_u, hi_u = sums.rows(torch.tensor(positions, dtype=torch.float64))
        for layer in range(L):
            n_all = positions * H
            m = float(sums.s[layer].sum()) / max(n_all, 1)
            sd = max(float(sums.s2[layer].sum()) / max(n_all, 1) - m * m, 0.0) ** 0.5
            rows.append(_row("all", layer, name, -1, m, sd, float(sums.lo[layer].sum()) / max(n_all, 1),
                             float(sums.hi[layer].sum()) / max(n_all, 1), int(n_all)))
            if name in per_pos:
                p = per_pos[name].cpu()
                tokens = pos_count.double().cpu()
                mean_p, std_p, lo_p, hi_p = p.rows(tokens * H)
                for t in range(mean_p.shape[1]):
                    # count: the real tokens at this position (each contributes H unit activations)
                    rows.append(_row("position", layer, name, t, mean_p[layer, t], std_p[layer, t],
                                     lo_p[layer, t], hi_p[layer, t], int(tokens[t])))
            for u in range(H):
                rows.append(_row("unit", layer, name, u, mean_u[layer, u], std_u[layer, u], lo_u[layer, u],
                                 hi_u[layer, u], int(positions)))
    return rows


def _row(scope, layer, gate, index, mean, std, lo, hi, count) -> dict:
    return {"scope": scope, "layer": layer, "gate": gate, "index": index, "mean": float(mean), "std": float(std),
            "frac_left_saturated": float(lo), "frac_right_saturated": float(hi), "count": count}


def write(path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    order = {"all": 0, "position": 1, "unit": 2}
    for r in sorted(rows, key=lambda r: (order[r["scope"]], r["layer"], r["gate"], r["index"])):
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    with atomic_write(path) as fh:
        fh.write(buf.getvalue())
