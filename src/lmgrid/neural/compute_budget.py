"""A run's compute budget in training FLOPs (`train.budget_flops`), turned into the token budget its schedule runs.

The budget schedule (lmgrid.neural.schedule.BudgetSchedule) counts training tokens; an equal-compute comparison of
architectures gives each the same FLOPs instead, so that a cheap model trains on more tokens than a costly one.  The
conversion is the run's own analytic count (lmgrid.models.flops): tokens = budget_flops / training FLOPs per token of
the model this run builds, in its regime and chunk length, with the adaptive softmax's tail clusters weighted by the
share of training tokens that fall in them (the vocabulary's counts, from which the clusters were cut).  FLOPs, not
CPU-seconds, so that the budget, and so the run's result, is the same on every machine and under any load.
"""
from __future__ import annotations

from lmgrid.common.errors import LmgridError
from lmgrid.models.config import ModelConfig
from lmgrid.models.flops import cluster_fractions, flops_per_token


def train_flops_per_token(model_config: dict, regime: str, bptt: int, counts) -> float:
    """Training FLOPs per predicted token of the model model_config builds (forward + backward, FlopCount.train).
    counts: training token counts by id (vocabulary order), for the adaptive softmax's cluster fractions."""
    cfg = ModelConfig(**model_config)
    fractions = cluster_fractions(counts, cfg.cutoffs) if cfg.output_layer == "adaptive" else None
    return flops_per_token(cfg, regime, bptt, fractions).train


def flops_budget(hp: dict, model_config: dict, regime: str, counts) -> dict | None:
    """{budget_flops, train_flops_per_token, budget_tokens} of a run with train.budget_flops > 0, else None.
    Giving both train.budget_flops and train.budget_tokens is one line naming both."""
    flops = hp.get("budget_flops", 0) or 0
    if flops <= 0:
        return None
    if hp.get("budget_tokens", 0) > 0:
        raise LmgridError(f"train.budget_flops ({flops:g}) and train.budget_tokens ({hp['budget_tokens']}) are both "
                          "set: a run has one budget; set the other to 0")
    per_token = train_flops_per_token(model_config, regime, hp["bptt"], counts)
    tokens = int(round(flops / per_token))
    if tokens < 1:
        raise LmgridError(f"train.budget_flops: {flops:g} is less than one training token of this model "
                          f"({per_token:.4g} FLOPs)")
    return {"budget_flops": float(flops), "train_flops_per_token": per_token, "budget_tokens": tokens}
