"""LMData, the LightningDataModule of one corpus: the splits as lmgrid.neural.data builds them, in the run's regime.
Apart from lmgrid.neural.data so that the evaluation passes that need only its tensors never import Lightning
(docs/benchmarks.md, "Per-job overhead")."""
from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from lmgrid.common.errors import LmgridError
from lmgrid.data.corpus import load_split
from lmgrid.data.ppl import BOS, EOS, PAD
from lmgrid.data.vocab import Vocab
from lmgrid.neural.data import (IGNORE, BatchIndices, StreamChunks, WindowData, encode, first_sentences, loader,
                                sentence_rows, window_examples)


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
