"""Multi-process training (train.devices > 1): Lightning DDP on the CPU with 2 processes on gloo.

The global batch is the same as in one process (each process takes its share, data.shard) and the loss is scaled
so that DDP's averaged gradient is the global batch's gradient (module.LMModule), so the two runs differ only by
the order of floating-point sums (partial sums per process, then all-reduce): the losses agree to ~1e-7 relative,
and the test allows 1e-5.  The DDP run goes through `python -m lmgrid train`, because Lightning starts the second
process by re-running the command line (here, that is what a Snakemake job does).
"""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml

from lmgrid.neural.data import IGNORE, shard
from lmgrid.run.key import normalise

from test_neural_support import TINY, killed_at_epoch, tiny_corpus
from test_neural_train import train

REL_TOL = 1e-5
HP = dict(epochs=3, lr_decay=0.5, plateau_patience=0)


def test_shards_cover_each_batch_once():
    x, y = torch.arange(14).view(7, 2), torch.arange(7)
    parts = [shard(x, y, rank, 3) for rank in range(3)]
    assert torch.equal(torch.cat([p[1] for p in parts]), y)
    assert torch.equal(torch.cat([p[0] for p in parts]), x)
    assert shard(x, y, 0, 1)[1] is y
    # Fewer rows than processes: the process with no share gets one row that scores and counts nothing.
    px, py = shard(x[:1], y[:1], 1, 2)
    assert torch.equal(px, x[:1]) and py.tolist() == [IGNORE]


def ddp_available() -> str | None:
    if not dist.is_available() or not dist.is_gloo_available():
        return "torch.distributed with the gloo backend is not available on this platform"
    return None


