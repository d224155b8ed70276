"""The two baselines beside every neural model's word vectors: a count-based model and a random control.

PPMI-SVD (Levy, Goldberg & Dagan 2015, "Improving distributional similarity with lessons learned from word
embeddings"): word-context counts over a symmetric window of `window` tokens each side, within a sentence; positive
PMI with context-distribution smoothing (context counts raised to 0.75, their recommended setting); the matrix
reduced by truncated SVD to the neural model's dimension d, the word vectors being U_d Sigma_d^0.5 (their
eigenvalue weighting p = 0.5).  Counted over the training split, on the corpus's vocabulary: it sees exactly the
text and the words the neural models saw.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse

from lmgrid.common.errors import LmgridError

CDS_ALPHA = 0.75  # context-distribution smoothing (Levy et al. 2015, section 3.2)
EIGEN_P = 0.5  # eigenvalue weighting: W = U Sigma^p


def cooccurrence(sentences: list[list[str]], words: list[str], window: int) -> sparse.csr_matrix:
    """Symmetric counts [len(words)]^2 of word pairs at most `window` tokens apart within a sentence.  Tokens outside
    `words` keep their place (they are gaps, not removed), so distances are those of the text."""
    index = {w: i for i, w in enumerate(words)}
    ids = np.fromiter((index.get(t, -1) for s in sentences for t in s), dtype=np.int64)
    sent = np.repeat(np.arange(len(sentences)), [len(s) for s in sentences])
    rows, cols = [], []
    for d in range(1, window + 1):
        a, b = ids[:-d], ids[d:]
        keep = (sent[:-d] == sent[d:]) & (a >= 0) & (b >= 0)
        rows += [a[keep], b[keep]]
        cols += [b[keep], a[keep]]
    r, c = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in (rows, cols))
    n = len(words)
    return sparse.coo_matrix((np.ones(len(r)), (r, c)), shape=(n, n)).tocsr()  # duplicates are summed


def ppmi(counts: sparse.csr_matrix, alpha: float = CDS_ALPHA) -> sparse.csr_matrix:
    """max(0, log P(w, c) / (P(w) P_alpha(c))), with P_alpha(c) = #c^alpha / sum #c'^alpha."""
    counts = counts.tocoo()
    row = np.asarray(counts.sum(1)).ravel()  # #w (P(w) = #w / D: the total D cancels against P(w, c))
    col = np.asarray(counts.sum(0)).ravel() ** alpha
    pmi = np.log(counts.data * col.sum() / (row[counts.row] * col[counts.col]))
    keep = pmi > 0
    return sparse.csr_matrix((pmi[keep], (counts.row[keep], counts.col[keep])), shape=counts.shape)


def ppmi_svd(sentences: list[list[str]], words: list[str], dim: int, window: int, seed: int = 0):
    """(words kept, vectors [kept, dim]): words whose PPMI row is all zero have no vector (they count as out of
    the baseline's vocabulary rather than as a zero vector, whose cosine is undefined)."""
    from sklearn.decomposition import TruncatedSVD

    if dim >= len(words):
        raise LmgridError(f"PPMI-SVD: dimension {dim} is not below the vocabulary's {len(words)} words")
    m = ppmi(cooccurrence(sentences, words, window))
    svd = TruncatedSVD(n_components=dim, algorithm="randomized", random_state=seed)
    us = svd.fit_transform(m)  # U Sigma
    vectors = us * svd.singular_values_ ** (EIGEN_P - 1.0)
    kept = np.flatnonzero(np.asarray(abs(m).sum(1)).ravel() > 0)
    return [words[i] for i in kept], vectors[kept].astype(np.float32)


def random_vectors(words: list[str], dim: int, seed: int = 0):
    """The control: independent standard-normal vectors, which know nothing about the words."""
    return list(words), np.random.default_rng(seed).standard_normal((len(words), dim)).astype(np.float32)
