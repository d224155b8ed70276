rule vocab:
    localrule: local("vocab")
    input:
        train="results/{corpus}/corpus/train.txt",
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
    output:
        vocab="results/{corpus}/vocab.json",
        report="results/{corpus}/vocab_report.json",
    params:
        min_count=config["vocab"]["min_count"],
        max_size=config["vocab"]["max_size"],
    benchmark:
        "results/{corpus}/benchmarks/vocab.tsv"
    log:
        "results/{corpus}/logs/vocab.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: vocabulary")
    shell:
        "lmgrid vocab --train {input.train} --valid {input.valid} --test {input.test} "
        "--out {output.vocab} --report {output.report} "
        "--min-count {params.min_count} --max-size {params.max_size} > {log} 2>&1"


rule oracle:
    localrule: local("oracle")
    input:
        vocab="results/{corpus}/vocab.json",
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
        valid_logprob="results/{corpus}/raw/valid.logprob",
        test_logprob="results/{corpus}/raw/test.logprob",
    output:
        "results/{corpus}/oracle.json",
    # a second's work that the aggregation waits for (lmgrid.orchestration.job_order)
    priority: UPSTREAM_PRIORITY
    benchmark:
        "results/{corpus}/benchmarks/oracle.tsv"
    log:
        "results/{corpus}/logs/oracle.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: oracle perplexity of the grammar")
    shell:
        "lmgrid oracle --vocab {input.vocab} "
        "--split valid={input.valid},{input.valid_logprob} "
        "--split test={input.test},{input.test_logprob} --out {output} > {log} 2>&1"
