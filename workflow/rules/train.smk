# Neural runs: one job per grid cell. In-progress checkpoints go to results/<corpus>/ckpt/..., which is no
# output, so Snakemake keeps it when a job fails or is killed; the re-run resumes from its last.ckpt.
from lmgrid.neural.hparams import resolve_hparams

CKPT_DIR = beside_runs("ckpt/runs")
TRAIN_CONFIG = config.get("train", {})


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
        # Every training setting of this architecture: a change reruns exactly the affected runs.
        hparams=lambda w: json.dumps(resolve_hparams(TRAIN_CONFIG, w.arch), sort_keys=True),
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
    shell:
        "lmgrid train --arch {wildcards.arch} --impl {wildcards.impl} --n-step {wildcards.n_step} "
        "--layers {wildcards.layers} --regime {wildcards.regime} --seed {wildcards.seed} "
        "--train {input.train} --valid {input.valid} --test {input.test} --vocab {input.vocab} "
        "--run-dir {params.run_dir} --ckpt-dir {params.ckpt_dir} --hparams {params.hparams:q} "
        "--threads {threads} > {log} 2>&1"


# LSTM and GRU runs also write their gate statistics.
use rule train as train_gated with:
    output:
        metrics=f"{RUN_DIR}/metrics.json",
        log_csv=f"{RUN_DIR}/log.csv",
        model=f"{RUN_DIR}/model.ckpt",
        gates=f"{RUN_DIR}/gates.csv",
    wildcard_constraints:
        arch="lstm|gru",
