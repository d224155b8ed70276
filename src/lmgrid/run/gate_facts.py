"""Facts about the gates that the training side (lmgrid.neural.gates) and the tables and plots share; torch-free.

* Saturation thresholds, per gate range: a sigmoid gate (i, f, o of the LSTM; z, r of the GRU; range 0..1) is
  left-saturated below 0.1 and right-saturated above 0.9 (Karpathy, Johnson & Fei-Fei 2015); the LSTM's tanh
  candidate g (range -1..1) below -0.9 and above 0.9, i.e. |g| > 0.9.
* Which gate values have an effect is decided where they are measured (lmgrid.neural.gates.effect_mask): the LSTM
  forget gate at the first step from a zero cell state is left out there.
"""
from __future__ import annotations

from lmgrid.common import plugins
from lmgrid.common.errors import LmgridError

GATED_ARCHS = ("lstm", "gru")  # the built-in architectures whose gates are measured (gates.csv)
TANH_GATES = ("g",)
SATURATION = {"sigmoid": (0.1, 0.9), "tanh": (-0.9, 0.9)}  # (left-saturated below, right-saturated above)


def saturation_bounds(gate: str) -> tuple[float, float]:
    return SATURATION["tanh" if gate in TANH_GATES else "sigmoid"]


def gated_archs() -> tuple[str, ...]:
    """Every architecture whose gates are measured: the built-in gated ones and each registered plug-in that
    declares gates (lmgrid_gates; lmgrid.common.plugins)."""
    return GATED_ARCHS + plugins.gated_names()


def is_gated(arch: str) -> bool:
    return arch in gated_archs()


def check_workflow_gates(arch: str, hparams: dict) -> None:
    """The workflow's gated runs write gates.csv (rule train_gated) for the gate studies: train.gate_stats false,
    meant for runs by hand that read no gates, is refused there with one line."""
    if is_gated(arch) and not hparams["gate_stats"]:
        raise LmgridError(f"train.gate_stats: false for {arch}, but the workflow's {arch} runs write gates.csv for the "
                          "gate analysis; leave it at true in config.yaml (false is for `lmgrid train` by hand)")
