"""LSTM language model with three interchangeable implementations of the same recurrence.

* `torch`:  nn.LSTM (fused kernels; cuDNN on GPU).
* `cell`:   the equations of the PyTorch nn.LSTM documentation, written out, with a separate input projection
            W_i* x_t + b_i* and hidden projection W_h* h_{t-1} + b_h* per gate:
                i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)     f = sigmoid(W_if x + b_if + W_hf h + b_hf)
                g = tanh(W_ig x + b_ig + W_hg h + b_hg)        o = sigmoid(W_io x + b_io + W_ho h + b_ho)
                c' = f * c + i * g                              h' = o * tanh(c')
* `concat`: one projection of the concatenation [h_{t-1}; x_t] per gate, as in course slides:
                (i, f, g, o) = act(W [h; x] + b)
* `cellonebias`: the ablation of `cell` that tests the explanation below: the same code, with its second bias b_h*
            held at zero (a buffer, not a parameter), so its one bias takes concat's step.

`cell` and `concat` are the same function: W [h; x] + b = W_h h + W_x x + b, so W = [W_hh | W_ih] and
b = b_ih + b_hh maps a cell onto a concat model, and (W_hh, W_ih, b, 0) maps any concat model back. The only
difference is the cell's redundant second bias: from mapped weights the two compute the same outputs, but they
do not train alike, because both of the cell's biases receive the bias gradient, so its effective bias b_ih + b_hh
takes twice the step of concat's single b (SGD and Adam alike). `cellonebias` is cell's code with concat's bias
parameterisation (the same function and the same gradients as concat, any optimiser). Measured on PTB
(course_report, study lstm_impls, 5 paired seeds; docs/ptb_course_report_findings.md): cellonebias ended within
0.11 test PPL of concat on every seed, while cell equals torch, so the bias accounts for what concat differs by;
that difference itself, +3.9 test PPL over torch, is not established (p 0.088 after Holm).

Every implementation keeps the four gates' weights stacked in nn.LSTM's order (i, f, g, o) so that weights
map between them by plain copies (`LSTMLM.copy_weights_from`), and every implementation's state is
(h, c), each [layers, B, H], so states interchange too.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lmgrid.models.adaptive import output_layer
from lmgrid.models.common import (Embedding, LMBase, construction_draws_discarded, fp32_recurrence, init_recurrence,
                     maybe_compiled, stack_layers, zeros_state)
from lmgrid.models.bptt import LSTMLayer, runs_whole_layer
from lmgrid.models.config import ModelConfig

GATES = ("i", "f", "g", "o")  # nn.LSTM's row order in weight_ih / weight_hh


# The cells below run one small step at a time ([B, 4H] with B = 20, H = 200 on PTB), where the cost of a step is
# the number of operations PyTorch dispatches (and autograd records), not their arithmetic: each step is written
# with as few as the equations allow (addmm with the biases folded in beforehand, addcmul).  These step functions
# serve the gates, torch.compile and the reference of tests/test_models_bptt.py; otherwise a whole layer runs as
# one autograd node with its backward written out (models/bptt.py): 1.3-1.6x the training tokens per CPU-second
# (issue 46, `python -m lmgrid.bench archs --threads 1 --clock cpu`, paired before/after runs).

def _gate_math(z: torch.Tensor, c: torch.Tensor):
    i, f, g, o = z.chunk(4, 1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = torch.addcmul(f * c, i, g)  # f * c + i * g
    h = o * torch.tanh(c)  # tanh of the new cell state c (LSTMLM.py's bug was o * tanh(g))
    return h, c, i, f, g, o


def cell_step(x_proj_t, h, c, w_hh_t):
    """One step of the docs' cell. x_proj_t = W_i* x_t + b_i* + b_h* for all gates: everything that does not depend
    on the recurrence, precomputed for every t at once; w_hh_t = W_h*^T. The step adds W_h* h to it."""
    return _gate_math(torch.addmm(x_proj_t, h, w_hh_t), c)


def concat_step(x_t, h, c, w_t, b):
    """One step of the concat cell: a single projection of [h_{t-1}; x_t] (w_t = W^T)."""
    return _gate_math(torch.addmm(b, torch.cat([h, x_t], 1), w_t), c)


def _unroll(step, inputs, h, c, return_gates):
    """One layer over time: `step(input_t, h, c) -> (h, c, i, f, g, o)` at each step; returns the stacked
    outputs [B, T, H], the last h and c, and the per-step gates (empty lists unless asked for)."""
    outs, per_t = [], ([], [], [], [])
    for t in range(inputs.shape[1]):
        h, c, *g = step(inputs[:, t], h, c)
        outs.append(h)
        if return_gates:
            for acc, v in zip(per_t, g):
                acc.append(v)
    return torch.stack(outs, 1), h, c, per_t


def _run_layers(x, state, n_layers, layer_fn, dropout, training, return_gates, residual=False):
    """Shared multi-layer driver: layer_fn(k, x, h0, c0) -> (out [B,T,H], h, c, gates per t or None).
    Dropout sits between layers only, exactly where nn.LSTM(dropout=p) puts it (common.stack_layers)."""
    h0, c0 = state
    x, per_layer = stack_layers(x, n_layers, lambda k, x: layer_fn(k, x, h0[k], c0[k]), dropout, training, residual)
    hs, cs, layer_gates = zip(*per_layer)
    gates = None
    if return_gates:  # per layer, per gate: a list over t of [B, H] -> [layers, B, T, H]
        gates = {name: torch.stack([torch.stack(g[GATES.index(name)], 1) for g in layer_gates])
                 for name in ("i", "f", "o", "g")}
    return x, (torch.stack(hs), torch.stack(cs)), gates


def cell_forward(x, state, weights, dropout, training, return_gates, compiled=False, residual=False,
                 hand_bptt=True):
    """The docs' equations over a sequence, for any weights in nn.LSTM layout: [(w_ih, w_hh, b_ih, b_hh)] per layer.
    With `hand_bptt` (and neither gates nor compile asked for) each layer is one bptt.LSTMLayer, the same function
    with its backward through time written out; else the step-by-step loop below, under autograd.
    (Impl `torch` gets its gates without this loop: run_library_stack_with_gates.)"""
    step = maybe_compiled(cell_step, compiled)
    whole_layer = runs_whole_layer(hand_bptt, return_gates, compiled)

    def layer(k, x, h, c):
        w_ih, w_hh, b_ih, b_hh = weights[k]
        x_proj = torch.addmm(b_ih + b_hh, x.reshape(-1, x.shape[-1]), w_ih.t()).view(*x.shape[:2], -1)  # [B, T, 4H]
        if whole_layer:
            return (*LSTMLayer.apply(x_proj, h, c, w_hh), None)
        w_hh_t = w_hh.t()
        return _unroll(lambda x_t, h, c: step(x_t, h, c, w_hh_t), x_proj, h, c, return_gates)

    return _run_layers(x, state, len(weights), layer, dropout, training, return_gates, residual)


class LSTMCellStack(nn.Module):
    """`cell`: parameters named and shaped as nn.LSTM's (weight_ih_l{k} [4H, in], weight_hh_l{k} [4H, H],
    bias_ih_l{k}, bias_hh_l{k}); rows k*H:(k+1)*H of each are gate k's W_i*, W_h*, b_i*, b_h*."""

    hand_bptt = True  # False: the step-by-step loop under autograd (the reference of tests/test_models_bptt.py)

    def __init__(self, input_size: int, hidden: int, layers: int, dropout: float, compiled: bool = False,
                 residual: bool = False, second_bias: bool = True):
        super().__init__()
        self.hidden, self.layers, self.dropout, self.compiled = hidden, layers, dropout, compiled
        self.residual, self.second_bias = residual, second_bias
        for k in range(layers):
            in_k = input_size if k == 0 else hidden
            setattr(self, f"weight_ih_l{k}", nn.Parameter(torch.empty(4 * hidden, in_k)))
            setattr(self, f"weight_hh_l{k}", nn.Parameter(torch.empty(4 * hidden, hidden)))
            setattr(self, f"bias_ih_l{k}", nn.Parameter(torch.empty(4 * hidden)))
            if second_bias:
                setattr(self, f"bias_hh_l{k}", nn.Parameter(torch.empty(4 * hidden)))
            else:  # `cellonebias`: b_h* stays 0 (no gradient, no optimiser state, not in the checkpoint)
                self.register_buffer(f"bias_hh_l{k}", torch.zeros(4 * hidden), persistent=False)

    def torch_layout(self):
        return torch_layout(self, self.layers)

    def load_torch_layout(self, weights):
        """Copies; without a second bias, b_ih + b_hh goes into the one bias (the mapping concat uses)."""
        with torch.no_grad():
            for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(weights):
                mine = torch_layout(self, self.layers)[k]
                bias = (b_ih, b_hh) if self.second_bias else (b_ih + b_hh, torch.zeros_like(b_hh))
                for m, w in zip(mine, (w_ih, w_hh, *bias)):
                    m.copy_(w)

    def forward(self, x, state, return_gates=False):
        return cell_forward(x, state, self.torch_layout(), self.dropout, self.training, return_gates, self.compiled,
                            self.residual, self.hand_bptt)


