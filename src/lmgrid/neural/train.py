"""One neural run end to end: data, Lightning training with resume, final evaluation, gates, outputs.

In-progress state (last.ckpt, best.ckpt, the live log.csv) lives in a checkpoint folder outside the run
folder, so a job that is killed, or fails, keeps it (Snakemake deletes a failed job's outputs), and a re-run
resumes from last.ckpt.  A fingerprint of everything the run depends on guards the folder: a checkpoint of a
different config or corpus is discarded, never resumed.  The run folder gets its files only at the end:
model.ckpt, log.csv, gates.csv (lstm, gru) and, last, metrics.json.

Several devices (`train.devices` > 1): Lightning DDP, nccl on GPUs, gloo on the CPU.  Lightning starts the other
processes by re-running this very command (`lmgrid train ...`) with LOCAL_RANK set; all of them train (each on
its share of every global batch, see data.py), and only process 0 touches the checkpoint folder, evaluates
valid and test on whole splits after training and writes the run folder.  The cluster environment is Lightning's
own even inside a SLURM job: the job is one task holding N GPUs (see docs/cluster.md), not N srun tasks.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.environments import LightningEnvironment
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import MLFlowLogger
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from lmgrid.common import plugins
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write
from lmgrid.run.gate_facts import is_gated
from lmgrid.models import IMPLS
from lmgrid.data.ppl import BOS, perplexity
from lmgrid.run.record import RECORD_FILE, RunRecord, SplitScore
from lmgrid.neural.compute_budget import flops_budget
from lmgrid.run.spec import RunSpec, parse_placement  # noqa: F401 - parse_placement re-exported
from lmgrid.run.key import NEURAL_ARCHS, REGIMES
from lmgrid.data.vocab import Vocab

from lmgrid.neural import gates as gates_mod
from lmgrid.neural.averaging import WeightAverage
from lmgrid.neural.callbacks import AttemptUsage, EpochLog, Progress
from lmgrid.neural.datamodule import LMData
from lmgrid.neural.module import LMModule, evaluate
from lmgrid.neural.precision import autocast, fp32_settings, full_fp32, resolve_precision

CKPT_FORMAT = "lmgrid-neural-1"  # model.ckpt's layout, checked by model_io.load_run
# torch.utils.deterministic.fill_uninitialized_memory while training (see `run`).
FILL_UNINITIALIZED_MEMORY = False


def check_run(arch: str, impl: str, n_step: int, layers: int, regime: str) -> None:
    plugin = plugins.facts(arch)
    if arch not in NEURAL_ARCHS and plugin is None:
        raise LmgridError(f"arch: unknown neural architecture {arch!r} (one of: {', '.join(NEURAL_ARCHS)}; or a "
                          "plug-in: docs/models.md)")
    impls = IMPLS[arch] if plugin is None else (plugins.IMPL,)
    if impl not in impls:
        raise LmgridError(f"impl: {impl!r} is not an implementation of {arch} (one of: {', '.join(impls)})")
    if plugin is not None and regime not in plugin.regimes:
        raise LmgridError(f"regime: plug-in {arch} supports {', '.join(plugin.regimes)}, not {regime!r}")
    if regime not in REGIMES:
        raise LmgridError(f"regime: unknown regime {regime!r} (one of: {', '.join(REGIMES)})")
    if layers < 1:
        raise LmgridError(f"layers: {layers} is not allowed (must be >= 1)")
    if regime == "window" and n_step < 2:
        raise LmgridError(f"n_step: {n_step} is below 2, the least context a neural model can be given "
                          "in the window regime")
    if regime == "stream" and arch == "ffnn":
        raise LmgridError("regime: ffnn sees a fixed window of n_step-1 tokens; it has no stream regime")


def schedule_settings(hp: dict) -> dict:
    """The plateau schedule's settings (lmgrid.neural.schedule) from the training settings.  Under a budget schedule
    (train.budget_tokens > 0) the plateau rule neither decays nor stops: it only keeps the per-epoch record."""
    if hp.get("budget_tokens", 0) > 0:
        return {"lr_decay": hp["lr_decay"], "max_decays": 0, "patience": 10**9, "min_delta": hp["plateau_min_delta"],
                "min_lr": hp["min_lr"], "decay_from": 0, "max_epochs": hp["epochs"]}
    return {"lr_decay": hp["lr_decay"], "max_decays": hp["lr_decays"], "patience": hp["plateau_patience"],
            "min_delta": hp["plateau_min_delta"], "min_lr": hp["min_lr"],
            "decay_from": hp["lr_decay_from_epoch"], "max_epochs": hp["epochs"]}


def budget_settings(hp: dict, n_train: int) -> dict | None:
    """The budget schedule's settings (lmgrid.neural.schedule.BudgetSchedule), None without one (budget_tokens 0);
    a setting that cannot hold is one line naming its key."""
    budget, warmup = hp.get("budget_tokens", 0), hp.get("budget_warmup_tokens", 0)
    if budget <= 0:
        if warmup > 0:
            raise LmgridError(f"train.budget_warmup_tokens: {warmup} needs a budget schedule (train.budget_tokens > 0)")
        return None
    if warmup >= budget:
        raise LmgridError(f"train.budget_warmup_tokens: {warmup} must be below train.budget_tokens ({budget})")
    if hp["average_from_epoch"] > 0:
        raise LmgridError(f"train.average_from_epoch: {hp['average_from_epoch']} with train.budget_tokens is not "
                          "supported (a budget schedule keeps its final weights); set one of them to 0")
    if hp["min_lr"] > hp["lr"]:
        raise LmgridError(f"train.min_lr: {hp['min_lr']} is above train.lr ({hp['lr']}): the budget schedule "
                          "anneals from lr down to min_lr")
    if budget > hp["epochs"] * n_train:
        raise LmgridError(f"train.budget_tokens: {budget} is more than train.epochs x the train tokens per epoch "
                          f"({hp['epochs']} x {n_train} = {hp['epochs'] * n_train}); raise train.epochs")
    return {"budget": budget, "lr": hp["lr"], "min_lr": hp["min_lr"], "warmup": warmup}


def stream_chunk_positions(data: LMData, regime: str, bptt: int) -> int:
    """The stream regime's training-loss denominator (LMModule, chunk_positions): the positions of the first training
    chunk, every row of every process times min(bptt, row length), the most any chunk holds; 0 in the window regime."""
    return data.tensors["train"][1][:, :bptt].numel() if regime == "stream" else 0


def _fingerprint(spec: RunSpec, placement: dict) -> str:
    """What a checkpoint must match to be resumed: the run, its computing settings (spec.computing(): a setting at its
    neutral default, which computes what runs did before the setting existed, left out), its input files, and where
    and in which precision it trains (placement), so a checkpoint is never resumed on another device kind or
    precision.  The hashed JSON is what it has always been, so in-progress checkpoints keep resuming."""
    paths = {**spec.paths, "vocab": spec.vocab}
    ident = {"run": spec.cell, "hp": spec.computing(), "placement": placement}
    if spec.plugin:  # a plug-in's source is part of the run: an edited file never resumes the old one's checkpoint
        ident["plugin_sha256"] = plugins.file_sha256(spec.plugin["source"])
    h = hashlib.sha256(json.dumps(ident, sort_keys=True).encode())
    for name in sorted(paths):
        h.update(name.encode())
        h.update(Path(paths[name]).read_bytes())
    return h.hexdigest()


def _prepare_ckpt_dir(ckpt_dir: Path, fingerprint: str) -> Path | None:
    """The checkpoint to resume from, if the folder holds one of this very run; stale ones are removed."""
    stamp = ckpt_dir / "fingerprint.txt"
    if ckpt_dir.exists():
        if stamp.is_file() and stamp.read_text().strip() == fingerprint and (ckpt_dir / "last.ckpt").is_file():
            return ckpt_dir / "last.ckpt"
        if any(ckpt_dir.iterdir()):
            print(f"discarding {ckpt_dir}: its checkpoint belongs to another config or corpus", flush=True)
        shutil.rmtree(ckpt_dir)
    ckpt_dir.mkdir(parents=True)
    stamp.write_text(fingerprint + "\n")
    return None


def _resume_path(ckpt_dir: Path, fingerprint: str) -> Path | None:
    """What _prepare_ckpt_dir returns, without changing anything: for the DDP processes other than 0."""
    stamp, last = ckpt_dir / "fingerprint.txt", ckpt_dir / "last.ckpt"
    return last if stamp.is_file() and stamp.read_text().strip() == fingerprint and last.is_file() else None


def use_cuda(accelerator: str) -> bool:
    """Whether a run with this `train.accelerator` trains on a GPU: `auto` where one is visible; `gpu` and `cuda`
    without one are an error, not a silent CPU run (on SLURM: hours on a few cores until the time limit)."""
    if accelerator == "cpu":
        return False
    if torch.cuda.is_available():
        return True
    if accelerator in ("gpu", "cuda"):
        why = ("this torch is a CPU build" if torch.version.cuda is None and torch.version.hip is None else
               f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}" if "CUDA_VISIBLE_DEVICES" in os.environ
               else "torch.cuda.is_available() is False")
        raise LmgridError(f"train.accelerator: {accelerator!r} asks for a GPU, but none is visible ({why}); "
                          "use accelerator: cpu or auto, or run where a GPU is (docs/cluster.md)")
    return False


def _output_layer_name(model_config: dict) -> str:
    if model_config["output_layer"] == "adaptive":
        return f"adaptive softmax (clusters cut at {', '.join(map(str, model_config['cutoffs']))})"
    return "full softmax"


def _device_name(device: torch.device, devices: int = 1) -> str:
    times = f" x {devices}" if devices > 1 else ""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}{times}"
    return f"cpu ({torch.get_num_threads()} threads){times}"


def run(spec: RunSpec, threads: int = 0) -> dict:
    """Train one grid cell and write its run folder; returns metrics.json's content (process 0; {} elsewhere).

    The one way into training: `lmgrid train --spec FILE` reads a spec, and `lmgrid train --arch ...` builds one.
    Float32 is IEEE float32 throughout, TF32 off (precision.full_fp32); the caller's settings are restored."""
    with full_fp32():
        t0 = time.time()
        job = build(spec, threads)
        trainer, ckpt = fit(job, t0)
        if trainer.global_rank != 0:
            return {}  # process 0 evaluates and writes the run folder
        result = evaluate_run(job, ckpt)
        return write(job, result, t0)


