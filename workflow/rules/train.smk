# Neural runs: one job per grid cell. In-progress checkpoints go to results/<corpus>/ckpt/..., which is no
# output, so Snakemake keeps it when a job fails or is killed; the re-run resumes from its last.ckpt.
#
# Every setting of a run reaches its job in one file, the cell's RunSpec (lmgrid.run.spec; docs/contracts.md, "Run
# spec"), written by the onstart handler (write_specs in common.smk) and read by `lmgrid train --spec`.  The params
# are the rerun triggers only, read off the same spec: one per setting that changes what a run computes ("lr=0.01";
# TRIGGER_PARAMS in common.smk, which says how a setting added later stays out of them at its neutral default), and
# where the run trains and in which precision (placement): a cell trained on a CPU is not done on a GPU.  Settings
# that only change how a run is executed or watched (log_every, accelerator, devices, compile: `x-changes-results:
# false` in the schema; mlflow.live) are in the spec but no param, so changing them reschedules nothing.
CKPT_DIR = beside_runs("ckpt/runs")
TRAIN_INPUTS = {
    "train": "results/{corpus}/corpus/train.txt",
    "valid": "results/{corpus}/corpus/valid.txt",
    "test": "results/{corpus}/corpus/test.txt",
    "vocab": "results/{corpus}/vocab.json",
}


rule train:
    input:
        **TRAIN_INPUTS,
    output:
        metrics=f"{RUN_DIR}/metrics.json",
        log_csv=f"{RUN_DIR}/log.csv",
        model=f"{RUN_DIR}/model.ckpt",
    wildcard_constraints:
        arch="ffnn|rnn|transformer",
    params:
        run_dir=RUN_DIR,
        ckpt_dir=CKPT_DIR,
        **TRIGGER_PARAMS,
        placement=train_placement,
    threads: train_threads
    # The longest first when slots are short (its planned training FLOPs), and before any test-time job.
    priority: train_job_priority
    resources:
        mem_mb=train_mem_mb,
        runtime=train_runtime,
        gpu=train_gpu,
    benchmark:
        beside_runs("benchmarks/runs", ".tsv")
    log:
        beside_runs("logs/train", ".log"),
    conda:
        ENV
    message:
        brief(
            "{wildcards.corpus}: train {wildcards.arch}/{wildcards.impl} n{wildcards.n_step} l{wildcards.layers} "
            "{wildcards.regime} s{wildcards.seed}"
        )
    shell:
        # The run's one result line (cell, valid and test PPL, epochs, wall) to the terminal as well.  The command
        # names no setting, so a setting added to the schema later leaves it, and Snakemake's code trigger, alone.
        # `make run`'s terminal (lmgrid.orchestration.terminal) sets LMGRID_RESULT_LINES=0 and shows the line itself.
        # The trailing comment only shows where the job trains in a dry run's commands (`-p`; the spec holds it).
        f"lmgrid train --spec {SPEC_FILE} --threads {{threads}} > {{log}} 2>&1 "
        "&& tail -n ${{LMGRID_RESULT_LINES:-1}} {log}"
        " # {params.placement:q}"


# LSTM and GRU runs also write their gate statistics.
use rule train as train_gated with:
    output:
        metrics=f"{RUN_DIR}/metrics.json",
        log_csv=f"{RUN_DIR}/log.csv",
        model=f"{RUN_DIR}/model.ckpt",
        gates=f"{RUN_DIR}/gates.csv",
    wildcard_constraints:
        arch="lstm|gru",


# Plug-in architectures (docs/models.md, "Your own model"): the same job, with the class's source file as an input
# (common.smk plugin_source), so an edit to it reruns that plug-in's cells and nothing else; a plug-in that returns
# gates (lmgrid_gates) also writes gates.csv.
use rule train as train_plugin with:
    input:
        **TRAIN_INPUTS,
        plugin=plugin_source,
    wildcard_constraints:
        arch=plugin_archs(gated=False),


use rule train_gated as train_plugin_gated with:
    input:
        **TRAIN_INPUTS,
        plugin=plugin_source,
    wildcard_constraints:
        arch=plugin_archs(gated=True),
