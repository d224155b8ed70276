"""The neural architectures: the three LSTMs and the two GRUs are the same function (outputs and gradients),
the untrained loss is ~log(V), shapes follow the interface, the transformer is causal, bad configs fail in one line."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from lmgrid.common.errors import LmgridError
from lmgrid.models import IMPLS, build_model
from lmgrid.run.spec import model_config_defaults

V, EMB, HID, LAYERS, B, T = 37, 16, 24, 3, 4, 9
TOL = dict(rtol=1e-5, atol=1e-5)
ALL = [(arch, impl) for arch, impls in IMPLS.items() for impl in impls]


def make(arch, impl="torch", seed=0, **kw):
    torch.manual_seed(seed)
    kw = {"vocab_size": V, "emb_dim": EMB, "hidden_dim": HID, "layers": LAYERS, **kw}
    return build_model(model_config_defaults(arch=arch, impl=impl, **kw))


def tokens(seed, t=T, b=B, v=V):
    return torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed))


def run_two_chunks(model, state0):
    """Loss over two consecutive chunks, the second starting from the first's (detached) state, as in
    truncated BPTT, plus the gradient reaching the initial state."""
    state0 = tuple(s.clone().requires_grad_() for s in state0) if isinstance(state0, tuple) \
        else state0.clone().requires_grad_()
    logits1, state1, _ = model(tokens(1), state0)
    logits2, state2, _ = model(tokens(2), model.detach_state(state1))
    loss = F.cross_entropy(logits1.reshape(-1, V), tokens(3).reshape(-1)) \
        + F.cross_entropy(logits2.reshape(-1, V), tokens(4).reshape(-1))
    loss.backward()
    grad0 = tuple(s.grad for s in state0) if isinstance(state0, tuple) else (state0.grad,)
    return torch.cat([logits1, logits2], 1), state2, grad0


def random_state(n, seed=5):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(LAYERS, B, HID, generator=g) * 0.5 for _ in range(n))


def lstm_family():
    ref = make("lstm", "torch")
    cell = make("lstm", "cell", seed=1).copy_weights_from(ref)
    concat = make("lstm", "concat", seed=2).copy_weights_from(ref)
    return ref, cell, concat


def test_three_lstm_impls_same_outputs_and_gradients():
    ref, cell, concat = lstm_family()
    results = [run_two_chunks(m, random_state(2)) for m in (ref, cell, concat)]
    (ref_logits, ref_state, ref_g0) = results[0]
    for logits, state, g0 in results[1:]:
        torch.testing.assert_close(logits, ref_logits, **TOL)
        for a, b in zip(state, ref_state):
            torch.testing.assert_close(a, b, **TOL)
        for a, b in zip(g0, ref_g0):
            torch.testing.assert_close(a, b, **TOL)
    for m in (cell, concat):
        torch.testing.assert_close(m.embedding.weight.grad, ref.embedding.weight.grad, **TOL)
        torch.testing.assert_close(m.head.decoder.weight.grad, ref.head.decoder.weight.grad, **TOL)
    # Recurrent weights: the cell's gradients are nn.LSTM's, parameter for parameter.
    for k in range(LAYERS):
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            torch.testing.assert_close(getattr(cell.rnn, f"{name}_l{k}").grad, getattr(ref.rnn, f"{name}_l{k}").grad,
                                       **TOL)
        # concat: W = [W_hh | W_ih] so its gradient is [dW_hh | dW_ih]; b = b_ih + b_hh gets d(b_ih) (= d(b_hh)).
        g = {n: getattr(ref.rnn, f"{n}_l{k}").grad for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        torch.testing.assert_close(concat.rnn.get_parameter(f"weight_l{k}").grad,
                                   torch.cat([g["weight_hh"], g["weight_ih"]], 1), **TOL)
        torch.testing.assert_close(concat.rnn.get_parameter(f"bias_l{k}").grad, g["bias_ih"], **TOL)
        torch.testing.assert_close(g["bias_ih"], g["bias_hh"], **TOL)


def test_gru_cell_same_outputs_and_gradients_as_nn_gru():
    ref = make("gru", "torch")
    cell = make("gru", "cell", seed=1).copy_weights_from(ref)
    (ref_logits, ref_state, ref_g0), (logits, state, g0) = (run_two_chunks(m, random_state(1)[0]) for m in (ref, cell))
    torch.testing.assert_close(logits, ref_logits, **TOL)
    torch.testing.assert_close(state, ref_state, **TOL)
    torch.testing.assert_close(g0[0], ref_g0[0], **TOL)
    for (name, p), (ref_name, ref_p) in zip(cell.named_parameters(), ref.named_parameters()):
        assert name == ref_name
        torch.testing.assert_close(p.grad, ref_p.grad, **TOL, msg=name)


def test_cell_and_concat_are_the_same_function():
    """Both directions of the mapping: every concat LSTM is a cell LSTM (W_ih = W[:, H:], W_hh = W[:, :H],
    b_ih = b, b_hh = 0) and every cell LSTM is a concat LSTM (W = [W_hh | W_ih], b = b_ih + b_hh)."""
    x, state = tokens(7), random_state(2)
    concat = make("lstm", "concat", seed=3)
    cell = make("lstm", "cell", seed=4).copy_weights_from(concat)
    torch.testing.assert_close(cell(x, state)[0], concat(x, state)[0], **TOL)
    cell = make("lstm", "cell", seed=5)
    concat = make("lstm", "concat", seed=6).copy_weights_from(cell)
    torch.testing.assert_close(concat(x, state)[0], cell(x, state)[0], **TOL)
    # The cell's only extra freedom is the split of each bias between b_ih and b_hh, which changes nothing.
    before = cell(x, state)[0]
    with torch.no_grad():
        shift = torch.randn_like(cell.rnn.bias_ih_l0)
        cell.rnn.bias_ih_l0 += shift
        cell.rnn.bias_hh_l0 -= shift
    torch.testing.assert_close(cell(x, state)[0], before, **TOL)
    n_cell = sum(p.numel() for p in cell.rnn.parameters())
    n_concat = sum(p.numel() for p in concat.rnn.parameters())
    assert n_cell - n_concat == LAYERS * 4 * HID  # exactly one redundant bias vector per layer


def test_cell_without_its_second_bias_trains_like_concat():
    """The ablation `cellonebias` (models/lstm.py): from one seed's weights, one Adam step leaves it the same function
    as concat, while the cell, whose two biases both take the step, ends elsewhere.  Negative control, run here:
    the cell itself, i.e. the mutation "cellonebias keeps b_hh as a parameter", which must differ from concat."""
    x, y = tokens(11), tokens(12)

    def stepped(impl):
        model = make("lstm", impl, seed=3)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        F.cross_entropy(model(x)[0].reshape(-1, V), y.reshape(-1)).backward()
        opt.step()
        return model(x)[0].detach()

    start = {impl: make("lstm", impl, seed=3)(x)[0] for impl in ("concat", "cellonebias")}
    torch.testing.assert_close(start["cellonebias"], start["concat"], **TOL)  # the same initial function
    concat, onebias, cell = stepped("concat"), stepped("cellonebias"), stepped("cell")
    torch.testing.assert_close(onebias, concat, **TOL)
    assert not torch.allclose(cell, concat, atol=1e-3)  # the control: a second bias doubles the bias step
    n = {impl: sum(p.numel() for p in make("lstm", impl).rnn.parameters()) for impl in ("cell", "cellonebias")}
    assert n["cell"] - n["cellonebias"] == LAYERS * 4 * HID


@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_gates_of_torch_impl_equal_gates_of_cell(arch):
    ref = make(arch, "torch")
    cell = make(arch, "cell", seed=1).copy_weights_from(ref)
    x, state = tokens(8), random_state(2 if arch == "lstm" else 1)
    state = state if arch == "lstm" else state[0]
    ref_plain, _, no_gates = ref(x, state)
    ref_logits, _, ref_gates = ref(x, state, return_gates=True)
    logits, _, gates = cell(x, state, return_gates=True)
    assert no_gates is None
    torch.testing.assert_close(ref_logits, ref_plain, **TOL)  # the recompute path is still nn.LSTM's function
    torch.testing.assert_close(logits, ref_logits, **TOL)
    assert set(gates) == set(ref_gates) == ({"i", "f", "o", "g"} if arch == "lstm" else {"z", "r"})
    for name in gates:
        torch.testing.assert_close(gates[name], ref_gates[name], **TOL)
        lo = -1.0 if name == "g" else 0.0  # g is tanh, the rest sigmoid
        assert gates[name].min() >= lo and gates[name].max() <= 1.0


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_library_gates_are_recomputed_from_each_layers_previous_output(arch, residual, monkeypatch):
    """impl torch's gates come from each layer run alone on the fused kernel and recomputed for all steps from the
    layer's inputs and h_{t-1}; they equal the written-out cell's step-by-step gates, layer by layer (3 layers: the
    middle one's input is the first one's output), from a non-zero state, residual stacks included.
    Negative control, the mutation it kills: h_t taken for h_{t-1} (previous_outputs returning the outputs
    unshifted) makes them differ."""
    from lmgrid.models import lstm as lstm_mod

    ref = make(arch, "torch", residual=residual)
    cell = make(arch, "cell", seed=1, residual=residual).copy_weights_from(ref)
    x, state = tokens(14), random_state(2 if arch == "lstm" else 1)
    state = state if arch == "lstm" else state[0]
    with torch.no_grad():
        want = cell(x, state, return_gates=True)[2]
        plain_logits, plain_state, _ = ref(x, state)
        logits, new_state, got = ref(x, state, return_gates=True)
        torch.testing.assert_close(logits, plain_logits, **TOL)  # running layer by layer is still nn.LSTM/nn.GRU
        torch.testing.assert_close(new_state, plain_state, **TOL)
        for name in want:
            assert got[name].shape == (LAYERS, B, T, HID)
            torch.testing.assert_close(got[name], want[name], **TOL)
        monkeypatch.setattr(lstm_mod, "previous_outputs", lambda h0, out: out)
        broken = ref(x, state, return_gates=True)[2]
    assert not all(torch.allclose(broken[n], want[n], **TOL) for n in want)


def test_concat_gates_equal_cell_gates():
    cell = make("lstm", "cell")
    concat = make("lstm", "concat", seed=1).copy_weights_from(cell)
    x = tokens(9)
    g_cell, g_concat = cell(x, return_gates=True)[2], concat(x, return_gates=True)[2]
    for name in "ifog":
        torch.testing.assert_close(g_concat[name], g_cell[name], **TOL)


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("arch,impl", ALL)
def test_untrained_loss_is_log_vocab(arch, impl, tie):
    vocab = 2000
    model = make(arch, impl, vocab_size=vocab, layers=2, emb_dim=32, hidden_dim=48, tie_weights=tie,
                 direct=(arch == "ffnn"), n_step=4, heads=4)
    x = tokens(10, t=3 if arch == "ffnn" else 20, b=16, v=vocab)
    with torch.no_grad():
        logits = model(x)[0]
    y = tokens(11, t=logits.shape[1], b=16, v=vocab)
    loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1)).item()
    # Near-uniform predictions: within 1% of log(V) = 7.60 nats (a poor init is off by whole nats).
    assert abs(loss - math.log(vocab)) < 0.01 * math.log(vocab), loss


@pytest.mark.parametrize("arch,impl", ALL)
def test_shapes_of_logits_state_and_gates(arch, impl):
    model = make(arch, impl, n_step=6, heads=4)
    t = 5 if arch == "ffnn" else T
    logits, state, gates = model(tokens(12, t=t))
    assert logits.shape == (B, 1 if arch == "ffnn" else T, V) and logits.dtype == torch.float32
    assert gates is None
    logits2, state2, gates = model(tokens(13, t=t), model.detach_state(state), return_gates=True)
    assert logits2.shape == logits.shape
    if arch == "ffnn":
        assert state is None and state2 is None and model.detach_state(state) is None
    elif arch == "transformer":  # its state is the tokens read so far, the context of the next chunk
        assert torch.equal(state, tokens(12, t=t)) and torch.equal(state2, tokens(13, t=t))  # context_len 0: no context kept
    elif arch == "lstm":
        assert [s.shape for s in state] == [(LAYERS, B, HID)] * 2
    else:
        assert state.shape == (LAYERS, B, HID)
    if arch in ("lstm", "gru"):
        for s in (state if arch == "lstm" else (state,)):
            assert s.grad_fn is not None
        for s in (model.detach_state(state) if arch == "lstm" else (model.detach_state(state),)):
            assert s.grad_fn is None and not s.requires_grad
    expected = {"lstm": {"i", "f", "o", "g"}, "gru": {"z", "r"}}.get(arch, set())
    assert set(gates) == expected
    for g in gates.values():
        assert g.shape == (LAYERS, B, T, HID)


@pytest.mark.parametrize("arch,impl", ALL)
def test_last_only_is_the_last_position(arch, impl):
    model = make(arch, impl, n_step=6, heads=4).eval()
    x = tokens(14, t=5 if arch == "ffnn" else T)
    full, state, _ = model(x)
    last, state_last, _ = model(x, last_only=True)
    assert last.shape == (B, 1, V)
    torch.testing.assert_close(last, full[:, -1:], rtol=1e-6, atol=1e-6)
    if state is not None:
        for a, b in zip(state if arch == "lstm" else (state,), state_last if arch == "lstm" else (state_last,)):
            torch.testing.assert_close(a, b)


def test_zero_state_equals_no_state():
    for arch, impl in [("rnn", "torch"), ("lstm", "cell"), ("gru", "torch")]:
        model = make(arch, impl)
        zero = torch.zeros(LAYERS, B, HID)
        state = (zero, zero) if arch == "lstm" else zero
        torch.testing.assert_close(model(tokens(14), state)[0], model(tokens(14))[0])


def test_transformer_is_causal():
    model = make("transformer", heads=4).eval()
    x = tokens(15, t=12)
    y = x.clone()
    y[:, 7] = (y[:, 7] + 1) % V
    a, b = model(x)[0], model(y)[0]
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=1e-6)
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-4  # and the change is seen from its own position on


def test_ffnn_sees_exactly_its_window_and_direct_connections():
    plain, direct = make("ffnn", n_step=4), make("ffnn", n_step=4, direct=True)
    extra = sum(p.numel() for p in direct.parameters()) - sum(p.numel() for p in plain.parameters())
    assert extra == 3 * EMB * V  # W: (n_step-1)*emb -> V, no bias
    with pytest.raises(LmgridError, match="n_step-1=3"):
        plain(tokens(16, t=4))
    for activation in ("relu", "gelu"):
        assert make("ffnn", n_step=4, activation=activation)(tokens(16, t=3))[0].shape == (B, 1, V)


def test_tied_weights_share_the_embedding():
    same = make("lstm", emb_dim=HID, tie_weights=True)
    assert same.head.decoder.weight is same.embedding.weight
    assert isinstance(same.head.proj, torch.nn.Identity)
    projected = make("gru", tie_weights=True)  # emb 16 != hidden 24: a bias-free projection bridges them
    assert projected.head.decoder.weight is projected.embedding.weight
    assert projected.head.proj.weight.shape == (EMB, HID)


def test_dropout_only_in_training():
    model = make("lstm", "cell", dropout=0.5)
    x = tokens(17)
    model.train()
    assert not torch.equal(model(x)[0], model(x)[0])
    model.eval()
    torch.testing.assert_close(model(x)[0], model(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("changes,key", [
    ({"arch": "cnn"}, "model.arch"),
    ({"arch": "gru", "impl": "concat"}, "model.impl"),
    ({"arch": "rnn", "impl": "cell"}, "model.impl"),
    ({"layers": 0}, "model.layers"),
    ({"n_step": 1}, "model.n_step"),
    ({"arch": "ffnn", "n_step": 0}, "model.n_step"),
    ({"vocab_size": 1}, "model.vocab_size"),
    ({"hidden_dim": 0}, "model.hidden_dim"),
    ({"emb_dim": 2.5}, "model.emb_dim"),
    ({"dropout": 1.0}, "model.dropout"),
    ({"dropout": -0.1}, "model.dropout"),
    ({"arch": "ffnn", "activation": "sigmoid"}, "model.activation"),
    ({"arch": "transformer", "hidden_dim": 30, "heads": 4}, "model.hidden_dim"),
    ({"layers": True}, "model.layers"),
    ({"tie_weights": "yes"}, "model.tie_weights"),
    ({"init_range": -0.1}, "model.init_range"),
])
def test_bad_config_is_a_one_line_error(changes, key):
    values = {"arch": "lstm", "vocab_size": V, **changes}
    with pytest.raises(LmgridError) as err:
        build_model(model_config_defaults(**values))
    message = str(err.value)
    assert message.startswith(key + ":") and "\n" not in message
    assert repr(changes[key.split(".")[1]]) in message  # names the offending value


def test_from_dict_rejects_unknown_and_missing_keys():
    assert model_config_defaults(**{"arch": "gru", "vocab_size": 10, "impl": "cell"}).impl == "cell"
    with pytest.raises(LmgridError, match=r"^model\.hiden_dim: unknown key"):
        model_config_defaults(**{"arch": "gru", "vocab_size": 10, "hiden_dim": 3})
    with pytest.raises(LmgridError, match=r"^model\.vocab_size: required"):
        model_config_defaults(**{"arch": "gru"})


def test_transformer_rejects_inputs_longer_than_max_len():
    with pytest.raises(LmgridError, match="max_len=8"):
        make("transformer", max_len=8)(tokens(18, t=9))


def test_transformer_reads_a_chunk_after_the_previous_one():
    """Stream mode (context_len): a chunk attends to the latest context_len tokens before it, and a token's logits
    depend neither on tokens after it nor on whether a previous chunk exists beyond what it attends to."""
    model = make("transformer", heads=4, max_len=2 * T, context_len=T).eval()
    first, second = tokens(21, t=T), tokens(22, t=T)
    _, state, _ = model(first)
    chunk, state2, _ = model(second, state)
    assert torch.equal(state2, torch.cat([first, second], 1))
    # Only the latest context_len tokens of the state count.
    older, _, _ = model(second, torch.cat([tokens(23, t=T), first], 1))
    assert torch.allclose(older, chunk, atol=1e-6)
    # The context changes the prediction (it is attended to) ...
    assert not torch.allclose(model(second)[0], chunk, atol=1e-3)
    # ... and padding after a token, as at a row's tail, does not (positions count from the chunk's start).
    short, _, _ = model(second[:, :5], state)
    assert torch.allclose(short, chunk[:, :5], atol=1e-5)
    with pytest.raises(LmgridError, match="context_len"):
        model(tokens(24, t=T + 1))


@pytest.mark.parametrize("arch,impls", [("lstm", ("torch", "cell", "concat")), ("gru", ("torch", "cell"))])
def test_residual_stacks_agree_across_impls_and_with_the_gate_path(arch, impls):
    """With residual connections every impl computes the same function, and reading the gates changes nothing."""
    ref = make(arch, impls[0], layers=3, residual=True).eval()
    x = tokens(31)
    want, want_state, _ = ref(x)
    for impl in impls:
        model = make(arch, impl, seed=5, layers=3, residual=True).copy_weights_from(ref).eval()
        for gated in (False, True):
            out, state, _ = model(x, return_gates=gated)
            assert torch.allclose(out, want, atol=1e-5), (impl, gated)
            for a, b in zip(state if arch == "lstm" else (state,), want_state if arch == "lstm" else (want_state,)):
                assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("arch", ["rnn", "lstm", "gru", "ffnn"])
def test_residual_adds_each_layers_input_from_the_second_layer_on(arch):
    plain = make(arch, layers=2, n_step=T + 1).eval()
    residual = make(arch, layers=2, n_step=T + 1, residual=True).eval()
    assert residual(tokens(32))[0].shape == plain(tokens(32))[0].shape
    assert not torch.allclose(residual(tokens(32))[0], plain(tokens(32))[0])


class _OpDtypes(TorchDispatchMode):
    """Every aten op that runs, with the dtype of its first floating-point output and that output's last width:
    the ops autocast has already cast, i.e. the precision the computation itself ran in."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = next((t for t in (out if isinstance(out, (tuple, list)) else (out,))
                      if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
        if first is not None:
            self.ops.append((func.__name__.split(".")[0], first.dtype, first.shape[-1] if first.dim() else 0))
        return out


