rule synth:
    localrule: local("synth")
    output:
        expand("results/{{corpus}}/raw/{split}.{ext}", split=SPLITS, ext=["txt", "logprob"]),
    params:
        # Functions: corpus.synth exists only for kind synth, and they run only when a synth job does.
        seed=lambda w: config["corpus"]["synth"]["seed"],
        sizes=lambda w: config["corpus"]["synth"]["sentences"],
        grammar=lambda w: json.dumps(config["corpus"]["synth"]["grammar"], sort_keys=True),
    benchmark:
        "results/{corpus}/benchmarks/synth.tsv"
    log:
        "results/{corpus}/logs/synth.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: synthetic corpus from the grammar")
    shell:
        "lmgrid synth --out-dir results/{wildcards.corpus}/raw --seed {params.seed} "
        "--train {params.sizes[train]} --valid {params.sizes[valid]} --test {params.sizes[test]} "
        "--grammar '{params.grammar}' > {log} 2>&1"


# kind ptb with corpus.download: the http storage plugin fetches a split, `lmgrid verify` keeps it in raw/ only
# when its sha256 is corpus.sha256's (a failed job's output is deleted: nothing unverified stays).
rule fetch:
    localrule: local("fetch")
    input:
        lambda w: storage.http(PTB.urls[w.split]),
    output:
        "results/{corpus}/raw/ptb.{split}.txt",
    wildcard_constraints:
        split="train|valid|test",
    params:
        url=lambda w: PTB.urls[w.split],
        sha256=lambda w: config["corpus"]["sha256"][w.split],
    benchmark:
        "results/{corpus}/benchmarks/fetch_{split}.tsv"
    log:
        "results/{corpus}/logs/fetch_{split}.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: check the download {output}")
    shell:
        "lmgrid verify {input:q} --out {output:q} --sha256 {params.sha256} --name {params.url:q} > {log} 2>&1"


rule corpus:
    localrule: local("corpus")
    input:
        unpack(raw_inputs),
    output:
        expand("results/{{corpus}}/corpus/{split}.txt", split=SPLITS),
        stats="results/{corpus}/corpus/corpus_stats.json",
    params:
        kind=KIND,
        args=corpus_input_args,
        options=corpus_options,
    benchmark:
        "results/{corpus}/benchmarks/corpus.tsv"
    log:
        "results/{corpus}/logs/corpus.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: train, valid and test splits")
    shell:
        "lmgrid corpus --kind {params.kind} {params.args} --out-dir results/{wildcards.corpus}/corpus "
        "{params.options} > {log} 2>&1"
