"""The adaptive softmax of Grave et al. (2017), "Efficient softmax approximation for GPUs": `output_layer: adaptive`.

The vocabulary is cut by id into a head [0, c_1) and tail clusters [c_1, c_2), ..., [c_k, V).  The head is a
softmax over its c_1 words plus one entry per tail cluster; a word w of tail cluster i has

    log p(w | h) = log p_head(cluster i | h) + log p_i(w | P_i h),

where P_i is a bias-free projection to d / 4^i dimensions (Grave et al.'s div_value 4) and p_i a softmax over the
cluster's words.  This is an exact, normalised distribution over the whole vocabulary, not an approximation of
another one: `forward` returns its full log-probabilities (which every consumer of logits, log_softmax,
cross_entropy, sampling, can take as they are), and `nll` returns the same NLL without building the [N, V]
matrix: the head for every position, and each tail only for the positions whose target lies in it.  That is where
training gets its speed: with PTB's cutoffs 87% of the targets need no tail at all.

Cutoffs (`adaptive_cutoffs`): the clusters need the vocabulary ordered by frequency, and lmgrid.data.vocab already
assigns ids that way (the four specials 0..3, then train words by descending count), so no remapping is needed;
the specials simply sit in the head.  c_1 is the shortest id prefix whose train counts cover HEAD_COVERAGE = 87%
of the training tokens, c_2 the one covering TAIL_COVERAGE = 97%, each rounded to the nearest multiple of
10^(floor(log10 V) - 2) (100 words for PTB's V = 10,002, which gives 2000 and 6200); a cutoff that would not
leave each cluster at least one word is dropped.  Grave et al. put the most frequent ~80-90% of the tokens into a
head of a few thousand words and use 2-5 clusters; two tail clusters of 10% and 3% of the tokens follow them.

With `tie_weights` the head's word rows are the embedding's rows [0, c_1) and tail cluster i's output rows the
embedding's rows [c_i, c_{i+1}) (as fairseq ties an adaptive softmax to its input embedding).  Our embedding is
one full-width table, not fairseq's adaptive input with narrower tail embeddings, so a tied tail cannot shrink its
width: its projection P_i is then a square emb_dim x emb_dim one.  Untied, every row is this module's own.

Precision: under bf16-mixed the matrix products run in bf16, as the full softmax's do, and every log-softmax,
sum and gather in float32 (each part's scores are cast before they are normalised), so the distribution stays
normalised to float32 rounding and the loss is float32.  (PyTorch's AdaptiveLogSoftmaxWithLoss fails under CPU bf16
autocast, index_copy_ with mismatched dtypes, pytorch#44724; this module copies no scores into a preallocated
tensor.)  Measured (docs/benchmarks.md) at 1 thread, [700 x 200] -> 10,000, forward and backward: 25 ms with
everything in float32, 11 ms with bf16 products, against the full softmax's 114 ms (fp32) and 41 ms (bf16).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lmgrid.models.common import INIT_RANGE, OutputHead
from lmgrid.models.config import ModelConfig
# The cluster rule is torch-free (the workflow costs a model when it plans, without torch): re-exported here.
from lmgrid.models.clusters import DIV_VALUE, HEAD_COVERAGE, TAIL_COVERAGE, adaptive_cutoffs  # noqa: F401


def _uniform(*shape) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape).uniform_(-INIT_RANGE, INIT_RANGE))


class AdaptiveHead(nn.Module):
    """hidden [.., in_dim] -> exact log-probabilities [.., V] (float32), with dropout before it; `nll` for training."""

    def __init__(self, cfg: ModelConfig, in_dim: int, embedding: nn.Embedding | None):
        super().__init__()
        self.drop = nn.Dropout(cfg.dropout)
        self.bounds = [*cfg.cutoffs, cfg.vocab_size]  # cluster i (0 = head words) is ids [bounds[i-1], bounds[i])
        head, n_tails = self.bounds[0], len(cfg.cutoffs)
        if cfg.tie_weights:
            dim = embedding.weight.shape[1]
            self.proj = nn.Linear(in_dim, dim, bias=False) if in_dim != dim else nn.Identity()
            self._tied = (embedding,)  # a tuple: not a submodule, so its weight is not saved twice
            self.head_words = None
        else:
            dim = in_dim
            self.proj = nn.Identity()
            self._tied = None
            self.head_words = _uniform(head, dim)
        self.head_clusters = _uniform(n_tails, dim)
        self.head_bias = nn.Parameter(torch.zeros(head + n_tails))
        self.tail_proj = nn.ModuleList()
        self.tail_words = nn.ParameterList()
        self.tail_bias = nn.ParameterList()
        for i in range(n_tails):
            width = dim if cfg.tie_weights else max(1, dim // DIV_VALUE ** (i + 1))
            self.tail_proj.append(nn.Linear(dim, width, bias=False))
            if not cfg.tie_weights:
                self.tail_words.append(_uniform(self.bounds[i + 1] - self.bounds[i], width))
            self.tail_bias.append(nn.Parameter(torch.zeros(self.bounds[i + 1] - self.bounds[i])))

    def _rows(self, cluster: int) -> torch.Tensor:
        """The output rows of cluster 0 (head words) or tail cluster i >= 1."""
        if self._tied is not None:
            lo = self.bounds[cluster - 1] if cluster else 0
            return self._tied[0].weight[lo:self.bounds[cluster]]
        return self.head_words if cluster == 0 else self.tail_words[cluster - 1]

    def _blocks(self) -> list[torch.Tensor]:
        """Every cluster's output rows, [head words, tail 1, ..]: what one forward pass uses.

        Why one split: tied, each cluster's rows are a slice of the embedding table, and each slice taken on its own
        has its own backward, which builds a zero-filled [V, d] gradient and adds it to the table's, once per
        cluster.  One `split` is one backward that concatenates the clusters' gradients into a single [V, d]
        tensor; the rows are disjoint, so every gradient entry is the same float either way (adding the other
        slices' zeros is exact), at a fraction of the memory traffic (on PTB's tied RNN 1x600 the zero fills and
        adds were about a fifth of a training step: docs/benchmarks.md)."""
        if self._tied is None:
            return [self._rows(c) for c in range(len(self.bounds))]
        sizes = [hi - lo for lo, hi in zip([0, *self.bounds[:-1]], self.bounds)]
        return list(self._tied[0].weight.split(sizes))

    def word_vectors(self) -> torch.Tensor:
        """One output vector per word [V, dim], in the space of the features x (after `proj`): word w of tail
        cluster i has within-cluster logit x . (P_i^T r_w), so its vector is P_i^T r_w; a head word's is its row.
        What an untied adaptive layer has in place of the full softmax's output matrix (lmgrid embed)."""
        parts = [self._rows(0)]
        for i, proj in enumerate(self.tail_proj):
            parts.append(self._rows(i + 1) @ proj.weight)  # [n_i, width] @ [width, dim]
        return torch.cat(parts)

    def _head_log_probs(self, x, rows=None):
        """log p_head over the head's words (`rows`, default `_rows(0)`) and then its clusters, in float32."""
        rows = self._rows(0) if rows is None else rows
        return F.log_softmax(F.linear(x, torch.cat([rows, self.head_clusters]), self.head_bias).float(), -1)

    def _tail_log_probs(self, i: int, x, rows=None):
        """log p_i(w | x) over tail cluster i's words (i from 0; `rows`, default `_rows(i + 1)`), in float32."""
        rows = self._rows(i + 1) if rows is None else rows
        return F.log_softmax(F.linear(self.tail_proj[i](x), rows, self.tail_bias[i]).float(), -1)

    def _features(self, hidden: torch.Tensor) -> torch.Tensor:
        # Flattened positions, one matrix product per part (see OutputHead.forward).
        return self.proj(self.drop(hidden.reshape(-1, hidden.shape[-1])))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        x, blocks = self._features(hidden), self._blocks()
        head_lp = self._head_log_probs(x, blocks[0])
        head = self.bounds[0]
        parts = [head_lp[:, :head]]
        for i in range(len(self.tail_proj)):
            parts.append(head_lp[:, head + i:head + i + 1] + self._tail_log_probs(i, x, blocks[i + 1]))
        out = torch.cat(parts, -1)
        return out.view(*hidden.shape[:-1], out.shape[-1])

    def nll(self, hidden: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        """Sum of -log p(target | hidden) over the targets != ignore_index: hidden [.., in_dim], target [..]."""
        x, t = self._features(hidden), target.reshape(-1)
        keep = t != ignore_index
        x, t = x[keep], t[keep]
        head = self.bounds[0]
        head_target = t.clone()
        members = []
        for i in range(len(self.tail_proj)):
            rows = ((t >= self.bounds[i]) & (t < self.bounds[i + 1])).nonzero().squeeze(1)
            head_target[rows] = head + i
            members.append(rows)
        blocks = self._blocks()
        total = -self._head_log_probs(x, blocks[0]).gather(1, head_target[:, None]).sum()
        # Every tail is called, with no rows when no target falls in it: its parameters are then in the graph with
        # zero gradients, which DDP (train.devices > 1) requires of every parameter at every step.
        for i, rows in enumerate(members):
            total = total + self._tail_nll(i, x[rows], t[rows] - self.bounds[i], blocks[i + 1])
        return total

    def token_nll(self, hidden: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        """-log p(target | hidden) per position, shaped as target, 0 where target == ignore_index: the terms whose
        sum `nll` returns (computed apart, so that `nll`'s own arithmetic stays what training used)."""
        x, t = self._features(hidden), target.reshape(-1)
        keep = t != ignore_index
        out = torch.zeros(t.shape, dtype=torch.float32, device=t.device)
        x, tk = x[keep], t[keep]
        head = self.bounds[0]
        head_target = tk.clone()
        per = torch.zeros(tk.shape, dtype=torch.float32, device=t.device)
        blocks = self._blocks()
        for i in range(len(self.tail_proj)):
            rows = ((tk >= self.bounds[i]) & (tk < self.bounds[i + 1])).nonzero().squeeze(1)
            head_target[rows] = head + i
            if len(rows):
                per[rows] -= self._tail_log_probs(i, x[rows], blocks[i + 1]).gather(
                    1, (tk[rows] - self.bounds[i])[:, None])[:, 0]
        per -= self._head_log_probs(x, blocks[0]).gather(1, head_target[:, None])[:, 0]
        out[keep] = per
        return out.view(target.shape)

    def _tail_nll(self, i: int, x, word, rows=None) -> torch.Tensor:
        """-sum log p_i(word | x) within tail cluster i (from 0); word counts from the cluster's first id."""
        return -self._tail_log_probs(i, x, rows).gather(1, word[:, None]).sum()


def output_layer(cfg: ModelConfig, in_dim: int, embedding: nn.Embedding | None) -> nn.Module:
    """The output layer cfg.output_layer names: the full softmax's OutputHead (logits) or the adaptive softmax
    (exact log-probabilities, which serve wherever logits do)."""
    if cfg.output_layer == "adaptive":
        return AdaptiveHead(cfg, in_dim, embedding)
    return OutputHead(cfg, in_dim, embedding)
