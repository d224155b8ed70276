"""GRU language model (Cho et al. 2014): nn.GRU, or the equations of the PyTorch nn.GRU documentation written out.

    r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn))      h' = (1 - z) * n + z * h

Note that r multiplies the hidden projection *including its bias* b_hn, so the two biases of n are not
interchangeable (unlike the LSTM's). The hand-written cell keeps nn.GRU's parameter names and its stacked row
order (r, z, n), so weights copy across unchanged. The fused kernel of impl `torch` does not expose its gates; when
they are asked for, r and z are recomputed from each layer's inputs and outputs (lstm.run_library_stack_with_gates).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lmgrid.models.adaptive import output_layer
from lmgrid.models.common import (Embedding, LMBase, construction_draws_discarded, fp32_recurrence, init_recurrence,
                     maybe_compiled, stack_layers, zeros_state)
from lmgrid.models.bptt import GRULayer, runs_whole_layer
from lmgrid.models.config import ModelConfig
from lmgrid.models.lstm import library_stack, run_library_stack, run_library_stack_with_gates, torch_layout


def gru_step(x_proj_t, h, w_hh_t, b_hh):
    """One step; x_proj_t = W_i* x_t + b_i* for the three blocks, precomputed for all t at once; w_hh_t = W_h*^T.
    Written with few operations (see models/lstm.py): r and z in one sigmoid, n's r * (W_hn h + b_hn) in an
    addcmul, and h' = (1 - z) * n + z * h as n + z * (h - n), another addcmul."""
    H = h.shape[1]
    x_rz, x_n = x_proj_t.split([2 * H, H], 1)
    h_rz, h_n = torch.addmm(b_hh, h, w_hh_t).split([2 * H, H], 1)
    r, z = torch.sigmoid(x_rz + h_rz).chunk(2, 1)
    n = torch.tanh(torch.addcmul(x_n, r, h_n))
    return torch.addcmul(n, z, h - n), z, r


def gru_gates_of(x, h_prev, weights) -> dict:
    """z and r at every step of one layer from its inputs x [B, T, in] and h_{t-1} [B, T, H]."""
    w_ih, w_hh, b_ih, b_hh = weights
    xr, xz, _ = F.linear(x, w_ih, b_ih).chunk(3, -1)
    hr, hz, _ = F.linear(h_prev, w_hh, b_hh).chunk(3, -1)
    return {"z": torch.sigmoid(xz + hz), "r": torch.sigmoid(xr + hr)}


def gru_cell_forward(x, h0, weights, dropout, training, return_gates, compiled=False, residual=False,
                     hand_bptt=True):
    """Multi-layer GRU over [B, T, in] for weights in nn.GRU layout; dropout between layers as nn.GRU does.
    With `hand_bptt` (and neither gates nor compile asked for) each layer is one bptt.GRULayer, the same function
    with its backward through time written out; else the step-by-step loop below, under autograd."""
    step = maybe_compiled(gru_step, compiled)
    whole_layer = runs_whole_layer(hand_bptt, return_gates, compiled)

    def layer(k, x):
        w_ih, w_hh, b_ih, b_hh = weights[k]
        x_proj = F.linear(x, w_ih, b_ih)
        if whole_layer:
            return (*GRULayer.apply(x_proj, h0[k], w_hh, b_hh), None, None)
        h, outs, zs, rs, w_hh_t = h0[k], [], [], [], w_hh.t()
        for t in range(x.shape[1]):
            h, z, r = step(x_proj[:, t], h, w_hh_t, b_hh)
            outs.append(h)
            if return_gates:
                zs.append(z)
                rs.append(r)
        return torch.stack(outs, 1), h, zs, rs

    x, per_layer = stack_layers(x, len(weights), layer, dropout, training, residual)
    hs, zs, rs = zip(*per_layer)
    gates = None
    if return_gates:
        gates = {"z": torch.stack([torch.stack(z, 1) for z in zs]), "r": torch.stack([torch.stack(r, 1) for r in rs])}
    return x, torch.stack(hs), gates


