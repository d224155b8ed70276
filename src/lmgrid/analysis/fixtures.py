"""Fake run folders that follow docs/contracts.md, for tests and for trying the aggregation without training.

The numbers are made up but shaped like real ones: perplexity falls with context and depth towards
the oracle, the LSTM forget-gate mean rises and the input-gate mean falls with n_step, and seeds
add noise.  Nothing here is a result.
"""
from __future__ import annotations

import csv
import math
import zlib
from dataclasses import asdict
from pathlib import Path

import numpy as np

from lmgrid.common.fileio import atomic_write, write_json
from lmgrid.run.record import RECORD_FILE, RunRecord
from lmgrid.run.key import RunKey, all_runs
from lmgrid.run.gate_facts import is_gated

GATES = {"lstm": "ifog", "gru": "zr"}
BASE_PPL = {"addk": 160.0, "katz": 120.0, "kn": 105.0, "mkn": 100.0, "ffnn": 95.0, "rnn": 92.0, "lstm": 85.0,
            "gru": 86.0, "transformer": 88.0}
ORACLE_PPL = 60.0


def _rng(key: RunKey) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(asdict(key)).encode()))


def fake_ppl(key: RunKey) -> float:
    """Deterministic PPL for a key: better with context and depth, plus seed noise."""
    n = key.n_step if key.regime == "window" else 12
    ppl = ORACLE_PPL + (BASE_PPL[key.arch] - ORACLE_PPL) * (1.0 + 2.0 / n) / 2.0 * (1.0 - 0.05 * (key.layers - 1))
    if key.is_ngram:
        return round(ppl, 4)
    return round(ppl * (1.0 + 0.02 * _rng(key).standard_normal()), 4)


def write_run(run_dir: Path, key: RunKey, epochs: int = 4, units: int = 8) -> None:
    rng = _rng(key)
    test = fake_ppl(key)
    valid = round(test * 1.01, 4)
    tokens = 1000
    m = {"name": key.name, **asdict(key),
         "valid": {"ppl": valid, "nll_nats": round(tokens * math.log(valid), 4), "tokens": tokens, "oov_tokens": 3},
         "test": {"ppl": test, "nll_nats": round(tokens * math.log(test), 4), "tokens": tokens, "oov_tokens": 2},
         "params": 1000 * key.layers + 10 * key.n_step}
    if key.is_ngram:
        m.update({"order": key.n_step, "method": key.arch, "settings": {"discounts": [0.5, 0.8]},
                  "timing": {"score_s": 0.25}})
    else:
        m.update({"train_tokens_per_s": 5000.0, "train_tokens": 20000, "epochs": epochs, "best_epoch": epochs - 1, "stopped_because": "budget", "wall_s": 1.5,
                  "device": "cpu", "torch_version": "fake", "lightning_version": "fake",
                  "hparams": {"lr": 0.001, "hidden": units, "optimizer": "adam"}})
        with atomic_write(run_dir / "log.csv") as fh:
            w = csv.writer(fh)
            w.writerow(["epoch", "step", "train_loss", "train_ppl", "valid_loss", "valid_ppl", "lr", "wall_s"])
            for e in range(epochs):
                v = valid * (1.0 + 1.5 / (e + 1) ** 1.5)
                t = v * 0.95
                w.writerow([e, 50 * (e + 1), round(math.log(t), 6), round(t, 4), round(math.log(v), 6), round(v, 4),
                            0.001, round(0.4 * (e + 1), 3)])
    if is_gated(key.arch):
        write_gates(run_dir / "gates.csv", key, rng, units)
    # A made-up model file and when the "training" ran (fixed, so fixtures are reproducible).
    m.update({"start_unix_s": 1.7e9 + 100 * key.n_step, "end_unix_s": 1.7e9 + 100 * key.n_step + 1.5})
    # The job process's own CPU time and peak RSS (lmgrid.common.resources), unlike the benchmark file's (write_data).
    m.update({"cpu_s": 20.0 + key.n_step, "max_rss_mib": 400.0 + key.layers})
    with atomic_write(run_dir / ("model.arpa" if key.is_ngram else "model.ckpt"), "wb") as fh:
        fh.write(f"fake model of {key.name}\n".encode())
    RunRecord.from_dict(m, run_dir / RECORD_FILE).write(run_dir / RECORD_FILE)


