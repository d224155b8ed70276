# Studies after training: tables and figures of every study (one job), then the MLflow mirror (one job,
# the only writer of the tracking database). Which files a study produces comes from its grid
# (lmgrid.aggregate.layout), so a study added to config.yaml needs no change here.
from lmgrid.aggregate.layout import check_mlflow as _check_mlflow
from lmgrid.aggregate.layout import report_item, study_plan

try:
    _check_mlflow(config.get("mlflow", {}), source="config")
except LmgridError as _e:
    sys.exit(f"lmgrid: error: {_e}")

MLFLOW = config.get("mlflow", {})
STUDIES_JSON = shlex.quote(json.dumps(config["studies"], sort_keys=True))


def study_files(name, report_marked=True):
    """Every output of one study; the ones shown in the HTML report are wrapped in report()."""
    out = []
    for stem, exts in study_plan(config["studies"][name]).items():
        for ext in exts:
            path = f"results/{{corpus}}/studies/{name}/{stem}.{ext}"
            item = report_item(stem, ext) if report_marked else None
            if item:
                path = report(path, caption=f"../report/{item[0]}", category="Studies", subcategory=name,
                              labels={"study": name, "output": item[1]})
            out.append(path)
    return out


def run_metrics(wildcards):
    return [f"{d}/metrics.json" for d in run_dirs()]


rule aggregate:
    input:
        run_metrics,
        oracle="results/{corpus}/oracle.json" if KIND == "synth" else [],
    output:
        [f for name in config["studies"] for f in study_files(name)],
    params:
        studies=STUDIES_JSON,
        oracle=lambda w, input: f"--oracle {input.oracle}" if input.oracle else "",
    log:
        "results/{corpus}/logs/aggregate.log",
    shell:
        "{LMGRID} aggregate --corpus {wildcards.corpus} --studies {params.studies} {params.oracle} > {log} 2>&1"


rule mlflow_sync:
    input:
        run_metrics,
        [f for name in config["studies"] for f in study_files(name, report_marked=False)],
    output:
        "results/{corpus}/mlflow_sync.json",
    params:
        studies=STUDIES_JSON,
        uri=MLFLOW.get("tracking_uri", "sqlite:///results/mlflow.db"),
        prefix=shlex.quote(MLFLOW.get("experiment_prefix", "")),
    log:
        "results/{corpus}/logs/mlflow_sync.log",
    shell:
        "{LMGRID} mlflow-sync --corpus {wildcards.corpus} --studies {params.studies} "
        "--tracking-uri {params.uri} --experiment-prefix {params.prefix} --out {output} > {log} 2>&1"
