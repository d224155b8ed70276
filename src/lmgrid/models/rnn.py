"""Elman (1990) simple recurrent network, h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh), via nn.RNN."""
from __future__ import annotations

import torch
from torch import nn

from lmgrid.models.adaptive import output_layer
from lmgrid.models.common import Embedding, LMBase, fp32_recurrence, init_recurrence, zeros_state
from lmgrid.models.lstm import library_stack, run_library_stack, torch_layout
from lmgrid.models.config import ModelConfig


class RNNLM(LMBase):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = Embedding(cfg.vocab_size, cfg.emb_dim)
        self.drop = nn.Dropout(cfg.dropout)
        # nn.RNN's own dropout acts between layers only, the same place the hand-written LSTM/GRU put it.
        self.rnn = library_stack(nn.RNN, cfg.emb_dim, cfg.hidden_dim, cfg.layers, cfg.dropout, cfg.residual,
                                 nonlinearity="tanh")
        self.head = output_layer(cfg, cfg.hidden_dim, self.embedding)
        init_recurrence(torch_layout(self.rnn, cfg.layers), cfg.hidden_dim)

    def features(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = False):
        """tokens [B, T] -> hidden [B, T, H] ([B, 1, H] with last_only; forward applies the output
        layer); state h [layers, B, H] (None = zeros). An RNN has no gates."""
        x = self.drop(self.embedding(tokens))
        with fp32_recurrence(x):  # see common.fp32_recurrence
            if state is None:
                state = zeros_state(self.cfg.layers, tokens.shape[0], self.cfg.hidden_dim, x.float())
            out, state = run_library_stack(self.rnn, x.float(), state.float(), self.cfg.dropout if self.cfg.layers > 1
                                           else 0.0, self.training, self.cfg.residual, self.cfg.weight_drop)
        return out[:, -1:] if last_only else out, state, ({} if return_gates else None)

    @staticmethod
    def detach_state(state):
        return None if state is None else state.detach()
