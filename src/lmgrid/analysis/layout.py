"""Which files each study produces, decided from the config alone.

Snakemake must know every output before any job runs, and the aggregation job must write exactly
those files, so both ask this module.  Kept free of heavy imports (Snakemake imports it while
building the DAG).  A new study in config.yaml gets its outputs from its grid, with no code change:
a plot is made when the grid varies along its axis.
"""
from __future__ import annotations

from lmgrid.common.errors import LmgridError
from lmgrid.run.gate_facts import is_gated
from lmgrid.analysis import names
from lmgrid.run.key import RunKey, expand_study

STUDIES_DIR = "results/{corpus}/studies"
EMBEDDINGS_DIR = "results/{corpus}/embeddings"  # `lmgrid embeddings` (lmgrid.embed.pipeline)
EMBEDDING_VECTORS = "embeddings/vectors"  # a cell's word vectors: RunKey.beside(corpus, EMBEDDING_VECTORS)
TABLE_EXTS = ("csv", "md", "tex", "html")  # html: the view in the Snakemake report
FIGURE_EXTS = ("pdf", "png")
# The study's main figure (main_figure) is also written a column wide, as <stem>_column.{pdf,png}, for a one-column
# paper; the report shows the main one only (the same figure at another size).
COLUMN_SUFFIX = "_column"


def model_id(arch: str, impl: str) -> str:
    """The architecture and implementation, e.g. 'lstm/cell'; the default implementation is left out.  Takes the two
    strings, not a RunKey, so that tables holding only those columns (lmgrid.analysis.summary) name models the same way."""
    return arch if impl in ("torch", "ngram", "plugin") else f"{arch}/{impl}"


def model_label(key: RunKey) -> str:
    """A run's model id (model_id), the key of the display names (analysis.names)."""
    return model_id(key.arch, key.impl)


def gated_models(keys: list[RunKey]) -> list[tuple[str, str]]:
    return sorted({(k.arch, k.impl) for k in keys if is_gated(k.arch)})


def study_plan(study: dict) -> dict[str, list[str]]:
    """Output stem -> extensions for one study; stems are file names without extension."""
    plan = _plan(study)
    main = _main(plan, expand_study(study))
    if main:
        plan[main + COLUMN_SUFFIX] = list(FIGURE_EXTS)
    return plan


def _plan(study: dict) -> dict[str, list[str]]:
    """study_plan without the column version of the main figure (which needs this plan to be chosen)."""
    keys = expand_study(study)
    window_steps = {k.n_step for k in keys if k.regime == "window" and not k.is_ngram} | \
                   {k.n_step for k in keys if k.is_ngram}
    layers = {k.layers for k in keys if not k.is_ngram}
    neural = [k for k in keys if not k.is_ngram]
    gated = gated_models(keys)
    # table.tex holds the test PPL table, table_valid.tex the valid one: one table per .tex file.
    plan = {"table": list(TABLE_EXTS), "table_valid": ["tex"], "findings": ["md", "html"]}
    if len(window_steps) > 1:
        plan["ppl_vs_nstep"] = list(FIGURE_EXTS)
    if len(layers) > 1:
        plan["ppl_vs_layers"] = list(FIGURE_EXTS)
    if neural:
        plan["curves"] = list(FIGURE_EXTS)
        plan["valid_curves"] = list(FIGURE_EXTS)  # one line per run (analysis.run_curves)
    gated_window_steps = {k.n_step for k in keys if is_gated(k.arch) and k.regime == "window"}
    if gated and len(gated_window_steps) > 1:
        plan["gates_vs_nstep"] = list(FIGURE_EXTS)
        plan["gates_effect"] = list(TABLE_EXTS)  # the trend test (analysis.effects.gate_trends)
        plan["gate_steps"] = ["tex"]  # its step changes, a LaTeX table of their own
        plan["gate_means"] = list(TABLE_EXTS)  # per n_step, with intervals over seeds
        plan["gates_vs_position"] = list(FIGURE_EXTS)  # per window position and n_step (analysis.positions)
        plan["gate_positions"] = list(TABLE_EXTS)  # each position's slope on n_step
    for arch, impl in gated:
        plan[f"saturation_{arch}_{impl}"] = list(FIGURE_EXTS)
    return plan


def embedding_plan(study: dict) -> dict[str, list[str]]:
    """A study's embeddings outputs (written by `lmgrid embeddings`, lmgrid.embed), when it has neural cells."""
    if all(k.is_ngram for k in expand_study(study)):
        return {}
    return {"embeddings": ["csv", "md", "html"], "embeddings_neighbours": ["md", "html"],
            "embeddings_map": list(FIGURE_EXTS)}


# Outputs shown in the Snakemake HTML report: stem prefix -> (extension, caption file, label).
REPORT_KINDS = {
    "table": ("html", "table.rst", "perplexity table"),
    "ppl_vs_nstep": ("png", "ppl_vs_nstep.rst", "test PPL against context length"),
    "ppl_vs_layers": ("png", "ppl_vs_layers.rst", "test PPL against layers"),
    "curves": ("png", "curves.rst", "training curves"),
    "valid_curves": ("png", "valid_curves.rst", "valid PPL per run and how it stopped"),
    "gates_vs_nstep": ("png", "gates_vs_nstep.rst", "gate means against context length"),
    "gates_effect": ("html", "gates_effect.rst", "gate trend against context length"),
    "gate_means": ("html", "gate_means.rst", "gate means per context length, 95% CI"),
    "gates_vs_position": ("png", "gates_vs_position.rst", "gate means against window position"),
    "gate_positions": ("html", "gate_positions.rst", "gate slope at each window position"),
    "findings": ("html", "findings.rst", "findings"),
    "saturation": ("png", "saturation.rst", "per-unit gate saturation"),
    "embeddings": ("html", "embeddings.rst", "word vectors: benchmarks"),
    "embeddings_neighbours": ("html", "embeddings_neighbours.rst", "word vectors: nearest neighbours"),
    "embeddings_map": ("png", "embeddings_map.rst", "word vectors: map of frequent words"),
}
# The order of a study's items in the report: its main figure first (main_figure), then the table and the findings.
REPORT_ORDER = ["main", "table", "findings", "ppl_vs_nstep", "ppl_vs_layers", "gates_vs_nstep", "gates_vs_position",
                "gates_effect", "gate_positions", "gate_means", "curves", "valid_curves", "saturation", "embeddings", "embeddings_neighbours", "embeddings_map"]
