"""GRU language model (Cho et al. 2014): nn.GRU, or the equations of the PyTorch nn.GRU documentation written out.

    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn))      h' = (1 - z) * n + z * h

Note that r multiplies the hidden projection *including its bias* b_hn, so the two biases of n are not
interchangeable (unlike the LSTM's). The hand-written cell keeps nn.GRU's parameter names and its stacked row
order (r, z, n), so weights copy across unchanged; impl `torch` runs that cell on nn.GRU's own parameters when
the gates are asked for, since the fused kernel does not expose them.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .common import Embedding, OutputHead, fp32_recurrence, maybe_compiled, zeros_state
from .config import ModelConfig
from .lstm import torch_layout


def gru_step(x_proj_t, h, w_hh, b_hh):
    """One step; x_proj_t = W_i* x_t + b_i* for the three blocks, precomputed for all t at once."""
    xr, xz, xn = x_proj_t.chunk(3, 1)
    hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, 1)
    r = torch.sigmoid(xr + hr)
    z = torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return (1 - z) * n + z * h, z, r


def gru_cell_forward(x, h0, weights, dropout, training, return_gates, compiled=False):
    """Multi-layer GRU over [B, T, in] for weights in nn.GRU layout; dropout between layers as nn.GRU does."""
    step = maybe_compiled(gru_step, compiled)
    hs, gates = [], {"z": [], "r": []}
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(weights):
        if k > 0 and dropout > 0:
            x = F.dropout(x, dropout, training)
        x_proj = F.linear(x, w_ih, b_ih)
        h, outs, zs, rs = h0[k], [], [], []
        for t in range(x.shape[1]):
            h, z, r = step(x_proj[:, t], h, w_hh, b_hh)
            outs.append(h)
            if return_gates:
                zs.append(z)
                rs.append(r)
        x = torch.stack(outs, 1)
        hs.append(h)
        if return_gates:
            gates["z"].append(torch.stack(zs, 1))
            gates["r"].append(torch.stack(rs, 1))
    gates = {name: torch.stack(v) for name, v in gates.items()} if return_gates else None
    return x, torch.stack(hs), gates


class GRUCellStack(nn.Module):
    """`cell`: weight_ih_l{k} [3H, in], weight_hh_l{k} [3H, H], bias_ih_l{k}, bias_hh_l{k}, as in nn.GRU."""

    def __init__(self, input_size: int, hidden: int, layers: int, dropout: float, compiled: bool = False):
        super().__init__()
        self.layers, self.dropout, self.compiled = layers, dropout, compiled
        for k in range(layers):
            in_k = input_size if k == 0 else hidden
            setattr(self, f"weight_ih_l{k}", nn.Parameter(torch.empty(3 * hidden, in_k)))
            setattr(self, f"weight_hh_l{k}", nn.Parameter(torch.empty(3 * hidden, hidden)))
            setattr(self, f"bias_ih_l{k}", nn.Parameter(torch.empty(3 * hidden)))
            setattr(self, f"bias_hh_l{k}", nn.Parameter(torch.empty(3 * hidden)))
        bound = 1.0 / math.sqrt(hidden)  # nn.GRU's init
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x, h0, return_gates=False):
        return gru_cell_forward(x, h0, torch_layout(self, self.layers), self.dropout, self.training, return_gates,
                                self.compiled)


class GRULM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = Embedding(cfg.vocab_size, cfg.emb_dim)
        self.drop = nn.Dropout(cfg.dropout)
        between = cfg.dropout if cfg.layers > 1 else 0.0
        if cfg.impl == "torch":
            self.rnn = nn.GRU(cfg.emb_dim, cfg.hidden_dim, cfg.layers, batch_first=True, dropout=between)
        else:
            self.rnn = GRUCellStack(cfg.emb_dim, cfg.hidden_dim, cfg.layers, between, cfg.compile)
        self.head = OutputHead(cfg, cfg.hidden_dim, self.embedding)

    def torch_layout(self):
        return torch_layout(self.rnn, self.cfg.layers)

    @torch.no_grad()
    def copy_weights_from(self, other: "GRULM") -> "GRULM":
        """Same parameter names in both impls, so a state_dict copy maps them."""
        self.load_state_dict(other.state_dict())
        return self

    def forward(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = False):
        """tokens [B, T] -> logits [B, T, V] ([B, 1, V] with last_only), state h [layers, B, H],
        gates {z, r: [layers, B, T, H]}."""
        x = self.drop(self.embedding(tokens))
        with fp32_recurrence(x):  # see common.fp32_recurrence
            x = x.float()
            state = (zeros_state(self.cfg.layers, tokens.shape[0], self.cfg.hidden_dim, x) if state is None
                     else state.float())
            gates = None
            if isinstance(self.rnn, nn.GRU):
                if return_gates:
                    out, state, gates = gru_cell_forward(x, state, self.torch_layout(), self.rnn.dropout,
                                                         self.training, True)
                else:
                    out, state = self.rnn(x, state)
            else:
                out, state, gates = self.rnn(x, state, return_gates)
        return self.head(out[:, -1:] if last_only else out), state, gates

    @staticmethod
    def detach_state(state):
        return None if state is None else state.detach()