@dataclasses.dataclass
class Job:
    """One run set up to train: what `build` prepares and `fit`, `evaluate_run` and `write` use."""
    spec: RunSpec
    hp: dict
    cuda: bool
    precision: str
    precision_reason: str
    devices: int
    main: bool
    vocab: Vocab
    data: LMData
    model_config: dict
    ckpt_dir: Path
    resume: Path | None
    module: LMModule
    params: int
    n_train: int
    epoch_log: EpochLog | None = None
    usage: AttemptUsage | None = None  # this and the earlier attempts' CPU and wall seconds (callbacks.AttemptUsage)
    compute: dict | None = None  # train.budget_flops > 0: {budget_flops, train_flops_per_token, budget_tokens}


def _placement(spec: RunSpec) -> tuple[bool, str, str]:
    """(on a GPU, precision, why): the workflow's plan (spec.placement) overrides train.accelerator with its device
    kind, and its precision, unless `auto`, must be what the run resolves here."""
    planned = spec.placement or {"device": None, "precision": "auto"}
    cuda = use_cuda({"cuda": "gpu", "cpu": "cpu"}.get(planned["device"], spec.hparams["accelerator"]))
    precision, reason = resolve_precision(spec.hparams["precision"], cuda)
    if planned["precision"] not in ("auto", precision):
        raise LmgridError(f"precision: the workflow planned {planned['precision']} for this run, but here it "
                          f"resolves to {precision} ({reason}); run the workflow again where the job runs")
    return cuda, precision, reason


