# Per-token scores of the cells the combinations use, and the combinations (lmgrid.testtime.combine; docs/contracts.md,
# "Score files").  token_scores is a rule of its own, after training: it re-runs a cell's evaluation pass from its
# model file (the train and ngram rules are unchanged, so no cell retrains for it); adapt_scores does the same with
# a test-time mode (a neural cache, dynamic evaluation).  A combination's inputs are
# its components' score files: a changed component reruns only the combinations that use it.
import re

from lmgrid.testtime.combine.adapted import ADAPTED_MODES, SETTINGS_FILE as ADAPT_SETTINGS, grid_of, needs_train_split
from lmgrid.testtime.combine.scorefile import SCORE_DIR
from lmgrid.testtime.combine.select import compare_pairs
from lmgrid.testtime.combine.select import label as combine_label
from lmgrid.testtime.combine.select import resolve as resolve_combine
from lmgrid.testtime.combine.select import run_folders
from lmgrid.testtime.combine.select import score_dir
from lmgrid.run.record import EVAL_SPLITS as SCORE_SPLITS

try:
    _combine_resolved, _combine_notes = resolve_combine(config)
    COMPARE_PAIRS = compare_pairs(config, _combine_resolved, _combine_notes)
except LmgridError as _e:  # a test-time mode on a window-regime cell, a compare_with naming no combination
    sys.exit(f"lmgrid: error: {_e}")
for _note in _combine_notes:
    print(f"lmgrid: {_note}", file=sys.stderr)
# One job per run of a combination: {folder: (name, seed, components)}; the folder is <name> for a combination of one
# run, <name>/s<seed> for each seed of one run per seed (lmgrid.testtime.combine.select).
COMBINE_RUNS = run_folders(_combine_resolved)
COMBINE = {run: comps for run, (_, _, comps) in COMBINE_RUNS.items()}
COMBINE_DIR = "results/{corpus}/combine/{combo}"
COMBINE_FILES = ("result.json", "table.csv", "table.md", "table.html")
COMBINATIONS = "results/{corpus}/combine/combinations"
COMPARISONS = "results/{corpus}/combine/comparisons"


def combine_outputs(corpus):
    """Every run's files, and the paired comparisons' when the config asks for any (the combinations rule)."""
    return ([f"{COMBINE_DIR}/{f}".format(corpus=corpus, combo=c) for c in COMBINE for f in COMBINE_FILES]
            + ([f"{COMPARISONS.format(corpus=corpus)}.{e}" for e in ("csv", "md", "html")] if COMPARE_PAIRS else []))


def _model_file(w):
    name = "model.arpa" if w.arch in NGRAM_ARCHS else "model.ckpt"
    return f"{RunKey.from_wildcards(w).run_dir(w.corpus)}/{name}"


rule token_scores:
    input:
        metrics=f"{RUN_DIR}/metrics.json",
        model=_model_file,
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
        vocab="results/{corpus}/vocab.json",
    output:
        **{f"{s}_{e}": f"{SCORE_DIR}/{s}.{e}" for s in SCORE_SPLITS for e in ("npy", "json")},
    wildcard_constraints:
        mode="base",
    params:
        run_dir=RUN_DIR,
        out_dir=SCORE_DIR,
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
# --train passed.
def _adapt_train(w):
    return f"results/{w.corpus}/corpus/train.txt" if needs_train_split(w.mode, config["adapt"]) else []


def _adapt_train_arg(w):
    train = _adapt_train(w)
    return f"--train {shlex.quote(train)}" if train else ""


rule adapt_scores:
    input:
        metrics=f"{RUN_DIR}/metrics.json",
        model=f"{RUN_DIR}/model.ckpt",
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
        vocab="results/{corpus}/vocab.json",
        train=_adapt_train,
    output:
        **{f"{s}_{e}": f"{SCORE_DIR}/{s}.{e}" for s in SCORE_SPLITS for e in ("npy", "json")},
        settings=f"{SCORE_DIR}/{ADAPT_SETTINGS}",
    wildcard_constraints:
        mode="|".join(re.escape(m) for m in ADAPTED_MODES),
    params:
        run_dir=RUN_DIR,
        out_dir=SCORE_DIR,
        grid=lambda w: shlex.quote(json.dumps(grid_of(w.mode, config["adapt"]), sort_keys=True)),
        train_arg=_adapt_train_arg,
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


def _combine_inputs(w):
    return [f"{score_dir(w.corpus, key, mode)}/{f}" for key, mode in COMBINE[w.combo]
            for f in [f"{s}.{e}" for s in SCORE_SPLITS for e in ("npy", "json")]
            + ([ADAPT_SETTINGS] if mode != "base" else [])]


def _combine_args(w):
    name, seed, _ = COMBINE_RUNS[w.combo]
    return " ".join(["--component " + shlex.quote(f"{combine_label(key, mode)}={score_dir(w.corpus, key, mode)}")
                     for key, mode in COMBINE[w.combo]]
                    + [f"--name {shlex.quote(name)} --run {shlex.quote(w.combo)}"]
                    + ([f"--seed {seed}"] if seed is not None else []))


rule combine:
    localrule: local("combine")
    input:
        _combine_inputs,
    output:
        **{f.replace(".", "_"): f"{COMBINE_DIR}/{f}" for f in COMBINE_FILES},
    wildcard_constraints:
        combo=r"[A-Za-z0-9][A-Za-z0-9_.-]*(/s\d+)?",
    params:
        args=_combine_args,
        description=lambda w: shlex.quote(config["combine"][COMBINE_RUNS[w.combo][0]].get("description", "")),
        out_dir=COMBINE_DIR,
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
def _compare_inputs(w):
    if not COMPARE_PAIRS:
        return {}
    runs = [c for c, (name, _, _) in COMBINE_RUNS.items() if any(name in pair for pair in COMPARE_PAIRS)]
    return {"scores": sorted({f"{score_dir(w.corpus, key, mode)}/test.{e}" for c in runs for key, mode in COMBINE[c]
                              for e in ("npy", "json")}),
            "test": f"results/{w.corpus}/corpus/test.txt", "vocab": f"results/{w.corpus}/vocab.json"}


def _compare_args(w, input, output):
    if not COMPARE_PAIRS:
        return ""
    return (" ".join(f"--pair {shlex.quote(a)}={shlex.quote(b)}" for a, b in COMPARE_PAIRS)
            + f" --test {input.test} --vocab {input.vocab} --compare-csv {output.compare_csv} "
              f"--compare-md {output.compare_md} --compare-html {output.compare_html}")


rule combinations:
    localrule: local("combine")
    input:
        unpack(_compare_inputs),
        results=lambda w: [f"{COMBINE_DIR}/result.json".format(corpus=w.corpus, combo=c) for c in COMBINE],
    output:
        csv=f"{COMBINATIONS}.csv",
        md=f"{COMBINATIONS}.md",
        html=report(f"{COMBINATIONS}.html", caption="../report/combinations.rst", category="Combinations"),
        by_seed=f"{COMBINATIONS}_by_seed.csv",
        **({"compare_csv": f"{COMPARISONS}.csv", "compare_md": f"{COMPARISONS}.md",
            "compare_html": report(f"{COMPARISONS}.html", caption="../report/comparisons.rst",
                                   category="Combinations")} if COMPARE_PAIRS else {}),
    params:
        compare=_compare_args,
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
