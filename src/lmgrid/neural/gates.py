"""Gate statistics of LSTM (i, f, o, g) and GRU (z, r) runs on the test split, written to gates.csv.

For each layer and gate: mean, standard deviation, and the fractions of activations below 0.1 and above 0.9
(the saturation measure of Karpathy, Johnson & Fei-Fei 2015, "Visualizing and Understanding Recurrent
Networks"), over every unit and every time step of every counted position; per unit (for a scatter plot of
left- vs right-saturation); and in the window regime per position in the window (0 = oldest token).
Sums are accumulated in float64 over the whole split, so no batch is singled out.
"""
from __future__ import annotations

import csv
import io

import torch

from lmgrid.errors import atomic_write

from .data import IGNORE

COLUMNS = ["scope", "layer", "gate", "index", "mean", "std", "frac_below_0.1", "frac_above_0.9", "count"]
GATED_ARCHS = ("lstm", "gru")


class _Sums:
    """sum, sum of squares, #below 0.1, #above 0.9 and count, reduced over the dims not kept."""

    def __init__(self):
        self.s = self.s2 = self.lo = self.hi = None
        self.n = 0

    def add(self, acts: torch.Tensor, weight: torch.Tensor, dims: tuple[int, ...]) -> None:
        a = acts.double() * weight
        parts = (a.sum(dims), (a * acts.double()).sum(dims), ((acts < 0.1) * weight).sum(dims).double(),
                 ((acts > 0.9) * weight).sum(dims).double())
        if self.s is None:
            self.s, self.s2, self.lo, self.hi = (p.cpu() for p in parts)
        else:
            for name, p in zip(("s", "s2", "lo", "hi"), parts):
                setattr(self, name, getattr(self, name) + p.cpu())

    def rows(self, count: torch.Tensor):
        mean = self.s / count
        std = (self.s2 / count - mean * mean).clamp_min(0).sqrt()
        return mean, std, self.lo / count, self.hi / count


@torch.no_grad()
def collect(model, batches, regime: str, device) -> list[dict]:
    """gates.csv rows for `model` over `batches` (inputs, targets) of the test split."""
    model.eval()
    per_unit: dict[str, _Sums] = {}
    per_pos: dict[str, _Sums] = {}
    positions = 0  # counted (batch, time) cells
    pos_count = None
    state = None
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        _, new_state, gates = model(x, state if regime == "stream" else None, return_gates=True)
        state = new_state
        if regime == "window":
            # Every window position holds a real token (left padding is <s>, part of the context).
            mask = torch.ones(x.shape, device=device)
        else:
            mask = (y != IGNORE).float()  # the stream's tail padding is not a time step
        weight = mask[None, :, :, None]  # [1, B, T, 1] against gates [L, B, T, H]
        positions += float(mask.sum())
        for name, acts in gates.items():
            per_unit.setdefault(name, _Sums()).add(acts, weight, (1, 2))  # -> [L, H]
            if regime == "window":
                per_pos.setdefault(name, _Sums()).add(acts, weight, (1, 3))  # -> [L, T]
        if regime == "window":
            c = mask.sum(0)
            pos_count = c if pos_count is None else pos_count + c
    rows = []
    for name, sums in per_unit.items():
        L, H = sums.s.shape
        mean_u, std_u, lo_u, hi_u = sums.rows(torch.tensor(positions, dtype=torch.float64))
        for layer in range(L):
            n_all = positions * H
            m = float(sums.s[layer].sum()) / n_all
            sd = max(float(sums.s2[layer].sum()) / n_all - m * m, 0.0) ** 0.5
            rows.append(_row("all", layer, name, -1, m, sd, float(sums.lo[layer].sum()) / n_all,
                             float(sums.hi[layer].sum()) / n_all, int(n_all)))
            if name in per_pos:
                p = per_pos[name]
                cnt = pos_count.double().cpu() * H
                mean_p, std_p, lo_p, hi_p = p.rows(cnt)
                for t in range(mean_p.shape[1]):
                    rows.append(_row("position", layer, name, t, mean_p[layer, t], std_p[layer, t],
                                     lo_p[layer, t], hi_p[layer, t], int(cnt[t])))
            for u in range(H):
                rows.append(_row("unit", layer, name, u, mean_u[layer, u], std_u[layer, u], lo_u[layer, u],
                                 hi_u[layer, u], int(positions)))
    return rows


def _row(scope, layer, gate, index, mean, std, lo, hi, count) -> dict:
    return {"scope": scope, "layer": layer, "gate": gate, "index": index, "mean": float(mean), "std": float(std),
            "frac_below_0.1": float(lo), "frac_above_0.9": float(hi), "count": count}


def write(path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    order = {"all": 0, "position": 1, "unit": 2}
    for r in sorted(rows, key=lambda r: (order[r["scope"]], r["layer"], r["gate"], r["index"])):
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    with atomic_write(path) as fh:
        fh.write(buf.getvalue())
