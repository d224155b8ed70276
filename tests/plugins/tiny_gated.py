"""The plug-in the tests use (not one of examples/): a tiny gated linear recurrence, window and stream, one gate.

    a_t = sigmoid(U x_t),  h_t = a_t * h_{t-1} + (1 - a_t) * tanh(W x_t),  stacked cfg.layers deep.

The gate reads only the current input, so a layer is causal by construction; the state is the last h of each layer.
"""
import torch
from torch import nn


class TinyGated(nn.Module):
    lmgrid_name = "tiny_gated"
    lmgrid_display = "Tiny gated"
    lmgrid_regimes = ("window", "stream")
    lmgrid_gates = ("a",)

    def __init__(self, cfg):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        dims = [cfg.emb_dim] + [cfg.hidden_dim] * cfg.layers
        self.gate = nn.ModuleList(nn.Linear(dims[k], cfg.hidden_dim) for k in range(cfg.layers))
        self.cand = nn.ModuleList(nn.Linear(dims[k], cfg.hidden_dim) for k in range(cfg.layers))
        self.drop = nn.Dropout(cfg.dropout)
        self.out_dim = cfg.hidden_dim

    def features(self, tokens, state=None, return_gates=False, last_only=False):
        x = self.drop(self.embedding(tokens))
        new_state, gates = [], []
        for k, (g, c) in enumerate(zip(self.gate, self.cand)):
            a = torch.sigmoid(g(x))
            u = torch.tanh(c(x))
            h = x.new_zeros(x.shape[0], a.shape[-1]) if state is None else state[k]
            out = []
            for t in range(x.shape[1]):
                h = a[:, t] * h + (1 - a[:, t]) * u[:, t]
                out.append(h)
            x = torch.stack(out, 1)
            new_state.append(h)
            gates.append(a)
        hidden = self.drop(x)
        if last_only:
            hidden = hidden[:, -1:]
        return hidden, torch.stack(new_state), ({"a": torch.stack(gates)} if return_gates else None)

    def detach_state(self, state):
        return None if state is None else state.detach()
