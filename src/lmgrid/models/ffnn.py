"""Bengio et al. (2003), "A Neural Probabilistic Language Model": a feed-forward n-gram model.

The n_step-1 context embeddings are concatenated into x, then y = b + W x + U act(d + H x) (the paper's eq.,
generalised to `layers` hidden layers); W x is the optional "direct" embedding-to-output connection.
"""
from __future__ import annotations

import torch
from torch import nn

from lmgrid.common.errors import LmgridError

from lmgrid.models.adaptive import output_layer
from lmgrid.models.common import INIT_RANGE, Embedding, LMBase, stack_layers
from lmgrid.models.config import ModelConfig

ACT = {"tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}


class FFNNLM(LMBase):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.context = cfg.n_step - 1
        self.embedding = Embedding(cfg.vocab_size, cfg.emb_dim)
        self.drop = nn.Dropout(cfg.dropout)
        widths = [self.context * cfg.emb_dim] + [cfg.hidden_dim] * cfg.layers
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.act = ACT[cfg.activation]()
        self.head = output_layer(cfg, cfg.hidden_dim, self.embedding)
        self.direct = None
        if cfg.direct:
            # No bias: the output layer's bias is the paper's b already.
            self.direct = nn.Linear(self.context * cfg.emb_dim, cfg.vocab_size, bias=False)
            nn.init.uniform_(self.direct.weight, -INIT_RANGE, INIT_RANGE)

    def _layers(self, tokens: torch.Tensor):
        """(the concatenated context embeddings x [B, (n-1)*emb], the last hidden layer h [B, H])."""
        if tokens.dim() != 2 or tokens.shape[1] != self.context:
            raise LmgridError(
                f"ffnn: input of shape {tuple(tokens.shape)} is not [batch, n_step-1={self.context}]")
        x = self.drop(self.embedding(tokens).flatten(1))  # [B, (n-1)*emb]
        # Dropout between hidden layers (the head applies the last one); residual from the second layer on.
        h, _ = stack_layers(x, len(self.hidden), lambda k, h: (self.act(self.hidden[k](h)),), self.cfg.dropout,
                            self.training, self.cfg.residual)
        return x, h

    def features(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = True):
        """tokens [B, n_step-1] -> hidden [B, 1, H] before the output layer (without the direct connections, which
        ModelConfig allows with the full softmax only)."""
        return self._layers(tokens)[1].unsqueeze(1), None, ({} if return_gates else None)

    def forward(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = True):
        """tokens [B, n_step-1] -> logits [B, 1, V] for the token after the window. Stateless: state is None.
        `last_only` is accepted for the shared interface: a feed-forward model predicts one position anyway."""
        x, h = self._layers(tokens)
        logits = self.head(h.unsqueeze(1))
        if self.direct is not None:
            logits = logits + self.direct(x).unsqueeze(1)
        return logits, None, ({} if return_gates else None)

    @staticmethod
    def detach_state(state):
        return None
