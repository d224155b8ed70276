# N-gram models: one counting job per corpus, then one job per n-gram grid cell (n_step = order).
# The counts hold every order up to the largest n_step of any n-gram run in config["studies"].
# Both work on disk within ngram.memory_mb.  model.arpa is always an output: with ngram.write_arpa
# false (or auto above 10 M n-grams) it is a one-line note, so the DAG does not depend on model size.
NGRAM_MAX_ORDER = max([k.n_step for k in all_runs(config["studies"]) if k.is_ngram], default=1)
NGRAM = config["ngram"]
NGRAM_WRITE_ARPA = str(NGRAM["write_arpa"]).lower()


rule ngram_counts:
    input:
        train="results/{corpus}/corpus/train.txt",
        vocab="results/{corpus}/vocab.json",
    output:
        "results/{corpus}/ngram/counts.npz",
    params:
        max_order=NGRAM_MAX_ORDER,
    # before the nets (lmgrid.orchestration.job_order): the run's tail waits for every n-gram cell
    priority: UPSTREAM_PRIORITY
    # The memory budget changes how counting runs, not its result: a resource, so changing it reruns nothing.
    resources:
        ngram_memory_mb=NGRAM["memory_mb"],
    benchmark:
        "results/{corpus}/benchmarks/ngram_counts.tsv"
    log:
        "results/{corpus}/logs/ngram_counts.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: n-gram counts up to order {params.max_order}")
    shell:
        "lmgrid ngram-counts --train {input.train} --vocab {input.vocab} "
        "--max-order {params.max_order} --memory-mb {resources.ngram_memory_mb} --out {output} > {log} 2>&1"


rule ngram:
    input:
        counts="results/{corpus}/ngram/counts.npz",
        vocab="results/{corpus}/vocab.json",
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
    output:
        metrics=f"{RUN_DIR}/metrics.json",
        arpa=f"{RUN_DIR}/model.arpa",
    wildcard_constraints:
        arch="addk|katz|kn|mkn",
        impl="ngram",
    params:
        # Only the setting of the run's own method: changing add-k's k reruns the addk runs, nothing else.
        method=lambda w: {"addk": f"--addk-k {NGRAM['addk_k']}",
                          "katz": f"--katz-max-count {NGRAM['katz_max_count']}"}.get(w.arch, ""),
        write_arpa=NGRAM_WRITE_ARPA,
    priority: UPSTREAM_PRIORITY
    threads: train_threads
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
        ngram_memory_mb=NGRAM["memory_mb"],
    benchmark:
        beside_runs("benchmarks/runs", ".tsv")
    log:
        beside_runs("logs/ngram", ".log"),
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: {wildcards.arch} order {wildcards.n_step}")
    shell:
        "lmgrid ngram --counts {input.counts} --vocab {input.vocab} --valid {input.valid} --test {input.test} "
        "--arch {wildcards.arch} --order {wildcards.n_step} --arpa {output.arpa} --metrics {output.metrics} "
        "{params.method} --memory-mb {resources.ngram_memory_mb} "
        # the result line to the terminal too (LMGRID_RESULT_LINES=0: lmgrid's logger plugin shows it itself)
        "--write-arpa {params.write_arpa} > {log} 2>&1 && tail -n ${{LMGRID_RESULT_LINES:-1}} {log}"
