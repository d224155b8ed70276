# Helpers shared by the rules. The config is checked here first, so a bad value stops the run
# with one line naming the key before Snakemake builds the DAG.
import functools
import json
import os
import re
import shlex
import sys
from pathlib import Path

from lmgrid.orchestration.config import workflow_config
from lmgrid.data.corpus import SPLITS
from lmgrid.common.errors import LmgridError
from lmgrid.run.settings import COMPUTING
from lmgrid.neural.placement import asks_for_gpus, plan, probe_gpu_bf16, visible_gpus
from lmgrid.data.rawdata import ptb_sources
from lmgrid.run.spec import CONTRACT_1_TRIGGERS, NO_PARAM, RunSpec, spec_path
from lmgrid.run.key import (NGRAM_ARCHS, RUN_DIR, WILDCARD_CONSTRAINTS, RunKey, all_runs, arch_constraint,
                            beside_runs)
from lmgrid.common import plugins
from lmgrid.run.gate_facts import check_workflow_gates
from lmgrid.orchestration.job_order import UPSTREAM_PRIORITY, train_priority

# Typed --config overrides (and --config set="a.b=1"), validation against the schema, the schema's defaults.
# Layers in the order they apply: the Snakefile's configfile, then --configfile files, then --config.
_CLI_FILES = [str(f) for f in workflow.config_settings.configfiles]
try:
    CONFIG_SOURCES = workflow_config(config, [str(f) for f in workflow.configfiles if str(f) not in _CLI_FILES]
                                     + _CLI_FILES, workflow.config_settings.config,
                                     workflow.source_path("../schemas/config.schema.yaml"))
except LmgridError as _e:
    sys.exit(f"lmgrid: error: {_e}")

CORPUS = config["corpus"]["name"]
KIND = config["corpus"]["kind"]
# kind ptb: local files (corpus.files, else $LMGRID_PTB_DIR) or URLs that rule fetch downloads (lmgrid.data.rawdata).
PTB = ptb_sources(config["corpus"]) if KIND == "ptb" else None
envvars:
    "PATH",


# Jobs call `lmgrid`, installed beside the interpreter running Snakemake: put that first on
# PATH so the jobs use the same environment even when it was never activated.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
ENV = "../envs/lmgrid.yaml"


wildcard_constraints:
    corpus=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    **{**WILDCARD_CONSTRAINTS, "arch": arch_constraint()},  # the built-ins and the config's plug-ins


# Plug-in architectures (lmgrid.common.plugins; docs/models.md, "Your own model"), resolved by workflow_config above.
def plugin_archs(gated):
    """The arch wildcard's pattern for the plug-ins with (gated) or without gates; one that matches nothing when
    there are none (the rule then makes no job)."""
    names = [n for n in plugins.names() if bool(plugins.facts(n).gates) == gated]
    return "|".join(names) or "(?!)"


def plugin_source(wildcards):
    """A plug-in cell's class file: an input of its training job, so that editing the file reruns that plug-in's
    cells and nothing else (Snakemake reruns a job whose input is newer than its outputs)."""
    path = plugins.facts(wildcards.arch).source
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def brief(text):
    """A rule's message: the one line its job shows when it starts, in place of Snakemake's block of inputs,
    outputs and resources (profiles/default hides the `reason:` lines).  With LMGRID_VERBOSE=1 (`make run
    VERBOSE=1`) no message, so Snakemake prints its full job block."""
    return None if os.environ.get("LMGRID_VERBOSE", "0") == "1" else text


def local(rule_name):
    """Whether a rule runs on the submit host rather than as a cluster job (config cluster.local_rules)."""
    return rule_name in config["cluster"]["local_rules"]


def raw_inputs(wildcards):
    """The corpus stage's input files, by split (or the one text file)."""
    c = config["corpus"]
    if KIND == "synth":
        return {s: f"results/{CORPUS}/raw/{s}.txt" for s in SPLITS}
    if KIND == "ptb":
        return {s: f"results/{CORPUS}/raw/ptb.{s}.txt" for s in SPLITS} if PTB.downloads else dict(PTB.files)
    return {"text": c["text"]["path"]}


def corpus_input_args(wildcards, input):
    return " ".join(f"--input {k}={shlex.quote(str(v))}" for k, v in input.items())


def corpus_options(wildcards):
    c = config["corpus"]
    opts = ["--lowercase"] if c["lowercase"] else []
    opts.append(f"--max-len {c['max_len']}")
    opts += [f"--sha256 {s}={c['sha256'][s]}" for s in SPLITS if "sha256" in c]  # local files are checked too
    if KIND == "text":
        t = c["text"]
        ratios = t["ratios"]
        opts.append(f"--ratios {ratios['train']} {ratios['valid']} {ratios['test']} --seed {t['seed']}")
    # Only the splits a cut applies to (lmgrid.orchestration.config drops those at 0): without corpus.max_sentences this string
    # is the one it always was, so a finished corpus stage keeps its params and does not rerun.
    cut = c.get("max_sentences", {})
    opts += [f"--max-sentences {s}={cut[s]}" for s in SPLITS if s in cut]
    return " ".join(opts)


