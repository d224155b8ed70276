"""Training and evaluation data of the two context regimes, as tensors (their LightningDataModule:
lmgrid.neural.datamodule).

* window: one example per target of the shared convention (`lmgrid.data.ppl.targets`): each word and the final </s>
  of a sentence, with exactly the n_step-1 tokens before it in that sentence as context, left-padded with <s>.
  Every window has the same length, so there is no padding to mask and each target is counted once.
* stream: the literature's stateful regime.  The split's sentences, in order, are cut into B rows of whole
  sentences with about equal token counts (`sentence_rows`); each row reads </s> w1 .. </s> w1 .. </s>, so it
  starts at a sentence boundary, from a zero state, with </s> as the context of its first word, and every
  prediction is one of the convention's targets (words + one </s> per sentence; <s> never appears).  The state
  is carried across a row's BPTT chunks.  Rows are padded at their tail (padded targets are IGNORE), so every
  token is counted once.  Why sentence-aligned: a row that starts from a zero state in the middle of a sentence
  can fall into a state the model never saw in training (an Elman RNN locks into a sign-flipped attractor for
  the rest of the row), so the PPL of a contiguous cut depends on where the cuts fall; at sentence boundaries a
  zero state is what training starts from, and the evaluation PPL no longer depends on the number of rows
  (tests/test_stream_layout.py).

Several processes (DDP, `train.devices`): the batch sizes stay global.  Every process reads the same sequence of
global batches (same seeded order) and keeps its share: a contiguous slice of the window batch, or a slice of the
stream rows (each process always holds the same rows, so the carried state stays its own).  Nothing is padded or
repeated; a process whose share is empty gets one row whose targets are IGNORE, so that it still takes part in
the step.  Together the processes see exactly the batch one process would see.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from lmgrid.data.corpus import load_split
from lmgrid.common.errors import LmgridError
from lmgrid.data.ppl import BOS, EOS, PAD
from lmgrid.data.vocab import Vocab

IGNORE = -100  # target id of padding: F.cross_entropy(ignore_index=IGNORE) neither scores nor counts it


def encode(vocab: Vocab, sentences: list[list[str]]) -> list[list[int]]:
    return [vocab.encode(s) for s in sentences]


def window_examples(ids: list[list[int]], n_step: int, bos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """contexts [N, n_step-1] and targets [N], one row per target of every sentence, in order."""
    if n_step < 2:
        raise LmgridError(f"n_step: {n_step} is below 2, the least context a neural model can be given "
                          "in the window regime")
    ctx = n_step - 1
    lengths = np.array([len(s) for s in ids], dtype=np.int64)
    # Each sentence becomes <s>*ctx + words + </s>; its targets are the last len+1 positions.
    flat = np.concatenate([np.array([bos] * ctx + s + [eos], dtype=np.int64) for s in ids])
    starts = np.concatenate([[0], np.cumsum(lengths + 1 + ctx)[:-1]])
    target_pos = np.concatenate([np.arange(st + ctx, st + ctx + n + 1) for st, n in zip(starts, lengths)])
    windows = np.lib.stride_tricks.sliding_window_view(flat, ctx)[target_pos - ctx]
    return torch.from_numpy(np.ascontiguousarray(windows)), torch.from_numpy(flat[target_pos])


def stream_tokens(ids: list[list[int]], eos: int) -> torch.Tensor:
    """</s> w1 .. </s> w1 .. </s>: the leading </s> is context only; tokens[1:] are the counted targets."""
    out = [eos]
    for s in ids:
        out += s
        out.append(eos)
    return torch.tensor(out, dtype=torch.long)


def batchify(stream: torch.Tensor, rows: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """inputs and targets [rows, S]: row b holds the contiguous targets b*S .. b*S+S-1 of the stream.  Rows start
    anywhere, mid-sentence included: for throughput benchmarks only; runs use `sentence_rows`."""
    n = len(stream) - 1
    if n < 1:
        raise LmgridError("stream regime: the split has no tokens")
    rows = max(1, min(rows, n))
    S = math.ceil(n / rows)
    x = torch.full((rows * S,), pad, dtype=torch.long)
    y = torch.full((rows * S,), IGNORE, dtype=torch.long)
    x[:n], y[:n] = stream[:-1], stream[1:]
    return x.view(rows, S), y.view(rows, S)


def sentence_rows(ids: list[list[int]], rows: int, eos: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """inputs and targets [R, S]: the sentences cut into R <= rows contiguous groups of whole sentences with about
    equal target counts; row r reads </s> s_a </s> .. s_b </s> (inputs) and predicts everything after its first
    </s> (targets).  Tail padding: input `pad`, target IGNORE."""
    if not ids:
        raise LmgridError("stream regime: the split has no sentences")
    targets = np.array([len(s) + 1 for s in ids], dtype=np.int64)  # words + </s>
    ends = np.cumsum(targets)
    rows = max(1, min(rows, len(ids)))
    # The first sentence of each later row: where the running target count passes k/rows of the total.
    cuts = np.searchsorted(ends, np.arange(1, rows) * ends[-1] / rows, side="left") + 1
    # Every row gets at least one sentence: cut k lies in [k, n - rows + k] and after cut k-1.
    cuts = np.maximum.accumulate(np.maximum(cuts, np.arange(1, rows)) - np.arange(1, rows)) + np.arange(1, rows)
    cuts = np.minimum(cuts, len(ids) - rows + np.arange(1, rows))
    bounds = np.concatenate([[0], cuts, [len(ids)]])
    groups = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
    S = max(int(targets[a:b].sum()) for a, b in groups)
    x = torch.full((len(groups), S), pad, dtype=torch.long)
    y = torch.full((len(groups), S), IGNORE, dtype=torch.long)
    for r, (a, b) in enumerate(groups):
        row = stream_tokens(ids[a:b], eos)
        x[r, : len(row) - 1], y[r, : len(row) - 1] = row[:-1], row[1:]
    return x, y


def first_sentences(ids: list[list[int]], max_targets: int) -> list[list[int]]:
    """The leading whole sentences holding at most `max_targets` targets (at least one sentence): the stream
    regime's cap on training data keeps rows sentence-aligned."""
    ends = np.cumsum([len(s) + 1 for s in ids])
    return ids[: max(1, int(np.searchsorted(ends, max_targets, side="right")))]


