"""presets/ptb_budget.yaml: a budget study whose scales differ in their FLOP budget (and epoch cap) only."""
from __future__ import annotations

import copy
from pathlib import Path

from lmgrid.orchestration.scales import scales_of
from lmgrid.run.key import NEURAL_ARCHS, all_runs

REPO = Path(__file__).resolve().parents[1]
PRESET = "presets/ptb_budget.yaml"


def _without_budget(config: dict) -> dict:
    c = copy.deepcopy(config)
    for key in ("budget_flops", "epochs"):
        c["train"].pop(key)
    c["corpus"].pop("name")
    return c


def test_the_budget_scales_differ_in_their_budget_only(monkeypatch):
    """Three budgets spanning at least 8x, each scale every neural architecture over 3 seeds, and the scales' configs
    equal but for train.budget_flops, train.epochs and the corpus name.  Kills: a scale file edited apart from the
    others (a setting changed in one budget only confounds the budget with it), an architecture left out."""
    monkeypatch.chdir(REPO)
    scales = scales_of([PRESET])
    budgets = sorted(s.config["train"]["budget_flops"] for s in scales)
    assert len(budgets) >= 3 and budgets[-1] / budgets[0] >= 8
    first = _without_budget(scales[0].config)
    for s in scales:
        runs = [k for k in all_runs(s.config["studies"]) if k.arch in NEURAL_ARCHS]
        assert {k.arch for k in runs} == set(NEURAL_ARCHS)
        assert {k.seed for k in runs} == {1, 2, 3}
        assert _without_budget(s.config) == first, s.label
    edited = copy.deepcopy(scales[1].config)  # the negative control: one scale with another rate
    edited["train"]["lr"] = 1.0
    assert _without_budget(edited) != first