class ConcatLSTMStack(nn.Module):
    """`concat`: per layer one weight_l{k} [4H, H + in] acting on [h_{t-1}; x_t] and one bias_l{k} [4H]."""

    hand_bptt = True  # False: the step-by-step loop under autograd (the reference of tests/test_models_bptt.py)

    def __init__(self, input_size: int, hidden: int, layers: int, dropout: float, compiled: bool = False,
                 residual: bool = False):
        super().__init__()
        self.hidden, self.layers, self.dropout, self.compiled = hidden, layers, dropout, compiled
        self.residual = residual
        for k in range(layers):
            in_k = input_size if k == 0 else hidden
            setattr(self, f"weight_l{k}", nn.Parameter(torch.empty(4 * hidden, hidden + in_k)))
            setattr(self, f"bias_l{k}", nn.Parameter(torch.empty(4 * hidden)))

    def torch_layout(self):
        """The equivalent nn.LSTM-layout weights: W_hh = W[:, :H], W_ih = W[:, H:], b_ih = b, b_hh = 0."""
        out = []
        for k in range(self.layers):
            w, b = getattr(self, f"weight_l{k}"), getattr(self, f"bias_l{k}")
            out.append((w[:, self.hidden:], w[:, :self.hidden], b, torch.zeros_like(b)))
        return out

    def load_torch_layout(self, weights):
        """W = [W_hh | W_ih], b = b_ih + b_hh: the mapping that makes this the same function as the cell."""
        with torch.no_grad():
            for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(weights):
                getattr(self, f"weight_l{k}").copy_(torch.cat([w_hh, w_ih], 1))
                getattr(self, f"bias_l{k}").copy_(b_ih + b_hh)

    def forward(self, x, state, return_gates=False):
        if runs_whole_layer(self.hand_bptt, return_gates, self.compiled):
            # W [h; x] + b = W[:, :H] h + (W[:, H:] x + b): the x half for every step in one product, then
            # bptt.LSTMLayer on the views of W (their gradients land in W's two halves), as the cell runs.
            return cell_forward(x, state, self.torch_layout(), self.dropout, self.training, False,
                                residual=self.residual)
        step = maybe_compiled(concat_step, self.compiled)

        def layer(k, x, h, c):
            w_t, b = getattr(self, f"weight_l{k}").t(), getattr(self, f"bias_l{k}")
            return _unroll(lambda x_t, h, c: step(x_t, h, c, w_t, b), x, h, c, return_gates)

        return _run_layers(x, state, self.layers, layer, self.dropout, self.training, return_gates, self.residual)


