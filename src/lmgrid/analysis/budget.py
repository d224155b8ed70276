"""The equal-compute study: every architecture trained at the same FLOP budgets, PPL against compute.

A budget study is a config whose scales (lmgrid.orchestration.scales) each set `train.budget_flops`, each its own
Snakemake run under its own corpus name, with every neural architecture and its seeds.  An architecture may run at
several widths per budget: one scale per budget and width (a run folder is keyed by its grid cell only, so two widths
are two Snakemake runs), the scales of one budget sharing its label (`b1x_w100` and `b1x_w200` are budget `b1x`:
budget_cli.budget_label).  The width of a budget and architecture is chosen on VALID: the lowest mean valid PPL over
seeds (ties: the narrower, fewer parameters); test PPL is read at that width only.  Every width stays in
compute.csv, the choice in its `chosen` column, so a reader sees what was chosen from.

This module reads the scales' runs' metrics.json (and the config's own n-gram runs, the references) and writes
results/<corpus>/budget/:
* compute.{csv,md,html}: per architecture, budget and width, test PPL mean, sample std and 95% t interval over seeds
  (analysis.effects.t_interval, df = seeds - 1), valid PPL mean, the training CPU-minutes (metrics.json cpu_s: the
  training process's own CPU, user + system, from getrusage(RUSAGE_SELF) in that process; a job forked from the
  warm server is its own process and its counters start at zero at the fork, so it is the job's own CPU, never the
  server's; a resumed run's earlier attempts count too, each up to the checkpoint resumed from,
  lmgrid.neural.callbacks.AttemptUsage) and the training FLOPs it spent (the budget schedule's tokens x the model's
  FLOPs per training token); the n-gram rows below, each with its own (estimation) CPU time;
* ppl_vs_compute.{pdf,png}: one line per architecture through its chosen widths (each point labelled with its
  width), the t interval as error bars, on a CPU-minutes axis (a) and on the machine-independent FLOP axis (b), both
  log; the n-grams as horizontal lines;
* findings.md: per budget, the chosen widths and which architectures' intervals do not overlap (separated), chosen
  by the intervals alone: the order of two architectures is claimed only where they are separated.
"""
from __future__ import annotations

import math
from html import escape
from pathlib import Path

import pandas as pd

from lmgrid.analysis import names
from lmgrid.analysis.effects import t_interval
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write
from lmgrid.run.record import RunRecord



def run_rows(runs: list[tuple[str, str]]) -> pd.DataFrame:
    """runs: (budget label, metrics.json path) of neural runs.  One row per run, its width the model's hidden_dim
    (metrics.json hparams); a run without a FLOP budget (not trained with train.budget_flops), without its width,
    or a budget whose runs had different budgets, or a seed twice at one budget, model and width (two scales of the
    same width) is one line naming the file."""
    rows = []
    for label, path in runs:
        r = RunRecord.read(path)
        if not r.get("budget_flops"):
            raise LmgridError(f"{path}: no budget_flops: the run was not trained with train.budget_flops "
                              f"(budget '{label}')")
        width = (r.get("hparams") or {}).get("hidden_dim")
        if not width:
            raise LmgridError(f"{path}: no hparams.hidden_dim: the run's width is unknown (budget '{label}')")
        rows.append({"budget": label, "arch": r.arch, "model": r.arch if r.impl == "torch" else f"{r.arch}/{r.impl}",
                     "width": int(width), "seed": r.seed, "path": path,
                     "test_ppl": r.test.ppl, "valid_ppl": r.valid.ppl,
                     "cpu_min": r.get("cpu_s") / 60, "budget_flops": r.get("budget_flops"),
                     "train_flops": r.get("budget_tokens_trained") * r.get("train_flops_per_token"),
                     "train_tokens": r.get("budget_tokens_trained")})
    out = pd.DataFrame(rows)
    for label, g in out.groupby("budget", sort=False):
        if g["budget_flops"].nunique() > 1:
            raise LmgridError(f"{g['path'].iloc[-1]}: budget '{label}' has runs at "
                              f"{', '.join(f'{v:g}' for v in sorted(g['budget_flops'].unique()))} FLOPs: one budget, "
                              "one train.budget_flops (a scale label's part before its last '_' names its budget)")
    twice = out[out.duplicated(["budget", "model", "width", "seed"])]
    if len(twice):
        r = twice.iloc[0]
        raise LmgridError(f"{r['path']}: budget '{r['budget']}', {r['model']} width {r['width']}, seed {r['seed']} "
                          "twice (two scales of one budget at the same width)")
    return out.drop(columns="path")