class GRUCellStack(nn.Module):
    """`cell`: weight_ih_l{k} [3H, in], weight_hh_l{k} [3H, H], bias_ih_l{k}, bias_hh_l{k}, as in nn.GRU."""

    hand_bptt = True  # False: the step-by-step loop under autograd (the reference of tests/test_models_bptt.py)

    def __init__(self, input_size: int, hidden: int, layers: int, dropout: float, compiled: bool = False,
                 residual: bool = False):
        super().__init__()
        self.layers, self.dropout, self.compiled, self.residual = layers, dropout, compiled, residual
        for k in range(layers):
            in_k = input_size if k == 0 else hidden
            setattr(self, f"weight_ih_l{k}", nn.Parameter(torch.empty(3 * hidden, in_k)))
            setattr(self, f"weight_hh_l{k}", nn.Parameter(torch.empty(3 * hidden, hidden)))
            setattr(self, f"bias_ih_l{k}", nn.Parameter(torch.empty(3 * hidden)))
            setattr(self, f"bias_hh_l{k}", nn.Parameter(torch.empty(3 * hidden)))

    def forward(self, x, h0, return_gates=False):
        return gru_cell_forward(x, h0, torch_layout(self, self.layers), self.dropout, self.training, return_gates,
                                self.compiled, self.residual, self.hand_bptt)


class GRULM(LMBase):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = Embedding(cfg.vocab_size, cfg.emb_dim)
        self.drop = nn.Dropout(cfg.dropout)
        between = cfg.dropout if cfg.layers > 1 else 0.0
        with construction_draws_discarded():  # both impls start from the same weights for a seed
            if cfg.impl == "torch":
                self.rnn = library_stack(nn.GRU, cfg.emb_dim, cfg.hidden_dim, cfg.layers, between, cfg.residual)
            else:
                self.rnn = GRUCellStack(cfg.emb_dim, cfg.hidden_dim, cfg.layers, between, cfg.compile, cfg.residual)
        self.head = output_layer(cfg, cfg.hidden_dim, self.embedding)
        init_recurrence(self.torch_layout(), cfg.hidden_dim)

    def torch_layout(self):
        return torch_layout(self.rnn, self.cfg.layers)

    @torch.no_grad()
    def copy_weights_from(self, other: "GRULM") -> "GRULM":
        """Make this model compute the same function as `other`, whatever either's impl (same sizes required)."""
        self.embedding.weight.copy_(other.embedding.weight)
        self.head.load_state_dict(other.head.state_dict())
        for mine, theirs in zip(self.torch_layout(), other.torch_layout()):
            for m, t in zip(mine, theirs):
                m.copy_(t)
        return self

    def features(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = False):
        """tokens [B, T] -> hidden [B, T, H] ([B, 1, H] with last_only; forward applies the output
        layer), state h [layers, B, H], gates {z, r: [layers, B, T, H]}."""
        x = self.drop(self.embedding(tokens))
        with fp32_recurrence(x):  # see common.fp32_recurrence
            x = x.float()
            state = (zeros_state(self.cfg.layers, tokens.shape[0], self.cfg.hidden_dim, x) if state is None
                     else state.float())
            gates = None
            if isinstance(self.rnn, (nn.GRU, nn.ModuleList)):
                between = self.cfg.dropout if self.cfg.layers > 1 else 0.0
                if return_gates:  # the fused kernel hides its gates: recomputed from each layer's inputs and outputs
                    out, state, gates = run_library_stack_with_gates(self.rnn, x, state, self.torch_layout(),
                                                                     gru_gates_of, between, self.training,
                                                                     self.cfg.residual)
                else:
                    out, state = run_library_stack(self.rnn, x, state, between, self.training, self.cfg.residual,
                                                   self.cfg.weight_drop)
            else:
                out, state, gates = self.rnn(x, state, return_gates)
        return out[:, -1:] if last_only else out, state, gates

    @staticmethod
    def detach_state(state):
        return None if state is None else state.detach()
