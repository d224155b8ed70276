"""Which training job starts first when the slots are short: each neural cell's planned training FLOPs.

Snakemake starts the ready job of highest `priority` first.  A grid finishes soonest when its longest jobs start
first (longest-processing-time first): a long job started last runs alone at the end while the other slots idle.
In the one-seed PTB seed_table on 2 slots, the Elman RNN (18 of the run's 65 training CPU-minutes) started after
the LSTM's test-time jobs and ran with one core idle for most of its time (80% use of the 2 cores over 49.5 min).

The cost of a cell is its planned training work: lmgrid.models.flops's analytic training FLOPs per token (the
machine-independent count the equal-compute study uses) times the passes over the training set it may make, its
epoch cap (a budget schedule in tokens ends within it; a budget in FLOPs is converted over NOMINAL_TRAIN_TOKENS).
The output layer is costed over the corpus's vocabulary where vocab.json exists (a resumed run); a fresh run plans
before the vocabulary job has run, so there it is costed over a nominal one (NOMINAL_VOCAB ids with Zipf-law
counts, cut by the adaptive softmax's own rule).  Either way it is the same for every cell of a corpus, so the
order among them holds.  The priority is that work in kFLOP per training token, plus
PRIORITY_FLOOR, so that every training job comes before the test-time jobs (priority 0) that could wait for it.

A plug-in architecture (lmgrid.common.plugins) gets the floor: costing it would import its class, and torch.

The n-gram counts and models and the oracle get UPSTREAM_PRIORITY, above every training job: they take seconds
(minutes on PTB) and every job of the run's tail waits for them (the aggregation and the MLflow mirror read every
cell), so they run while the nets train instead of between the last net and the tail.  In the default run on 2
cores they had run after the last training job, and the aggregation and the mirror then waited about 20 s for them.
"""
from __future__ import annotations

import functools
from pathlib import Path

from lmgrid.data.vocab import Vocab
from lmgrid.models.clusters import ZIPF_EXPONENT
from lmgrid.neural.compute_budget import train_flops_per_token

NOMINAL_VOCAB = 10_000  # ids, PTB's size: the output layer's cost when the vocabulary is not built yet
NOMINAL_TRAIN_TOKENS = 1_000_000  # a train.budget_flops run's tokens are budget_flops / its FLOPs per token
PRIORITY_FLOOR = 1  # above the test-time jobs' 0
# Far above any cell's training priority (the seed_table's LSTM 2x300 gets about 1.1e5, a cell five times as wide
# trained ten times as long about 2.1e7: tests/test_job_order.py), and small enough that Snakemake's scheduler
# objective (priority x about 4 x the jobs' cores) stays exact in a float.
UPSTREAM_PRIORITY = 10**12


class NominalVocab:
    """What RunSpec.model_config reads of a vocabulary (its size, its ids in order, their train counts), for a
    corpus whose vocabulary is not built yet: NOMINAL_VOCAB ids whose counts follow a Zipf law."""

    def __init__(self, size: int = NOMINAL_VOCAB):
        self.tokens = list(range(size))
        self.counts = {i: round(1e9 * (i + 1) ** -ZIPF_EXPONENT) for i in self.tokens}

    def __len__(self) -> int:
        return len(self.tokens)


@functools.lru_cache(maxsize=8)
def _vocab(path: str, mtime_ns: int):
    return Vocab.load(path) if mtime_ns else NominalVocab()


def planning_vocab(path: str):
    """The vocabulary at `path` when it exists, else the nominal one."""
    try:
        return _vocab(path, Path(path).stat().st_mtime_ns)
    except FileNotFoundError:
        return _vocab(path, 0)


def planned_train_kflop(spec) -> float:
    """Training kFLOP per token of the training set that a cell (a lmgrid.run.spec.RunSpec) may spend: FLOPs per
    token x its epoch cap, or its FLOP budget over NOMINAL_TRAIN_TOKENS when that is less."""
    vocab = planning_vocab(spec.vocab)
    per_token = train_flops_per_token(spec.model_config(vocab), spec.regime, spec.hparams["bptt"],
                                      [vocab.counts.get(t, 0) for t in vocab.tokens])
    work = per_token * spec.hparams["epochs"]
    budget = spec.hparams.get("budget_flops", 0) or 0
    if budget > 0:
        work = min(work, budget / NOMINAL_TRAIN_TOKENS)
    return work / 1e3


def train_priority(spec) -> int:
    """The train rule's `priority:` for a cell: PRIORITY_FLOOR + its planned training kFLOP per token, rounded."""
    if spec.plugin:
        return PRIORITY_FLOOR
    return PRIORITY_FLOOR + round(planned_train_kflop(spec))