RECURRENCE_KERNELS = {"lstm", "gru", "rnn_tanh", "mkldnn_rnn_layer", "sigmoid", "tanh", "_thnn_fused_lstm_cell",
                      "_thnn_fused_gru_cell"}
MATMULS = {"mm", "addmm", "bmm", "matmul", "linear", "baddbmm"}


def recurrence_ops(model, x, gated):
    """(op, dtype) of the recurrence's own computation under CPU bf16 autocast: its kernels and gate
    nonlinearities, and every matmul producing a recurrence-wide output (H, 3H or 4H; the head's is V wide)."""
    widths = {HID, 3 * HID, 4 * HID}
    with torch.autocast("cpu", dtype=torch.bfloat16), _OpDtypes() as mode:
        logits, _, _ = model(x, return_gates=gated)
    ops = [(op, dtype) for op, dtype, width in mode.ops
           if op in RECURRENCE_KERNELS or (op in MATMULS and width in widths)]
    return logits, ops


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("arch,impl", [(a, i) for a, i in ALL if a in ("rnn", "lstm", "gru")])
def test_every_recurrence_computes_in_float32_under_bf16_autocast(arch, impl, gated, monkeypatch):
    """bf16-mixed: the output layer runs in bf16, and the gate computation itself (its matmuls, nonlinearities or
    fused kernel) in float32 for every impl, so the impls stay comparable.

    Negative control, run here: kills "fp32_recurrence switched off" (autocast left on around the recurrence):
    then the hand-written cells' hidden matmuls and nn.LSTM/GRU/RNN's kernel run in bf16 (their states stay float32
    by type promotion, which is why checking the state's dtype could not see it) and the check must fail.

    The control runs with oneDNN switched off, on every CPU: oneDNN's bf16 LSTM primitive exists only where the
    CPU computes bf16 natively (avx512_bf16), and without it the mutant nn.LSTM fails to run at all instead of
    showing its bf16 kernel.  PyTorch's own LSTM kernel then runs the mutant's gate matmuls in bf16 on any CPU."""
    import contextlib

    from lmgrid.models import gru, lstm, rnn

    model = make(arch, impl, layers=2).eval()
    x = tokens(41)
    logits, ops = recurrence_ops(model, x, gated)
    assert logits.dtype == torch.bfloat16  # the head ran under autocast
    assert ops and all(dtype == torch.float32 for _, dtype in ops), sorted(set(ops))
    for module in (gru, lstm, rnn):  # the mutation
        monkeypatch.setattr(module, "fp32_recurrence", lambda x: contextlib.nullcontext())
    with torch.backends.mkldnn.flags(enabled=False):
        _, mutated = recurrence_ops(model, x, gated)
    assert any(dtype == torch.bfloat16 for _, dtype in mutated), sorted(set(mutated))


