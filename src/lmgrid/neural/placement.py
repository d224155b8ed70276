"""Where a training job will run and in which precision, decided while the workflow builds its DAG.

The answer enters the train rule's params (`placement=cuda bf16-mixed`), so a cell trained on a CPU does not count
as done on a GPU, nor one trained in bf16 as done in fp32, and the job gets it as `lmgrid train --placement`: it
trains on that device kind and checks the precision (lmgrid.neural.train).

Kept free of torch imports (the DAG is built in seconds): GPUs are counted from the device files of the NVIDIA
driver, and the one question only torch can answer, whether the GPU computes bf16 natively, is asked in a child
process, and only when a GPU is visible and `precision: auto` needs it.

* A local run: `auto` trains on a GPU when torch sees one here, `gpu`/`cuda` always (a missing GPU is then the
  job's one-line error), `cpu` never; `auto` precision resolves as the job would resolve it on this machine.
* A cluster run (a remote executor, or the job's own Snakemake on a compute node): `auto` and `gpu`/`cuda` ask for
  GPUs (the jobs' `gpu` resource); the login node cannot see the compute node's GPU or CPU, so an `auto` precision
  stays `auto` and the job resolves it where it runs (metrics.json says what it chose and why).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

KINDS = ("cpu", "cuda")


def visible_gpus(env: dict | None = None, dev: str | Path = "/dev") -> int:
    """NVIDIA GPUs a process started here could use: the /dev/nvidia<N> device files, limited by
    CUDA_VISIBLE_DEVICES (unset: all; empty or starting with -1: none; else its entries up to the first invalid)."""
    env = os.environ if env is None else env
    try:
        present = sum(1 for p in Path(dev).iterdir() if re.fullmatch(r"nvidia\d+", p.name))
    except OSError:
        return 0
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    entries = []
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):  # CUDA ignores this entry and every one after it
            break
        entries.append(entry)
    return min(len(entries), present)


PROBE = ("import json, torch; from lmgrid.neural.precision import gpu_bf16; "
         "print(json.dumps(gpu_bf16() if torch.cuda.is_available() else None))")


def probe_gpu_bf16(timeout_s: float = 120.0) -> tuple[bool, str] | None:
    """precision.gpu_bf16() asked in a child process (torch and a CUDA context stay out of Snakemake's process):
    (native bf16, a label naming the GPU), or None when torch sees no GPU or the probe fails."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=timeout_s)
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    return (bool(answer[0]), str(answer[1])) if answer else None


def plan(accelerator: str, precision: str, *, cluster: bool, gpus: int,
         gpu_bf16: Callable[[], tuple[bool, str] | None] = probe_gpu_bf16,
         flags: set[str] | None = None) -> tuple[str, str]:
    """(device kind, precision) of a training job: ("cuda", "bf16-mixed"), or ("cuda", "auto") where the
    precision can only be resolved where the job runs.  gpus: visible_gpus() here (unused on a cluster);
    gpu_bf16: asked only on a local run with a GPU visible, and its None (torch sees no GPU: a CPU build of torch)
    makes `auto` train on the CPU."""
    from lmgrid.neural.precision import resolve_precision

    gpu = None
    if accelerator == "cpu":
        kind = "cpu"
    elif cluster or accelerator in ("gpu", "cuda"):
        kind = "cuda"
    else:
        gpu = gpu_bf16() if gpus > 0 else None
        kind = "cuda" if gpu else "cpu"
    if precision != "auto" or cluster:
        return kind, precision
    if kind == "cpu":
        return kind, resolve_precision("auto", cuda=False, flags=flags)[0]
    gpu = gpu or (gpu_bf16() if gpus > 0 else None)
    return kind, (resolve_precision("auto", cuda=True, gpu=gpu)[0] if gpu else "auto")


def asks_for_gpus(kind: str, devices: int) -> int:
    """The `gpu` resource of a training job: its DDP processes when it trains on GPUs, else none."""
    return devices if kind == "cuda" else 0