def torch_layout(module: nn.Module, layers: int):
    """[(weight_ih, weight_hh, bias_ih, bias_hh)] per layer of an nn.LSTM/nn.GRU/nn.RNN, a module named like one,
    or a ModuleList of one-layer ones (the residual stacks, see library_stack)."""
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    if isinstance(module, nn.ModuleList):
        return [tuple(getattr(m, f"{n}_l0") for n in names) for m in module]
    return [tuple(getattr(module, f"{n}_l{k}") for n in names) for k in range(layers)]


_ONE_LAYER: dict = {}


def _one_layer_fn(rnn, k: int, weights):
    """Layer k of library_stack's module as its own call, `(x, state_k) -> (out, state_k)`, still on the fused
    kernel: a residual stack's own one-layer module, or a fused multi-layer module's layer-k weights run through a
    one-layer module of the same class by torch.func.functional_call (no copy, gradients reach the weights). The
    one-layer module is a shape template, built once per (class, sizes) with its init draws discarded."""
    if isinstance(rnn, nn.ModuleList):
        return rnn[k]
    w_ih, w_hh, b_ih, b_hh = weights[k]
    key = (type(rnn), w_ih.shape[1], rnn.hidden_size)
    if key not in _ONE_LAYER:
        with construction_draws_discarded():
            _ONE_LAYER[key] = type(rnn)(w_ih.shape[1], rnn.hidden_size, 1, batch_first=True)
    params = {"weight_ih_l0": w_ih, "weight_hh_l0": w_hh, "bias_ih_l0": b_ih, "bias_hh_l0": b_hh}
    return lambda x, s: torch.func.functional_call(_ONE_LAYER[key], params, (x, s))


