# Helpers shared by the rules. The config is checked here first, so a bad value stops the run
# with one line naming the key before Snakemake builds the DAG.
import json
import shlex
import sys

from lmgrid.config import check as _check_config
from lmgrid.errors import LmgridError
from lmgrid.runkey import RUN_DIR, WILDCARD_CONSTRAINTS, RunKey, all_runs

try:
    _check_config(config, workflow.source_path("../schemas/config.schema.yaml"), source="config")
except LmgridError as _e:
    sys.exit(f"lmgrid: error: {_e}")

CORPUS = config["corpus"]["name"]
KIND = config["corpus"]["kind"]
SPLITS = ["train", "valid", "test"]
# The interpreter running Snakemake also runs the jobs, so no PATH setup is needed.
LMGRID = f"{shlex.quote(sys.executable)} -m lmgrid"


wildcard_constraints:
    corpus=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    **WILDCARD_CONSTRAINTS,


def local(rule_name):
    """Whether a rule runs on the submit host rather than as a cluster job (config cluster.local_rules)."""
    return rule_name in config["cluster"]["local_rules"]


def raw_inputs(wildcards):
    """The corpus stage's input files, by split (or the one text file)."""
    c = config["corpus"]
    if KIND == "synth":
        return {s: f"results/{CORPUS}/raw/{s}.txt" for s in SPLITS}
    if KIND == "ptb":
        return dict(c["files"])
    return {"text": c["text"]["path"]}


def corpus_input_args(wildcards, input):
    return " ".join(f"--input {k}={shlex.quote(str(v))}" for k, v in input.items())


def run_dirs():
    return [key.run_dir(CORPUS) for key in all_runs(config["studies"])]
