# Word vectors of every neural cell against WordSim-353, SimLex-999 and the analogies, beside PPMI-SVD and random
# vectors (lmgrid.embed; docs/contracts.md), and each study's embeddings table, neighbours and map.  One job per
# corpus, not per cell: every cell's vectors come out of one process that imports torch, gensim and scikit-learn
# once (a job per cell would add that start-up, a few seconds, to every cell of the grid).
from lmgrid.analysis.layout import EMBEDDINGS_DIR, embedding_plan

EMBED = config["embeddings"]
EMBED_RUN_DIRS = [key.run_dir(CORPUS) for key in all_runs(config["studies"]) if not key.is_ngram]
# The embeddings job's files, over the wildcard {corpus} (none when there is no neural cell or embeddings.enabled is
# false): rule all and the MLflow mirror (aggregate.smk) expand them.
EMBEDDING_OUTPUTS = ([f"{EMBEDDINGS_DIR}/{f}" for f in ("embeddings.csv", "neighbours.csv", "vectors")]
                     + snakemake_outputs(config["studies"], plan=embedding_plan)
                     if EMBED["enabled"] and EMBED_RUN_DIRS else [])


rule embeddings:
    localrule: local("embeddings")
    input:
        models=[f"{d}/model.ckpt" for d in EMBED_RUN_DIRS],
        metrics=[f"{d}/metrics.json" for d in EMBED_RUN_DIRS],  # the map shows each study's cell of lowest valid PPL
        train="results/{corpus}/corpus/train.txt",
        vocab="results/{corpus}/vocab.json",
    output:
        csv=f"{EMBEDDINGS_DIR}/embeddings.csv",
        neighbours=f"{EMBEDDINGS_DIR}/neighbours.csv",
        vectors=directory(f"{EMBEDDINGS_DIR}/vectors"),
        studies=snakemake_outputs(config["studies"], report, plan=embedding_plan),
    params:
        studies=shlex.quote(json.dumps(config["studies"], sort_keys=True)),
        window=EMBED["ppmi_window"],
        probes=shlex.quote(json.dumps(EMBED["probes"])),
        n_probes=EMBED["n_probes"],
        neighbours=EMBED["neighbours"],
    resources:
        mem_mb=4000,
    benchmark:
        "results/{corpus}/benchmarks/embeddings.tsv"
    log:
        "results/{corpus}/logs/embeddings.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: embeddings of each study's best cell -> {output.csv}")
    shell:
        "lmgrid embeddings --corpus {wildcards.corpus} --studies {params.studies} --train {input.train} "
        "--vocab {input.vocab} --window {params.window} --probes {params.probes} --n-probes {params.n_probes} "
        "--neighbours {params.neighbours} > {log} 2>&1"
