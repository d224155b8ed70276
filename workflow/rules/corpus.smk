rule synth:
    localrule: local("synth")
    output:
        expand("results/{{corpus}}/raw/{split}.{ext}", split=SPLITS, ext=["txt", "logprob"]),
    params:
        seed=config["corpus"].get("synth", {}).get("seed", 1),
        sizes=config["corpus"].get("synth", {}).get("sentences", {}),
        grammar=json.dumps(config["corpus"].get("synth", {}).get("grammar", {}), sort_keys=True),
    log:
        "results/{corpus}/logs/synth.log",
    shell:
        "{LMGRID} synth --out-dir results/{wildcards.corpus}/raw --seed {params.seed} "
        "--train {params.sizes[train]} --valid {params.sizes[valid]} --test {params.sizes[test]} "
        "--grammar '{params.grammar}' > {log} 2>&1"


rule corpus:
    localrule: local("corpus")
    input:
        unpack(raw_inputs),
    output:
        expand("results/{{corpus}}/corpus/{split}.txt", split=SPLITS),
        stats="results/{corpus}/corpus/corpus_stats.json",
    params:
        args=corpus_input_args,
        lowercase="--lowercase" if config["corpus"].get("lowercase") else "",
        max_len=config["corpus"].get("max_len", 0),
        ratios=lambda w: " ".join(
            str(config["corpus"]["text"].get("ratios", {"train": 0.8, "valid": 0.1, "test": 0.1})[s])
            for s in SPLITS
        )
        if KIND == "text"
        else "",
        seed=config["corpus"].get("text", {}).get("seed", 1),
    log:
        "results/{corpus}/logs/corpus.log",
    shell:
        "{LMGRID} corpus --kind {KIND} {params.args} --out-dir results/{wildcards.corpus}/corpus "
        "{params.lowercase} --max-len {params.max_len} --seed {params.seed} "
        "$( [ -n '{params.ratios}' ] && echo --ratios {params.ratios} ) > {log} 2>&1"