@pytest.mark.parametrize("arch,impls", [("lstm", ("torch", "cell", "concat", "cellonebias")), ("gru", ("torch", "cell"))])
def test_impls_of_one_seed_start_from_the_same_weights(arch, impls, monkeypatch):
    """Same seed, any impl: the same initial function (so an impl comparison compares the impls, not the draws).
    Negative control, run here: kills "nn.LSTM/nn.GRU's own init draws from the seeded generator" (construction
    draws kept): impl torch then starts elsewhere."""
    import contextlib

    from lmgrid.models import gru, lstm

    def outputs():
        return {impl: make(arch, impl, seed=3, layers=2, residual=True).eval()(tokens(8))[0] for impl in impls}

    out = outputs()
    assert all(torch.allclose(out[impl], out[impls[0]], atol=1e-6) for impl in impls), impls
    for module in (gru, lstm):  # the mutation
        monkeypatch.setattr(module, "construction_draws_discarded", contextlib.nullcontext)
    out = outputs()
    assert not torch.allclose(out["torch"], out["cell"], atol=1e-3)


def test_output_layer_is_one_matrix_product_when_validating_in_bf16():
    """Under torch.inference_mode (Lightning's validation) and CPU bf16 autocast, the output layer runs as one
    matrix product over all positions (aten::addmm), never a batched one: nn.Linear on the recurrence's 3-D,
    non-contiguous output takes aten::bmm there, copying the weight per batch row (23 ms against 1.5 ms per PTB
    chunk, docs/benchmarks.md). Negative control, the mutation it kills: the 3-D input handed to nn.Linear as
    it is (the head before the fix) shows aten::bmm.  The recurrence runs in float32 as in the model
    (fp32_recurrence): called under autocast, nn.LSTM needs native bf16 (oneDNN's primitive) and fails elsewhere."""
    from torch.profiler import profile

    from lmgrid.models.common import fp32_recurrence

    model = make("lstm", layers=1).eval()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        emb = model.embedding(tokens(15))
        with fp32_recurrence(emb):  # as the model runs it: nn.LSTM in float32, on any CPU
            out, _ = model.rnn(emb.float())
        assert out.dim() == 3 and out.dtype == torch.float32
        with profile() as fixed:
            logits = model.head(out)
        with profile() as unflattened:
            model.head.decoder(out)
    ops = {e.key for e in fixed.key_averages()}
    assert "aten::addmm" in ops and "aten::bmm" not in ops
    assert "aten::bmm" in {e.key for e in unflattened.key_averages()}
    assert logits.shape == (B, T, V)


@pytest.mark.parametrize("arch", ["lstm", "gru", "rnn", "ffnn", "transformer"])
def test_init_range_draws_every_parameter_uniform_in_the_range(arch):
    """init_range 0.1 (Zaremba et al. 2014): every weight and bias in [-0.1, 0.1] and spread over it, the recurrent
    blocks no longer orthogonal and no forget-gate bias of 1.  Kills "init_range ignored": the default init, run
    below as the negative control, has parameters outside the range (the orthogonal blocks' entries, the LSTM's
    forget bias 1, the Transformer's LayerNorm weights 1)."""
    model = make(arch, layers=2, init_range=0.1)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert flat.abs().max() <= 0.1 and flat.min() < -0.09 and flat.max() > 0.09
    assert abs(float(flat.mean())) < 0.01  # centred: uniform, not a one-sided draw
    default = torch.cat([p.detach().flatten() for p in make(arch, layers=2).parameters()])
    assert default.abs().max() > 0.1
    assert torch.equal(flat, torch.cat([p.detach().flatten() for p in make(arch, layers=2, init_range=0.1).parameters()]))