def run_dirs():
    return [key.run_dir(CORPUS) for key in all_runs(config["studies"])]


# Resources of one training job, for the train rules of the model stages:
#     threads: train_threads
#     resources: mem_mb=train_mem_mb, runtime=train_runtime, gpu=train_gpu
#     benchmark: "results/{corpus}/benchmarks/runs/{arch}/{impl}/n{n_step}_l{layers}_{regime}_s{seed}.tsv"
# On SLURM the plugin turns mem_mb, runtime (minutes) and gpu into the job request; the profile leaves them to
# these functions, which size them by train.devices and by the attempt (a retried job gets more: --retries).
# Where each architecture's jobs train, and in which precision (lmgrid.neural.placement): part of every training
# job's spec and a param of its own, so a cell trained on a CPU is not done on a GPU.  A cluster run is one whose jobs
# go to a remote executor (Snakemake then counts --jobs as nodes, dry runs included) or the job's own Snakemake on a
# node.
CLUSTER = workflow.remote_exec or workflow.global_resources["_nodes"].value is not None
GPUS_HERE = 0 if CLUSTER else visible_gpus()
_gpu_bf16 = functools.cache(probe_gpu_bf16)  # one child process at most, and only where a GPU is visible


@functools.cache
def _cell_spec(arch, impl, n_step, layers, regime, seed):
    from lmgrid.run.live import live_logger_kwargs

    spec = RunSpec.build(arch=arch, impl=impl, n_step=n_step, layers=layers, regime=regime, seed=seed,
                         corpus=CORPUS, train=config["train"], live_mlflow=live_logger_kwargs(config["mlflow"], CORPUS))
    hp = spec.hparams
    check_workflow_gates(arch, hp)
    return spec.placed(plan(hp["accelerator"], hp["precision"], cluster=CLUSTER, gpus=GPUS_HERE, gpu_bf16=_gpu_bf16))


def cell_spec(key):
    """The RunSpec of a neural cell (a RunKey or a job's wildcards), built once: the training settings are resolved
    there only, and the job's spec file, its params and its resources all read them from it."""
    return _cell_spec(key.arch, key.impl, int(key.n_step), int(key.layers), key.regime, int(key.seed))


def neural_specs():
    return [cell_spec(key) for key in all_runs(config["studies"]) if not key.is_ngram]


# A local run on a machine with GPUs runs at most as many GPU jobs at once as it has GPUs (unless --resources
# gpu=N says otherwise): jobs sharing one GPU would compete, and their tokens/s would measure each other.
if not CLUSTER and GPUS_HERE and "gpu" not in workflow.global_resources:
    workflow.register_resource("gpu", GPUS_HERE)


def _devices(wildcards):
    """DDP processes of a neural run (train.devices, or its per_arch override); 0 for n-gram runs."""
    return 0 if wildcards.arch in NGRAM_ARCHS else cell_spec(wildcards).hparams["devices"]


def train_threads(wildcards):
    # With train.devices > 1 the job runs that many DDP processes, each with threads // devices torch threads.
    return max(config["train"]["threads"], _devices(wildcards)) if _devices(wildcards) else 1


def train_mem_mb(wildcards, attempt):
    if wildcards.arch in NGRAM_ARCHS:
        return 2000 * attempt
    return config["cluster"]["train_mem_mb"] * _devices(wildcards) * attempt  # per DDP process


def train_runtime(wildcards, attempt):
    return (15 if wildcards.arch in NGRAM_ARCHS else config["cluster"]["train_runtime_min"]) * attempt


# GPUs: train.devices of them when the job trains on GPUs (DDP within one node, one task: docs/cluster.md).
def train_gpu(wildcards):
    if not _devices(wildcards):
        return 0
    return asks_for_gpus(cell_spec(wildcards).placement["device"], _devices(wildcards))


# Longest training jobs first, every one before the test-time jobs (lmgrid.orchestration.job_order).
def train_job_priority(wildcards):
    return train_priority(cell_spec(wildcards))


def train_placement(wildcards):
    return cell_spec(wildcards).placement_param()


