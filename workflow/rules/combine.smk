# Per-token scores of the cells the combinations use, and the combinations (lmgrid.testtime.combine; docs/contracts.md,
# "Score files").  token_scores is a rule of its own, after training: it re-runs a cell's evaluation pass from its
# model file (the train and ngram rules are unchanged, so no cell retrains for it); adapt_scores does the same with
# a test-time mode (a neural cache, dynamic evaluation).  A combination's inputs are
# its components' score files: a changed component reruns only the combinations that use it.
import re

from lmgrid.testtime.combine.adapted import ADAPTED_MODES, SETTINGS_FILE as ADAPT_SETTINGS, grid_of, needs_train_split
from lmgrid.testtime.combine.scorefile import SCORE_DIR
from lmgrid.testtime.combine.select import label as combine_label
from lmgrid.testtime.combine.select import resolve as resolve_combine
from lmgrid.testtime.combine.select import score_dir
from lmgrid.run.record import EVAL_SPLITS as SCORE_SPLITS

try:
    COMBINE, _combine_notes = resolve_combine(config)
except LmgridError as _e:  # a test-time mode on a window-regime cell
    sys.exit(f"lmgrid: error: {_e}")
for _note in _combine_notes:
    print(f"lmgrid: {_note}", file=sys.stderr)
COMBINE_DIR = "results/{corpus}/combine/{combo}"
COMBINE_FILES = ("result.json", "table.csv", "table.md", "table.html")


def combine_outputs(corpus):
    return [f"{COMBINE_DIR}/{f}".format(corpus=corpus, combo=c) for c in COMBINE for f in COMBINE_FILES]


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
        "--vocab {input.vocab} --mode {wildcards.mode} --out-dir {params.out_dir} > {log} 2>&1 && tail -n 1 {log}"


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
        "> {log} 2>&1 && tail -n 1 {log}"


def _combine_inputs(w):
    return [f"{score_dir(w.corpus, key, mode)}/{f}" for key, mode in COMBINE[w.combo]
            for f in [f"{s}.{e}" for s in SCORE_SPLITS for e in ("npy", "json")]
            + ([ADAPT_SETTINGS] if mode != "base" else [])]


def _combine_args(w):
    return " ".join("--component " + shlex.quote(f"{combine_label(key, mode)}={score_dir(w.corpus, key, mode)}")
                    for key, mode in COMBINE[w.combo])


rule combine:
    localrule: local("combine")
    input:
        _combine_inputs,
    output:
        **{f.replace(".", "_"): f"{COMBINE_DIR}/{f}" for f in COMBINE_FILES},
    wildcard_constraints:
        combo=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    params:
        components=_combine_args,
        description=lambda w: shlex.quote(config["combine"][w.combo].get("description", "")),
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
        "lmgrid combine --name {wildcards.combo} {params.components} --description {params.description} "
        "--out-dir {params.out_dir} > {log} 2>&1 && tail -n 1 {log}"


# Every combination in one table, for the report (category Combinations).
rule combinations:
    localrule: local("combine")
    input:
        lambda w: [f"{COMBINE_DIR}/result.json".format(corpus=w.corpus, combo=c) for c in COMBINE],
    output:
        csv="results/{corpus}/combine/combinations.csv",
        md="results/{corpus}/combine/combinations.md",
        html=report("results/{corpus}/combine/combinations.html", caption="../report/combinations.rst",
                    category="Combinations"),
    benchmark:
        "results/{corpus}/benchmarks/combinations.tsv"
    log:
        "results/{corpus}/logs/combinations.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: every combination -> {output.md}")
    shell:
        "lmgrid combinations --results {input} --csv {output.csv} --md {output.md} --html {output.html} > {log} 2>&1"
