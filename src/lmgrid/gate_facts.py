"""Facts about the gates that the training side (lmgrid.neural.gates) and the tables and plots share; torch-free.

* Saturation thresholds, per gate range: a sigmoid gate (i, f, o of the LSTM; z, r of the GRU; range 0..1) is
  left-saturated below 0.1 and right-saturated above 0.9 (Karpathy, Johnson & Fei-Fei 2015); the LSTM's tanh
  candidate g (range -1..1) below -0.9 and above 0.9, i.e. |g| > 0.9.
* Whether a gate can learn at all in a grid cell.  The LSTM forget gate multiplies the previous cell state
  (c' = f * c + i * g).  A window of n_step 2 holds one context token, read from the zero initial state, so f only
  ever multiplies c = 0 and receives no gradient: its activations are those of its initial bias, not a finding.
  From n_step 3 on (and in the stream regime) f acts on a non-zero c.  The GRU's gates all get a gradient at the
  first step (z weighs n against h = 0, r scales the bias b_hn).
"""
from __future__ import annotations

TANH_GATES = ("g",)
SATURATION = {"sigmoid": (0.1, 0.9), "tanh": (-0.9, 0.9)}  # (left-saturated below, right-saturated above)


def saturation_bounds(gate: str) -> tuple[float, float]:
    return SATURATION["tanh" if gate in TANH_GATES else "sigmoid"]


def gate_gets_gradient(gate: str, regime: str, n_step: int) -> bool:
    """False where the gate's activations are never trained (see the module docstring)."""
    return not (gate == "f" and regime == "window" and n_step <= 2)
