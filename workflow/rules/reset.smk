# Every stream-regime neural cell scored again with its state reset at every sentence start (lmgrid.testtime.reset;
# docs/configuration.md, "Perplexity convention"): a pass over valid and test from model.ckpt, no retraining, in
# the run's precision, device kind and threads.  reset_scores.json goes beside the run's metrics.json
# (docs/contracts.md, "A run folder"); the summary shows its test PPL as the column test_ppl_reset.
from lmgrid.run.reset_scores import RESET_FILE

# The reset_scores.json of every stream-regime neural cell of the config (window cells have none).
RESET_FILES = [f"{key.run_dir(CORPUS)}/{RESET_FILE}" for key in all_runs(config["studies"])
               if not key.is_ngram and key.regime == "stream"]


rule reset_scores:
    input:
        metrics=f"{RUN_DIR}/metrics.json",
        model=f"{RUN_DIR}/model.ckpt",
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
        vocab="results/{corpus}/vocab.json",
    output:
        f"{RUN_DIR}/{RESET_FILE}",
    wildcard_constraints:
        arch="|".join(["rnn", "lstm", "gru", "transformer"]  # and the plug-ins with a stream regime
                      + [n for n in plugins.names() if "stream" in plugins.facts(n).regimes]),
        regime="stream",
    params:
        run_dir=lambda w, input: os.path.dirname(input.metrics),
    # The job sets the thread count the run was evaluated with (metrics.json's device), whatever it is given.
    threads: train_threads
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
    benchmark:
        beside_runs("benchmarks/reset_scores", ".tsv")
    log:
        beside_runs("logs/reset_scores", ".log"),
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: {wildcards.arch} l{wildcards.layers} stream s{wildcards.seed} scored with the "
              "state reset at every sentence")
    shell:
        "lmgrid reset-scores --run-dir {params.run_dir} --valid {input.valid} --test {input.test} "
        "--vocab {input.vocab} --out {output} > {log} 2>&1 && tail -n ${{LMGRID_RESULT_LINES:-1}} {log}"