def ddp_command(corpus, root: Path, regime: str, devices: int, *paths: Path, **hp) -> tuple[list[str], dict, Path]:
    """(the `lmgrid train` command of an lstm n3 run on `devices` processes, its environment, its run folder);
    `paths` go first on PYTHONPATH (a test's sitecustomize.py)."""
    key = normalise("lstm", "torch", 3, 1, regime, 1)
    run_dir = root / key.run_dir("c")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(Path(__file__).parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    p = corpus["paths"]
    cmd = [sys.executable, "-m", "lmgrid", "train", "--arch", "lstm", "--n-step", "3", "--regime", regime,
           "--train", p["train"], "--valid", p["valid"], "--test", p["test"], "--vocab", corpus["vocab_path"],
           "--run-dir", str(run_dir), "--ckpt-dir", str(root / "ckpt" / key.run_dir("c")), "--threads", "1",
           "--hparams", json.dumps({**TINY, **hp, "devices": devices})]
    return cmd, env, run_dir


def train_ddp(corpus, root: Path, regime: str, devices: int = 2, **hp) -> tuple[dict, Path, str]:
    cmd, env, run_dir = ddp_command(corpus, root, regime, devices, **hp)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    # Written once: process 1 neither prints the result nor writes files.
    assert done.stdout.count("valid PPL") == 1, done.stdout
    assert "x 2 (DDP)" in done.stdout
    return json.loads((run_dir / "metrics.json").read_text()), run_dir, done.stdout


def log_rows(run_dir: Path) -> list[dict]:
    return list(csv.DictReader((run_dir / "log.csv").open()))


def assert_same_training(one: tuple, two: tuple) -> float:
    """The largest relative difference of the per-epoch train/valid losses and final NLLs; all must be < REL_TOL."""
    (m1, d1), (m2, d2) = one[:2], two[:2]
    rows1, rows2 = log_rows(d1), log_rows(d2)
    assert [(r["epoch"], r["step"], r["lr"]) for r in rows1] == [(r["epoch"], r["step"], r["lr"]) for r in rows2]
    pairs = [(float(a[k]), float(b[k])) for a, b in zip(rows1, rows2) for k in ("train_loss", "valid_loss")]
    for split in ("valid", "test"):
        assert m1[split]["tokens"] == m2[split]["tokens"]  # every counted token, once
        pairs.append((m1[split]["nll_nats"], m2[split]["nll_nats"]))
    worst = max(abs(a - b) / abs(a) for a, b in pairs)
    assert worst < REL_TOL, (rows1, rows2)
    assert m2["hparams"]["devices"] == 2 and m2["device"].endswith("x 2")
    return worst


@pytest.mark.slow
@pytest.mark.parametrize("regime,extra", [("window", {}), ("stream", {}), ("stream", {"average_from_epoch": 2})],
                         ids=["window", "stream", "stream-averaged"])
def test_two_gloo_processes_train_like_one(tmp_path, regime, extra):
    """Two gloo processes train and validate like one (with weight averaging too: each process keeps the mean).
    Kills: a rank that samples other batches, skips the all-reduce, or leaves the averaging out (its losses then
    differ from one process's).  The negative control: the comparison fails against one process trained
    otherwise, on other batches (seed 2), or without the averaging in the averaged case."""
    if (reason := ddp_available()) is not None:
        pytest.skip(reason)
    corpus = tiny_corpus(tmp_path)
    one = train(corpus, tmp_path / "one", regime=regime, **HP, **extra)
    two = train_ddp(corpus, tmp_path / "two", regime, **HP, **extra)
    worst = assert_same_training(one, two)
    print(f"{regime}: largest relative difference 1 vs 2 processes: {worst:.2e}")
    other = (train(corpus, tmp_path / "other", regime=regime, **HP) if extra
             else train(corpus, tmp_path / "other", regime=regime, seed=2, **HP))
    with pytest.raises(AssertionError):
        assert_same_training(other, two)
    assert sorted(p.name for p in two[1].iterdir()) == ["gates.csv", "log.csv", "metrics.json", "model.ckpt"]
    assert not (tmp_path / "two" / "ckpt").exists()  # process 0 cleaned up; process 1 left nothing behind


@pytest.mark.slow
def test_ddp_run_resumes_a_checkpoint(tmp_path):
    """A run killed after epoch 2 (one process) resumes on 2 processes and ends as the uninterrupted run."""
    if (reason := ddp_available()) is not None:
        pytest.skip(reason)
    corpus = tiny_corpus(tmp_path)
    straight = train(corpus, tmp_path / "a", **HP)
    with killed_at_epoch(2):
        train(corpus, tmp_path / "b", **HP)
    assert (tmp_path / "b" / "ckpt" / normalise("lstm", "torch", 3, 1, "window", 1).run_dir("c") / "last.ckpt").is_file()
    resumed = train_ddp(corpus, tmp_path / "b", "window", **HP)
    assert "resuming from" in resumed[2] and len(log_rows(resumed[1])) == 3
    print(f"resumed: largest relative difference: {assert_same_training(straight, resumed):.2e}")


@pytest.mark.full
@pytest.mark.skipif(importlib.util.find_spec("snakemake") is None, reason="snakemake is not installed")
def test_training_jobs_ask_for_devices_gpus_and_threads(repo, tmp_path):
    """train.devices: 2 on GPUs: each training job asks for gpu=2 and at least 2 threads; n-gram jobs for none."""
    shutil.copy(repo / "Snakefile", tmp_path)
    shutil.copytree(repo / "workflow", tmp_path / "workflow")
    config = yaml.safe_load((repo / "config.yaml").read_text())
    config["studies"] = {"s": {"arch": ["kn", "ffnn", "lstm"], "n_step": [3]}}
    config["train"].update(devices=2, accelerator="gpu", threads=1)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(repo / "src"), "LMGRID_VERBOSE": "1"}  # job blocks, not messages
    out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "4"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:] + out.stdout[-2000:]
    jobs = {}
    for block in out.stdout.split("\nrule ")[1:]:
        fields = dict(line.strip().split(": ", 1) for line in block.splitlines()[1:] if ": " in line)
        jobs[block.split(":", 1)[0]] = fields
    for rule in ("train", "train_gated"):
        assert "gpu=2" in jobs[rule]["resources"] and jobs[rule]["threads"] == "2", jobs[rule]
    assert "gpu=2" not in jobs["ngram"]["resources"] and jobs["ngram"].get("threads", "1") == "1", jobs["ngram"]


