"""presets/ptb_budget.yaml: a budget study whose scales differ in their FLOP budget (and epoch cap) and width only."""
from __future__ import annotations

import copy
from pathlib import Path

from lmgrid.analysis.budget_cli import budget_label
from lmgrid.orchestration.scales import scales_of
from lmgrid.run.key import NEURAL_ARCHS, all_runs

REPO = Path(__file__).resolve().parents[1]
PRESET = "presets/ptb_budget.yaml"


def _without_budget_and_width(config: dict) -> dict:
    c = copy.deepcopy(config)
    for key in ("budget_flops", "epochs", "hidden_dim", "emb_dim"):
        c["train"].pop(key)
    c["train"]["per_arch"]["ffnn"].pop("emb_dim")
    c["corpus"].pop("name")
    for study in c["studies"].values():  # its prose names the width
        study.pop("description", None)
    return c


def test_the_budget_scales_differ_in_their_budget_and_width_only(monkeypatch):
    """Three budgets spanning at least 8x, each at the same two or more widths, each scale every neural architecture
    over 3 seeds, the scales of one budget label at one budget, and the scales' configs equal but for
    train.budget_flops, train.epochs, the width keys and the corpus name.  Kills: a scale file edited apart from the
    others (a setting changed in one budget or width only confounds it), an architecture left out, one width only
    (nothing to choose from), a width scale whose budget differs from its label's (b1x_w100 at b3x's FLOPs)."""
    monkeypatch.chdir(REPO)
    scales = scales_of([PRESET])
    by_budget: dict[str, dict[int, float]] = {}
    for s in scales:
        by_budget.setdefault(budget_label(s.label), {})[s.config["train"]["hidden_dim"]] = \
            s.config["train"]["budget_flops"]
    budgets = sorted(next(iter(w.values())) for w in by_budget.values())
    assert len(budgets) >= 3 and budgets[-1] / budgets[0] >= 8
    widths = {frozenset(w) for w in by_budget.values()}
    assert len(widths) == 1 and len(next(iter(widths))) >= 2, by_budget      # the same widths at every budget
    assert all(len(set(w.values())) == 1 for w in by_budget.values()), by_budget  # one budget per label
    first = _without_budget_and_width(scales[0].config)
    for s in scales:
        runs = [k for k in all_runs(s.config["studies"]) if k.arch in NEURAL_ARCHS]
        assert {k.arch for k in runs} == set(NEURAL_ARCHS)
        assert {k.seed for k in runs} == {1, 2, 3}
        assert _without_budget_and_width(s.config) == first, s.label
    edited = copy.deepcopy(scales[1].config)  # the negative control: one scale with another rate
    edited["train"]["lr"] = 1.0
    assert _without_budget_and_width(edited) != first
