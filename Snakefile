# lmgrid: corpus -> vocabulary -> models over study grids -> tables. All logic lives in src/lmgrid.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


# Validates the config (one line naming the file or option, key and value) and fills in the schema's defaults.
include: "workflow/rules/common.smk"


include: "workflow/rules/corpus.smk"
include: "workflow/rules/vocab.smk"
include: "workflow/rules/ngram.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/aggregate.smk"


report: "workflow/report/workflow.rst"


onstart:
    start_warm_server()


onsuccess:
    stop_warm_server()


onerror:
    stop_warm_server()


rule all:
    input:
        f"results/{CORPUS}/summary.csv",
        f"results/{CORPUS}/summary.md",
        expand(snakemake_outputs(config["studies"]), corpus=CORPUS),
        f"results/{CORPUS}/mlflow_sync.json",
