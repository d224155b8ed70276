"""Which files each study produces, decided from the config alone.

Snakemake must know every output before any job runs, and the aggregation job must write exactly
those files, so both ask this module.  Kept free of heavy imports (Snakemake imports it while
building the DAG).  A new study in config.yaml gets its outputs from its grid, with no code change:
a plot is made when the grid varies along its axis.
"""
from __future__ import annotations

from ..errors import LmgridError
from ..runkey import RunKey, expand_study

GATED_ARCHS = ("lstm", "gru")
STUDIES_DIR = "results/{corpus}/studies"
TABLE_EXTS = ("csv", "md", "tex", "html")  # html: the view in the Snakemake report
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
    plan = {"table": list(TABLE_EXTS), "findings": ["md", "html"]}
    if len(window_steps) > 1:
        plan["ppl_vs_nstep"] = list(FIGURE_EXTS)
    if len(layers) > 1:
        plan["ppl_vs_layers"] = list(FIGURE_EXTS)
    if neural:
        plan["curves"] = list(FIGURE_EXTS)
        plan["valid_curves"] = list(FIGURE_EXTS)  # one line per run (aggregate.run_curves)
    gated_window_steps = {k.n_step for k in keys if k.arch in GATED_ARCHS and k.regime == "window"}
    if gated and len(gated_window_steps) > 1:
        plan["gates_vs_nstep"] = list(FIGURE_EXTS)
        plan["gates_effect"] = list(TABLE_EXTS)  # the trend test (aggregate.effects.gate_trends)
        plan["gate_means"] = list(TABLE_EXTS)  # per n_step, with intervals over seeds
    for arch, impl in gated:
        plan[f"saturation_{arch}_{impl}"] = list(FIGURE_EXTS)
    return plan


# Outputs shown in the Snakemake HTML report: stem prefix -> (extension, caption file, label).
REPORT_KINDS = {
    "table": ("html", "table.rst", "perplexity table"),
    "ppl_vs_nstep": ("png", "ppl_vs_nstep.rst", "PPL against n_step"),
    "ppl_vs_layers": ("png", "ppl_vs_layers.rst", "PPL against layers"),
    "curves": ("png", "curves.rst", "training curves"),
    "valid_curves": ("png", "valid_curves.rst", "valid PPL per run and how it stopped"),
    "gates_vs_nstep": ("png", "gates_vs_nstep.rst", "gate means against n_step"),
    "gates_effect": ("html", "gates_effect.rst", "gate trend against n_step"),
    "gate_means": ("html", "gate_means.rst", "gate means per n_step, 95% CI"),
    "findings": ("html", "findings.rst", "findings"),
    "saturation": ("png", "saturation.rst", "per-unit gate saturation"),
}


def report_item(stem: str, ext: str) -> tuple[str, str] | None:
    """(caption file, label) when stem.ext belongs in the HTML report, else None."""
    kind = "saturation" if stem.startswith("saturation_") else stem
    if kind not in REPORT_KINDS or REPORT_KINDS[kind][0] != ext:
        return None
    _, caption, label = REPORT_KINDS[kind]
    if kind == "saturation":
        arch, impl = stem.split("_")[1:3]
        label += f" ({arch if impl == 'torch' else arch + '/' + impl})"
    return caption, label


def snakemake_outputs(studies: dict, report=None, caption_dir: str = "../report") -> list:
    """Every study output as a Snakemake pattern over {corpus}; with `report` (Snakemake's report
    function), the ones shown in the HTML report are wrapped in it, with caption, category and labels."""
    out = []
    for name, study in studies.items():
        for stem, exts in study_plan(study).items():
            for ext in exts:
                path = f"{STUDIES_DIR}/{name}/{stem}.{ext}"
                item = report_item(stem, ext) if report else None
                if item:
                    path = report(path, caption=f"{caption_dir}/{item[0]}", category="Studies", subcategory=name,
                                  labels={"study": name, "output": item[1]})
                out.append(path)
    return out


def study_outputs(corpus: str, name: str, study: dict) -> list[str]:
    base = f"{STUDIES_DIR.format(corpus=corpus)}/{name}"
    return [f"{base}/{stem}.{ext}" for stem, exts in study_plan(study).items() for ext in exts]


def all_outputs(corpus: str, studies: dict) -> list[str]:
    return [p for name, study in studies.items() for p in study_outputs(corpus, name, study)]


def check_mlflow(mlflow: dict, source: str = "config") -> None:
    """The mlflow config section beyond the schema: live logging needs a server, never the sqlite file."""
    uri = mlflow.get("tracking_uri", "sqlite:///results/mlflow.db")
    if not uri.startswith(("sqlite:///", "http://", "https://")):
        raise LmgridError(f"{source}: mlflow.tracking_uri: expected sqlite:///<path> or http(s)://, got {uri!r}")
    if mlflow.get("live") and uri.startswith("sqlite:"):
        raise LmgridError(f"{source}: mlflow.live: needs an http(s):// tracking_uri; training jobs must not write "
                          f"the sqlite file {uri!r} (parallel writers get 'database is locked')")


def live_logger_kwargs(mlflow: dict, corpus: str, key: RunKey | None = None) -> dict | None:
    """Arguments for Lightning's MLFlowLogger in a training job when `mlflow.live` is on, else None
    (without `key`: the part shared by every job, which the workflow hands to the jobs).

    Live runs go to their own experiment (`<corpus>-live`): the aggregation's experiment keeps exactly one
    run per grid cell.  The tracking URI is always explicit (MLFlowLogger would default to ./mlruns).
    """
    if not mlflow.get("live"):
        return None
    check_mlflow(mlflow)
    kwargs = {"tracking_uri": mlflow["tracking_uri"],
              "experiment_name": f"{mlflow.get('experiment_prefix', '')}{corpus}-live"}
    if key is not None:
        kwargs.update(live_run_tags(key.name, key.run_dir(corpus)))
    return kwargs


LIVE_ENV = "LMGRID_MLFLOW_LIVE"


def export_live_settings(mlflow: dict, corpus: str) -> None:
    """Hand the live logger's shared settings to the training jobs through their environment (Snakemake and
    sbatch pass it on); read back by `lmgrid train`."""
    import json
    import os

    kwargs = live_logger_kwargs(mlflow, corpus)
    if kwargs:
        os.environ[LIVE_ENV] = json.dumps(kwargs)
    else:
        os.environ.pop(LIVE_ENV, None)


def live_run_tags(name: str, run_dir: str) -> dict:
    return {"run_name": name, "tags": {"lmgrid.run_key": run_dir, "lmgrid.kind": "live"}}
