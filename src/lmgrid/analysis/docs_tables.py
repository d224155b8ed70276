"""The tables and lines a docs block can render from a snapshot (lmgrid.analysis.docs_render): each a function of the
snapshot folder and an argument (`study:context` passes `context`), returning Markdown.

Numbers are printed as the pipeline's own tables print them (PPL to 2 decimals); verdicts and `comparable` are
reference.csv's, as lmgrid.analysis.reference gave them; nothing here computes a verdict.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from lmgrid.analysis import docs_embeddings, docs_gates, docs_gpu
from lmgrid.analysis.docs_io import blank as _blank, read_csv as _read
from lmgrid.analysis.docs_snapshot import FIRST_RUN_AVX2_FILE, FIRST_RUN_FILE, RUN_FILE, same_commit
from lmgrid.analysis.reference import shown_difference
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json
from lmgrid.common.units import duration_text, markdown_table


def _num(v, spec: str = ",.2f") -> str:
    return "" if _blank(v) else format(v, spec)


def _text(v) -> str:
    return "" if _blank(v) else str(v)


duration = duration_text  # lmgrid.common.units: the spelling `lmgrid status` uses too


def headline(snap: Path, _arg: str = "") -> str:
    """Each model's best cell, chosen on valid, with that cell's test PPL (lmgrid.analysis.summary.headline)."""
    from lmgrid.analysis.summary import headline as best_cells

    return markdown_table(best_cells(_read(snap, "summary.csv")))


def reference(snap: Path, _arg: str = "") -> str:
    """reference.csv: each published figure beside ours, with its `comparable` and verdict as the rule gave them,
    and the parameter counts (ours; the published model's where the config states it)."""
    t = _read(snap, "reference.csv")
    ours = [("not run here" if r.ours == "not run here" else
             _num(r.test_ppl_mean) + ("" if _blank(r.test_ppl_std) else f" ± {r.test_ppl_std:.2f}"))
            for r in t.itertuples()]
    show = pd.DataFrame({
        "published model": t["model"], "published test PPL": t["published_test_ppl"].map(lambda v: f"{v:g}"),
        "source": t["source"], "ours": t["ours"].map(_text), "comparable": t["comparable"].map(_text),
        "seeds": t["seeds"].map(lambda v: _num(v, ".0f")), "our test PPL (mean ± std)": ours,
        "95% t interval": [("" if _blank(r.ci95_low) or r.seeds == 1 or r.ci95_low == r.ci95_high
                            else f"[{r.ci95_low:.2f}, {r.ci95_high:.2f}]") for r in t.itertuples()],
        "verdict": t["verdict"].map(_text),
        "ours minus published": [_num(shown_difference(r.comparable, r.difference), "+.2f") for r in t.itertuples()],
        "our parameters": t["params"].map(lambda v: _num(v, ",.0f"))})
    if "published_params" in t:
        show["published parameters"] = t["published_params"].map(lambda v: _num(v, ",.0f") or "not stated")
    return markdown_table(show)


def _mean_std(mean, std) -> str:
    return _num(mean) + ("" if _blank(std) else f" ± {std:.2f}")


def _interval(low, high, spec: str = ".2f") -> str:
    return "" if _blank(low) else f"[{format(low, spec)}, {format(high, spec)}]"


def combinations(snap: Path, _arg: str = "") -> str:
    """combine/combinations.csv: each mixture's test PPL (mean ± std over its seeds, with the 95% t interval), its
    valid PPL, which is in-sample (settings and weights were fitted on valid), and its best single model, chosen on
    valid.  A table of the one-run form (valid_ppl, test_ppl) is shown as it is."""
    t = _read(snap, "combine/combinations.csv")
    over_seeds = "test_ppl_mean" in t
    show = pd.DataFrame({"combination": t["combination"], "models": t["components"]})
    if over_seeds:
        show["seeds"] = t["seed_list"].map(_text)
        show["test PPL (mean ± std)"] = [_mean_std(m, s) for m, s in zip(t["test_ppl_mean"], t["test_ppl_std"])]
        show["95% t interval"] = [_interval(lo, hi) for lo, hi in zip(t["ci95_low"], t["ci95_high"])]
    else:
        show["test PPL"] = t["test_ppl"].map(_num)
    show["valid PPL (in-sample: fitted on valid)"] = t["valid_ppl_in_sample" if over_seeds else "valid_ppl"].map(_num)
    show["best single model (chosen on valid)"] = t["best_component"].map(_text)
    show["its test PPL"] = t["best_component_test_ppl"].map(_num)
    return markdown_table(show)


def comparisons(snap: Path, _arg: str = "") -> str:
    """combine/comparisons.csv: the paired bootstrap over test sentences, one combination against another."""
    t = _read(snap, "combine/comparisons.csv")
    return markdown_table(pd.DataFrame({
        "combination": t["combination"], "against": t["compare_with"], "seed": t["seed"].map(_text),
        "test PPL": t["test_ppl"].map(_num), "its test PPL": t["compare_with_test_ppl"].map(_num),
        "difference": t["difference"].map(lambda v: _num(v, "+.2f")),
        "95% bootstrap interval (sentences)": [_interval(lo, hi, "+.2f") for lo, hi in zip(t["ci95_low"], t["ci95_high"])],
        "95% t interval over seeds": [_interval(lo, hi, "+.2f") for lo, hi in zip(t["seed_t_low"], t["seed_t_high"])]}))


def study(snap: Path, name: str) -> str:
    """studies/<name>/table.csv as the run wrote it, PPL to 2 decimals."""
    if not name:
        raise LmgridError("lmgrid:render study needs the study's name: study:<name>")
    t = _read(snap, f"studies/{name}/table.csv")
    for col in t.columns:
        if t[col].dtype.kind == "f":
            t[col] = t[col].map(_num)
    return markdown_table(t.fillna(""))


def timing(snap: Path, _arg: str = "") -> str:
    """One line: the run's wall time and its CPU time (run.json).  The wall time is the time while a job ran, with
    the span from the first job's start to the last job's end and the resumptions beside it when the run was
    stopped and resumed; a snapshot older than `span_s` recorded the span alone, and is said so."""
    r = read_json(snap / "run.json")
    cores = r["machine"]["cores"]
    share = (r["train_cpu_s"] + r["jobs_cpu_s"]) / (r["wall_s"] * cores)
    jobs = f"{r['jobs']} jobs, {duration(r['job_wall_s'])} of job time summed"
    if "span_s" not in r:
        wall = f"**{duration(r['wall_s'])}** of wall time from its first job's start to its last job's end ({jobs})"
    elif r["resumptions"]:
        times = {1: "once", 2: "twice"}.get(r["resumptions"], f"{r['resumptions']} times")
        wall = (f"**{duration(r['wall_s'])}** of wall time while its jobs ran ({jobs}), resumed {times}: "
                f"{duration(r['span_s'])} from its first job's start to its last job's end, the pauses included")
    else:
        wall = f"**{duration(r['wall_s'])}** of wall time while its jobs ran, in one go ({jobs})"
    return (f"The run took {wall}; its "
            f"{r['runs']} trained models used {duration(r['train_cpu_s'])} of CPU time{_lower_bound(r)}, the other jobs "
            f"{duration(r['jobs_cpu_s'])}, together {share:.0%} of the {cores} cores' time over the run's wall time"
            + (" (so far below 100%: the jobs waited on one another or shared the machine with other work)."
               if share < 0.5 else ".")
            + (f" The HTML report took {duration(r['report_wall_s'])} more." if "report_wall_s" in r else ""))


def _cpu(m: dict) -> str:
    """A CPU as tools/first_run.py records it (cpu, isa, avx512_bf16, cores), e.g. `AMD EPYC (AVX-512, avx512_bf16:
    yes, 2 cores)`: the ISA is named since the project's target names an AVX2-only CPU."""
    isa = {"avx512": "AVX-512", "avx2-only": "AVX2 only", "older": "no AVX2"}.get(m["isa"], m["isa"])
    return f"{m['cpu']} ({isa}, avx512_bf16: {'yes' if m['avx512_bf16'] else 'no'}, {m['cores']} cores)"


def first_run(snap: Path, _arg: str = "") -> str:
    """One line: the install-included time of a fresh clone's quick start (first_run.json, tools/first_run.py), or
    that this snapshot's run was not made that way.  The CPU is the one the tool read, with its vector ISA, since the
    project's target names an AVX2-only CPU.  Then, when the snapshot holds first_run_avx2.json of its run's commit
    (tools/first_run.py --avx2-emulation, written there with --json), a sentence with the same commit's times under
    the AVX2-only emulation, saying it is one; such a file of another commit is left unsaid."""
    path = snap / FIRST_RUN_FILE
    if not path.is_file():
        text = "*This run was not timed from a fresh clone (`make first-run` with `--snapshot` makes one that is).*"
    else:
        r = read_json(path)
        text = (f"A fresh clone of this commit, timed by `make first-run` (uv's and pip's caches empty): `make setup` "
                f"took {duration(r['setup_s'])} and `make run` (Snakemake's start, the jobs, the report) "
                f"{duration(r['run_s'])}, **{duration(r['total_s'])}** in all, on {_cpu(r)}. The "
                f"target: {duration(r['target_s'])} on a 2-core AVX2-only CPU.")
    emulated = snap / FIRST_RUN_AVX2_FILE
    if not (emulated.is_file() and (snap / RUN_FILE).is_file()):
        return text
    e = read_json(emulated)
    if not (same_commit(e, read_json(snap / RUN_FILE).get("commit", "")) and e.get("emulation")):
        return text
    share = f"{e['emulation']['cpu_share']:g}"
    return (f"{text} The same commit under the AVX2-only emulation (`make first-run FIRST_RUN_ARGS=\"--avx2-emulation "
            f"{share} --json docs/results/{snap.name}/{FIRST_RUN_AVX2_FILE}\"`: on {e['cpu']}, {e['cores']} cores, "
            f"the kernels capped at AVX2 and each core at {share} of its time by a cgroup CPU quota, the share from "
            f"`make avx2-calibration`, benchmarks.md's \"An AVX2-only CPU, emulated\"; an emulation, not an AVX2-only "
            f"machine): `make setup` {duration(e['setup_s'])}, `make run` {duration(e['run_s'])}, "
            f"**{duration(e['total_s'])}** in all, against the target of {duration(e['target_s'])}.")


def avx2_calibration(snap: Path, _arg: str = "") -> str:
    """calibration.json (tools/avx2_calibration.py): the reference commit's `make run` on the real AVX2-only CPU and
    here with the kernels capped at AVX2, and the share of each core's time their ratio gives `--avx2-emulation`."""
    c = read_json(snap / "calibration.json")
    ref, here = c["reference"], c["here"]
    rows = pd.DataFrame({"where": [f"the AVX2-only CPU ({ref['source']})", "this machine, kernels capped at AVX2"],
                         "CPU": [_cpu(ref), _cpu(here)],
                         "`make run` of commit " + ref["commit"][:10]: [duration(ref["run_s"]),
                                                                        duration(here["run_s"])]})
    return (markdown_table(rows) + f"\n\nThis machine's time over the AVX2-only CPU's, rounded down: "
            f"`--avx2-emulation {c['cpu_share']:g}` (each core at {c['cpu_share']:g} of its time then runs that "
            "default pipeline about as fast as the AVX2-only CPU did; a share rounded down emulates a slower CPU).")


def _lower_bound(r: dict) -> str:
    """The caveat of a resumed run whose models' CPU time counts only their last attempt (docs_snapshot.timing)."""
    n = r.get("train_cpu_last_attempt_only", 0)
    return (f" at least ({n} of them were recorded before lmgrid carried a resumed model's earlier attempts over, "
            "so each of those counts only its last process)") if n else ""


def stops(snap: Path, _arg: str = "") -> str:
    """One line: how the neural runs ended (runs.csv): by which rule, after how many epochs, best epoch or not."""
    t = _read(snap, "runs.csv")
    t = t[t["epochs"].notna()]
    if t.empty:
        return "No neural run."
    how = ", ".join(f"{n} by `{why}`" for why, n in t["stopped_because"].fillna("unknown").value_counts().items())
    before = int((t["best_epoch"] < t["epochs"]).sum())
    lo, hi = int(t["epochs"].min()), int(t["epochs"].max())
    return (f"{len(t)} neural runs ended: {how}, after {lo if lo == hi else f'{lo} to {hi}'} epochs; "
            f"{before} of them had their best epoch before their last.")


def budget(snap: Path, _arg: str = "") -> str:
    """budget/compute.csv (the equal-compute study, lmgrid.analysis.budget): per budget and architecture the width
    chosen on valid, with its test PPL (mean ± std over seeds, 95% t interval) and the widths it was chosen from;
    the n-gram references; per budget, which architectures are separated by their intervals (budget.separations,
    the findings' own words); and the figure, linked from the snapshot from the repository's root (a snapshot is
    docs/results/<name>, and GitHub resolves a link starting with / from the root)."""
    from lmgrid.analysis.budget import separations

    t = _read(snap, "budget/compute.csv")
    neural = t[t["kind"] == "neural"].copy()
    if "chosen" not in neural:  # a run of the one-width study, before widths were chosen: its width is the only one
        neural["chosen"], neural["width"] = True, math.nan
    neural["chosen"] = neural["chosen"].astype(str).str.lower().isin(("true", "1", "yes"))
    tried = neural.groupby(["budget", "model"])["width"].agg(
        lambda w: ", ".join(f"{v:g}" for v in sorted(w.dropna())))
    picked = neural[neural["chosen"]]
    show = pd.DataFrame({
        "budget": picked["budget"], "FLOPs": picked["budget_flops"].map(lambda v: f"{v:.3g}"),
        "model": picked["display"], "width (chosen on valid)": picked["width"].map(lambda v: _num(v, "g")),
        "widths tried": [tried[(b, m)] for b, m in zip(picked["budget"], picked["model"])],
        "seeds": picked["seeds"].astype(int), "test PPL": [_mean_std(m, s) for m, s in
                                             zip(picked["test_ppl_mean"], picked["test_ppl_std"])],
        "95% t interval": [_interval(lo, hi) for lo, hi in zip(picked["test_ppl_ci_low"], picked["test_ppl_ci_high"])],
        "valid PPL": picked["valid_ppl_mean"].map(_num), "CPU-min": picked["cpu_min_mean"].map(_num)})
    refs = t[t["kind"] == "ngram"]
    ref_line = "; ".join(f"{r.display} {_num(r.test_ppl_mean)} ({_num(r.cpu_min_mean)} CPU-min)"
                         for r in refs.itertuples())
    parts = [markdown_table(show), _budget_cost(neural)]
    if ref_line:
        parts.append(f"References (test PPL): {ref_line}.")
    parts.append("Separated by their intervals, per budget:\n\n" + "\n".join(separations(picked)))
    if (snap / "budget" / "ppl_vs_compute.png").is_file():
        parts.append(f"![Test PPL against training compute, one line per architecture at its chosen widths]"
                     f"(/docs/results/{snap.name}/budget/ppl_vs_compute.png)")
    return "\n\n".join(parts)


def _budget_cost(neural: pd.DataFrame) -> str:
    """The study's training cost: every width's every seed, chosen or not (compute.csv has each row's mean over its
    seeds, so mean x seeds is the row's total).  The snapshot's own run.json times only the config's run, the
    n-grams and the comparison: each budget and width is a scale, a Snakemake run of its own."""
    runs = int(neural["seeds"].sum())
    total_min = float((neural["cpu_min_mean"] * neural["seeds"]).sum())
    return (f"Training the study's {runs} neural models (every width and seed, chosen or not) took "
            f"**{_num(total_min, ',.1f')} CPU-minutes**, each model's own process CPU time (metrics.json `cpu_s`) "
            "summed.")


NOT_TRAINED, NO_RATIO = "not trained", "n/a"  # train_cost's cells for a model a run lacks, and for no ratio


def train_cost(snap: Path, against: str = "") -> str:
    """Each architecture's neural training CPU time (runs.csv: every model's own process CPU seconds, metrics.json
    `cpu_s`, earlier attempts of a resumed model included, summed over its seeds) in CPU-minutes, and the total.
    With `train_cost:<name>`, the snapshot <name> beside this one (a sibling folder) is set beside it, row by row,
    with the ratio where both rows hold as many models, and named by its commit and machine: the same preset before
    and after a change."""
    from lmgrid.analysis import names

    def read(folder: Path) -> pd.DataFrame:
        t = _read(folder, "runs.csv")
        t = t[t["epochs"].notna()]  # neural models (the n-grams have no epochs)
        t = t.assign(model=[a if i == "torch" else f"{a}/{i}" for a, i in zip(t["arch"], t["impl"])])
        return t.groupby("model")["cpu_s"].agg(["sum", "size"])

    ours = read(snap)
    if ours.empty:
        return "No neural run."
    other_dir = snap.parent / against if against else None
    if other_dir is not None and not (other_dir / "runs.csv").is_file():
        raise LmgridError(f"lmgrid:render train_cost:{against}: {other_dir}/runs.csv does not exist")
    other = read(other_dir) if other_dir is not None else ours.iloc[:0].copy()
    # Rows of either run, this run's largest first, then those only the other run trained (a model replaced by
    # another impl), then the total, a row like the others ("all": no model is named so): it sums every row shown,
    # in both columns.
    order = (sorted(ours.index, key=lambda m: -ours.loc[m, "sum"])
             + sorted(set(other.index) - set(ours.index), key=lambda m: -other.loc[m, "sum"]) + ["all"])
    ours.loc["all"], other.loc["all"] = ours.sum(), other.sum()

    def minutes(t: pd.DataFrame, m) -> str:
        # Said, not left blank: an empty cell reads as a figure that went missing.
        return _num(t.loc[m, "sum"] / 60, ",.1f") if m in t.index else NOT_TRAINED

    show = pd.DataFrame({"model": [m if m == "all" else names.display(m) for m in order],
                         "models (seeds)": [int(ours.loc[m, "size"]) if m in ours.index else 0 for m in order],
                         "training CPU-minutes": [minutes(ours, m) for m in order]})
    note = ""
    if other_dir is not None:
        show[f"{against} (models)"] = [f"{minutes(other, m)} ({int(other.loc[m, 'size'])})" if m in other.index
                                       else NOT_TRAINED for m in order]
        # A ratio only between the same number of models: other seeds would compare a different amount of work.
        show["ratio"] = [_num(ours.loc[m, "sum"] / other.loc[m, "sum"], ".3f")
                         if m in ours.index and m in other.index and ours.loc[m, "size"] == other.loc[m, "size"]
                         and other.loc[m, "sum"] > 0 else NO_RATIO for m in order]
        r = read_json(other_dir / "run.json")
        note = (f"\n\n`{against}`: the `{r['corpus']}` run of commit {r['commit']}, ended {r['date']}, on "
                f"{r['machine']['cpu']} (avx512_bf16: {'yes' if r['machine']['avx512_bf16'] else 'no'}); ratio: "
                "this run's CPU time over that one's, where both trained the model as many times "
                f"({NO_RATIO} where they did not).")
    return markdown_table(show) + note


TABLES = {"headline": headline, "reference": reference, "combinations": combinations, "comparisons": comparisons,
          "study": study, "timing": timing, "first_run": first_run, "avx2_calibration": avx2_calibration,
          "stops": stops, "budget": budget, "train_cost": train_cost, **docs_gates.TABLES, **docs_embeddings.TABLES,
          **docs_gpu.TABLES}


def provenance(snap: Path, src: str) -> str:
    """The line that ends every block: the snapshot, and the commit, date and machine of its run."""
    r = read_json(snap / "run.json")
    if r.get("kind") == "gpu-check":
        return docs_gpu.provenance(r, src)
    m = r["machine"]
    dirty = " with uncommitted changes" if r.get("dirty") else ""
    return (f"<sub>Rendered by `lmgrid docs` from `{src}`: the `{r['corpus']}` run of commit "
            f"{r['commit']}{dirty}, ended {r['date']}, on {m['cpu']} (avx512_bf16: "
            f"{'yes' if m['avx512_bf16'] else 'no'}, {m['cores']} cores).</sub>")
