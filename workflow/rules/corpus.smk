rule synth:
    output:
        expand("results/{{corpus}}/raw/{split}.{ext}", split=SPLITS, ext=["txt", "logprob"]),
    params:
        seed=config["corpus"].get("synth", {}).get("seed", 1),
        sizes=config["corpus"].get("synth", {}).get("sentences", {}),
        grammar=json.dumps(config["corpus"].get("synth", {}).get("grammar", {}), sort_keys=True),
    log:
        "results/{corpus}/logs/synth.log",
    conda:
        ENV
    shell:
        "lmgrid synth --out-dir results/{wildcards.corpus}/raw --seed {params.seed} "
        "--train {params.sizes[train]} --valid {params.sizes[valid]} --test {params.sizes[test]} "
        "--grammar '{params.grammar}' > {log} 2>&1"


rule corpus:
    input:
        unpack(raw_inputs),
    output:
        expand("results/{{corpus}}/corpus/{split}.txt", split=SPLITS),
        stats="results/{corpus}/corpus/corpus_stats.json",
    params:
        kind=KIND,
        args=corpus_input_args,
        options=corpus_options,
    log:
        "results/{corpus}/logs/corpus.log",
    conda:
        ENV
    shell:
        "lmgrid corpus --kind {params.kind} {params.args} --out-dir results/{wildcards.corpus}/corpus "
        "{params.options} > {log} 2>&1"