def write_data(root: Path, corpus: str, keys: list[RunKey]) -> None:
    """Corpus splits, vocabulary, their reports and one Snakemake benchmark file per run."""
    base = root / f"results/{corpus}"
    for split in ("train", "valid", "test"):
        with atomic_write(base / f"corpus/{split}.txt") as fh:
            fh.write(f"the {split} sentence\n" * 10)
    write_json(base / "vocab.json", {"tokens": ["<pad>", "<unk>", "<s>", "</s>", "the", "sentence"]})
    write_json(base / "vocab_report.json", {"vocab_size": 6, "min_count": 1, "max_size": 0})
    write_json(base / "corpus/corpus_stats.json", {"splits": {s: {"sentences": 10, "tokens": 30}
                                                             for s in ("train", "valid", "test")}})
    for key in keys:
        with atomic_write(root / key.beside(corpus, "benchmarks/runs", ".tsv")) as fh:
            fh.write("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
                     f"{2.0 + key.n_step:.2f}\t0:00:0{key.n_step}\t{100 + key.layers:.2f}\t1\t1\t1\t0\t0\t0\t1.25\n")


def write_gates(path: Path, key: RunKey, rng: np.random.Generator, units: int) -> None:
    n = key.n_step if key.regime == "window" else 12
    rows = []
    for layer in range(key.layers):
        for gate in GATES[key.arch]:
            if gate == "f" and key.regime == "window" and key.n_step == 2:
                continue  # every f value multiplies the zero cell state: none has an effect (neural.gates)
            trend = {"f": 0.02, "i": -0.015, "z": -0.01}.get(gate, 0.0)
            # noise small enough that a planted trend survives Holm over a study's whole gate family (about 70 tests
            # with the end-aligned and padding-free ones, at df 2 with 3 seeds)
            mean = (0.0 if gate == "g" else 0.5) + trend * n + 0.0005 * rng.standard_normal()
            lo, hi = max(0.02, 0.3 - trend * 5 * n), min(0.9, 0.2 + trend * 5 * n + 0.1)
            rows.append(["all", layer, gate, -1, mean, 0.2, lo, hi, 1000 * units, 0])
            if key.regime == "window":  # input positions 0..n_step-2; f has no effect at 0 (neural.gates)
                for pos in range(1 if gate == "f" else 0, key.n_step - 1):
                    rows.append(["position", layer, gate, pos, mean + 0.01 * pos, 0.2, lo, hi, 1000 * units, 0])
                    for context in range(key.n_step - 1, 9):  # padding-free rows up to a study max n_step of 9
                        rows.append(["padfree", layer, gate, pos, mean + 0.01 * pos - 0.001 * context, 0.2, lo, hi,
                                     800 - 50 * context, context])
            for u in range(units):
                below, above = rng.uniform(0, 0.5, 2)
                rows.append(["unit", layer, gate, u, mean, 0.2, round(below, 4), round(above, 4), 1000, 0])
    with atomic_write(path) as fh:
        w = csv.writer(fh)
        w.writerow(["scope", "layer", "gate", "index", "mean", "std", "frac_left_saturated", "frac_right_saturated", "count",
                    "min_context"])
        for r in rows:
            w.writerow([f"{v:.6f}" if isinstance(v, float) else v for v in r])


def write_fake_results(root: str | Path, corpus: str, studies: dict, oracle: bool = True) -> list[RunKey]:
    """Fake run folders for every run of `studies` (and oracle.json) under root/results/<corpus>/."""
    root = Path(root)
    keys = all_runs(studies)
    for key in keys:
        write_run(root / key.run_dir(corpus), key)
    write_data(root, corpus, keys)
    if oracle:
        tokens = 1000
        o = {s: {"ppl": ORACLE_PPL, "nll_nats": tokens * math.log(ORACLE_PPL), "tokens": tokens, "oov_tokens": 0,
                 "is_floor": True} for s in ("valid", "test")}
        write_json(root / f"results/{corpus}/oracle.json", o)
    return keys