NAN_ON_RANK_1 = '''
# Test-only: on DDP process 1, the third training batch's loss becomes NaN (rank 0 trains normally).
import os
if os.environ.get("LOCAL_RANK") == "1":
    import lmgrid.neural.module as m
    _real, _calls = m.batch_nll, [0]

    def batch_nll(model, x, y, regime, state=None, gate_stats=None, token_nll=None):
        nll, n, state = _real(model, x, y, regime, state, gate_stats, token_nll)
        if model.training:
            _calls[0] += 1
            if _calls[0] == 3:
                nll = nll * float("nan")
        return nll, n, state

    m.batch_nll = batch_nll
'''


@pytest.mark.slow
def test_nan_loss_on_one_process_stops_both_with_one_line(tmp_path):
    """A NaN on process 1 only: both processes stop at the check (every step on the CPU) with the usual one-line
    error, well before any collective would time out (gloo's default is 30 minutes)."""
    if (reason := ddp_available()) is not None:
        pytest.skip(reason)
    corpus = tiny_corpus(tmp_path)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(NAN_ON_RANK_1)
    key = normalise("lstm", "torch", 3, 1, "window", 1)
    p = corpus["paths"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(inject), str(Path(__file__).parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "lmgrid", "train", "--arch", "lstm", "--n-step", "3", "--regime", "window",
           "--train", p["train"], "--valid", p["valid"], "--test", p["test"], "--vocab", corpus["vocab_path"],
           "--run-dir", str(tmp_path / key.run_dir("c")), "--ckpt-dir", str(tmp_path / "ckpt"), "--threads", "1",
           "--hparams", json.dumps({**TINY, "epochs": 2, "log_every": 2, "devices": 2})]
    # The other process must not hang in a collective: a hang runs into the timeout and fails the test.  The time
    # taken is not asserted (it moves with the machine's load).
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    # Both processes print the line; written at the same instant, the two can share a line of stderr.
    expected = ("lmgrid: error: training diverged at epoch 1, step 3 on process 1 of 2: batch loss nan nats is "
                "non-finite; lower the learning rate (lr=0.003)")
    assert done.stderr.count("lmgrid: error:") == done.stderr.count(expected) >= 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / key.run_dir("c") / "metrics.json").exists()


# Test-only: the divergence check as it was before issue 30, fed the scaled DDP loss (this process's NLL sum times
# the number of processes over the global batch's count) instead of this process's own mean NLL.
SCALED_LOSS_CHECKED = '''
import lmgrid.neural.module as m
import torch

_real = m.LMModule._add_train_step


def _add_train_step(self, nll, n, loss):
    n_global = n.clone()
    torch.distributed.all_reduce(n_global)
    return _real(self, nll, n, nll * self.trainer.world_size / n_global)


m.LMModule._add_train_step = _add_train_step
'''


@pytest.mark.slow
def test_a_last_batch_smaller_than_the_processes_is_no_divergence(tmp_path):
    """4 gloo processes, a last global batch of one example: process 0 holds it, the others none.  Each process's
    loss for DDP's gradient is its NLL times 4 over the global count, 4x that example's NLL (about 4 ln V near the
    start), while the divergence bound is 3 ln V; the check must read the process's own mean NLL (about ln V).
    Kills: the check fed the scaled DDP loss (the negative control: SCALED_LOSS_CHECKED injected into every process
    stops the same run at that last step with "training diverged ... on process 0 of 4")."""
    if (reason := ddp_available()) is not None:
        pytest.skip(reason)
    corpus = tiny_corpus(tmp_path)
    # Windows: one example per train token, so 129 tokens at batch_size 64 are batches of 64, 64 and 1.
    hp = dict(epochs=1, batch_size=64, max_train_tokens=129)
    cmd, env, run_dir = ddp_command(corpus, tmp_path / "fixed", "window", 4, **hp)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["train_tokens"] == 129 and metrics["device"].endswith("x 4")
    assert [r["step"] for r in log_rows(run_dir)] == ["3"]  # all three steps trained, the short one included

    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SCALED_LOSS_CHECKED)
    cmd, env, run_dir = ddp_command(corpus, tmp_path / "mutant", "window", 4, inject, **hp)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0, "the negative control trained through: the test cannot see the scaled check"
    assert "training diverged at epoch 1, step 3 on process 0 of 4" in done.stderr, done.stderr[-3000:]
    assert "above the divergence bound" in done.stderr
    assert not (run_dir / "metrics.json").exists()
