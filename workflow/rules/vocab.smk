rule vocab:
    localrule: local("vocab")
    input:
        expand("results/{{corpus}}/corpus/{split}.txt", split=SPLITS),
    output:
        vocab="results/{corpus}/vocab.json",
        report="results/{corpus}/vocab_report.json",
    params:
        min_count=config["vocab"].get("min_count", 1),
        max_size=config["vocab"].get("max_size", 0),
    log:
        "results/{corpus}/logs/vocab.log",
    shell:
        "{LMGRID} vocab --train {input[0]} --valid {input[1]} --test {input[2]} "
        "--out {output.vocab} --report {output.report} "
        "--min-count {params.min_count} --max-size {params.max_size} > {log} 2>&1"


rule oracle:
    localrule: local("oracle")
    input:
        vocab="results/{corpus}/vocab.json",
        corpus=expand("results/{{corpus}}/corpus/{split}.txt", split=["valid", "test"]),
        logprob=expand("results/{{corpus}}/raw/{split}.logprob", split=["valid", "test"]),
    output:
        "results/{corpus}/oracle.json",
    log:
        "results/{corpus}/logs/oracle.log",
    shell:
        "{LMGRID} oracle --vocab {input.vocab} "
        "--split valid={input.corpus[0]},{input.logprob[0]} "
        "--split test={input.corpus[1]},{input.logprob[1]} --out {output} > {log} 2>&1"
