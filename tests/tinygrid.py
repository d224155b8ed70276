"""The tiny synthetic grid the workflow tests share, and the helpers that run Snakemake on it.

One finished grid (conftest.py's session fixture `tiny_pipeline`) holds what the workflow tests read: the n-grams
(addk, mkn at n 2 and 3), three neural cells in the window regime (ffnn, rnn, gru at n 3) and one in the stream
regime (rnn), two combinations that share the n-gram and differ in their neural component, one with the stream
RNN's test-time cache, the embeddings, the MLflow mirror and the HTML report.  Tests that only read use it as it is;
tests that change files work on a copy (`copy_grid`); dry runs with other settings pass them with `--config set=`,
which changes no file.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

TINY = {
    "corpus": {"name": "tiny", "kind": "synth",
               "synth": {"seed": 2, "sentences": {"train": 400, "valid": 60, "test": 60},
                         "grammar": {"nouns": 30, "adjectives": 10, "intransitive_verbs": 10,
                                     "transitive_verbs": 10, "adverbs": 5}}},
    "vocab": {"min_count": 1},
    "studies": {"context": {"arch": ["mkn"], "n_step": [2, 3]}},
}

GRID = {
    **TINY,
    "studies": {"ctx": {"arch": ["addk", "mkn"], "n_step": [2, 3]},
                "neural": {"arch": ["ffnn", "rnn", "gru"], "n_step": [3]},
                "stream": {"arch": ["rnn"], "n_step": [3], "regime": ["stream"]}},
    "train": {"epochs": 1, "emb_dim": 8, "hidden_dim": 8, "batch_size": 64, "max_train_tokens": 1500,
              "log_every": 0},
    # Two combinations that share the n-gram and differ in their neural component (issue 26); one with a cache.
    "combine": {"kn_rnn": {"components": [{"arch": "mkn", "n_step": 3}, {"arch": "rnn", "regime": "window"},
                                          {"arch": "rnn", "regime": "stream", "mode": "cache"}]},
                "kn_gru": {"components": [{"arch": "mkn", "n_step": 3}, {"arch": "gru"}]}},
    "adapt": {"cache": {"window": [20], "theta": [1.0], "lam": [0.1]}},
}
COMBINED = "results/tiny/combine/{}/result.json"


def snakemake(workdir: Path, repo: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name("snakemake")), "-s", str(repo / "Snakefile"), "-d", str(workdir),
           "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def planned_jobs(result: subprocess.CompletedProcess) -> dict[str, int]:
    """Rule -> job count from a dry run's 'Job stats' table (empty when nothing is to be done)."""
    out = result.stdout + result.stderr
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m.group(1) != "total"}


def write_config(workdir: Path, cfg: dict) -> None:
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def build(workdir: Path, repo: Path, cfg: dict) -> subprocess.CompletedProcess:
    write_config(workdir, cfg)
    r = snakemake(workdir, repo)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    (workdir / "terminal.txt").write_text(r.stdout + r.stderr)  # what the run showed in the terminal
    return r


def copy_grid(grid: Path, to: Path) -> Path:
    """A copy of a finished grid that a test may change: Snakemake's records come along, so nothing reruns."""
    shutil.copytree(grid, to, symlinks=True)
    return to
