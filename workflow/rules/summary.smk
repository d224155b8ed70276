rule summary:
    localrule: local("summary")
    input:
        stats="results/{corpus}/corpus/corpus_stats.json",
        vocab_report="results/{corpus}/vocab_report.json",
        oracle="results/{corpus}/oracle.json" if KIND == "synth" else [],
        metrics=[f"{d}/metrics.json" for d in run_dirs()],
        reset=RESET_FILES,  # reset.smk: the stream cells' PPL with the state reset at every sentence
    output:
        csv="results/{corpus}/summary.csv",
        md="results/{corpus}/summary.md",
        html=report("results/{corpus}/summary.html", caption="../report/summary.rst", category="Summary"),
    params:
        oracle=lambda w, input: f"--oracle {input.oracle}" if input.oracle else "",
    benchmark:
        "results/{corpus}/benchmarks/summary.tsv"
    log:
        "results/{corpus}/logs/summary.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: summary table -> {output.html}")
    shell:
        "lmgrid summary --corpus {wildcards.corpus} --corpus-stats {input.stats} "
        "--vocab-report {input.vocab_report} {params.oracle} --metrics {input.metrics} --reset {input.reset} "
        "--csv {output.csv} --md {output.md} --html {output.html} > {log} 2>&1"


# A preset's published figures beside ours (config `reference:`; lmgrid.analysis.reference). Only when the list is not empty.
rule reference:
    localrule: local("summary")
    input:
        metrics=[f"{d}/metrics.json" for d in run_dirs()],
        # combine.smk: the combinations the rows name (a row naming one left out of the config reads "not run here")
        # (every run of it: one per seed when its neural components pin no seed)
        combinations=lambda w: COMBINE_JOBS.results(w, names={r.get("combine") for r in config["reference"]}),
        reset=RESET_FILES,  # reset.smk: shown beside our test PPL for stream rows
    output:
        csv="results/{corpus}/reference.csv",
        md="results/{corpus}/reference.md",
        tex="results/{corpus}/reference.tex",
        html=report("results/{corpus}/reference.html", caption="../report/reference.rst", category="Reference"),
    params:
        rows=shlex.quote(json.dumps(config["reference"], sort_keys=True)),
    benchmark:
        "results/{corpus}/benchmarks/reference.tsv"
    log:
        "results/{corpus}/logs/reference.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: published figures beside ours -> {output.md}")
    shell:
        "lmgrid reference --rows {params.rows} --metrics {input.metrics} --combinations {input.combinations} "
        "--reset {input.reset} --csv {output.csv} --md {output.md} "
        "--tex {output.tex} --html {output.html} > {log} 2>&1"