def previous_outputs(h0: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """h_{t-1} for every step t of a layer: its initial state [B, H] followed by its outputs [B, T, H] but the last."""
    return torch.cat([h0.unsqueeze(1), out[:, :-1]], 1)


def run_library_stack_with_gates(rnn, x, state, weights, gates_of, dropout: float, training: bool, residual: bool):
    """library_stack's forward that also returns every layer's gates, without a Python loop over time.

    A gate at step t is a function of the layer's input x_t and its previous output h_{t-1} alone (for the LSTM
    z_t = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh; the GRU's r and z likewise), and the fused kernel returns every
    h_t of the layer it runs. So each layer runs on its own through the fused kernel, and its gates are then
    `gates_of(x_k, h_prev, weights_k)` for all steps at once: two matmuls instead of T cell steps, the same
    function as the written-out equations (models/lstm.py, gru.py) to float rounding.
    Returns the last layer's output, the new state (as the fused module returns it) and
    {gate: [layers, B, T, H]}."""
    pair = isinstance(state, tuple)
    per_layer_gates = []

    def layer(k, x_k):
        s = tuple(t[k:k + 1] for t in state) if pair else state[k:k + 1]
        out, s = _one_layer_fn(rnn, k, weights)(x_k, s)
        h0_k = state[0][k] if pair else state[k]  # the LSTM's h of (h, c); the GRU's h
        per_layer_gates.append(gates_of(x_k, previous_outputs(h0_k, out), weights[k]))
        return out, s

    out, per_layer = stack_layers(x, len(weights), layer, dropout, training, residual)
    states = [s for (s,) in per_layer]
    new_state = tuple(torch.cat(parts) for parts in zip(*states)) if pair else torch.cat(states)
    gates = {name: torch.stack([g[name] for g in per_layer_gates]) for name in per_layer_gates[0]}
    return out, new_state, gates


def lstm_gates_of(x, h_prev, weights) -> dict:
    """i, f, g, o at every step of one layer from its inputs x [B, T, in] and h_{t-1} [B, T, H]."""
    w_ih, w_hh, b_ih, b_hh = weights
    i, f, g, o = (F.linear(x, w_ih, b_ih) + F.linear(h_prev, w_hh, b_hh)).chunk(4, -1)
    return {"i": torch.sigmoid(i), "f": torch.sigmoid(f), "g": torch.tanh(g), "o": torch.sigmoid(o)}


def library_stack(cls, input_size: int, hidden: int, layers: int, dropout: float, residual: bool, **kw):
    """PyTorch's fused multi-layer RNN/LSTM/GRU, or with `residual` one single-layer module per layer (the fused
    kernel has no place to add a layer's input to its output); either way torch_layout reads its weights."""
    if residual and layers > 1:
        return nn.ModuleList(cls(input_size if k == 0 else hidden, hidden, 1, batch_first=True, **kw)
                             for k in range(layers))
    return cls(input_size, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0, **kw)


def hh_dropped(module: nn.Module, weight_drop: float, training: bool) -> dict:
    """DropConnect on the hidden-to-hidden weights (Wan et al. 2013; Merity et al. 2018's weight-drop): every
    `weight_hh_l*` of a fused nn.RNN/LSTM/GRU with each entry zeroed with probability `weight_drop` and the rest
    scaled by 1/(1 - weight_drop), one mask per forward call, so per BPTT chunk and shared by every time step of
    it (where dropout on h_t would draw a new mask each step and disturb the memory it regularises).  Returns the
    overrides for torch.func.functional_call: empty in evaluation or at 0, where the module runs as it is (gate
    statistics are taken in evaluation, lmgrid.neural.module, so run_library_stack_with_gates never drops)."""
    if not training or weight_drop == 0:
        return {}
    return {name: F.dropout(w, weight_drop, True) for name, w in module.named_parameters()
            if name.startswith("weight_hh_l")}


def _call(module: nn.Module, overrides: dict, x, state):
    return torch.func.functional_call(module, overrides, (x, state)) if overrides else module(x, state)


def run_library_stack(rnn, x, state, dropout: float, training: bool, residual: bool, weight_drop: float = 0.0):
    """Forward of library_stack's module: state is h or (h, c), each [layers, B, H]; `weight_drop` as in
    hh_dropped."""
    if not isinstance(rnn, nn.ModuleList):
        return _call(rnn, hh_dropped(rnn, weight_drop, training), x, state)
    pair = isinstance(state, tuple)

    def layer(k, x):
        s = tuple(t[k:k + 1] for t in state) if pair else state[k:k + 1]
        return _call(rnn[k], hh_dropped(rnn[k], weight_drop, training), x, s)

    x, per_layer = stack_layers(x, len(rnn), layer, dropout, training, residual)
    states = [s for (s,) in per_layer]
    if pair:
        return x, tuple(torch.cat(parts) for parts in zip(*states))
    return x, torch.cat(states)


class LSTMLM(LMBase):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = Embedding(cfg.vocab_size, cfg.emb_dim)
        self.drop = nn.Dropout(cfg.dropout)
        between = cfg.dropout if cfg.layers > 1 else 0.0
        with construction_draws_discarded():
            if cfg.impl == "torch":
                self.rnn = library_stack(nn.LSTM, cfg.emb_dim, cfg.hidden_dim, cfg.layers, between, cfg.residual)
            elif cfg.impl in ("cell", "cellonebias"):
                self.rnn = LSTMCellStack(cfg.emb_dim, cfg.hidden_dim, cfg.layers, between, cfg.compile, cfg.residual,
                                         second_bias=cfg.impl == "cell")
            else:
                self.rnn = ConcatLSTMStack(cfg.emb_dim, cfg.hidden_dim, cfg.layers, between, cfg.compile,
                                           cfg.residual)
        self.head = output_layer(cfg, cfg.hidden_dim, self.embedding)
        # Every impl starts from the same function for a seed: the recurrence is drawn once in nn.LSTM's layout,
        # into fresh tensors (the concat layout's views would be filled in another order), and mapped onto this
        # impl's parameterisation.
        fresh = [tuple(torch.empty(w.shape) for w in layer) for layer in self.torch_layout()]
        init_recurrence(fresh, cfg.hidden_dim, forget_block=GATES.index("f"))
        self.load_torch_layout(fresh)

    def torch_layout(self):
        """This model's recurrent weights as nn.LSTM would hold them, per layer (w_ih, w_hh, b_ih, b_hh)."""
        if isinstance(self.rnn, (nn.LSTM, nn.ModuleList)):
            return torch_layout(self.rnn, self.cfg.layers)
        return self.rnn.torch_layout()

    @torch.no_grad()
    def load_torch_layout(self, weights) -> None:
        """Set the recurrence from weights in nn.LSTM's layout, mapped onto this impl's parameterisation."""
        if isinstance(self.rnn, (nn.LSTM, nn.ModuleList)):
            for mine, theirs in zip(self.torch_layout(), weights):
                for m, t in zip(mine, theirs):
                    m.copy_(t)
        else:
            self.rnn.load_torch_layout(weights)

    @torch.no_grad()
    def copy_weights_from(self, other: "LSTMLM") -> "LSTMLM":
        """Make this model compute the same function as `other`, whatever either's impl (same sizes required)."""
        self.embedding.weight.copy_(other.embedding.weight)
        self.head.load_state_dict(other.head.state_dict())
        self.load_torch_layout(other.torch_layout())
        return self

    def features(self, tokens: torch.Tensor, state=None, return_gates: bool = False, last_only: bool = False):
        """tokens [B, T] -> hidden [B, T, H] ([B, 1, H] with last_only; forward applies the output
        layer), state (h, c) each [layers, B, H], gates {i,f,o,g: [layers,B,T,H]}."""
        x = self.drop(self.embedding(tokens))
        with fp32_recurrence(x):
            x = x.float()
            if state is None:
                z = zeros_state(self.cfg.layers, tokens.shape[0], self.cfg.hidden_dim, x)
                state = (z, z)
            state = tuple(s.float() for s in state)
            gates = None
            if isinstance(self.rnn, (nn.LSTM, nn.ModuleList)):
                between = self.cfg.dropout if self.cfg.layers > 1 else 0.0
                if return_gates:
                    # The fused kernel hides its gates: recompute them from each layer's inputs and outputs.
                    out, state, gates = run_library_stack_with_gates(self.rnn, x, state, self.torch_layout(),
                                                                     lstm_gates_of, between, self.training,
                                                                     self.cfg.residual)
                else:
                    out, state = run_library_stack(self.rnn, x, state, between, self.training, self.cfg.residual,
                                                   self.cfg.weight_drop)
            else:
                out, state, gates = self.rnn(x, state, return_gates)
        return out[:, -1:] if last_only else out, state, gates

    @staticmethod
    def detach_state(state):
        return None if state is None else tuple(s.detach() for s in state)