def compute_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per budget, model and width: every measure over its seeds (one point per seed, never pooled runs);
    `chosen`: the width of its budget and model with the lowest valid PPL mean (choose_widths)."""
    out = []
    for (budget, model, width), g in rows.groupby(["budget", "model", "width"], sort=False):
        lo, hi = t_interval(g["test_ppl"])
        out.append({"budget": budget, "budget_flops": g["budget_flops"].iloc[0], "model": model, "width": width,
                    "display": names.display(model), "seeds": int(g["seed"].nunique()),
                    "test_ppl_mean": g["test_ppl"].mean(), "test_ppl_std": g["test_ppl"].std(ddof=1),
                    "test_ppl_ci_low": lo, "test_ppl_ci_high": hi, "valid_ppl_mean": g["valid_ppl"].mean(),
                    "cpu_min_mean": g["cpu_min"].mean(), "cpu_min_std": g["cpu_min"].std(ddof=1),
                    "train_flops_mean": g["train_flops"].mean(), "train_tokens_mean": g["train_tokens"].mean()})
    table = pd.DataFrame(out)
    if table.empty:
        return table
    table["_rank"] = table["model"].map(names.rank)
    table = table.sort_values(["budget_flops", "_rank", "width"]).drop(columns="_rank").reset_index(drop=True)
    return choose_widths(table)


def choose_widths(table: pd.DataFrame) -> pd.DataFrame:
    """`chosen` True on one width per budget and model: the lowest mean valid PPL over seeds, the narrower on a tie
    (the table is sorted by width).  Never test PPL: test is read once, at the width valid chose."""
    best = table.groupby(["budget", "model"], sort=False)["valid_ppl_mean"].idxmin()
    return table.assign(chosen=table.index.isin(best.values))


def chosen(table: pd.DataFrame) -> pd.DataFrame:
    """The rows the figure and the findings show: each budget and model at its chosen width."""
    return table[table["chosen"]].reset_index(drop=True)


def references(paths: list[str]) -> pd.DataFrame:
    """The n-gram rows: one per model and order, test PPL and its own CPU-minutes."""
    rows = []
    for path in paths:
        r = RunRecord.read(path)
        rows.append({"model": r.arch, "display": f"{names.display(r.arch)} {r.n_step}-gram", "n_step": r.n_step,
                     "test_ppl": r.test.ppl, "valid_ppl": r.valid.ppl, "cpu_min": (r.get("cpu_s") or math.nan) / 60})
    return pd.DataFrame(rows, columns=["model", "display", "n_step", "test_ppl", "valid_ppl", "cpu_min"])


def separations(table: pd.DataFrame) -> list[str]:
    """Per budget, the models at their chosen widths, and the pairs of them whose 95% intervals do not overlap
    (lower PPL first), and the rest."""
    lines = []
    for budget, g in chosen(table).groupby("budget", sort=False):
        g = g.sort_values("test_ppl_mean")
        apart, together = [], []
        recs = list(g.itertuples())
        for i, a in enumerate(recs):
            for b in recs[i + 1:]:
                if any(math.isnan(v) for v in (a.test_ppl_ci_high, b.test_ppl_ci_low)):
                    together.append(f"{a.display} / {b.display} (no interval: one seed)")
                elif a.test_ppl_ci_high < b.test_ppl_ci_low:
                    apart.append(f"{a.display} < {b.display}")
                else:
                    together.append(f"{a.display} / {b.display}")
        flops = g["budget_flops"].iloc[0]
        widths = ", ".join(f"{r.display} {r.width:g}" for r in g.sort_values("display").itertuples())
        lines.append(f"- **{budget}** ({flops:.3g} training FLOPs; widths chosen on valid: {widths}): separated: "
                     f"{'; '.join(apart) or 'none'}. Overlapping: {'; '.join(together) or 'none'}.")
    return lines


def _fmt(t: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "budget": t["budget"], "FLOPs": t["budget_flops"].map(lambda v: f"{v:.3g}"), "model": t["display"],
        "width": t["width"], "chosen": t["chosen"].map({True: "yes", False: ""}), "seeds": t["seeds"],
        "test PPL mean ± std": [f"{m:.2f} ± {s:.2f}" if not math.isnan(s) else f"{m:.2f}"
                                for m, s in zip(t["test_ppl_mean"], t["test_ppl_std"])],
        "95% t interval": [f"[{lo:.2f}, {hi:.2f}]" if not math.isnan(lo) else "n/a"
                           for lo, hi in zip(t["test_ppl_ci_low"], t["test_ppl_ci_high"])],
        "valid PPL": t["valid_ppl_mean"].map(lambda v: f"{v:.2f}"),
        "CPU-min": t["cpu_min_mean"].map(lambda v: f"{v:.2f}"),
        "tokens": t["train_tokens_mean"].map(lambda v: f"{v:,.0f}")})


NOTE = ("Every architecture at the same training-FLOP budgets (train.budget_flops: the analytic count of "
        "lmgrid.models.flops, forward + backward), each run annealed to the end of its budget (budget-schedule). "
        "Test PPL: mean ± sample std over seeds, 95% t interval (df = seeds - 1). CPU-min: the training process's own "
        "CPU time (metrics.json cpu_s), mean over seeds. Width: the hidden size; per budget and architecture the "
        "width with the lowest mean valid PPL is chosen (column chosen), and only the chosen rows are compared and "
        "drawn; the other widths are listed to show the choice.")


def write(table: pd.DataFrame, refs: pd.DataFrame, out_dir: str) -> list[str]:
    out = Path(out_dir)
    with atomic_write(out / "compute.csv") as fh:
        pd.concat([table.assign(kind="neural"),
                   refs.rename(columns={"test_ppl": "test_ppl_mean", "valid_ppl": "valid_ppl_mean",
                                        "cpu_min": "cpu_min_mean"}).assign(kind="ngram")],
                  ignore_index=True).to_csv(fh, index=False, float_format="%.6g")
    findings = separations(table)
    show = _fmt(table)
    ref_md = (refs[["display", "test_ppl", "valid_ppl", "cpu_min"]].rename(columns={
        "display": "n-gram", "test_ppl": "test PPL", "valid_ppl": "valid PPL", "cpu_min": "CPU-min"})
        .to_markdown(index=False, floatfmt=".2f") if len(refs) else "(no n-gram rows)")
    with atomic_write(out / "compute.md") as fh:
        fh.write(f"## Test PPL at equal compute\n\n{NOTE}\n\n{show.to_markdown(index=False, disable_numparse=True)}"
                 f"\n\n### References\n\n{ref_md}\n\n### Separated by their intervals\n\n" + "\n".join(findings) + "\n")
    with atomic_write(out / "findings.md") as fh:
        fh.write("## Equal compute: which architectures are separated by their 95% intervals\n\n"
                 "Two architectures are separated at a budget when their test-PPL t intervals over seeds do not "
                 "overlap; nothing else ranks them.\n\n" + "\n".join(findings) + "\n")
    from lmgrid.analysis.tables import html_page

    with atomic_write(out / "compute.html") as fh:
        fh.write(html_page("Test PPL at equal compute", [
            f"<p>{escape(NOTE)}</p>", show.to_html(index=False, border=0), "<h3>References</h3>",
            refs.to_html(index=False, border=0, float_format="%.2f"), "<h3>Separated by their intervals</h3>",
            "<ul>" + "".join(f"<li>{escape(f[2:].replace('**', ''))}</li>" for f in findings) + "</ul>"]))
    from lmgrid.analysis.budget_plot import ppl_vs_compute

    return ppl_vs_compute(chosen(table), refs, str(out / "ppl_vs_compute"))
