"""A cell's per-token scores, by mode, written as score files (lmgrid.testtime.combine.scorefile).

A mode is a function `(run_dir, paths, vocab, grid=None) -> {split: (logprob [N], ppl[, target_ids])}`: the
log-probability (nats) of every counted target of valid and test in corpus order, and the PPL its own evaluation
reports for that split, which the file must reproduce (scorefile.PPL_RTOL); with target ids, they are checked to be
the corpus's in order.  `base` is the run as trained: it re-runs the very pass that produced metrics.json's
valid_ppl and test_ppl and claims those figures, so a file that is not that pass fails its check.
The test-time modes `cache`, `dynamic`, `dynamic+cache` (adapted.py, through lmgrid.testtime.adapt) take `grid`, the
settings to choose from on valid, and also return {"adapt": record}, written as adapt.json beside their files.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from lmgrid.data.corpus import load_split
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import write_json
from lmgrid.run.gate_facts import is_gated
from lmgrid.data.ppl import EOS
from lmgrid.run.record import RECORD_FILE, RunRecord
from lmgrid.data.vocab import Vocab

from lmgrid.testtime.combine import scorefile
from lmgrid.testtime.combine.adapted import ADAPTED_MODES, SETTINGS_FILE, run_threads

ModeFn = Callable[..., dict]  # (run_dir, paths, vocab, grid=None) -> {split: (logprob, ppl[, ids])[, adapt]}


def target_ids(sentences: list[list[str]], vocab: Vocab) -> np.ndarray:
    """The counted targets of a split as vocab.json ids, in corpus order: each sentence's words, then </s>."""
    eos = vocab.index[EOS]
    return np.array([i for s in sentences for i in (*vocab.encode(s), eos)], dtype=np.int64)


def neural_base(run_dir: Path, paths: dict, vocab: Vocab) -> dict:
    """The run's evaluation pass again, from model.ckpt: the same batches (eval windows, or
    stream_eval_batch_size sentence-aligned rows with the state carried), precision and threads, and for lstm and
    gru test the same forward with gates that wrote gates.csv."""
    import torch

    from lmgrid.neural import gates as gates_mod
    from lmgrid.neural.data import LMData
    from lmgrid.neural.model_io import load_run
    from lmgrid.neural.module import corpus_order, evaluate
    from lmgrid.neural.precision import autocast, full_fp32
    from lmgrid.data.ppl import BOS

    record = RunRecord.read(run_dir / RECORD_FILE)
    hp, regime = record.get("hparams"), record.regime
    if not hp:
        raise LmgridError(f"{run_dir / RECORD_FILE}: no hparams (a run older than its evaluation settings)")
    lm = load_run(run_dir)
    threads = run_threads(record)
    if threads:
        torch.set_num_threads(threads)
    cuda = str(record.get("device", "")).startswith("cuda") and torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    data = LMData(paths, vocab, regime, n_step=max(record.n_step, 2), eval_batch_size=hp["eval_batch_size"],
                  stream_eval_batch_size=hp["stream_eval_batch_size"], bptt=hp["bptt"])
    data.setup()
    model = lm.model.to(device)
    out = {}
    with full_fp32():
        for split in paths:
            gate_stats = (gates_mod.GateStats(regime, vocab.index[BOS])
                          if split == "test" and is_gated(record.arch) else None)
            collected: list = []
            with autocast(lm.precision, device.type):
                evaluate(model, data.dataloader(split, device=device), regime, device, gate_stats, collected)
            nll, ys = corpus_order(collected, regime)
            out[split] = (-nll.double().numpy(), record.score(split).ppl, ys.numpy())
    return out


def ngram_base(run_dir: Path, paths: dict, vocab: Vocab) -> dict:
    """The n-gram's own scoring (lmgrid.ngram.model.stream_logprobs) of its model.arpa."""
    from lmgrid.ngram.model import load_run

    record = RunRecord.read(run_dir / RECORD_FILE)
    model = load_run(run_dir)
    out = {}
    for split, path in paths.items():
        per = model.sentence_logprobs(load_split(path))
        out[split] = (np.array([v for s in per for v in s], dtype=np.float64), record.score(split).ppl)
    return out


def base(run_dir: Path, paths: dict, vocab: Vocab, grid: dict | None = None) -> dict:
    if grid:
        raise LmgridError(f"{run_dir}: mode base has no settings to choose (grid {grid})")
    if (run_dir / "model.ckpt").is_file():
        return neural_base(run_dir, paths, vocab)
    if (run_dir / "model.arpa").is_file():
        return ngram_base(run_dir, paths, vocab)
    raise LmgridError(f"{run_dir}: no trained model here (expected model.arpa or model.ckpt)")


MODES: dict[str, ModeFn] = {"base": base, **ADAPTED_MODES}


def write_scores(run_dir, valid: str, test: str, vocab_path: str, mode: str, out_dir, grid: dict | None = None,
                 train: str = "") -> dict:
    """Score one cell in one mode and write {valid,test}.{npy,json} to out_dir (and a test-time mode's adapt.json);
    returns {split: Scores}.  grid: a test-time mode's settings to choose from (None: lmgrid.testtime.adapt.tune's).
    train: the train split, given to a test-time mode only (dynamic evaluation's rule rms reads it; never scored)."""
    if mode not in MODES:
        raise LmgridError(f"mode: unknown score mode {mode!r} (one of: {', '.join(MODES)})")
    run_dir, vocab = Path(run_dir), Vocab.load(vocab_path)
    paths = {"valid": valid, "test": test}
    scored = MODES[mode](run_dir, {**paths, "train": train} if train and mode in ADAPTED_MODES else paths, vocab,
                         grid)
    # Everything is checked before anything is written: a failing split leaves no file of the other behind.
    ready = {}
    for split, path in paths.items():
        logprob, ppl, *ys = scored[split]
        ids = target_ids(load_split(path), vocab)
        if ys and not np.array_equal(np.asarray(ys[0]), ids):
            raise LmgridError(f"{run_dir} ({mode}, {split}): the evaluation's targets are not the corpus's "
                              f"targets in order ({len(ys[0])} against {ids.size})")
        lp = np.asarray(logprob, dtype=np.float32)
        if lp.size != ids.size:
            raise LmgridError(f"{run_dir} ({mode}, {split}): {lp.size} log-probabilities for {ids.size} targets")
        scorefile.check_ppl(scorefile.Scores(lp, split, "", ppl, str(run_dir), mode).file_ppl(), ppl,
                            f"{run_dir} ({mode}, {split})")
        ready[split] = (lp, ids, ppl)
    out = {split: scorefile.write(out_dir, split, lp, ids, ppl, str(run_dir), mode)
           for split, (lp, ids, ppl) in ready.items()}
    if "adapt" in scored:  # last: a mode's folder with adapt.json is complete
        write_json(Path(out_dir) / SETTINGS_FILE, {"mode": mode, **scored["adapt"]})
    return out
