"""Pieces every architecture shares: the token embedding and the output layer (with optional weight tying)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lmgrid.models.config import ModelConfig

# Small uniform init of embeddings and output weights (as in Zaremba et al. 2014 and pytorch/examples'
# word_language_model): the untrained model's logits are then nearly equal, so its loss starts at ~log(V).
INIT_RANGE = 0.1


class Embedding(nn.Embedding):
    def __init__(self, vocab_size: int, dim: int):
        super().__init__(vocab_size, dim)
        nn.init.uniform_(self.weight, -INIT_RANGE, INIT_RANGE)


class OutputHead(nn.Module):
    """hidden [.., hidden_dim] -> logits [.., V], with dropout before it.

    With tie_weights the output matrix is the input embedding (Press & Wolf 2017; Inan et al. 2017). The embedding
    is emb_dim wide, so when hidden_dim != emb_dim a bias-free linear projection hidden_dim -> emb_dim is inserted
    first rather than refusing the combination.
    """

    def __init__(self, cfg: ModelConfig, in_dim: int, embedding: nn.Embedding | None):
        super().__init__()
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.tie_weights:
            emb_dim = embedding.weight.shape[1]
            self.proj = nn.Linear(in_dim, emb_dim, bias=False) if in_dim != emb_dim else nn.Identity()
            self.decoder = nn.Linear(emb_dim, cfg.vocab_size)
            self.decoder.weight = embedding.weight
        else:
            self.proj = nn.Identity()
            self.decoder = nn.Linear(in_dim, cfg.vocab_size)
            nn.init.uniform_(self.decoder.weight, -INIT_RANGE, INIT_RANGE)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # The positions are flattened into one matrix product: with a 3-D input under torch.inference_mode (how
        # Lightning validates) and CPU bf16 autocast, nn.Linear takes a batched-matmul path that copies the weight
        # for every row of the batch: 23 ms against 1.5 ms for a [10, 35] chunk at V = 10,000 (docs/benchmarks.md).
        flat = self.decoder(self.proj(self.drop(hidden.reshape(-1, hidden.shape[-1]))))
        return flat.view(*hidden.shape[:-1], flat.shape[-1])


class LMBase(nn.Module):
    """What every architecture shares: forward is `features` (the hidden state at each position, before the output
    layer) followed by `head`, the output layer.  lmgrid.neural.module.batch_nll calls the two apart to train an
    adaptive softmax on its own loss, without the [N, V] log-probabilities."""

    def forward(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = False):
        hidden, state, gates = self.features(tokens, state, return_gates, last_only)
        return self.head(hidden), state, gates


@torch.no_grad()
def init_recurrence(layout, hidden: int, forget_block: int | None = None) -> None:
    """Initialise recurrent weights given in nn.LSTM/nn.GRU/nn.RNN layout, [(w_ih, w_hh, b_ih, b_hh)] per layer,
    with each weight's rows stacked in H-row blocks (one per gate):

    * every H x H block of w_hh orthogonal (Saxe et al. 2014; Le et al. 2015): at init the recurrence neither
      shrinks nor amplifies a state, so gradients reach early time steps, and stacked layers pass a signal
      through instead of each squashing it further (with PyTorch's uniform init a 3-layer net on the default
      corpus sat at the unigram PPL for its whole training budget);
    * w_ih uniform in +-1/sqrt(H) (PyTorch's own default);
    * biases 0, except an LSTM's forget gate (block `forget_block`), whose total bias b_ih + b_hh is 1 (Gers et al.
      2000; Jozefowicz et al. 2015): the cell starts by keeping most of its state.
    Every implementation of an architecture goes through this one function, so they start from one distribution.
    """
    bound = 1.0 / math.sqrt(hidden)
    for w_ih, w_hh, b_ih, b_hh in layout:
        nn.init.uniform_(w_ih, -bound, bound)
        for block in w_hh.split(hidden, 0):
            nn.init.orthogonal_(block)
        b_ih.zero_()
        b_hh.zero_()
        if forget_block is not None:
            b_ih[forget_block * hidden:(forget_block + 1) * hidden] = 1.0


def construction_draws_discarded():
    """Build a recurrent module inside this: whatever its constructor draws from the global generator (nn.LSTM,
    nn.GRU and nn.RNN initialise themselves; the hand-written stacks draw nothing) is thrown away, so the draws of
    every later initialisation (the output layer, init_recurrence) are the same for every impl of one seed."""
    return torch.random.fork_rng(devices=[])


def fp32_recurrence(x: torch.Tensor):
    """Autocast switched off around a recurrence, whose inputs are then cast to float32.

    Why: under autocast PyTorch runs the cuDNN RNN kernels (nn.LSTM, nn.GRU, nn.RNN) in float16 whatever dtype
    was asked for, and Lightning's bf16-mixed runs no loss scaler, so `impl: torch` would silently train in
    unscaled fp16 while the hand-written cells ran their matmuls in bf16: the three LSTMs would stop being
    comparable.  With `precision: bf16-mixed` every recurrence (every impl of rnn, lstm, gru) therefore runs in
    float32, and only the embedding and the output layer (with a large vocabulary the costliest matmul, and
    recurrence-free) run in bf16.  That float32 is IEEE float32 on a GPU too: cuDNN's RNN kernels would otherwise
    run in TF32 on Ampere and later, where the hand-written cells' matmuls do not (precision.full_fp32)."""
    return torch.autocast(device_type=x.device.type, enabled=False)


def stack_layers(x: torch.Tensor, n_layers: int, layer, dropout: float, training: bool, residual: bool):
    """x through layers 0..n-1: `layer(k, x_k) -> (out_k, *extras_k)`.  Dropout acts between layers only (where
    nn.LSTM(dropout=p) puts it); with `residual`, x_k is added to out_k from the second layer on (the first one's
    input is the embedding, of another width).  Returns the last output and each layer's extras."""
    extras = []
    for k in range(n_layers):
        if k > 0 and dropout > 0:
            x = F.dropout(x, dropout, training)
        out, *extra = layer(k, x)
        x = out + x if residual and k > 0 else out
        extras.append(extra)
    return x, extras


def zeros_state(layers: int, batch: int, hidden: int, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros(layers, batch, hidden, dtype=like.dtype, device=like.device)


_COMPILED: dict = {}


def maybe_compiled(fn, compiled: bool):
    """`fn` itself, or its torch.compile'd version (built once per function and shared by every model).

    Only the per-time-step function of a hand-written cell is compiled, not the loop over time: the graph stays
    small (a matmul plus the gate pointwise ops, which Inductor fuses into one kernel), compiles in seconds and
    is reused at every step and every sequence length; a second batch size makes torch.compile recompile it
    once with a dynamic batch dimension, which then serves every size.
    """
    if not compiled:
        return fn
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn)
    return _COMPILED[fn]
