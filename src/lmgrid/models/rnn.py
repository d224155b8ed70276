"""Elman (1990) simple recurrent network, h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), via nn.RNN."""
from __future__ import annotations

import torch
from torch import nn

from .common import Embedding, OutputHead, fp32_recurrence
from .config import ModelConfig


class RNNLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = Embedding(cfg.vocab_size, cfg.emb_dim)
        self.drop = nn.Dropout(cfg.dropout)
        # nn.RNN's own dropout acts between layers only, the same place the hand-written LSTM/GRU put it.
        self.rnn = nn.RNN(cfg.emb_dim, cfg.hidden_dim, cfg.layers, nonlinearity="tanh", batch_first=True,
                          dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        self.head = OutputHead(cfg, cfg.hidden_dim, self.embedding)

    def forward(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = False):
        """tokens [B, T] -> logits [B, T, V] ([B, 1, V] with last_only); state h [layers, B, H] (None = zeros).
        An RNN has no gates."""
        x = self.drop(self.embedding(tokens))
        with fp32_recurrence(x):  # see common.fp32_recurrence
            out, state = self.rnn(x.float(), None if state is None else state.float())
        return self.head(out[:, -1:] if last_only else out), state, ({} if return_gates else None)

    @staticmethod
    def detach_state(state):
        return None if state is None else state.detach()
