"""minGRU: Feng, Tung, Ahmed, Bengio & Hajimirsadeghi (2024), "Were RNNs All We Needed?" (arXiv:2410.01201).

A worked example of an lmgrid plug-in (docs/models.md, "Your own model"): a plain torch module, no lmgrid imports.
Add it to a study with `arch: [gru, examples/min_gru.py:MinGRU]`.

The GRU with its gate and candidate made to depend on the input only, never on h_{t-1}:

    z_t = sigmoid(W_z x_t + b_z)        h~_t = W_h x_t + b_h        h_t = (1 - z_t) * h_{t-1} + z_t * h~_t

So h_t is linear in h_{t-1}, and all T steps can be computed at once by a scan (`scan` below) instead of a loop
over time: the point of the paper, which trains it in parallel like a transformer and runs it step by step like an
RNN.  `cfg.layers` such layers are stacked, with dropout between them and, with `cfg.residual`, each layer's input
added to its output from the second layer on.  Runs in both regimes: a window of n_step-1 tokens from a zero state,
or a stream whose state (each layer's last h, [layers, B, hidden_dim]) is carried from chunk to chunk.
"""
import torch
from torch import nn


def scan(gate_logit, h_tilde, h0):
    """All h_t of one layer at once.  gate_logit = W_z x + b_z, h_tilde [B, T, H]; h0 [B, H] -> h [B, T, H].

    Each step is an affine map of the state, h_t = a_t * h_{t-1} + b_t with a_t = 1 - z_t, b_t = z_t * h~_t, and
    two steps compose into one: (a_1, b_1) then (a_2, b_2) is (a_2 * a_1, a_2 * b_1 + b_2).  So log2(T) rounds of
    "compose each step with the one `step` places before it" (a Hillis-Steele prefix scan) leave every b_t = h_t,
    each round one elementwise operation over all t instead of T sequential ones.  Position t only ever composes
    with earlier positions, so the scan is causal.

    Why not the paper's log-space scan (log A_t by cumsum, then logcumsumexp): in float32 it cancels log A_t against
    a sum of size -log A_t, which grows with t; measured against a float64 loop it was 10-300x further off than a
    float32 loop (T = 35-200).  Products of numbers in [0, 1] need no logs: they only shrink, and the ones that
    underflow are the terms too small to matter.  This scan stays as close as the loop (tests/test_examples.py)."""
    a = torch.sigmoid(-gate_logit)  # 1 - z, without rounding 1 - z to 0 as z -> 1
    b = torch.sigmoid(gate_logit) * h_tilde
    b = torch.cat([b[:, :1] + a[:, :1] * h0.unsqueeze(1), b[:, 1:]], 1)  # fold h_0 into the first step
    step, T = 1, h_tilde.shape[1]
    while step < T:
        b = torch.cat([b[:, :step], torch.addcmul(b[:, step:], a[:, step:], b[:, :-step])], 1)
        a = torch.cat([a[:, :step], a[:, step:] * a[:, :-step]], 1)
        step *= 2
    return b


class MinGRULayer(nn.Module):
    def __init__(self, in_dim: int, hidden: int):
        super().__init__()
        self.z = nn.Linear(in_dim, hidden)  # the update gate's logit
        self.h = nn.Linear(in_dim, hidden)  # the candidate state h~

    def forward(self, x, h0):
        """x [B, T, in], h0 [B, H] -> (h [B, T, H], z [B, T, H])."""
        gate_logit = self.z(x)
        return scan(gate_logit, self.h(x), h0), torch.sigmoid(gate_logit)


class MinGRU(nn.Module):
    lmgrid_name = "min_gru"
    lmgrid_display = "minGRU"
    lmgrid_regimes = ("window", "stream")
    lmgrid_gates = ("z",)
    lmgrid_reference = "Feng et al. 2024, Were RNNs All We Needed? (arXiv:2410.01201)"

    def __init__(self, cfg):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.emb_dim)  # the name lmgrid ties and exports
        # Small uniform init, like lmgrid's built-ins: with tied weights nn.Embedding's N(0, 1) would start the
        # output layer with large logits instead of the uniform prediction a fresh model should make.
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        self.layers = nn.ModuleList(MinGRULayer(cfg.emb_dim if k == 0 else cfg.hidden_dim, cfg.hidden_dim)
                                    for k in range(cfg.layers))
        self.drop = nn.Dropout(cfg.dropout)  # on the embeddings and between layers; lmgrid's head drops its input
        self.residual = cfg.residual
        self.out_dim = cfg.hidden_dim

    def features(self, tokens, state=None, return_gates=False, last_only=False):
        """tokens [B, T] -> (hidden [B, T or 1, H], state [layers, B, H], {"z": [layers, B, T, H]} or None)."""
        B = tokens.shape[0]
        x = self.drop(self.embedding(tokens))
        # Under mixed precision the scan would carry its state in bf16 (8 bits of mantissa), rounding it afresh at
        # every step: the layers run in float32, as lmgrid's built-in recurrences do.
        with torch.autocast(device_type=x.device.type, enabled=False):
            x = x.to(torch.promote_types(x.dtype, torch.float32))  # half -> float32; float64 stays
            if state is None:  # the start of a stream, or a window: a zero state
                state = x.new_zeros(len(self.layers), B, self.out_dim)
            last, zs = [], []
            for k, layer in enumerate(self.layers):
                if k > 0:
                    x = self.drop(x)
                h, z = layer(x, state[k])
                # from the 2nd layer on (the 1st one's input is the embedding, of another width): a deep stack
                # starts out passing its input through (He et al. 2016)
                x = h + x if self.residual and k > 0 else h
                last.append(h[:, -1])
                zs.append(z)
        gates = {"z": torch.stack(zs)} if return_gates else None
        return (x[:, -1:] if last_only else x), torch.stack(last), gates

    def detach_state(self, state):
        # the state is the tensors themselves: cutting their graph ends truncated BPTT at the chunk boundary
        return None if state is None else state.detach()