def shard(x: torch.Tensor, y: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's share of a global batch (rows along dim 0); an empty share becomes one ignored row."""
    if world == 1:
        return x, y
    whole_x, whole_y = x, y
    x, y = x.tensor_split(world)[rank], y.tensor_split(world)[rank]
    if len(y) == 0:  # fewer rows than processes: a copy of the first row, scoring and counting nothing
        return whole_x[:1], torch.full_like(whole_y[:1], IGNORE)
    return x, y


class WindowData(Dataset):
    """Indexed by a tensor of example ids (a whole global batch at once: no per-example collate)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, rank: int = 0, world: int = 1):
        self.x, self.y, self.rank, self.world = x, y, rank, world

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        idx = idx.to(self.x.device, non_blocking=True)  # the split may live on the GPU (LMData.on_device)
        return shard(self.x[idx], self.y[idx], self.rank, self.world)


class BatchIndices(Sampler):
    """Batches of example ids; shuffled by a permutation that depends on (seed, epoch) only, so a resumed run
    sees the same order as an uninterrupted one. The trainer rebuilds the train loader every epoch
    (reload_dataloaders_every_n_epochs=1), passing the epoch; there is deliberately no set_epoch: on a resumed
    run Lightning makes the first epoch's iterator before it would call it."""

    def __init__(self, n: int, batch_size: int, shuffle: bool, seed: int = 0, epoch: int = 0):
        self.n, self.batch_size, self.shuffle, self.seed, self.epoch = n, batch_size, shuffle, seed, epoch

    def __len__(self):
        return math.ceil(self.n / self.batch_size)

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(self.n, generator=g)
        else:
            order = torch.arange(self.n)
        return iter(order.split(self.batch_size))


class StreamChunks(Dataset):
    """Chunk i = columns [i*bptt, (i+1)*bptt) of the batchified stream; read in order, state carried across."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, bptt: int, rank: int = 0, world: int = 1):
        self.x, self.y = shard(x, y, rank, world)  # this process's rows, the same in every chunk
        self.bptt = bptt

    def __len__(self):
        return math.ceil(self.x.shape[1] / self.bptt)

    def __getitem__(self, i):
        if not 0 <= i < len(self):
            raise IndexError(i)
        sl = slice(i * self.bptt, (i + 1) * self.bptt)
        return self.x[:, sl], self.y[:, sl]


def loader(dataset: Dataset, sampler: Sampler | None = None) -> DataLoader:
    # batch_size=None: each dataset item already is a batch. Data lives in memory: no worker processes.
    # Its own generator: making an iterator draws a seed from it, and drawing from the global RNG would shift
    # the dropout noise by however many iterators were made before, which differs on a resumed run.
    return DataLoader(dataset, batch_size=None, sampler=sampler, shuffle=False, num_workers=0,
                      generator=torch.Generator().manual_seed(0))