def build(spec: RunSpec, threads: int = 0) -> Job:
    """Data, model, placement and precision, and the checkpoint to resume from (its fingerprint checked)."""
    if spec.plugin:  # a plug-in: its class imported again from the reference the config resolved
        from lmgrid.models.plugin import ensure

        ensure(spec.plugin)
    check_run(spec.arch, spec.impl, spec.n_step, spec.layers, spec.regime)
    hp = spec.hparams
    cuda, precision, precision_reason = _placement(spec)
    devices, main = hp["devices"], rank_zero_only.rank == 0  # the rank Lightning's launcher gave this process
    if threads > 0:
        torch.set_num_threads(max(1, threads // devices))  # the job's CPUs, shared by its processes
    vocab = Vocab.load(spec.vocab)
    data = LMData(dict(spec.paths), vocab, spec.regime, n_step=max(spec.n_step, 2), batch_size=hp["batch_size"],
                  stream_batch_size=hp["stream_batch_size"], eval_batch_size=hp["eval_batch_size"],
                  stream_eval_batch_size=hp["stream_eval_batch_size"], bptt=hp["bptt"],
                  max_train_tokens=hp["max_train_tokens"], seed=spec.seed)
    data.setup()
    model_config = spec.model_config(vocab)
    ckpt_dir = Path(spec.ckpt_dir)
    fingerprint = _fingerprint(spec, {"device": "cuda" if cuda else "cpu", "precision": precision})
    resume = _prepare_ckpt_dir(ckpt_dir, fingerprint) if main else _resume_path(ckpt_dir, fingerprint)
    if cuda and devices > torch.cuda.device_count():
        raise LmgridError(f"train.devices: {devices} GPUs asked for, {torch.cuda.device_count()} visible "
                          "(on SLURM the training job's `gpu` resource must equal train.devices; docs/cluster.md)")
    n_train = data.counted_tokens("train")
    # train.budget_flops > 0: the token budget this model's FLOPs per training token give (lmgrid.neural.compute_budget)
    compute = flops_budget(hp, model_config, spec.regime, [vocab.counts.get(t, 0) for t in vocab.tokens])
    budget = budget_settings({**hp, "budget_tokens": compute["budget_tokens"]} if compute else hp, n_train)
    pl.seed_everything(spec.seed, workers=True, verbose=False)
    module = LMModule(model_config, spec.regime, optimizer=hp["optimizer"], lr=hp["lr"], momentum=hp["momentum"],
                      weight_decay=hp["weight_decay"], schedule=schedule_settings(hp), seed=spec.seed,
                      finite_check_every=hp["log_every"] if hp["log_every"] > 0 else 100,
                      chunk_positions=stream_chunk_positions(data, spec.regime, hp["bptt"]),
                      **({"budget": budget} if budget else {}))
    job = Job(spec, hp, cuda, precision, precision_reason, devices, main, vocab, data, model_config, ckpt_dir,
              resume, module, params=sum(p.numel() for p in module.model.parameters()),
              n_train=n_train, compute=compute)
    if main:
        start = f"resuming from {resume}" if resume else "from scratch"
        print(f"{spec.key.name}: {job.params} parameters, {job.n_train} train tokens per epoch, regime "
              f"{spec.regime}, on {'cuda' if cuda else 'cpu'}{f' x {devices} (DDP)' if devices > 1 else ''}, "
              f"{precision} ({precision_reason}), {_output_layer_name(model_config)}, {start}", flush=True)
    return job


def _trainer(job: Job, callbacks: list) -> pl.Trainer:
    hp, live = job.hp, job.spec.live_mlflow
    strategy = "auto" if job.devices == 1 else DDPStrategy(
        process_group_backend="nccl" if job.cuda else "gloo", cluster_environment=LightningEnvironment())
    return pl.Trainer(
        max_epochs=hp["epochs"], accelerator="gpu" if job.cuda else "cpu", devices=job.devices, strategy=strategy,
        precision=job.precision,
        deterministic=(True if not job.cuda else "warn") if hp["deterministic"] else False,
        gradient_clip_val=hp["clip"] or None, gradient_clip_algorithm="norm", callbacks=callbacks,
        # log.csv stays the source of truth; live MLflow logging is an optional mirror (mlflow.live), always
        # with an explicit tracking URI (MLFlowLogger would otherwise use the retired ./mlruns store).
        logger=MLFlowLogger(**live) if live and job.main else False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        # A fresh, epoch-seeded shuffle each epoch (see data.BatchIndices), split across DDP processes by
        # data.shard, not by a DistributedSampler (which pads by repeating examples).
        use_distributed_sampler=False, reload_dataloaders_every_n_epochs=1,
        default_root_dir=str(job.ckpt_dir))


def fit(job: Job, started_at: float | None = None) -> tuple[pl.Trainer, ModelCheckpoint]:
    """Train (resuming where build found a checkpoint), with the process's determinism state restored after.
    `started_at`: when this attempt began (run()'s start, time.time()), for the wall seconds it carries on."""
    job.epoch_log = EpochLog(job.ckpt_dir / "log.csv", job.n_train)
    job.usage = AttemptUsage(time.time() if started_at is None else started_at)
    ckpt = ModelCheckpoint(dirpath=job.ckpt_dir, filename="best", monitor="valid_loss", mode="min", save_top_k=1,
                           save_last=True, enable_version_counter=False, auto_insert_metric_name=False)
    progress = Progress(job.hp["log_every"], job.ckpt_dir / "progress.json" if job.main else None)  # lmgrid status
    callbacks = [job.epoch_log, progress, job.usage, ckpt]
    if job.hp["average_from_epoch"] > 0:  # validate and keep the mean of the weights from that epoch on
        callbacks.insert(0, WeightAverage(job.hp["average_from_epoch"]))
    # Lightning's start-up banner and hints would bury the progress lines of the job log; the device is in
    # metrics.json and in the final line.
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # sync_dist: the logged valid_loss is summed over the processes by the module itself.
        warnings.filterwarnings("ignore", message=".*(does not have many workers|Checkpoint directory|srun|LeafSpec"
                                                  "|sync_dist).*")
        trainer = _trainer(job, callbacks)
        was_deterministic = torch.are_deterministic_algorithms_enabled()
        was_filling = torch.utils.deterministic.fill_uninitialized_memory
        # Deterministic mode also fills every new tensor with NaN, by default, so that a read of uninitialised
        # memory shows; no op here reads one, so the results are the same bits without it (tested), and the fill is
        # pure cost: py-spy put 4.7% of a PTB GRU job's samples in it (docs/benchmarks.md). PyTorch's docs advise
        # this switch for programs that read no uninitialised memory.
        torch.utils.deterministic.fill_uninitialized_memory = FILL_UNINITIALIZED_MEMORY
        try:
            trainer.fit(job.module, datamodule=job.data, ckpt_path=str(job.resume) if job.resume else None)
        finally:  # Lightning switches deterministic algorithms on process-wide; leave the caller as it was
            torch.use_deterministic_algorithms(was_deterministic)
            torch.utils.deterministic.fill_uninitialized_memory = was_filling
    return trainer, ckpt


@dataclasses.dataclass
class Evaluation:
    """What evaluate_run scored: the split scores, the best epoch's log row, the gate statistics, scoring speed."""
    model: torch.nn.Module
    device: torch.device
    scores: dict
    best_row: dict | None
    gate_stats: object
    eval_s: float
    eval_tokens: int


def evaluate_run(job: Job, ckpt: ModelCheckpoint) -> Evaluation:
    """The epoch with the best valid PPL (the last one when PPL keeps falling): its valid score from the epoch log,
    test scored here (for lstm and gru in the forward pass that gathers the gate statistics).  Under a budget
    schedule the designed end is the final weights: the last state (last.ckpt, the log's last row) is evaluated."""
    spec, data = job.spec, job.data
    budget = job.module.budget is not None
    best = str(job.ckpt_dir / "last.ckpt") if budget else (ckpt.best_model_path or str(job.ckpt_dir / "last.ckpt"))
    job.module.load_state_dict(torch.load(best, map_location="cpu", weights_only=False)["state_dict"])
    device = torch.device("cuda" if job.cuda else "cpu")
    model = job.module.model.to(device)
    rows = job.epoch_log.rows
    # Valid was scored after every epoch with the batches, precision and weights (best.ckpt is that epoch's) that
    # scoring it again would use, so the best epoch's sums are its valid score; only test is scored here.
    best_row = (rows[-1] if budget else min(rows, key=lambda r: r["valid_loss"])) if rows else None
    # The window regime's padding-free rows need each test target's words before it, read in corpus order.
    gathers = gathers_gates(spec)
    preceding = gates_mod.preceding_words(data.sentences["test"]) if gathers and spec.regime == "window" else None
    gate_stats = gates_mod.GateStats(spec.regime, job.vocab.index[BOS], preceding) if gathers else None
    ev = Evaluation(model, device, {}, best_row, gate_stats, 0.0, 0)
    for split in ("valid", "test"):
        if split == "valid" and best_row is not None and "valid_tokens" in best_row:
            n = int(best_row["valid_tokens"])
            nll = best_row["valid_loss"] * n
        else:
            t_eval = time.time()
            with autocast(job.precision, device.type):
                nll, n = evaluate(model, data.dataloader(split, device=device), spec.regime, device,
                                  gate_stats if split == "test" else None)
            ev.eval_s, ev.eval_tokens = ev.eval_s + time.time() - t_eval, ev.eval_tokens + n
        if n != data.counted_tokens(split):
            raise AssertionError(f"{split}: evaluated {n} targets, expected {data.counted_tokens(split)}")
        try:
            ppl = perplexity(nll, n)
        except ValueError as e:
            raise LmgridError(f"{split} perplexity of {spec.key.name}: {e}; lower the learning rate") from None
        ev.scores[split] = SplitScore(ppl=ppl, nll_nats=nll, tokens=n, oov_tokens=data.oov_tokens(split))
    return ev


def gathers_gates(spec: RunSpec) -> bool:
    """Whether the run gathers gate statistics and writes gates.csv: a gated architecture with train.gate_stats on
    (the default, which the workflow's gated runs need).  Off, test is scored by the model's plain forward,
    without the per-layer passes, gate recomputation and float64 sums that the statistics take."""
    return is_gated(spec.arch) and spec.hparams["gate_stats"]


def _record_extra(job: Job, ev: Evaluation) -> dict:
    """The neural fields of the run record (lmgrid.run.record), in the order the file has always had them."""
    rows, module = job.epoch_log.rows, job.module
    return {
        "train_tokens_per_s": job.epoch_log.tokens_per_s,
        # Scoring test (and valid when no epoch scored it; forward only, eval batches; for lstm and gru with the
        # gate statistics gathered in the same pass): its speed, and the share of scored positions that are padding
        # (the stream regime's row tails; windows have none).
        "eval_tokens_per_s": ev.eval_tokens / max(ev.eval_s, 1e-9),
        "eval_padding_fraction": job.data.padding_fraction(("valid", "test")),
        "train_tokens": job.n_train,
        "epochs": len(rows),
        "best_epoch": ev.best_row["epoch"] if ev.best_row else 0,
        # Which rule ended the run (lmgrid.neural.schedule.STOP_REASONS: plateau = converged by the rule, budget =
        # the epoch cap came first), the rate each epoch trained with and the valid PPL after each epoch.
        "stopped_because": stop_reason(module),
        "lr_decays": module.schedule.decays,
        "lr_history": [r["lr"] for r in rows],
        "valid_ppl_history": [r["valid_ppl"] for r in rows],
        "wall_s": 0.0,
        "device": _device_name(ev.device, job.devices),
        "precision": job.precision,
        "precision_reason": job.precision_reason,
        # The float32 arithmetic the run had (precision.full_fp32): "ieee", never "tf32".
        "fp32_precision": fp32_settings(ev.device.type),
        "torch_version": torch.__version__,
        "lightning_version": pl.__version__,
        "hparams": job.hp,
        # A budget schedule's run only (train.budget_tokens > 0): the training tokens it took, >= the budget
        **({"budget_tokens_trained": module.budget.seen} if module.budget is not None else {}),
        # A FLOP budget's run only (train.budget_flops > 0): the budget, the count per training token, the tokens
        **(job.compute or {}),
    }


def stop_reason(module) -> str:
    """metrics.json's stopped_because (lmgrid.neural.schedule.STOP_REASONS)."""
    if module.budget is not None and module.budget.stopped_because:
        return module.budget.stopped_because
    return module.schedule.stopped_because or "budget"


def write(job: Job, ev: Evaluation, t0: float) -> dict:
    """The run folder: gates.csv (lstm, gru), model.ckpt, log.csv and, last, metrics.json (RunRecord); then the
    checkpoint folder goes."""
    spec, run_dir = job.spec, Path(job.spec.run_dir)
    extra = _record_extra(job, ev)
    if ev.gate_stats is not None:
        gates_mod.write(run_dir / "gates.csv", ev.gate_stats.rows())
    save_model(run_dir / "model.ckpt", ev.model, job.model_config, job.vocab, spec.cell, job.hp, job.precision,
               plugin=spec.plugin)
    job.epoch_log.write(run_dir / "log.csv")
    now = time.time()
    # When this attempt's work ran (Unix seconds), for the MLflow run's start and end (lmgrid mlflow-sync).
    extra["start_unix_s"], extra["end_unix_s"] = round(t0, 3), round(now, 3)
    # The run's training time and peak RSS (wall_s, cpu_s, max_rss_mib) over its attempts: each process's own,
    # forked from the warm server or not (the job's Snakemake benchmark measures only the thin client in the first
    # case, lmgrid.common.resources), a resumed run's earlier attempts up to the checkpoint it resumed from
    # (callbacks.AttemptUsage); `attempts`: how many processes trained it.
    extra.update(job.usage.totals(now))
    record = RunRecord(name=spec.key.name, **spec.cell, **ev.scores, params=job.params, extra=extra)
    metrics = record.write(run_dir / RECORD_FILE)
    print(f"{spec.key.name}: valid PPL {metrics['valid']['ppl']:.3f}, test PPL {metrics['test']['ppl']:.3f} "
          f"({metrics['test']['tokens']} tokens), {metrics['epochs']} epochs ({metrics['stopped_because']}), "
          f"{metrics['train_tokens_per_s']:.0f} train tokens/s, {metrics['wall_s']:.1f} s", flush=True)
    shutil.rmtree(job.ckpt_dir, ignore_errors=True)  # finished: nothing left to resume
    with contextlib.suppress(OSError):
        os.removedirs(job.ckpt_dir.parent)  # and the folders that held only it
    return metrics


def save_model(path: Path, model, model_config: dict, vocab: Vocab, run_info: dict, hp: dict,
               precision: str = "32-true", plugin: dict | None = None) -> None:
    """What `lmgrid score/generate` need: weights, how to rebuild the model, the vocabulary and the regime, and the
    precision the run was scored in (so that scoring the model again gives its test_ppl)."""
    blob = {"format": CKPT_FORMAT, "model_config": model_config, "run": run_info, "hparams": hp, "precision": precision,
            "vocab": {"tokens": vocab.tokens, "counts": [vocab.counts.get(t, 0) for t in vocab.tokens]},
            "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
    if plugin:  # a plug-in's class, to import again when the model is loaded (lmgrid.neural.model_io.load_run)
        blob["plugin"] = dict(plugin)
    with atomic_write(path, "wb") as fh:
        torch.save(blob, fh)

