# The equal-compute study (lmgrid.analysis.budget): a config whose scales each set train.budget_flops is a budget
# study, one scale per budget (presets/ptb_budget.yaml). Here: every scale's neural runs side by side, with this
# config's n-gram runs as references: results/<corpus>/budget/. Like the scales' comparison (scales.smk), it is left
# out of a run whose scales have not run yet, saying so in one line: their runs are another run's outputs.
from lmgrid.analysis.budget_cli import BUDGET_DIR, budget_label
from lmgrid.analysis.budget_cli import OUTPUTS as BUDGET_OUTPUTS
from lmgrid.orchestration.scales import mtime_stamp

BUDGET_SCALES = [s for s in SCALES if s.config["train"].get("budget_flops", 0) > 0]
# A budget with several widths is several scales, b1x_w100 and b1x_w200: both budget b1x (budget_label); the
# width of each budget and architecture is chosen on valid there (lmgrid.analysis.budget.choose_widths).
BUDGET_RUNS = [(budget_label(s.label), f"{key.run_dir(s.corpus)}/metrics.json") for s in BUDGET_SCALES
               for key in all_runs(s.config["studies"]) if not key.is_ngram]
BUDGET_REFERENCES = [f"{key.run_dir(CORPUS)}/metrics.json" for key in all_runs(config["studies"]) if key.is_ngram]
_BUDGET_MISSING = [path for _, path in BUDGET_RUNS if not os.path.exists(path)]
if BUDGET_SCALES and _BUDGET_MISSING:
    print(f"lmgrid: the equal-compute study is left out of this run: {_BUDGET_MISSING[0]} is not there yet "
          f"(`make run` runs every scale first)", file=sys.stderr)
COMPARE_BUDGETS = bool(BUDGET_RUNS) and not _BUDGET_MISSING


# The scales' runs are read, not declared as inputs: declared, they are outputs of this run's own rules too, and
# Snakemake would rebuild them under this run (a scale corpus's stage differs here: raw_inputs names this config's
# folder), retraining every scale's run. Their state enters as a params stamp instead, so a rerun scale still
# reruns `budget` (mtime_stamp, orchestration.scales). The study's files, over the wildcard {corpus} (rule all
# expands them).
BUDGET_FILES = [f"{BUDGET_DIR}/{name}" for name in BUDGET_OUTPUTS] if COMPARE_BUDGETS else []


if COMPARE_BUDGETS:

    rule budget:
        localrule: local("budget")
        input:
            references=BUDGET_REFERENCES,
        output:
            [f"{BUDGET_DIR}/{name}" for name in BUDGET_OUTPUTS if not name.endswith((".html", ".png"))],
            html=report(f"{BUDGET_DIR}/compute.html", caption="../report/budget.rst", category="Equal compute"),
            png=report(f"{BUDGET_DIR}/ppl_vs_compute.png", caption="../report/budget.rst", category="Equal compute"),
        params:
            runs=" ".join(f"--run {shlex.quote(label)} {shlex.quote(path)}" for label, path in BUDGET_RUNS),
            references=" ".join(f"--reference {shlex.quote(p)}" for p in BUDGET_REFERENCES),
            out=lambda w: BUDGET_DIR.format(corpus=w.corpus),
            runs_stamp=mtime_stamp(BUDGET_RUNS),
        benchmark:
            "results/{corpus}/benchmarks/budget.tsv"
        log:
            "results/{corpus}/logs/budget.log",
        conda:
            ENV
        message:
            brief("{wildcards.corpus}: test PPL per architecture at equal compute -> {params.out}/compute.md")
        shell:
            "lmgrid budget-compare {params.runs} {params.references} --out-dir {params.out} > {log} 2>&1"
