"""Which files each study produces, decided from the config alone.

Snakemake must know every output before any job runs, and the aggregation job must write exactly
those files, so both ask this module.  Kept free of heavy imports (Snakemake imports it while
building the DAG).  A new study in config.yaml gets its outputs from its grid, with no code change:
a plot is made when the grid varies along its axis.
"""
from __future__ import annotations

from ..runkey import RunKey, expand_study

GATED_ARCHS = ("lstm", "gru")
STUDIES_DIR = "results/{corpus}/studies"
TABLE_EXTS = ("csv", "md", "tex")
FIGURE_EXTS = ("pdf", "png")


def model_label(key: RunKey) -> str:
    """The architecture and implementation, e.g. 'lstm/cell'; the default implementation is left out."""
    return key.arch if key.impl in ("torch", "ngram") else f"{key.arch}/{key.impl}"


def gated_models(keys: list[RunKey]) -> list[tuple[str, str]]:
    return sorted({(k.arch, k.impl) for k in keys if k.arch in GATED_ARCHS})


def study_plan(study: dict) -> dict[str, list[str]]:
    """Output stem -> extensions for one study; stems are file names without extension."""
    keys = expand_study(study)
    window_steps = {k.n_step for k in keys if k.regime == "window" and not k.is_ngram} | \
                   {k.n_step for k in keys if k.is_ngram}
    layers = {k.layers for k in keys if not k.is_ngram}
    neural = [k for k in keys if not k.is_ngram]
    gated = gated_models(keys)
    plan = {"table": list(TABLE_EXTS)}
    if len(window_steps) > 1:
        plan["ppl_vs_nstep"] = list(FIGURE_EXTS)
    if len(layers) > 1:
        plan["ppl_vs_layers"] = list(FIGURE_EXTS)
    if neural:
        plan["curves"] = list(FIGURE_EXTS)
    gated_window_steps = {k.n_step for k in keys if k.arch in GATED_ARCHS and k.regime == "window"}
    if gated and len(gated_window_steps) > 1:
        plan["gates_vs_nstep"] = list(FIGURE_EXTS)
        plan["gates_effect"] = list(TABLE_EXTS)
    for arch, impl in gated:
        plan[f"saturation_{arch}_{impl}"] = list(FIGURE_EXTS)
    return plan


def study_outputs(corpus: str, name: str, study: dict) -> list[str]:
    base = f"{STUDIES_DIR.format(corpus=corpus)}/{name}"
    return [f"{base}/{stem}.{ext}" for stem, exts in study_plan(study).items() for ext in exts]


def all_outputs(corpus: str, studies: dict) -> list[str]:
    return [p for name, study in studies.items() for p in study_outputs(corpus, name, study)]