GATE_KINDS = ("gates_vs_nstep", "gates_vs_position", "gates_effect", "gate_positions", "gate_means", "saturation")


def _kind(stem: str) -> str:
    return "saturation" if stem.startswith("saturation_") else stem


def saturation_model(stem: str) -> tuple[str, str]:
    """'saturation_lstm_cell' -> ('lstm', 'cell'); the implementation is the last part (a plug-in's name may hold
    '_': 'saturation_min_gru_plugin')."""
    arch, impl = stem[len("saturation_"):].rsplit("_", 1)
    return arch, impl


def report_item(stem: str, ext: str) -> tuple[str, str] | None:
    """(caption file, label) when stem.ext belongs in the HTML report, else None."""
    kind = _kind(stem)
    if kind not in REPORT_KINDS or REPORT_KINDS[kind][0] != ext:
        return None
    _, caption, label = REPORT_KINDS[kind]
    if kind == "saturation":
        label += f", {names.display(model_id(*saturation_model(stem)))}"
    return caption, label


def main_figure(study: dict) -> str | None:
    """The figure that answers the study's question: the gate means for a study of LSTM/GRU runs only that varies
    n_step, else PPL against n_step, else against layers; None when no figure varies an axis."""
    return _main(_plan(study), expand_study(study))


def _main(plan: dict, keys: list[RunKey]) -> str | None:
    if "gates_vs_nstep" in plan and all(is_gated(k.arch) for k in keys):
        return "gates_vs_nstep"
    return next((s for s in ("ppl_vs_nstep", "ppl_vs_layers") if s in plan), None)


def _gate_view(stem: str, keys: list[RunKey]) -> tuple[tuple, int]:
    """What a gate output draws, and over how many seeds: its kind, its gated models (a saturation figure: one) and
    their depths and regimes."""
    models = [saturation_model(stem)] if stem.startswith("saturation_") else gated_models(keys)
    runs = [k for k in keys if (k.arch, k.impl) in models]
    return (stem, tuple(models), tuple(sorted({(k.layers, k.regime) for k in runs}))), len({k.seed for k in runs})


def report_skips(studies: dict) -> set[tuple[str, str]]:
    """(study, stem) of the gate outputs left out of the report because another study draws the same gated models,
    depths and regimes over more seeds: such a figure or table appears once, from the first study with the most
    seeds (a one-seed repeat has no interval over seeds).  The files are still written."""
    owner: dict[tuple, tuple[int, str]] = {}
    shown = []
    for name, study in studies.items():
        keys = expand_study(study)
        for stem in study_plan(study):
            if _kind(stem) in GATE_KINDS:
                view, seeds = _gate_view(stem, keys)
                shown.append((name, stem, view))
                if view not in owner or seeds > owner[view][0]:
                    owner[view] = (seeds, name)
    return {(name, stem) for name, stem, view in shown if owner[view][1] != name}


def _report_rank(stem: str, main: str | None) -> int:
    return 0 if stem == main else REPORT_ORDER.index(_kind(stem))


def snakemake_outputs(studies: dict, report=None, caption_dir: str = "../report", plan=study_plan) -> list:
    """Every study output of `plan` (study_plan or embedding_plan) as a Snakemake pattern over {corpus}; with
    `report` (Snakemake's report function), the ones shown in the HTML report are wrapped in it, with caption,
    category and labels.  The report lists a study's items by their label, so the label starts with the item's place
    (REPORT_ORDER) among all of the study's items, whichever plan they come from."""
    out = []
    skips = report_skips(studies) if report else set()
    for name, study in studies.items():
        every = {**study_plan(study), **embedding_plan(study)}
        main = main_figure(study)
        shown = sorted((s for s in every if report and (name, s) not in skips
                        and any(report_item(s, e) for e in every[s])), key=lambda s: (_report_rank(s, main), s))
        width = len(str(len(shown)))
        for stem, exts in plan(study).items():
            for ext in exts:
                path = f"{STUDIES_DIR}/{name}/{stem}.{ext}"
                item = report_item(stem, ext) if stem in shown else None
                if item:
                    place = f"{shown.index(stem) + 1:0{width}d}"
                    path = report(path, caption=f"{caption_dir}/{item[0]}", category="Studies", subcategory=name,
                                  labels={"output": f"{place}. {item[1]}", "study": name})
                out.append(path)
    return out


def study_outputs(corpus: str, name: str, study: dict) -> list[str]:
    base = f"{STUDIES_DIR.format(corpus=corpus)}/{name}"
    return [f"{base}/{stem}.{ext}" for stem, exts in study_plan(study).items() for ext in exts]


def all_outputs(corpus: str, studies: dict) -> list[str]:
    return [p for name, study in studies.items() for p in study_outputs(corpus, name, study)]
