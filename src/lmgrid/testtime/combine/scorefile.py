"""Per-token score files: each cell's natural-log probability of every valid and test target, in corpus order.

One split of one cell in one mode is two files in one folder (docs/contracts.md, "Score files"):
* `<split>.npy`: float32 1-D, the log-probability (nats) of each counted target of the shared convention
  (lmgrid.data.ppl: every word and one </s> per sentence, in corpus order);
* `<split>.json`: {split, count, tokens_sha256, ppl, nll_nats, run_dir, mode}: `tokens_sha256` is the sha256 of the
  target ids (vocab.json ids) as little-endian int32, so two files hold the same token sequence exactly when their
  checksums (and counts) are equal; `ppl` is the cell's own PPL of that split (its metrics.json), which the file
  reproduces: exp(-mean) equals it to PPL_RTOL.

The folder is results/<corpus>/scores/<arch>/<impl>/<cell>/<mode>/ (`score_dir`); `mode` names how the scores were
made: `base` is the run's own evaluation pass; test-time modes (a neural cache, dynamic evaluation) write the same
files under their own mode name (lmgrid.testtime.combine.cells.MODES).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write, read_json
from lmgrid.run.record import EVAL_SPLITS
from lmgrid.run.key import beside_runs

PPL_RTOL = 1e-6  # exp(-mean log-prob) of a file against the PPL it claims (and the run's metrics.json)
SCORE_DIR = beside_runs("scores") + "/{mode}"  # results/{corpus}/scores/{arch}/{impl}/n.._l.._.._s../{mode}


def tokens_sha256(target_ids) -> str:
    """sha256 of the target ids as little-endian int32."""
    return hashlib.sha256(np.asarray(target_ids, dtype="<i4").tobytes()).hexdigest()


@dataclass
class Scores:
    """One split's per-token log-probabilities (nats) and what they claim."""
    logprob: np.ndarray  # float32 [count]
    split: str
    tokens_sha256: str
    ppl: float
    run_dir: str
    mode: str
    path: str = ""  # the .npy file read, for messages

    @property
    def count(self) -> int:
        return int(self.logprob.size)

    def file_ppl(self) -> float:
        """exp(-mean), summed in float64."""
        return math.exp(-float(np.sum(self.logprob, dtype=np.float64)) / self.count)


def check_ppl(ppl: float, expected: float, what: str) -> None:
    """One line when `ppl` is not `expected` to PPL_RTOL."""
    if not math.isclose(ppl, expected, rel_tol=PPL_RTOL, abs_tol=0.0):
        raise LmgridError(f"{what}: per-token scores give PPL {ppl:.9g}, the run's is {expected:.9g} "
                          f"(relative difference {abs(ppl - expected) / expected:.2e} > {PPL_RTOL:g})")


def write(folder: str | Path, split: str, logprob, target_ids, ppl: float, run_dir: str, mode: str) -> Scores:
    """Check and write one split: the log-probs must reproduce `ppl` (the run's) to PPL_RTOL; nothing is written
    otherwise.  Returns what was written."""
    if split not in EVAL_SPLITS:  # a cell's score files are of the splits its run record scores
        raise LmgridError(f"split: {split!r} is not one of {', '.join(EVAL_SPLITS)}")
    lp = np.asarray(logprob, dtype=np.float32).reshape(-1)
    ids = np.asarray(target_ids).reshape(-1)
    if lp.size != ids.size or lp.size == 0:
        raise LmgridError(f"{run_dir} ({mode}, {split}): {lp.size} log-probabilities for {ids.size} targets")
    if not np.all(np.isfinite(lp)) or np.any(lp > 0):
        raise LmgridError(f"{run_dir} ({mode}, {split}): log-probabilities must be finite and <= 0")
    s = Scores(lp, split, tokens_sha256(ids), float(ppl), str(run_dir), mode)
    check_ppl(s.file_ppl(), s.ppl, f"{run_dir} ({mode}, {split})")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_write(folder / f"{split}.npy", "wb") as fh:
        np.save(fh, lp)
    meta = {"split": split, "count": s.count, "tokens_sha256": s.tokens_sha256, "ppl": s.ppl,
            "nll_nats": -float(np.sum(lp, dtype=np.float64)), "run_dir": s.run_dir, "mode": mode}
    with atomic_write(folder / f"{split}.json") as fh:
        fh.write(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return s


def read(folder: str | Path, split: str) -> Scores:
    """One split of a score folder, checked: count, finite log-probs, and exp(-mean) against its ppl."""
    folder = Path(folder)
    npy, meta_path = folder / f"{split}.npy", folder / f"{split}.json"
    meta = read_json(meta_path)
    missing = [k for k in ("split", "count", "tokens_sha256", "ppl", "run_dir", "mode") if k not in meta]
    if missing:
        raise LmgridError(f"{meta_path}: missing key {missing[0]!r}")
    if meta["split"] != split:
        raise LmgridError(f"{meta_path}: holds split {meta['split']!r}, not {split!r}")
    try:
        lp = np.load(npy, allow_pickle=False)
    except FileNotFoundError:
        raise LmgridError(f"{npy}: file not found") from None
    except ValueError as e:
        raise LmgridError(f"{npy}: not a score array ({e})") from None
    if lp.dtype != np.float32 or lp.ndim != 1:
        raise LmgridError(f"{npy}: expected a 1-D float32 array, got {lp.dtype} {lp.shape}")
    if lp.size != meta["count"]:
        raise LmgridError(f"{npy}: {lp.size} values, its {meta_path.name} says count {meta['count']}")
    s = Scores(lp, split, meta["tokens_sha256"], float(meta["ppl"]), meta["run_dir"], meta["mode"], str(npy))
    check_ppl(s.file_ppl(), s.ppl, str(npy))
    return s


def check_same_tokens(scores: list[Scores]) -> None:
    """A combination needs one token sequence: one line naming the first two files that differ."""
    for s in scores[1:]:
        if (s.count, s.tokens_sha256) != (scores[0].count, scores[0].tokens_sha256):
            raise LmgridError(f"{s.path} and {scores[0].path} score different token sequences "
                              f"({s.count} targets, sha256 {s.tokens_sha256[:12]} against {scores[0].count}, "
                              f"{scores[0].tokens_sha256[:12]}): not the same corpus or vocabulary")


def stack(scores: list[Scores]) -> np.ndarray:
    """[components, tokens] float64 log-probs of scores that hold one token sequence (checked)."""
    check_same_tokens(scores)
    return np.stack([s.logprob.astype(np.float64) for s in scores])
