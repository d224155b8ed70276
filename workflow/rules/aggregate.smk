# Studies after training: tables and figures of every study (one job), then the MLflow mirror (one job,
# the only writer of the tracking database). Which files a study produces comes from its grid
# (lmgrid.analysis.layout), so a study added to config.yaml needs no change here.
from lmgrid.analysis.layout import snakemake_outputs
from lmgrid.run.live import check_mlflow as _check_mlflow

try:
    _check_mlflow(config["mlflow"], source=CONFIG_SOURCES.of(["mlflow"]))
except LmgridError as _e:
    sys.exit(f"lmgrid: error: {_e}")

MLFLOW = config["mlflow"]
STUDIES_JSON = shlex.quote(json.dumps(config["studies"], sort_keys=True))


# The config's studies as a file, which the aggregation reads: a changed study rewrites it (its param changed), and
# the aggregation reruns; the report's entries, which list the aggregation job's params, show no wall of JSON.
rule study_grids:
    localrule: local("study_grids")
    output:
        "results/{corpus}/studies.json",
    params:
        studies=STUDIES_JSON,
    log:
        "results/{corpus}/logs/study_grids.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: studies of the config -> {output}")
    shell:
        "printf '%s\\n' {params.studies} > {output} 2> {log}"


rule aggregate:
    localrule: local("aggregate")
    input:
        metrics=[f"{d}/metrics.json" for d in run_dirs()],
        oracle="results/{corpus}/oracle.json" if KIND == "synth" else [],
        studies="results/{corpus}/studies.json",
    output:
        snakemake_outputs(config["studies"], report),
    params:
        oracle=lambda w, input: f"--oracle {input.oracle}" if input.oracle else "",
    # one process per study (lmgrid.analysis.build.build_all): this job ends the run, after every training job, so
    # its cores would otherwise sit idle; Snakemake scales the claim down to the cores it was given
    threads: len(config["studies"])
    benchmark:
        "results/{corpus}/benchmarks/aggregate.tsv"
    log:
        "results/{corpus}/logs/aggregate.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: tables and figures of every study")
    shell:
        'lmgrid aggregate --corpus {wildcards.corpus} --studies "$(cat {input.studies})" {params.oracle} '
        "--jobs {threads} > {log} 2>&1"


rule mlflow_sync:
    localrule: local("mlflow_sync")
    input:
        metrics=[f"{d}/metrics.json" for d in run_dirs()],
        studies=snakemake_outputs(config["studies"]),
        # embed.smk: scores and vectors of every neural cell
        embeddings=lambda w: expand(EMBEDDING_OUTPUTS, corpus=w.corpus),
        # The data every run saw: logged as dataset inputs with digests, so changed data re-syncs and shows.
        data=expand("results/{{corpus}}/corpus/{split}.txt", split=SPLITS),
        stats="results/{corpus}/corpus/corpus_stats.json",
        vocab="results/{corpus}/vocab.json",
        vocab_report="results/{corpus}/vocab_report.json",
        # every combination run's result.json (combine.smk, included after this file: looked up when a job is planned)
        combinations=lambda w: COMBINE_JOBS.results(w),
    output:
        "results/{corpus}/mlflow_sync.json",
    params:
        studies=STUDIES_JSON,
        uri=MLFLOW["tracking_uri"],
        prefix=shlex.quote(MLFLOW["experiment_prefix"]),
        data_settings=shlex.quote(json.dumps({"corpus": config["corpus"], "vocab": config["vocab"]}, sort_keys=True)),
        register="--register-models" if MLFLOW["register_models"] else "",
    # The store's one writer, plus a process drawing the runs' curves meanwhile (lmgrid.tracking.curves): the
    # last job of a run, with the cores otherwise idle.
    threads: 2
    benchmark:
        "results/{corpus}/benchmarks/mlflow_sync.tsv"
    log:
        "results/{corpus}/logs/mlflow_sync.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: mirror runs and studies into MLflow ({params.uri})")
    shell:
        "lmgrid mlflow-sync --corpus {wildcards.corpus} --studies {params.studies} "
        "--tracking-uri {params.uri} --experiment-prefix {params.prefix} --data-settings {params.data_settings} "
        "{params.register} --combinations {input.combinations} --jobs {threads} --out {output} > {log} 2>&1"
