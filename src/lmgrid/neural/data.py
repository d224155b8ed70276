"""Training and evaluation data of the two context regimes, as tensors, and the LightningDataModule.

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
import pytorch_lightning as pl
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


class LMData(pl.LightningDataModule):
    """The three splits of one corpus, encoded with the corpus vocabulary, in the run's regime."""

    def __init__(self, paths: dict[str, str], vocab: Vocab, regime: str, *, n_step: int = 2, batch_size: int = 64,
                 stream_batch_size: int = 20, eval_batch_size: int = 256, stream_eval_batch_size: int = 10,
                 bptt: int = 35, max_train_tokens: int = 0, seed: int = 1):
        super().__init__()
        if regime not in ("window", "stream"):
            raise LmgridError(f"regime: unknown regime {regime!r} (expected window or stream)")
        self.paths, self.vocab, self.regime, self.n_step = paths, vocab, regime, n_step
        self.batch_size, self.stream_batch_size = batch_size, stream_batch_size
        self.eval_batch_size, self.stream_eval_batch_size = eval_batch_size, stream_eval_batch_size
        self.bptt, self.max_train_tokens, self.seed = bptt, max_train_tokens, seed
        self.sentences: dict[str, list[list[str]]] = {}
        self.tensors: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._device_copies: dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]] = {}

    def setup(self, stage: str | None = None) -> None:
        if self.tensors:
            return
        bos, eos, pad = (self.vocab.index[t] for t in (BOS, EOS, PAD))
        for split, path in self.paths.items():
            sents = load_split(path)
            self.sentences[split] = sents
            ids = encode(self.vocab, sents)
            if self.regime == "window":
                x, y = window_examples(ids, self.n_step, bos, eos)
                if split == "train" and self.max_train_tokens > 0:
                    x, y = x[: self.max_train_tokens], y[: self.max_train_tokens]
                self.tensors[split] = (x, y)
            else:
                if split == "train" and self.max_train_tokens > 0:
                    ids = first_sentences(ids, self.max_train_tokens)
                rows = self.stream_batch_size if split == "train" else self.stream_eval_batch_size
                self.tensors[split] = sentence_rows(ids, rows, eos, pad)

    def padding_fraction(self, splits) -> float:
        """Padded target positions over all target positions the splits' tensors hold."""
        pad = sum(int((self.tensors[s][1] == IGNORE).sum()) for s in splits)
        return pad / max(sum(self.tensors[s][1].numel() for s in splits), 1)

    def counted_tokens(self, split: str) -> int:
        return int((self.tensors[split][1] != IGNORE).sum())

    def oov_tokens(self, split: str) -> int:
        return sum(1 for s in self.sentences[split] for t in s if t not in self.vocab.index)

    def on_device(self, split: str, device: torch.device | str | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The split's tensors on `device`, copied there once: batches are then slices made on the device, with
        no host-to-device copy per step."""
        x, y = self.tensors[split]
        if device is None or x.device == torch.device(device):
            return x, y
        key = (split, str(device))
        if key not in self._device_copies:
            self._device_copies[key] = (x.to(device), y.to(device))
        return self._device_copies[key]

    def dataloader(self, split: str, shuffle: bool = False, rank: int = 0, world: int = 1,
                   device: torch.device | str | None = None) -> DataLoader:
        """The whole split by default; this process's share of every batch when given its rank of `world`."""
        x, y = self.on_device(split, device)
        if self.regime == "stream":
            return loader(StreamChunks(x, y, self.bptt, rank, world))
        size = self.batch_size if split == "train" else self.eval_batch_size
        epoch = self.trainer.current_epoch if self.trainer is not None else 0
        return loader(WindowData(x, y, rank, world), BatchIndices(len(y), size, shuffle, self.seed, epoch))

    def _share(self) -> dict:
        if not self.trainer:
            return {}
        return {"rank": self.trainer.global_rank, "world": self.trainer.world_size,
                "device": self.trainer.strategy.root_device}

    def train_dataloader(self):
        return self.dataloader("train", shuffle=True, **self._share())

    def val_dataloader(self):
        return self.dataloader("valid", **self._share())

    def test_dataloader(self):
        return self.dataloader("test", **self._share())
