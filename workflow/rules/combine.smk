# Per-token scores of the cells the combinations use, and the combinations (lmgrid.testtime.combine; docs/contracts.md,
# section Score files).  token_scores is a rule of its own, after training: it re-runs a cell's evaluation pass from
# its model file (the train and ngram rules are unchanged, so no cell retrains for it); adapt_scores does the same
# with a test-time mode (a neural cache, dynamic evaluation).  A combination's inputs are its components' score
# files: a changed component reruns only the combinations that use it.  What each job reads and is told comes from
# lmgrid.testtime.combine.jobs (CombineJobs: the rules' input and params functions).
import re

from lmgrid.testtime.combine.adapted import ADAPTED_MODES, SETTINGS_FILE as ADAPT_SETTINGS, grid_of
from lmgrid.testtime.combine.jobs import COMBINATIONS, COMBINE_DIR, COMBINE_FILES, COMPARISONS, CombineJobs
from lmgrid.testtime.combine.scorefile import SCORE_DIR
from lmgrid.run.record import EVAL_SPLITS as SCORE_SPLITS

try:
    COMBINE_JOBS = CombineJobs(config)
except LmgridError as _e:  # a test-time mode on a window-regime cell, a compare_with naming no combination
    sys.exit(f"lmgrid: error: {_e}")
for _note in COMBINE_JOBS.notes:
    print(f"lmgrid: {_note}", file=sys.stderr)
# One job per run of a combination: {folder: components}; the folder is <name> for a combination of one run,
# <name>/s<seed> for each seed of one run per seed (lmgrid.testtime.combine.select; CombineJobs.runs adds name, seed).
COMBINE = COMBINE_JOBS.components
COMPARE_PAIRS = COMBINE_JOBS.compare_pairs


rule token_scores:
    input:
        metrics=f"{RUN_DIR}/metrics.json",
        model=COMBINE_JOBS.model_file,
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
        vocab="results/{corpus}/vocab.json",
    output:
        **{f"{s}_{e}": f"{SCORE_DIR}/{s}.{e}" for s in SCORE_SPLITS for e in ("npy", "json")},
    wildcard_constraints:
        mode="base",
    params:
        run_dir=lambda w, input: os.path.dirname(input.metrics),
        out_dir=lambda w, output: os.path.dirname(output.test_npy),
    # The job sets the thread count the run was evaluated with (metrics.json's device), whatever it is given.
    threads: train_threads
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    benchmark:
        beside_runs("benchmarks/token_scores", "_{mode}.tsv")
    log:
        beside_runs("logs/token_scores", "_{mode}.log"),
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: per-token scores of {wildcards.arch} n{wildcards.n_step} l{wildcards.layers} "
              "{wildcards.regime} s{wildcards.seed} ({wildcards.mode})")
    shell:
        "lmgrid token-scores --run-dir {params.run_dir} --valid {input.valid} --test {input.test} "
        "--vocab {input.vocab} --mode {wildcards.mode} --out-dir {params.out_dir} "
        "> {log} 2>&1 && tail -n ${{LMGRID_RESULT_LINES:-1}} {log}"


# A stream cell scored with a test-time mode (lmgrid.testtime.combine.adapted): settings chosen on valid from the config's
# adapt: grids (a params: changing a grid reruns the modes that use it), test scored once; adapt.json records the
# choice.  Its own rule: base scores are a cheap pass, these are a grid of passes over valid.  Dynamic evaluation with
# adapt.dynamic.rule rms also reads the train split (its gradient statistics): only then is train.txt an input and
# --train passed (CombineJobs.adapt_train).
rule adapt_scores:
    input:
        metrics=f"{RUN_DIR}/metrics.json",
        model=f"{RUN_DIR}/model.ckpt",
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
        vocab="results/{corpus}/vocab.json",
        train=COMBINE_JOBS.adapt_train,
    output:
        **{f"{s}_{e}": f"{SCORE_DIR}/{s}.{e}" for s in SCORE_SPLITS for e in ("npy", "json")},
        settings=f"{SCORE_DIR}/{ADAPT_SETTINGS}",
    wildcard_constraints:
        mode="|".join(re.escape(m) for m in ADAPTED_MODES),
    params:
        run_dir=lambda w, input: os.path.dirname(input.metrics),
        out_dir=lambda w, output: os.path.dirname(output.settings),
        grid=lambda w: shlex.quote(json.dumps(grid_of(w.mode, config["adapt"]), sort_keys=True)),
        train_arg=COMBINE_JOBS.adapt_train_arg,
    threads: train_threads
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    benchmark:
        beside_runs("benchmarks/token_scores", "_{mode}.tsv")
    log:
        beside_runs("logs/token_scores", "_{mode}.log"),
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: {wildcards.mode} of {wildcards.arch} n{wildcards.n_step} l{wildcards.layers} "
              "{wildcards.regime} s{wildcards.seed}, tuned on valid")
    shell:
        "lmgrid token-scores --run-dir {params.run_dir} --valid {input.valid} --test {input.test} "
        "--vocab {input.vocab} --mode {wildcards.mode} --grid {params.grid} {params.train_arg} --out-dir {params.out_dir} "
        "> {log} 2>&1 && tail -n ${{LMGRID_RESULT_LINES:-1}} {log}"


rule combine:
    localrule: local("combine")
    input:
        COMBINE_JOBS.inputs,
    output:
        **{f.replace(".", "_"): f"{COMBINE_DIR}/{f}" for f in COMBINE_FILES},
    wildcard_constraints:
        combo=r"[A-Za-z0-9][A-Za-z0-9_.-]*(/s\d+)?",
    params:
        args=COMBINE_JOBS.args,
        description=COMBINE_JOBS.description,
        out_dir=lambda w, output: os.path.dirname(output.result_json),
    benchmark:
        "results/{corpus}/benchmarks/combine_{combo}.tsv"
    log:
        "results/{corpus}/logs/combine_{combo}.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: combination {wildcards.combo} (linear, EM on valid)")
    shell:
        "lmgrid combine {params.args} --description {params.description} "
        "--out-dir {params.out_dir} "
        "> {log} 2>&1 && tail -n ${{LMGRID_RESULT_LINES:-1}} {log}"


# Every combination in one table, for the report (category Combinations), and the paired bootstraps of the config's
# compare_with pairs (lmgrid.testtime.combine.compare): they read the members' component score files (each run's
# mixture is rebuilt from them), the test split's sentences and the vocabulary (the targets' checksum).
rule combinations:
    localrule: local("combine")
    input:
        unpack(COMBINE_JOBS.compare_inputs),
        results=COMBINE_JOBS.results,
    output:
        csv=f"{COMBINATIONS}.csv",
        md=f"{COMBINATIONS}.md",
        html=report(f"{COMBINATIONS}.html", caption="../report/combinations.rst", category="Combinations"),
        by_seed=f"{COMBINATIONS}_by_seed.csv",
        **({"compare_csv": f"{COMPARISONS}.csv", "compare_md": f"{COMPARISONS}.md",
            "compare_html": report(f"{COMPARISONS}.html", caption="../report/comparisons.rst",
                                   category="Combinations")} if COMPARE_PAIRS else {}),
    params:
        compare=COMBINE_JOBS.compare_args,
    benchmark:
        "results/{corpus}/benchmarks/combinations.tsv"
    log:
        "results/{corpus}/logs/combinations.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: every combination -> {output.md}")
    shell:
        "lmgrid combinations --results {input.results} --csv {output.csv} --md {output.md} --html {output.html} "
        "--by-seed-csv {output.by_seed} {params.compare} > {log} 2>&1"
