"""Gate statistics of LSTM (i, f, o, g) and GRU (z, r) runs on the test split, written to gates.csv.

For each layer and gate: mean, standard deviation and two saturation fractions over every gate value that has an
effect (below); per unit (for a scatter plot of left- against right-saturation); and in the window regime per
position in the window (0 = oldest token), with the number of tokens each position contributes, and the same per
position over padding-free targets only (scope `padfree`, one set of rows per `min_context`: MAX_PADFREE_CONTEXT).
A row whose count would be 0 is not written.

What counts (docs/contracts.md, "gates.csv"):
* only real tokens: the window regime's left padding (<s> before the start of a sentence) and the stream regime's
  tail padding are not tokens of the text.  Averaging over them would make the gates-against-n_step study
  measure the padding share (22% of window positions at n_step 5, 39% at 9 on the default corpus);
* only values that have an effect: the LSTM forget gate multiplies the previous cell state (c' = f * c + i * g),
  which is exactly zero at the first step from a zero state (every window's position 0, every stream row's first
  token), so f there changes nothing and is left out (at n_step 2 that is every f value: no f rows at all).  Every
  other gate acts at every step: i scales g, o scales tanh(c'), g is added; the GRU's z weighs n against h (at
  h = 0 it still scales n by 1 - z) and r scales W_hn h + b_hn, whose bias is trained.

Saturation (after Karpathy, Johnson & Fei-Fei 2015, "Visualizing and Understanding Recurrent Networks"): a
sigmoid gate (i, f, o, z, r; range 0..1) is left-saturated below 0.1 and right-saturated above 0.9; the tanh
candidate g (range -1..1) is left-saturated below -0.9 and right-saturated above 0.9, i.e. |g| > 0.9.
Sums are accumulated in float64 on the model's device over the whole split, and copied to the host once.  They are
taken in the pass that scores the test split (module.evaluate), not in a second pass over it.
"""
from __future__ import annotations

import csv
import io

import torch

from lmgrid.common.fileio import atomic_write
from lmgrid.run.gate_facts import saturation_bounds

from lmgrid.neural.data import IGNORE

COLUMNS = ["scope", "layer", "gate", "index", "mean", "std", "frac_left_saturated", "frac_right_saturated",
           "count", "min_context"]

# Padding-free rows (scope `padfree`, window regime): per position, over the targets with at least `min_context`
# words before them in their sentence, for every min_context from the run's own n_step - 1 (its windows then hold no
# <s>) up to this cap.  A study whose largest n_step is N reads min_context N - 1 from each of its runs: the same
# targets at every n (analysis.positions).  A run does not know which studies read it (its folder is keyed by its
# cell alone), so it records every threshold a study up to n_step MAX_PADFREE_CONTEXT + 1 could ask for.
MAX_PADFREE_CONTEXT = 16


# Gates that multiply the previous state, and so have no effect at the first step from a zero state.
STATE_GATES = ("f",)


# How a batch's gate values [L, B, T, H] are reduced against its mask [B, T]: per unit (over B and T) or per
# position in the window (over B and H). An einsum contracts with the mask directly, without materialising
# the masked values (2.0 -> 0.8 ms per gate and PTB test batch; the sums are the same in float64).
KEEP = {"unit": "lbth,bt->lh", "position": "lbth,bt->lt", "padfree": "lbt,btk->lkt"}


class _Sums:
    """sum, sum of squares, #left- and #right-saturated and the count of values, per kept index; float64, on the
    device."""

    def __init__(self, gate: str):
        self.low, self.high = saturation_bounds(gate)
        self.parts = None

    def add(self, acts: torch.Tensor, mask: torch.Tensor, keep: str, bucket: torch.Tensor | None = None) -> None:
        """acts [L, B, T, H]; mask [B, T], 1.0 where a value counts; `padfree`: bucket [B, K], each target's
        one-hot context bucket (GateStats.add)."""
        a, w, eq = acts.double(), mask.double(), KEEP[keep]
        L, _, T, H = a.shape
        if keep == "padfree":
            # summed over the units first ([L, B, T]), then contracted with the mask and the buckets: the
            # three-operand einsum on [L, B, T, H] took about three times as long as the position rows
            ww = torch.einsum("bt,bk->btk", w, bucket)
            parts = tuple(torch.einsum(eq, v, ww) for v in (a.sum(-1), (a * a).sum(-1), (acts < self.low).sum(-1)
                                                             .double(), (acts > self.high).sum(-1).double()))
            parts += (ww.sum(0).T.expand(L, -1, T) * H,)
        else:
            count = w.sum(0).expand(L, T) * H if keep == "position" else w.sum().expand(L, H)
            parts = (torch.einsum(eq, a, w), torch.einsum(eq, a * a, w),
                     torch.einsum(eq, (acts < self.low).double(), w), torch.einsum(eq, (acts > self.high).double(), w),
                     count)
        self.parts = parts if self.parts is None else tuple(old + new for old, new in zip(self.parts, parts))

    def cpu(self) -> "_Sums":
        self.parts = tuple(t.cpu() for t in self.parts)
        return self

    def rows(self):
        """mean, std, fraction left- and right-saturated, and the count of values, per kept index."""
        s, s2, lo, hi, n = self.parts
        count = n.clamp_min(1)
        mean = s / count
        std = (s2 / count - mean * mean).clamp_min(0).sqrt()
        return mean, std, lo / count, hi / count, n


