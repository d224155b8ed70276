"""Write every study's tables and figures: exactly the files `layout.study_plan` promises."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from lmgrid.common.errors import LmgridError
from lmgrid.common.processes import spawned_pool
from lmgrid.run.key import expand_study
from lmgrid.analysis import findings, gate_plots, plots, run_curves, tables
from lmgrid.analysis.collect import load_study, read_oracle
from lmgrid.analysis.layout import COLUMN_SUFFIX, STUDIES_DIR, TABLE_EXTS, saturation_model, study_plan


def build_study(corpus: str, name: str, study: dict, oracle: dict | None, root: str | Path = ".",
                out_dir: str | Path | None = None) -> list[str]:
    keys = expand_study(study)
    data = load_study(keys, corpus, root)
    out = Path(out_dir) if out_dir else Path(root) / STUDIES_DIR.format(corpus=corpus) / name
    out.mkdir(parents=True, exist_ok=True)
    summary = tables.summarise(data["runs"])
    plan = study_plan(study)
    oracle_test = oracle["test"]["ppl"] if oracle else None
    written = []

    def stem(s: str) -> str:
        return str(out / s)

    family = means = None
    tables.write_tables(name, study.get("description", ""), summary, oracle,
                        *(f"{stem('table')}.{e}" for e in TABLE_EXTS), valid_tex_path=f"{stem('table_valid')}.tex")
    written += [f"{stem('table')}.{e}" for e in TABLE_EXTS] + [f"{stem('table_valid')}.tex"]
    for s in plan:  # figures carry no title: the caption (workflow/report/<kind>.rst) says what they show
        column = s.endswith(COLUMN_SUFFIX)  # the main figure again, a column wide (layout.study_plan)
        kind = s.removesuffix(COLUMN_SUFFIX)
        if kind == "ppl_vs_nstep":
            written += plots.ppl_vs_nstep(summary, oracle_test, stem(s), column=column)
        elif kind == "ppl_vs_layers":
            written += plots.ppl_vs_layers(summary, oracle_test, stem(s), column=column)
        elif s == "curves":
            written += plots.curves(data["logs"], stem(s))
        elif s == "valid_curves":
            written += run_curves.valid_curves(data["logs"], data["runs"], stem(s))
        elif kind == "gates_vs_nstep":
            _need(data["gates"], "all", name)
            written += gate_plots.gate_means(data["gates"], stem(s), column=column)
        elif s == "gates_vs_position":
            _need(data["gates"], "position", name)
            written += gate_plots.gate_positions(data["gates"], stem(s))
        elif s == "gates_effect":
            paths = [[f"{stem(x)}.{e}" for e in TABLE_EXTS] for x in ("gates_effect", "gate_means", "gate_positions")]
            family, means = findings.write_gate_tables(name, data["gates"], *paths[:2], f"{stem('gate_steps')}.tex",
                                                       paths[2])
            written += paths[0] + paths[1] + paths[2] + [f"{stem('gate_steps')}.tex"]
        elif s.startswith("saturation_"):
            arch, impl = saturation_model(s)
            g = data["gates"][(data["gates"]["arch"] == arch) & (data["gates"]["impl"] == impl)]
            _need(g, "unit", name)
            written += gate_plots.saturation(g, stem(s))
    findings.write_findings(name, data["runs"], family, means, f"{stem('findings')}.md", f"{stem('findings')}.html")
    written += [f"{stem('findings')}.md", f"{stem('findings')}.html"]
    planned = {f"{stem(s)}.{e}" for s, exts in plan.items() for e in exts}
    if planned != set(written):  # a bug, not a user error: Snakemake would miss or reject files
        raise RuntimeError(f"study {name}: wrote {sorted(set(written) ^ planned)} against the plan")
    return written


def _need(gates, scope: str, study: str) -> None:
    if not (gates["scope"] == scope).any():
        raise LmgridError(f"studies.{study}: no gates.csv rows with scope '{scope}' in its gated runs")


def build_all(corpus: str, studies: dict, oracle_path: str | None, root: str | Path = ".", jobs: int = 1) -> list[str]:
    """Every study's files; with jobs > 1, that many studies at once in child processes.

    The studies share nothing (each writes its own folder) and drawing a figure is single-threaded Python, so at the
    end of a run, where this job would otherwise leave the other cores idle, its wall is its slowest worker's rather
    than the sum. The files are the same bytes either way (figures carry no timestamps); the children are
    lmgrid.common.processes.spawned_pool's."""
    oracle = read_oracle(oracle_path)
    jobs = max(1, min(jobs, len(studies)))
    written = []
    with contextlib.ExitStack() as stack:
        if jobs == 1:
            results = (build_study(corpus, name, study, oracle, root) for name, study in studies.items())
        else:
            pool = spawned_pool(stack, jobs)  # a failed study's LmgridError reaches the CLI unchanged
            futures = [pool.submit(build_study, corpus, name, study, oracle, root) for name, study in studies.items()]
            results = (f.result() for f in futures)
        for (name, study), files in zip(studies.items(), results):  # printed and listed in the config's order
            print(f"study {name}: {len(expand_study(study))} runs, {len(files)} files", file=sys.stderr)
            written += files
    return written
