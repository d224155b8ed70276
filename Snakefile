# lmgrid: corpus -> vocabulary -> models over study grids -> tables. All logic lives in src/lmgrid.
import os
import sys

from snakemake.utils import min_version

from lmgrid.orchestration.config import load_yaml
from lmgrid.common.errors import LmgridError

min_version("9.0")

# A malformed config.yaml gets one line naming the file and the YAML problem, not Snakemake's generic message.
try:
    if os.path.exists("config.yaml"):
        load_yaml("config.yaml")
except LmgridError as _e:
    sys.exit(f"lmgrid: error: {_e}")


configfile: "config.yaml"


# Validates the config (one line naming the file or option, key and value) and fills in the schema's defaults.
include: "workflow/rules/common.smk"


include: "workflow/rules/corpus.smk"
include: "workflow/rules/vocab.smk"
include: "workflow/rules/ngram.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/reset.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/embed.smk"
include: "workflow/rules/combine.smk"
include: "workflow/rules/scales.smk"
include: "workflow/rules/budget.smk"


report: "workflow/report/workflow.rst"


onstart:
    write_specs()  # every neural cell's run spec, before any job reads one
    start_warm_server()


onsuccess:
    stop_warm_server()
    print_headline()
    build_report()


onerror:
    stop_warm_server()
    drop_stale_report()


rule all:
    message:
        brief("every result of the config")
    input:
        f"results/{CORPUS}/summary.csv",
        f"results/{CORPUS}/summary.md",
        f"results/{CORPUS}/summary.html",
        expand(snakemake_outputs(config["studies"]), corpus=CORPUS),
        f"results/{CORPUS}/mlflow_sync.json",
        expand(EMBEDDING_OUTPUTS, corpus=CORPUS),
        COMBINE_JOBS.outputs(CORPUS),
        expand(SCALES_FILES, corpus=CORPUS),
        expand(BUDGET_FILES, corpus=CORPUS),
        expand("results/{corpus}/combine/combinations.{ext}", corpus=CORPUS, ext=["csv", "md", "html"])
        if COMBINE else [],
        expand("results/{corpus}/reference.{ext}", corpus=CORPUS, ext=["csv", "md", "tex", "html"])
        if config["reference"] else [],
