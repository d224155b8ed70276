"""A trained neural run's word vectors and sentence vectors, and the nearest sentences of a file to a query.

Word vectors are the rows of the input embedding and, when the weights are untied, of the output layer: one row
per vocabulary entry, in vocabulary order, but for the ids the model never reads nor predicts (NEVER_SEEN: the
padding id <pad>, whose row keeps its initial weights), written in word2vec text format (gensim's
KeyedVectors.load_word2vec_format reads them back exactly: numpy prints the shortest float32 repr; the header's row
count is the rows written).

A sentence vector is a smooth-inverse-frequency (SIF) average of the model's states, as in Arora, Liang & Ma 2017
("A simple but tough-to-beat baseline for sentence embeddings"), the same for every architecture:
1. word states: for each word of the sentence, what the output layer reads when the model predicts the token after
   it, the sentence read as the run reads text (neural.model_io): window regime, the n_step-1 tokens ending at the
   word, left-padded with <s>; stream regime, the sentence after one </s> from a zero state (rnn/lstm/gru: the top
   layer's output, with `residual` including its input; transformer: after the final LayerNorm, its latest
   max_len - context_len tokens; ffnn: the last hidden layer);
2. their mean weighted by a / (a + p(w)), a = SIF_A, p the word's training frequency from the vocabulary's counts
   ('.', 'the' count little, rare words about 1);
3. less its projection on the common component: the first (uncentered) singular vector of the weighted means of a
   reference set (reference_sentences: the corpus's first REFERENCE_SENTENCES training sentences, in file order).
Chosen by measurement (issue 47 item 6; tests/test_embed_sentences.py's setting: synthetic corpus, 2,000 training
sentences, 300 held-out ones each the query, LSTM 32-d trained 300 steps): the last state, what this module gave
before, put every sentence at cosine ~1 to every other (a query's median cosine to the others, averaged over
queries, 0.997; 95% of top-5 neighbours above 0.999), because every synthetic sentence ends in '.'; the plain mean
of the word states 0.957, the SIF mean 0.904, SIF with the common component removed 0.029.  A query's nearest
neighbour shares 1.11 content words with it (last state 0.99; a random sentence 0.62).  GRU and transformer agreed
(docs/results.md, "Embeddings").
Vectors are batched by the length the model reads, so no padding enters any state: a sentence gets the same vector
alone as in any batch, given the same common component.
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
from lmgrid.neural.precision import autocast

SENTENCE_BATCH = 256
WINDOW_BATCH = 1024
SIF_A = 1e-3  # Arora et al.'s a: words with p(w) >> a count little (., the, a), rare ones about 1
REFERENCE_SENTENCES = 2000  # the common component's reference: the first this many training sentences
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


@torch.no_grad()
def _word_states(lm, sentences: list[list[str]]) -> list[tuple[list[int], np.ndarray]]:
    """Per sentence: the ids of its words that the model places, and [n, H] what the output layer reads after each of
    them (when it predicts the next token).  Window regime: word i's window is the n_step-1 tokens ending at it,
    left-padded with <s>; every window has the same length, so they are batched regardless of sentence.  Stream
    regime: the sentence after one </s> from a zero state (the transformer: its latest max_len - context_len tokens),
    batched with sentences of the same length only, so no padding enters any state."""
    model, ids = lm.model, [lm.vocab.encode(s) for s in sentences]
    out: list = [None] * len(ids)
    with autocast(lm.precision, "cpu"):
        if lm.regime == "window":
            k = lm.n_step - 1
            windows = [([lm.bos] * k + s)[i + 1:i + 1 + k] for s in ids for i in range(len(s))]
            states = [model.features(torch.tensor(windows[b:b + WINDOW_BATCH]), last_only=True)[0][:, -1].float()
                      for b in range(0, len(windows), WINDOW_BATCH)]
            flat = torch.cat(states).numpy() if states else np.zeros((0, 0), dtype=np.float32)
            pos = 0
            for j, s in enumerate(ids):
                out[j] = (s, flat[pos:pos + len(s)])
                pos += len(s)
            return out
        keep = lm.max_len - model.cfg.context_len if model.cfg.arch == "transformer" else None
        inputs = [[lm.eos, *s][-keep:] if keep else [lm.eos, *s] for s in ids]
        groups: dict[int, list[int]] = defaultdict(list)
        for j, x in enumerate(inputs):
            groups[len(x)].append(j)
        for length, members in groups.items():
            for b in range(0, len(members), SENTENCE_BATCH):
                batch = members[b:b + SENTENCE_BATCH]
                h = model.features(torch.tensor([inputs[j] for j in batch]))[0].float().numpy()
                for row, j in enumerate(batch):
                    n = min(len(ids[j]), length)
                    out[j] = (ids[j][-n:], h[row, length - n:])
    return out


def sif_weights(vocab) -> np.ndarray:
    """[V]: a / (a + p(w)), p the training unigram frequency (vocab counts, </s> one per sentence)."""
    counts = np.array([vocab.counts.get(t, 0) for t in vocab.tokens], dtype=np.float64)
    if counts.sum() <= 0:
        raise LmgridError("sentence vectors: the run's vocabulary has no training counts (SIF weights need them)")
    return SIF_A / (SIF_A + counts / counts.sum())


def weighted_means(lm, sentences: list[list[str]]) -> np.ndarray:
    """[len(sentences), H]: each sentence's SIF-weighted mean of its word states (before the common component is
    removed)."""
    weights = sif_weights(lm.vocab)
    states = _word_states(lm, sentences)
    dim = next((h.shape[1] for _, h in states if h.size), lm.model.cfg.hidden_dim)
    out = np.zeros((len(sentences), dim), dtype=np.float64)
    for j, (ids, h) in enumerate(states):
        if len(ids):
            out[j] = (weights[ids][:, None] * h).sum(0) / len(ids)
    return out


def common_component(lm, reference: list[list[str]]) -> np.ndarray:
    """[H], unit length: the first right singular vector of the reference sentences' weighted means (uncentered, as
    Arora et al.: the direction every sentence shares).  Its sign is fixed (largest |entry| positive); removal does
    not depend on it, but the vector is then the same on every run."""
    if not reference:
        raise LmgridError("sentence vectors: the reference set for the common component is empty")
    _, _, vt = np.linalg.svd(weighted_means(lm, reference), full_matrices=False)
    u = vt[0]
    return u if u[np.argmax(np.abs(u))] > 0 else -u


def sentence_vectors(lm, sentences: list[list[str]], reference: list[list[str]] | None = None,
                     component: np.ndarray | None = None) -> np.ndarray:
    """[len(sentences), H] float32: SIF vectors (module docstring).  The common component is `component` when given,
    else that of `reference`, else that of `sentences` themselves."""
    if component is None:
        component = common_component(lm, reference if reference is not None else sentences)
    v = weighted_means(lm, sentences)
    return (v - np.outer(v @ component, component)).astype(np.float32)


def known_words(lm, sentence: list[str]) -> list[str]:
    return [w for w in sentence if w in lm.vocab.index and w not in SPECIALS]


def nearest_sentences(vectors: np.ndarray, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k rows of `vectors` nearest to `query` by cosine similarity: (row, cosine), nearest first."""
    from sklearn.neighbors import NearestNeighbors

    index = NearestNeighbors(n_neighbors=min(k, len(vectors)), metric="cosine", algorithm="brute").fit(vectors)
    distance, rows = index.kneighbors(query.reshape(1, -1))
    return [(int(r), float(1.0 - d)) for r, d in zip(rows[0], distance[0])]


def reference_sentences(run_dir, reference_path, sentences, sentences_path) -> tuple[list[list[str]], str]:
    """The common component's reference set and where it came from: the first REFERENCE_SENTENCES sentences of
    `reference_path` when given, else of the run's corpus training split (results/<corpus>/corpus/train.txt beside
    results/<corpus>/runs/<arch>/<impl>/<cell>) when there is one, else of `sentences` (read from sentences_path).
    File order, no sampling: the same file gives the same component."""
    from lmgrid.data.corpus import read_sentences

    if reference_path is None:
        parents = Path(run_dir).resolve().parents
        train = parents[3] / "corpus" / "train.txt" if len(parents) > 3 and parents[2].name == "runs" else None
        if train is None or not train.is_file():
            return sentences[:REFERENCE_SENTENCES], str(sentences_path)
        reference_path = train
    return read_sentences(reference_path)[0][:REFERENCE_SENTENCES], str(reference_path)
