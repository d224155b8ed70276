"""A trained neural run's word vectors and sentence vectors, and the nearest sentences of a file to a query.

Word vectors are the rows of the input embedding and, when the weights are untied, of the output layer: one row
per vocabulary entry, in vocabulary order, but for the ids the model never reads nor predicts (NEVER_SEEN: the
padding id <pad>, whose row keeps its initial weights), written in word2vec text format (gensim's
KeyedVectors.load_word2vec_format reads them back exactly: numpy prints the shortest float32 repr; the header's row
count is the rows written).

A sentence vector is what the output layer reads when the model predicts the token after the sentence, given the
sentence the way the run reads text (neural.model_io): in the window regime its last n_step-1 tokens, left-padded
with <s>; in the stream regime the sentence after one </s>, from a zero state.  So per architecture:
* rnn, lstm, gru: the top layer's final hidden state (its output at the last token; with `residual` that output
  includes the layer's input, as it does when the model predicts);
* transformer: the mean over the sentence's word positions of the top layer's states (after the final LayerNorm);
* ffnn: the last hidden layer over the last window.
"""
from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from lmgrid.common.errors import LmgridError
from lmgrid.run.record import RECORD_FILE, RunRecord
from lmgrid.run.key import NGRAM_ARCHS
from lmgrid.data.ppl import PAD
from lmgrid.data.vocab import SPECIALS

SENTENCE_BATCH = 256
# Ids that are never an input nor a target, so their rows are never trained: only the padding id.  (<s> is read in
# the window regime, </s> and <unk> are predicted; lm.py's ban on predicting <s> does not make it unread.)
NEVER_SEEN = frozenset({PAD})


def load_neural(run_dir):
    """The run's model as neural.model_io.NeuralLM; one line when the folder holds no neural model."""
    from lmgrid.neural.model_io import load_run

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise LmgridError(f"{run_dir}: run folder not found")
    if not (run_dir / "model.ckpt").is_file():
        record = run_dir / RECORD_FILE
        arch = RunRecord.read(record).arch if record.is_file() else None
        if (run_dir / "model.arpa").exists() or arch in NGRAM_ARCHS:
            raise LmgridError(f"{run_dir}: an n-gram run has no embeddings (pass a neural run: ffnn, rnn, lstm, gru "
                              "or transformer)")
        raise LmgridError(f"{run_dir}: no trained neural model here (expected model.ckpt)")
    return load_run(run_dir)


def word_matrices(lm) -> dict[str, np.ndarray]:
    """'input': the token embedding [V, d]; 'output': the output layer's weights [V, d'], only when untied (for the
    adaptive softmax, each word's vector in its feature space: AdaptiveHead.word_vectors)."""
    model = lm.model
    out = {"input": model.embedding.weight.detach().float().numpy()}
    if not model.cfg.tie_weights:
        head = model.head
        weights = head.word_vectors() if hasattr(head, "word_vectors") else head.decoder.weight
        out["output"] = weights.detach().float().numpy()
    return out


def keyed_vectors(words: list[str], matrix: np.ndarray):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(matrix.shape[1], count=0, dtype=np.float32)
    kv.add_vectors(list(words), np.asarray(matrix, dtype=np.float32))
    return kv


def without_specials(tokens: list[str], matrix: np.ndarray):
    """The words only (<pad>, <unk>, <s>, </s> left out): what the benchmarks, neighbours and maps compare."""
    keep = [i for i, t in enumerate(tokens) if t not in SPECIALS]
    return keyed_vectors([tokens[i] for i in keep], matrix[keep])


def exported(tokens: list[str], matrix: np.ndarray):
    """The rows that go into a word2vec file: every vocabulary entry in order but NEVER_SEEN (<pad>)."""
    keep = [i for i, t in enumerate(tokens) if t not in NEVER_SEEN]
    return keyed_vectors([tokens[i] for i in keep], np.asarray(matrix)[keep])


def save_word2vec(kv, path) -> str:
    """Write kv in word2vec text format, atomically (gensim opens the path itself)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        kv.save_word2vec_format(str(tmp))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return str(path)


def export_words(lm, out_dir) -> list[str]:
    """out_dir/input.w2v.txt, and out_dir/output.w2v.txt when the weights are untied."""
    return [save_word2vec(exported(lm.vocab.tokens, m), Path(out_dir) / f"{name}.w2v.txt")
            for name, m in word_matrices(lm).items()]


def _reading(lm, ids: list[int]) -> tuple[list[int], int]:
    """The tokens the model reads for a sentence, and how many of the last of them are the sentence's words."""
    if lm.regime == "window":
        k = lm.n_step - 1
        return ([lm.bos] * k + ids)[-k:], min(len(ids), k)
    x = [lm.eos, *ids]
    if lm.model.cfg.arch == "transformer":  # its learned positions: the latest tokens it can place
        x = x[-(lm.max_len - lm.model.cfg.context_len):]
    return x, min(len(ids), len(x))


@torch.no_grad()
def sentence_vectors(lm, sentences: list[list[str]]) -> np.ndarray:
    """[len(sentences), d]: each sentence's vector (module docstring).  Sentences are batched by the length the
    model reads, so no padding enters any state."""
    pooled = lm.model.cfg.arch == "transformer"
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    inputs = [_reading(lm, lm.vocab.encode(s)) for s in sentences]
    for i, (x, words) in enumerate(inputs):
        groups[(len(x), words)].append(i)
    seen: list[torch.Tensor] = []
    hook = lm.model.head.register_forward_hook(lambda module, args, out: seen.append(args[0].detach().float()))
    out = None
    try:
        for (_, words), members in groups.items():
            for start in range(0, len(members), SENTENCE_BATCH):
                batch = members[start:start + SENTENCE_BATCH]
                seen.clear()
                lm._forward(torch.tensor([inputs[i][0] for i in batch]), last_only=not pooled)
                h = seen[-1]  # [B, H] (ffnn), [B, 1, H] (last position) or [B, T, H] (transformer)
                vec = h[:, -words:].mean(1) if pooled else h.reshape(len(batch), -1, h.shape[-1])[:, -1]
                if out is None:
                    out = np.zeros((len(sentences), vec.shape[-1]), dtype=np.float32)
                out[batch] = vec.numpy()
    finally:
        hook.remove()
    return out


def known_words(lm, sentence: list[str]) -> list[str]:
    return [w for w in sentence if w in lm.vocab.index and w not in SPECIALS]


def nearest_sentences(vectors: np.ndarray, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k rows of `vectors` nearest to `query` by cosine similarity: (row, cosine), nearest first."""
    from sklearn.neighbors import NearestNeighbors

    index = NearestNeighbors(n_neighbors=min(k, len(vectors)), metric="cosine", algorithm="brute").fit(vectors)
    distance, rows = index.kneighbors(query.reshape(1, -1))
    return [(int(r), float(1.0 - d)) for r, d in zip(rows[0], distance[0])]
