"""A small causal Transformer decoder (GPT-style): learned positions, pre-LayerNorm blocks
(x + attn(LN(x)), then x + MLP(LN(x)) with a 4x GELU MLP), a final LayerNorm and the output layer.

Width is cfg.hidden_dim (emb_dim is unused).  Its "state" is the text itself: the latest cfg.context_len tokens
before the current chunk, which it attends to but does not predict.  In the stream regime (context_len = bptt,
max_len = 2 * bptt) each chunk of bptt tokens is read after the previous chunk of its row, so its first position
attends to bptt earlier tokens and its last to 2 * bptt - 1, instead of the context resetting at every chunk
boundary (as in Transformer-XL's segment recurrence, with tokens recomputed rather than cached hidden states).
The chunk always starts at position context_len, whether or not a previous chunk precedes it (a row's first chunk
has none), and positions count forward from there, so neither a row's start nor tail padding moves a token's
position: the stream PPL does not depend on how a split is cut into rows.  The window regime (context_len 0)
passes no state: a window is the whole context.  Only the last block is cut to the predicted positions (the
chunk's, or with last_only the last one): it needs keys and values at every position, but its queries, output
projection and MLP there alone; every earlier block runs on every position, which later blocks attend to.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lmgrid.common.errors import LmgridError

from lmgrid.models.adaptive import output_layer
from lmgrid.models.common import LMBase
from lmgrid.models.config import ModelConfig


def last_queries_mask(n: int, length: int, device) -> torch.Tensor:
    """[n, length] bool, True where attending is allowed: query i sits at position length - n + i and sees keys
    0 .. length - n + i (is_causal would align it at position i instead)."""
    return torch.ones(n, length, dtype=torch.bool, device=device).tril(length - n)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads, self.dropout = cfg.heads, cfg.dropout
        self.qkv = nn.Linear(cfg.hidden_dim, 3 * cfg.hidden_dim)
        self.proj = nn.Linear(cfg.hidden_dim, cfg.hidden_dim)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, queries: int | None = None) -> torch.Tensor:
        """x [B, L, C] -> [B, n, C] at the last n = `queries` positions (all L when None), each attending to the
        positions up to its own."""
        B, L, C = x.shape
        n = L if queries is None else queries
        heads = lambda t, m: t.reshape(B, m, self.heads, C // self.heads).transpose(1, 2)  # noqa: E731
        dropout = self.dropout if self.training else 0.0
        if n == L:
            q, k, v = (heads(t, L) for t in self.qkv(x).split(C, 2))
            # is_causal applies the lower-triangular mask: position t attends to positions <= t only.
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:  # queries of the last n positions only; keys and values of all L
            w_q, w_kv = self.qkv.weight.split([C, 2 * C])
            b_q, b_kv = self.qkv.bias.split([C, 2 * C])
            q = heads(F.linear(x[:, L - n:], w_q, b_q), n)
            k, v = (heads(t, L) for t in F.linear(x, w_kv, b_kv).split(C, 2))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=last_queries_mask(n, L, x.device),
                                               dropout_p=dropout)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, n, C)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.hidden_dim), nn.LayerNorm(cfg.hidden_dim)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden_dim, 4 * cfg.hidden_dim), nn.GELU(),
                                 nn.Linear(4 * cfg.hidden_dim, cfg.hidden_dim), nn.Dropout(cfg.dropout))

    def forward(self, x, queries: int | None = None):
        """x [B, L, C] -> [B, n, C]: the block's output at the last n = `queries` positions (all L when None)."""
        attended = self.attn(self.ln1(x), queries)
        x = x[:, x.shape[1] - attended.shape[1]:] + attended
        return x + self.mlp(self.ln2(x))


class TransformerLM(LMBase):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_dim)
        self.position = nn.Embedding(cfg.max_len, cfg.hidden_dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden_dim)
        self.head = output_layer(cfg, cfg.hidden_dim, self.embedding)
        # GPT-2 init: N(0, 0.02), residual output projections scaled by 1/sqrt(2*layers) so the residual stream's
        # variance does not grow with depth; with the small output weights the untrained loss is ~log(V).
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * cfg.layers) if name.endswith(("attn.proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def features(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = False):
        """tokens [B, T] (T <= max_len - context_len) -> hidden [B, T, H] ([B, 1, H] with last_only), after the
        final LayerNorm (forward applies the output layer); state: the tokens before `tokens` (None = none), of
        which the latest context_len are attended to; returns the new state (the tokens read so far, trimmed at the
        next call), no gates."""
        T, context = tokens.shape[1], self.cfg.context_len
        if context + T > self.cfg.max_len:
            raise LmgridError(f"transformer: sequence length {T} exceeds model.max_len={self.cfg.max_len}"
                              + (f" - context_len={context}" if context else ""))
        prefix = state[:, max(state.shape[1] - context, 0):] if state is not None and context else tokens[:, :0]
        inp = torch.cat([prefix, tokens], 1)
        start = context - prefix.shape[1]  # the chunk's first token sits at position `context`, always
        x = self.drop(self.embedding(inp) + self.position(torch.arange(start, start + inp.shape[1],
                                                                       device=tokens.device)))
        # Only the new positions (or the last one) are predicted: the last block computes its queries, output
        # projection and MLP there alone; the earlier blocks run on every position, whose keys and values it reads.
        for block in self.blocks[:-1]:
            x = block(x)
        x = self.blocks[-1](x, 1 if last_only else T)
        return self.ln_f(x), inp, ({} if return_gates else None)

    @staticmethod
    def detach_state(state):
        return state  # token ids: no graph to cut
