"""The stream regime's training step weighs every target alike, however much tail padding its chunk holds.

Sentence-aligned rows (lmgrid.neural.data.sentence_rows) differ in length, so the last chunks of an epoch hold few
targets and much padding.  The step's loss is its NLL sum over the positions of a full chunk (LMModule's
chunk_positions), so d loss / d NLL is the same constant at every step; a mean over the chunk's own targets would
give a target in a 6-target chunk 100x the weight of one in a full chunk (PTB, 5,000 lines, 20 rows), and under
clipping a whole SGD step (the gap `python -m lmgrid.bench vs-plain` showed to the plain loop).
"""
from __future__ import annotations

import pytest

from lmgrid.neural import module as module_mod
from lmgrid.neural import train as train_mod
from lmgrid.neural.data import IGNORE

from test_neural_support import tiny_corpus
from test_neural_train import train

ROWS, BPTT = 4, 7
FULL_CHUNK = ROWS * BPTT


def _step_weights(corpus, root, monkeypatch) -> list[tuple[float, int]]:
    """(loss / the step's NLL sum, the step's counted targets) of every training step of a one-epoch stream run."""
    real, seen = module_mod.LMModule.training_step, []

    def probed(self, batch, batch_idx):
        before = float(self._train_sums[0]) if self._train_sums is not None else 0.0
        loss = real(self, batch, batch_idx)
        step_nll = float(self._train_sums[0]) - before  # the NLL sum the step added to the epoch's total
        seen.append((float(loss.detach()) / step_nll, int((batch[1] != IGNORE).sum())))
        return loss

    monkeypatch.setattr(module_mod.LMModule, "training_step", probed)
    train(corpus, root, arch="lstm", regime="stream", epochs=1, stream_batch_size=ROWS, bptt=BPTT, emb_dim=8,
          hidden_dim=8, optimizer="sgd", lr=1.0, clip=0.25)
    monkeypatch.setattr(module_mod.LMModule, "training_step", real)
    return seen


def test_every_stream_target_weighs_the_same_in_its_step(tmp_path, monkeypatch):
    """Every step's loss is its NLL sum over the full chunk's ROWS x BPTT positions, the tail chunks' included.
    Kills: the stream loss as the chunk's mean over its own counted targets (nll / n).  The negative control, run
    here: chunk_positions 0, which is that mean; the check that some step holds at most half a chunk's targets is
    the control that this corpus has padded tail chunks that tell the two apart."""
    corpus = tiny_corpus(tmp_path)
    seen = _step_weights(corpus, tmp_path / "a", monkeypatch)
    assert min(n for _, n in seen) <= FULL_CHUNK // 2  # the control: a tail chunk mostly padding
    assert max(n for _, n in seen) == FULL_CHUNK
    for weight, _ in seen:
        assert weight == pytest.approx(1 / FULL_CHUNK, rel=1e-5)

    monkeypatch.setattr(train_mod, "stream_chunk_positions", lambda data, regime, bptt: 0)  # the mutant: nll / n
    broken = _step_weights(corpus, tmp_path / "b", monkeypatch)
    assert any(weight != pytest.approx(1 / FULL_CHUNK, rel=1e-5) for weight, _ in broken)
    assert all(weight == pytest.approx(1 / n, rel=1e-5) for weight, n in broken)  # it is indeed the mean