# The train rule's rerun triggers: one param per training setting that changes what a run computes ("lr=0.01"),
# read off the cell's RunSpec (RunSpec.trigger_params), so a changed setting reruns exactly the runs it affects and
# the dry run's reason names it.  Snakemake records a finished job's params as the set of the repr() of each value
# and reruns the job when today's set differs (snakemake.persistence: _params, params_changed); values that are not
# of a builtin type (str, int, ...) are left out of that set, as if the param did not exist.
# - The 32 settings of contract 1 (CONTRACT_1_TRIGGERS) are params always: every finished grid recorded them.
# - A setting added to the schema later gets a param of its own name here (the rule's param names are fixed when
#   the Snakefile is read, so there is one per setting the schema knows), whose value is NO_PARAM, an object
#   Snakemake cannot represent and so neither records nor compares, while the setting is at its neutral default
#   (`x-neutral-default`): adding a setting reruns nothing.  Set off it, the value is "key=value" and the set
#   changes: exactly the cells whose spec says so rerun, with the setting named.
def _trigger(key):
    return lambda w: cell_spec(w).trigger_params().get(key, NO_PARAM)


TRIGGER_PARAMS = {key: _trigger(key) for key in CONTRACT_1_TRIGGERS + tuple(
    k for k in COMPUTING if k not in CONTRACT_1_TRIGGERS)}


# Where a job's spec is, in its shell command: results/<corpus>/specs/runs/<the run folder's path>.json (spec_path),
# from the wildcards.  Neither an input (it is written when jobs start, after the DAG is built) nor a param (a new
# param would rerun every finished cell).
SPEC_FILE = re.sub(r"\{(\w+)\}", r"{wildcards.\1}", beside_runs("specs/runs", ".json"))


def write_specs():
    """onstart: every neural cell's spec file, each written only when its content changed (RunSpec.write).  Jobs
    run only after onstart, and a dry run runs no onstart, so `snakemake -n` writes nothing."""
    for spec in neural_specs():
        spec.write(spec_path(spec, CORPUS))


# Training jobs of a local run fork from one warm process that imported torch and Lightning once (lmgrid.orchestration.warm;
# about 8.5 s saved per job on 2 cores). Each job stays its own Snakemake job; on a cluster, with LMGRID_WARM=0, or
# when a job trains on a GPU, jobs start their own interpreter as before.
def start_warm_server():
    import subprocess
    import tempfile

    from lmgrid.orchestration.warm import SOCKET_ENV

    if not workflow.local_exec or os.environ.get("LMGRID_WARM", "1") == "0":
        return
    neural = [key.arch for key in all_runs(config["studies"]) if not key.is_ngram]
    if not neural:
        return
    if any(spec.placement["device"] == "cuda" for spec in neural_specs()):
        print("lmgrid: training on a GPU: every training job starts its own process (a process that set up CUDA "
              "cannot fork one that uses it)", file=sys.stderr)
        return
    path = os.path.join(tempfile.mkdtemp(prefix="lmgrid-warm-"), "train.sock")
    os.makedirs(f"results/{CORPUS}/logs", exist_ok=True)
    with open(f"results/{CORPUS}/logs/warm_server.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "lmgrid", "warm-server", "--socket", path,
                                 "--parent-pid", str(os.getpid())], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    os.environ[SOCKET_ENV] = path
    WARM_SERVER.append(proc)


def stop_warm_server():
    for proc in WARM_SERVER:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except Exception:
            proc.kill()
    WARM_SERVER.clear()


WARM_SERVER = []


# The HTML report is rebuilt after every successful run with the run's own config (LMGRID_REPORT=0: not; `make
# run` builds it itself, also when nothing was to be done); a failed run removes a report older than the results.
# A run of some targets (`snakemake results/<corpus>/summary.csv`) that leaves results of the full run missing
# builds no report: one plain line says it waits for a full run (and a report older than the results goes).
def build_report():
    from lmgrid.analysis.report import REPORT, build, drop_if_stale

    if os.environ.get("LMGRID_REPORT", "1") == "0":
        return
    missing = [str(f) for f in rules.all.input if not os.path.exists(f)]
    if missing:
        dropped = drop_if_stale(Path(f"results/{CORPUS}"))
        print(f"lmgrid: {REPORT} waits for a full run: {len(missing)} of its results are not made yet "
              f"(e.g. {missing[0]}){'; removed the older one' if dropped else ''}", file=sys.stderr)
        return
    overrides = [f"{k}={json.dumps(v)}" for k, v in dict(workflow.config_settings.config).items()]
    error = build(workflow.main_snakefile, os.getcwd(), workflow.config_settings.configfiles, overrides, config)
    print(f"lmgrid: error: {error}" if error else f"lmgrid: report {REPORT} rebuilt", file=sys.stderr)


def print_headline():
    """At the end of a successful run: each model's best cell from the summary, in the terminal (when it exists)."""
    from lmgrid.analysis.summary import headline_text

    path = f"results/{CORPUS}/summary.csv"
    if os.path.exists(path):
        print(f"lmgrid: each model's best cell ({path}; every run and study in the report):\n{headline_text(path)}",
              file=sys.stderr)


def drop_stale_report():
    from lmgrid.analysis.report import drop_if_stale

    note = drop_if_stale(Path(f"results/{CORPUS}"))
    if note:
        print(f"lmgrid: {note}", file=sys.stderr)
