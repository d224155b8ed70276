# Studies after training: tables and figures of every study (one job), and the MLflow mirror (two jobs, one after
# the other, the only writers of the tracking database: the cells beside the aggregation, then the studies). Which
# files a study produces comes from its grid (lmgrid.analysis.layout), so a study added to config.yaml needs no
# change here.
from snakemake.exceptions import WorkflowError

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


# The aggregation's claim (below): every core but one where the run has a number of cores; a cluster run has none
# (Snakemake raises on asking), and there the local job's claim of one thread per study is scaled to the host's.
try:
    AGGREGATE_THREADS = max(1, min(len(config["studies"]), workflow.cores - 1))
except WorkflowError:
    AGGREGATE_THREADS = len(config["studies"])


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
    # One process per study (lmgrid.analysis.build.build_all), on every core but one: the MLflow mirror of the cells
    # (mlflow_cells) runs beside it on that one.  A claim of every core would wait for both to be free, and so for
    # the mirror to end (Snakemake's scheduler fills the cores it can with the ready jobs of highest priority).
    threads: AGGREGATE_THREADS
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


# What both MLflow jobs read and pass: every run's record, the word vectors (embed.smk), and the data every run saw,
# logged as dataset inputs with digests, so changed data re-syncs and shows.
MIRROR_INPUTS = dict(
    metrics=[f"{d}/metrics.json" for d in run_dirs()],
    embeddings=lambda w: expand(EMBEDDING_OUTPUTS, corpus=w.corpus),
    data=expand("results/{{corpus}}/corpus/{split}.txt", split=SPLITS),
    stats="results/{corpus}/corpus/corpus_stats.json",
    vocab="results/{corpus}/vocab.json",
    vocab_report="results/{corpus}/vocab_report.json",
)
MIRROR_PARAMS = dict(
    studies=STUDIES_JSON,
    uri=MLFLOW["tracking_uri"],
    prefix=shlex.quote(MLFLOW["experiment_prefix"]),
    data_settings=shlex.quote(json.dumps({"corpus": config["corpus"], "vocab": config["vocab"]}, sort_keys=True)),
    register="--register-models" if MLFLOW["register_models"] else "",
)
MIRROR = ("lmgrid mlflow-sync --corpus {wildcards.corpus} --studies {params.studies} --tracking-uri {params.uri} "
          "--experiment-prefix {params.prefix} --data-settings {params.data_settings} {params.register} "
          "--jobs {threads}")


# The cells' runs first, their models logged: they need no study table, so this job runs beside the aggregation
# instead of after it (while it runs it is the store's one writer; mlflow_sync waits for it).
rule mlflow_cells:
    localrule: local("mlflow_cells")
    input:
        **MIRROR_INPUTS,
    output:
        "results/{corpus}/mlflow_cells.json",
    params:
        **MIRROR_PARAMS,
    # One core, beside the aggregation. Each re-mirrored cell's curve is drawn in this process.
    threads: 1
    # the longest job of the run's tail: first among the jobs that wait for no training (priority 0)
    priority: 1
    benchmark:
        "results/{corpus}/benchmarks/mlflow_cells.tsv"
    log:
        "results/{corpus}/logs/mlflow_cells.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: mirror the runs and their models into MLflow ({params.uri})")
    shell:
        " ".join([MIRROR, "--cells-only --out {output} > {log} 2>&1"])


rule mlflow_sync:
    localrule: local("mlflow_sync")
    input:
        # the cells' runs, mirrored by mlflow_cells: found current here (each run's content hash), so this job adds
        # the studies, which read the aggregation's tables, and the combinations
        cells="results/{corpus}/mlflow_cells.json",
        **MIRROR_INPUTS,
        studies=snakemake_outputs(config["studies"]),
        # every combination run's result.json (combine.smk, included after this file: looked up when a job is planned)
        combinations=lambda w: COMBINE_JOBS.results(w),
    output:
        "results/{corpus}/mlflow_sync.json",
    params:
        **MIRROR_PARAMS,
    # One core: the cells are current, so no curve is drawn here.
    threads: 1
    benchmark:
        "results/{corpus}/benchmarks/mlflow_sync.tsv"
    log:
        "results/{corpus}/logs/mlflow_sync.log",
    conda:
        ENV
    message:
        brief("{wildcards.corpus}: mirror the studies and combinations into MLflow ({params.uri})")
    shell:
        " ".join([MIRROR, "--combinations {input.combinations} --out {output} > {log} 2>&1"])
