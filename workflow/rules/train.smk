# Neural runs: one job per grid cell. In-progress checkpoints go to results/<corpus>/ckpt/..., which is no
# output, so Snakemake keeps it when a job fails or is killed; the re-run resumes from its last.ckpt.
#
# Params hold one entry per setting that changes what a run computes ("lr=0.01"; SETTING_PARAMS in common.smk),
# so a changed setting reruns exactly the runs it affects and the dry run's reason names it.  Settings that only
# change how a run is executed or watched (log_every, accelerator, devices, compile: `x-changes-results: false` in
# the schema) reach the job through its environment (export_job_settings), and changing them reschedules nothing.
# Where the run trains (cpu or cuda) and in which precision is a param of its own (placement, common.smk): a cell
# trained on a CPU is not done on a GPU.
CKPT_DIR = beside_runs("ckpt/runs")
export_job_settings()


rule train:
    input:
        train="results/{corpus}/corpus/train.txt",
        valid="results/{corpus}/corpus/valid.txt",
        test="results/{corpus}/corpus/test.txt",
        vocab="results/{corpus}/vocab.json",
    output:
        metrics=f"{RUN_DIR}/metrics.json",
        log_csv=f"{RUN_DIR}/log.csv",
        model=f"{RUN_DIR}/model.ckpt",
    wildcard_constraints:
        arch="ffnn|rnn|transformer",
    params:
        run_dir=RUN_DIR,
        ckpt_dir=CKPT_DIR,
        **SETTING_PARAMS,
        placement=train_placement,
    threads: train_threads
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
        f"lmgrid train --arch {{wildcards.arch}} --impl {{wildcards.impl}} --n-step {{wildcards.n_step}} "
        f"--layers {{wildcards.layers}} --regime {{wildcards.regime}} --seed {{wildcards.seed}} "
        f"--train {{input.train}} --valid {{input.valid}} --test {{input.test}} --vocab {{input.vocab}} "
        f"--run-dir {{params.run_dir}} --ckpt-dir {{params.ckpt_dir}} {SETTING_ARGS} --set {{params.placement:q}} --threads {{threads}} "
        # the run's one result line (cell, valid and test PPL, epochs, wall) to the terminal as well
        f"> {{log}} 2>&1 && tail -n 1 {{log}}"


# LSTM and GRU runs also write their gate statistics.
use rule train as train_gated with:
    output:
        metrics=f"{RUN_DIR}/metrics.json",
        log_csv=f"{RUN_DIR}/log.csv",
        model=f"{RUN_DIR}/model.ckpt",
        gates=f"{RUN_DIR}/gates.csv",
    # Started first when slots are short: the 2-layer gated nets are usually the longest jobs, and a grid
    # finishes sooner when its longest jobs do not start last (the PTB seed_table on 2 slots).
    priority: 1
    wildcard_constraints:
        arch="lstm|gru",
