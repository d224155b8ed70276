"""Read run folders (docs/contracts.md) into pandas frames, one row per run, epoch or gate row."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import read_json
from lmgrid.run.key import RunKey
from lmgrid.run.gate_facts import is_gated
from lmgrid.run.record import EVAL_SPLITS, RECORD_FILE, SCORE_FIELDS, RunRecord
from lmgrid.analysis.layout import model_label

KEY_COLUMNS = ["model", "arch", "impl", "n_step", "layers", "regime", "seed"]
LOG_COLUMNS = ["epoch", "step", "train_loss", "train_ppl", "valid_loss", "valid_ppl", "lr", "wall_s"]
GATE_COLUMNS = ["scope", "layer", "gate", "index", "mean", "std", "frac_left_saturated", "frac_right_saturated", "count"]


def key_fields(key: RunKey) -> dict:
    return {"model": model_label(key), **asdict(key)}


def run_path(key: RunKey, corpus: str, root: str | Path = ".") -> Path:
    return Path(root) / key.run_dir(corpus)


def _read_csv(path: Path, columns: list[str]) -> pd.DataFrame:
    if not path.is_file():
        raise LmgridError(f"{path}: file not found (every run of this architecture writes it, see docs/contracts.md)")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise LmgridError(f"{path}: not a valid CSV file ({str(e).splitlines()[0]})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise LmgridError(f"{path}: missing column {missing[0]!r} (expected {', '.join(columns)})")
    return df


def read_log(path: Path) -> pd.DataFrame:
    return _read_csv(path, LOG_COLUMNS)


def read_gates(path: Path) -> pd.DataFrame:
    """A run's gates.csv; a file written before the padding-free rows existed has no `min_context` column: every
    row it holds is over every target (min_context 0), and it has no padfree rows (docs/contracts.md)."""
    df = _read_csv(path, GATE_COLUMNS)
    if "min_context" not in df.columns:
        df["min_context"] = 0
    df["gate"] = df["gate"].astype(str)
    df["scope"] = df["scope"].astype(str)
    return df


def run_row(key: RunKey, record: RunRecord) -> dict:
    row = key_fields(key)
    for split in EVAL_SPLITS:
        for k in SCORE_FIELDS:
            row[f"{split}_{k}"] = getattr(record.score(split), k)
    for k in ("params", "epochs", "best_epoch", "lr_decays", "train_tokens_per_s", "wall_s", "stopped_because"):
        row[k] = record.get(k)  # n-gram runs have no epochs: None, an empty cell
    return row


def load_study(keys: list[RunKey], corpus: str, root: str | Path = ".") -> dict[str, pd.DataFrame]:
    """The runs, per-epoch logs and gate statistics of a study's run keys.

    metrics.json is required for every run, log.csv for neural runs and gates.csv for LSTM and GRU runs.
    """
    runs, logs, gates = [], [], []
    for key in keys:
        d = run_path(key, corpus, root)
        runs.append(run_row(key, RunRecord.read(d / RECORD_FILE)))
        if key.is_ngram:
            continue
        log = read_log(d / "log.csv")
        logs.append(log.assign(**key_fields(key)))
        if is_gated(key.arch):
            gates.append(read_gates(d / "gates.csv").assign(**key_fields(key)))
    runs_df = pd.DataFrame(runs, columns=KEY_COLUMNS + [c for c in (runs[0] if runs else {}) if c not in KEY_COLUMNS])
    logs_df = pd.concat(logs, ignore_index=True) if logs else pd.DataFrame(columns=KEY_COLUMNS + LOG_COLUMNS)
    gates_df = pd.concat(gates, ignore_index=True) if gates else pd.DataFrame(columns=KEY_COLUMNS + GATE_COLUMNS)
    return {"runs": runs_df, "logs": logs_df, "gates": gates_df}


def read_oracle(path: str | Path | None) -> dict | None:
    if not path:
        return None
    o = read_json(path)
    if "test" not in o or "ppl" not in o["test"]:
        raise LmgridError(f"{path}: missing key test.ppl")
    return o


# Snakemake benchmark columns -> our names with units (max_rss is in MiB: psutil bytes / 2**20).
BENCHMARK_COLUMNS = {"s": "wall_s", "max_rss": "max_rss_mib", "cpu_time": "cpu_s"}


def read_benchmark(path: str | Path) -> dict[str, float]:
    """A job's Snakemake benchmark file: wall time, peak RSS and CPU time ({} when there is none; a value
    Snakemake could not measure is left out)."""
    import csv

    try:
        with open(path) as fh:
            row = next(csv.DictReader(fh, delimiter="\t"))
    except (OSError, StopIteration):
        return {}
    out = {}
    for column, name in BENCHMARK_COLUMNS.items():
        try:
            out[name] = float(row[column])
        except (KeyError, TypeError, ValueError):
            continue
    return out