def real_token_mask(x: torch.Tensor, y: torch.Tensor, regime: str, bos: int) -> torch.Tensor:
    """1.0 where the input is a real token: not the window's <s> left padding, not the stream's tail padding."""
    if regime == "window":
        return (x != bos).double()
    return (y != IGNORE).double()


def effect_mask(gate: str, real: torch.Tensor, from_zero_state: bool) -> torch.Tensor:
    """real [B, T] narrowed to the steps where `gate` has an effect: a state gate loses step 0 of a chunk that
    starts from the zero state."""
    if gate not in STATE_GATES or not from_zero_state:
        return real
    mask = real.clone()
    mask[:, 0] = 0
    return mask


def preceding_words(sentences) -> torch.Tensor:
    """Per target of a split in corpus order (each word, then </s>), the words before it in its sentence: 0 .. len."""
    return torch.cat([torch.arange(len(s) + 1) for s in sentences]) if sentences else torch.zeros(0, dtype=torch.long)


class GateStats:
    """The gates.csv sums of one pass over a split, fed batch by batch (`add`) by the pass that scores it
    (module.evaluate with `gate_stats`): test NLL and gate statistics then come from one forward pass.
    `preceding` (window regime; preceding_words of the split): with it the padding-free rows are gathered too.  It
    is read in step with the batches, which module.evaluate feeds in corpus order (rows() checks that every target
    was seen once)."""

    def __init__(self, regime: str, bos: int, preceding: torch.Tensor | None = None):
        self.regime, self.bos = regime, bos
        self.per_unit: dict[str, _Sums] = {}
        self.per_pos: dict[str, _Sums] = {}
        self.padfree: dict[str, _Sums] = {}
        self.preceding = preceding if regime == "window" else None
        self.seen = 0  # targets read so far, in corpus order
        self.context_from = None  # the run's n_step - 1: the least min_context of its padfree rows

    def _buckets(self, x: torch.Tensor) -> torch.Tensor | None:
        """[B, K] one-hot: target b's words before it, clamped to MAX_PADFREE_CONTEXT, minus n_step - 1 (k = 0: at
        least n_step - 1 words, no padding in its window); all zero for a padded window.  None: no padfree rows."""
        if self.preceding is None:
            return None
        B, T = x.shape
        j = self.preceding[self.seen:self.seen + B].to(x.device)
        self.seen += B
        if len(j) != B:
            raise AssertionError(f"gate statistics: {self.seen} targets fed, the split has {len(self.preceding)}")
        if T > MAX_PADFREE_CONTEXT:
            return None
        self.context_from = T
        k = j.clamp(max=MAX_PADFREE_CONTEXT) - T
        return torch.nn.functional.one_hot(k.clamp(min=0), MAX_PADFREE_CONTEXT - T + 1).double() * (k >= 0)[:, None]

    def add(self, x: torch.Tensor, y: torch.Tensor, gates: dict, from_zero_state: bool) -> None:
        """One batch's gates {name: [L, B, T, H]} for inputs x and targets y [B, T]; `from_zero_state`: the batch
        started from the zero state (every window; a stream row's first chunk)."""
        real = real_token_mask(x, y, self.regime, self.bos)
        bucket = self._buckets(x)
        for name, acts in gates.items():
            mask = effect_mask(name, real, from_zero_state)  # [B, T]
            self.per_unit.setdefault(name, _Sums(name)).add(acts, mask, "unit")  # -> [L, H]
            if self.regime == "window":
                self.per_pos.setdefault(name, _Sums(name)).add(acts, mask, "position")  # -> [L, T]
            if bucket is not None:
                self.padfree.setdefault(name, _Sums(name)).add(acts, mask, "padfree", bucket)  # -> [L, K, T]

    def _padfree_rows(self, name: str, layer: int, H: int) -> list[dict]:
        """scope `padfree`: per min_context K (n_step - 1 .. MAX_PADFREE_CONTEXT) and position, the values of the
        targets with at least K words before them: the buckets k >= K summed (a reversed cumulative sum)."""
        if name not in self.padfree:
            return []
        sums = _Sums(name)  # a copy: the buckets themselves stay as gathered
        sums.parts = tuple(p.flip(1).cumsum(1).flip(1) for p in self.padfree[name].cpu().parts)
        mean, std, lo, hi, n = sums.rows()
        rows = []
        for k in range(mean.shape[1]):
            for t in range(mean.shape[2]):
                if n[layer, k, t] > 0:
                    rows.append(_row("padfree", layer, name, t, mean[layer, k, t], std[layer, k, t], lo[layer, k, t],
                                     hi[layer, k, t], int(n[layer, k, t]) // H, self.context_from + k))
        return rows

    def rows(self) -> list[dict]:
        """gates.csv rows: per layer and gate over all counted values, per position (window regime), per unit."""
        if self.preceding is not None and self.seen != len(self.preceding):
            raise AssertionError(f"gate statistics: {self.seen} targets fed, the split has {len(self.preceding)}")
        rows = []
        for name, sums in self.per_unit.items():
            s, s2, lo, hi, n = sums.cpu().parts
            mean_u, std_u, lo_u, hi_u, n_u = sums.rows()
            L, H = s.shape
            by_position = self.per_pos[name].cpu().rows() if name in self.per_pos else None
            for layer in range(L):
                n_all = float(n[layer].sum())
                if n_all == 0:
                    continue  # no value of this gate has an effect here (the forget gate at n_step 2)
                m = float(s[layer].sum()) / n_all
                sd = max(float(s2[layer].sum()) / n_all - m * m, 0.0) ** 0.5
                rows.append(_row("all", layer, name, -1, m, sd, float(lo[layer].sum()) / n_all,
                                 float(hi[layer].sum()) / n_all, int(n_all)))
                if by_position is not None:
                    mean_p, std_p, lo_p, hi_p, n_p = by_position
                    for t in range(mean_p.shape[1]):
                        if n_p[layer, t] > 0:  # count: the tokens at this position (each gives H unit values)
                            rows.append(_row("position", layer, name, t, mean_p[layer, t], std_p[layer, t],
                                             lo_p[layer, t], hi_p[layer, t], int(n_p[layer, t]) // H))
                rows += self._padfree_rows(name, layer, H)
                for u in range(H):
                    rows.append(_row("unit", layer, name, u, mean_u[layer, u], std_u[layer, u], lo_u[layer, u],
                                     hi_u[layer, u], int(n_u[layer, u])))
        return rows


def collect(model, batches, regime: str, device, bos: int, preceding: torch.Tensor | None = None) -> list[dict]:
    """gates.csv rows for `model` over `batches` (inputs, targets) of the test split; `bos` is the <s> id;
    `preceding` (preceding_words of the split's sentences) adds the padfree rows.  A pass of its own; a run gets
    them from the pass that scores test (train.py)."""
    from lmgrid.neural.evaluation import evaluate

    stats = GateStats(regime, bos, preceding)
    evaluate(model, batches, regime, device, gate_stats=stats)
    return stats.rows()


def _row(scope, layer, gate, index, mean, std, lo, hi, count, min_context=0) -> dict:
    """min_context 0 (every target) except on padfree rows."""
    return {"scope": scope, "layer": layer, "gate": gate, "index": index, "mean": float(mean), "std": float(std),
            "frac_left_saturated": float(lo), "frac_right_saturated": float(hi), "count": count,
            "min_context": min_context}


def write(path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    order = {"all": 0, "position": 1, "padfree": 2, "unit": 3}
    for r in sorted(rows, key=lambda r: (order[r["scope"]], r["layer"], r["gate"], r["min_context"], r["index"])):
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    with atomic_write(path) as fh:
        fh.write(buf.getvalue())
