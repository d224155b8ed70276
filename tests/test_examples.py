"""The worked plug-in examples, examples/ngram_mlp.py and examples/min_gru.py, against the plug-in contract
(docs/models.md, "Your own model"), on their own: a stub config, no lmgrid.

Negative controls load an example's source with one edit (`load(..., mutate=(old, new))`), so each mutation a test
names is run on the real file, and the test's own check is seen to fail on it."""
from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BUILT_INS = {"addk", "katz", "kn", "mkn", "ffnn", "rnn", "lstm", "gru", "transformer"}


def load(name: str, mutate: tuple[str, str] | None = None):
    """examples/<name>.py as a module (as lmgrid imports a user's file), with `old` replaced by `new` once."""
    source = (EXAMPLES / f"{name}.py").read_text()
    if mutate is not None:
        old, new = mutate
        assert source.count(old) == 1, f"the mutation's text is not once in {name}.py: {old!r}"
        source = source.replace(old, new)
    spec = importlib.util.spec_from_loader(f"example_{name}", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, str(EXAMPLES / f"{name}.py"), "exec"), module.__dict__)
    return module


def stub_cfg(**over) -> SimpleNamespace:
    """The fields the contract says a plug-in may read (lmgrid passes its ModelConfig)."""
    values = dict(vocab_size=11, n_step=5, layers=2, emb_dim=6, hidden_dim=8, dropout=0.0, activation="gelu",
                  residual=True, tie_weights=False, init_range=0.0)
    return SimpleNamespace(**{**values, **over})


def build(module, cls: str, seed: int = 0, **over):
    torch.manual_seed(seed)
    return getattr(module, cls)(stub_cfg(**over)).eval()


def tokens(batch: int, length: int, seed: int = 1, vocab: int = 11) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def contract_breaches(model) -> list[str]:
    """The contract's attributes a built example gets wrong (by attribute name)."""
    wrong = []
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,30}", model.lmgrid_name) or model.lmgrid_name in BUILT_INS:
        wrong.append("lmgrid_name")
    if not model.lmgrid_regimes or not set(model.lmgrid_regimes) <= {"window", "stream"}:
        wrong.append("lmgrid_regimes")
    if not isinstance(model.lmgrid_gates, tuple) or not model.lmgrid_reference or not model.lmgrid_display:
        wrong.append("lmgrid_gates/reference/display")
    if not isinstance(model.embedding, nn.Embedding) or tuple(model.embedding.weight.shape) != (11, 6):
        wrong.append("embedding")
    if model.features(tokens(2, 4))[0].shape[-1] != model.out_dim or model.out_dim != 8:
        wrong.append("out_dim")
    return wrong


@pytest.mark.parametrize("name, cls", [("ngram_mlp", "NGramMLP"), ("min_gru", "MinGRU")])
def test_examples_declare_the_contracts_attributes(name, cls):
    """Kills: a name that takes a built-in's (negative control, run here: lmgrid_name "gru"); an `embedding` of
    another shape (tying and the word-vector export read it; run: hidden_dim wide, failed); an out_dim other than
    the features' width (run: emb_dim, failed)."""
    assert contract_breaches(build(load(name), cls)) == []
    old = f'lmgrid_name = "{load(name).__dict__[cls].lmgrid_name}"'
    assert contract_breaches(build(load(name, mutate=(old, 'lmgrid_name = "gru"')), cls)) == ["lmgrid_name"]


def test_ngram_mlp_returns_one_position_and_refuses_a_window_of_another_length():
    """Kills: returning [B, H] without the position axis, or one row per context token (run: `.unsqueeze(1)`
    dropped, failed); accepting a window of the wrong length silently (run: the length check removed, failed)."""
    model = build(load("ngram_mlp"), "NGramMLP")
    for last_only in (True, False):
        hidden, state, gates = model.features(tokens(3, 4), last_only=last_only)
        assert hidden.shape == (3, 1, 8) and state is None and gates is None
    assert model.features(tokens(3, 4), return_gates=True)[2] == {}
    with pytest.raises(ValueError, match=r"ngram_mlp: tokens of shape \(3, 5\) are not \[batch, n_step-1=4\]"):
        model.features(tokens(3, 5))


def blind_spots(model, window: torch.Tensor) -> list[str]:
    """What the n-gram MLP's output fails to depend on: each context position, and the order of the tokens.
    "Depends" means moves by more than float32 rounding (a sum taken in another order rounds differently)."""
    base = model.features(window)[0]

    def same(other):
        return torch.allclose(model.features(other)[0], base, rtol=0, atol=1e-5)

    missed = []
    for i in range(window.shape[1]):
        changed = window.clone()
        changed[:, i] = (changed[:, i] + 1) % 11
        if same(changed):
            missed.append(f"position {i}")
    if same(window.flip(1)):
        missed.append("order")
    return missed


def test_ngram_mlp_reads_every_context_token_and_their_order():
    """A window model's only output predicts the token after the window, so it may read the whole window: what it
    must do is read all of it, in order (the concatenation, not a bag of words).
    Kills: summed embeddings (negative control, run here: order lost); reading only the last token (negative
    control, run here: positions 0-2 missed)."""
    window = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert blind_spots(build(load("ngram_mlp"), "NGramMLP"), window) == []
    summed = load("ngram_mlp", mutate=("self.embedding(tokens).flatten(1)",
                                      "self.embedding(tokens).sum(1).repeat(1, self.context)"))
    assert blind_spots(build(summed, "NGramMLP"), window) == ["order"]
    last = load("ngram_mlp", mutate=("self.embedding(tokens).flatten(1)",
                                    "self.embedding(tokens[:, -1:]).repeat(1, self.context, 1).flatten(1)"))
    assert blind_spots(build(last, "NGramMLP"), window) == ["position 0", "position 1", "position 2"]


def test_min_gru_shapes_in_the_window_and_stream_regimes():
    """Kills: last_only returning another position than the last (run: `x[:, :1]`, failed); the state laid out
    [B, layers, H] or holding the top layer only (run: `torch.stack(last, 1)`, failed)."""
    model = build(load("min_gru"), "MinGRU", layers=3)
    for T in (4, 7):  # a window of n_step-1 tokens, a stream chunk
        full, state, gates = model.features(tokens(2, T))
        assert full.shape == (2, T, 8) and state.shape == (3, 2, 8) and gates is None
        last, state_last, _ = model.features(tokens(2, T), last_only=True)
        assert last.shape == (2, 1, 8) and torch.equal(last, full[:, -1:]) and torch.equal(state_last, state)
    assert model.detach_state(None) is None


def future_leaks(model, x: torch.Tensor) -> list[int]:
    """Positions k where changing token k changed an output at a position before k (exact comparison)."""
    base = model.features(x)[0]
    leaks = []
    for k in range(1, x.shape[1]):
        changed = x.clone()
        changed[:, k] = (changed[:, k] + 1) % 11
        out = model.features(changed)[0]
        if not torch.equal(out[:, :k], base[:, :k]):
            leaks.append(k)
        assert not torch.equal(out[:, k], base[:, k]), f"token {k} does not reach its own position"
    return leaks


def test_min_gru_is_causal():
    """Position t's output reads tokens[:, :t+1] only, exactly (the scan composes each step with earlier ones).
    Kills: a layer that reads its input reversed in time (negative control, run here: every position leaks)."""
    x = tokens(2, 9)
    assert future_leaks(build(load("min_gru"), "MinGRU"), x) == []
    reversed_ = load("min_gru", mutate=("h, z = layer(x, state[k])", "h, z = layer(x.flip(1), state[k])"))
    assert future_leaks(build(reversed_, "MinGRU"), x) != []


def chunked_gap(module) -> float:
    """Largest difference between one pass over 12 tokens and two chunks of 5 + 7 with the state carried."""
    model = build(module, "MinGRU", layers=2)
    x = tokens(3, 12)
    whole, state_whole, _ = model.features(x)
    first, state, _ = model.features(x[:, :5])
    second, state_end, _ = model.features(x[:, 5:], state=model.detach_state(state))
    gap = (torch.cat([first, second], 1) - whole).abs().max()
    return max(gap.item(), (state_end - state_whole).abs().max().item())


def test_min_gru_carries_its_state_from_chunk_to_chunk():
    """Two chunks with the state carried equal one chunk of their concatenation (within float32 rounding: the
    scan groups its products differently).  Kills: a scan that drops h_0 (negative control, run here); every layer
    started from layer 0's state (run: `state[0]`, failed)."""
    assert chunked_gap(load("min_gru")) < 1e-5
    dropped = load("min_gru", mutate=("b[:, :1] + a[:, :1] * h0.unsqueeze(1)", "b[:, :1]"))
    assert chunked_gap(dropped) > 1e-3


def loop(gate_logit, h_tilde, h0):
    """The recurrence as the paper writes it, one step at a time: the reference for the scan."""
    z = torch.sigmoid(gate_logit)
    h, out = h0, []
    for t in range(gate_logit.shape[1]):
        h = (1 - z[:, t]) * h + z[:, t] * h_tilde[:, t]
        out.append(h)
    return torch.stack(out, 1)


def scan_error(module, T: int, gate_bias: float) -> tuple[float, float]:
    """(float32 scan's largest error against a float64 loop, that of a float32 loop; both relative to the largest
    |h|) over T steps, with the gate logits ~ N(gate_bias, 1): z near 1 is where a log-space scan loses digits
    fastest, z near 0 where h_t depends on the most steps."""
    g = torch.Generator().manual_seed(T)
    gate_logit = torch.randn(4, T, 16, generator=g, dtype=torch.float64) + gate_bias
    h_tilde = torch.randn(4, T, 16, generator=g, dtype=torch.float64)
    h0 = torch.randn(4, 16, generator=g, dtype=torch.float64)
    exact = loop(gate_logit, h_tilde, h0)
    assert torch.allclose(module.scan(gate_logit, h_tilde, h0), exact, rtol=0, atol=1e-12)  # the algebra
    f32 = [t.float() for t in (gate_logit, h_tilde, h0)]
    return ((module.scan(*f32).double() - exact).abs().max().item() / exact.abs().max().item(),
            (loop(*f32).double() - exact).abs().max().item() / exact.abs().max().item())


@pytest.mark.parametrize("gate_bias", [-3, 0, 3])
@pytest.mark.parametrize("T", [1, 2, 5, 35, 200])
def test_min_gru_scan_equals_a_sequential_loop(T, gate_bias):
    """The scan is the loop's recurrence (float64, to 1e-12) and in float32 as close to it as a float32 loop is
    (within 8 float32 epsilons of the largest |h|).  Kills: one round of the scan too few (negative control, run
    here: `while 2 * step < T`); the paper's log-space scan (cumsum, then logcumsumexp of the positive and negative
    terms apart, h~ being signed here), the first draft of this file: run through scan_error, it failed at T = 35
    and 200 with gate_bias 0 and 3 (T = 200, bias 3: 3.9e-5 of max |h| against 1.3e-7 for the loop)."""
    scan_err, loop_err = scan_error(load("min_gru"), T, gate_bias)
    assert scan_err < 8 * torch.finfo(torch.float32).eps, (scan_err, loop_err)
    if T > 2 and gate_bias < 0:  # a missed round drops terms from >= T/2 steps back: only visible if z forgets slowly
        short = load("min_gru", mutate=("while step < T:", "while 2 * step < T:"))
        with pytest.raises(AssertionError):
            scan_error(short, T, gate_bias)


def test_min_gru_model_is_its_equations():
    """The whole model against the equations written out in float64: per layer z = sigmoid(W_z x + b_z),
    h~ = W_h x + b_h, the loop, the residual from layer 2, the state and the gate z.  Kills: the residual added at
    layer 1 too or not at all (run: `k >= 0`, and `residual=False` inside, failed); gates stacked [B, layers, T, H]
    (run: `torch.stack(zs, 1)`, failed); the gate returned before its sigmoid (run: `gate_logit`, failed)."""
    model = build(load("min_gru"), "MinGRU", layers=3).double()
    x, h0 = tokens(2, 6), torch.randn(3, 2, 8, dtype=torch.float64)
    hidden, state, gates = model.features(x, state=h0, return_gates=True)
    inp, states, zs = model.embedding(x), [], []
    for k, layer in enumerate(model.layers):
        h = loop(layer.z(inp), layer.h(inp), h0[k])
        states.append(h[:, -1])
        zs.append(torch.sigmoid(layer.z(inp)))
        inp = h + inp if k > 0 else h
    assert torch.allclose(hidden, inp, rtol=0, atol=1e-12)
    assert torch.allclose(state, torch.stack(states), rtol=0, atol=1e-12)
    assert set(gates) == {"z"} and gates["z"].shape == (3, 2, 6, 8)
    assert torch.allclose(gates["z"], torch.stack(zs), rtol=0, atol=1e-12)
    assert gates["z"].min() >= 0 and gates["z"].max() <= 1


def loss_after_training(model, window: int | None, steps: int = 60) -> tuple[float, float]:
    """(loss before, after) `steps` SGD steps predicting a repeating sequence 0, 1, .., 4, 0, 1, .. through a plain
    nn.Linear head.  Every token is equally frequent, so a model that does not read its context stays at log 5."""
    torch.manual_seed(0)
    seq = torch.arange(40) % 5
    if window:  # every window of n_step-1 tokens and the token after it
        inputs = seq.unfold(0, window, 1)[:-1]
        targets = seq[window:].unsqueeze(1)
    else:  # one stream, the next token at every position
        inputs, targets = seq[:-1].view(1, -1), seq[1:].view(1, -1)
    head = nn.Linear(model.out_dim, 5)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.5)
    model.train()

    def loss():
        logits = head(model.features(inputs)[0])
        return F.cross_entropy(logits.reshape(-1, 5), targets.reshape(-1))

    first = loss().item()
    for _ in range(steps):
        opt.zero_grad()
        loss().backward()
        opt.step()
    return first, loss().item()


@pytest.fixture
def one_thread():
    """Matrices of a few dozen rows: a second intra-op thread has nothing to do but wait, and on a shared machine
    that waiting made the training test ~10x slower in CPU time (.scratch timing, 2 threads against 1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name, cls, window, blind", [
    ("ngram_mlp", "NGramMLP", 4, ("x = self.proj(x)", "x = self.proj(x * 0)")),
    ("min_gru", "MinGRU", None, ("h, z = layer(x, state[k])", "h, z = layer(x * 0, state[k])")),
])
def test_examples_learn_a_repeating_sequence(name, cls, window, blind):
    """A few SGD steps take the loss from about log 5 to under half of it.  Kills: the gradient not reaching the
    model, or the model not reading its context (negative control, run here: its input multiplied by 0, so the
    head can learn the unigram only, which is log 5); the features detached (run: `.detach()`, failed)."""
    first, last = loss_after_training(build(load(name), cls, vocab_size=5, dropout=0.1), window)
    assert abs(first - math.log(5)) < 0.2 and last < 0.5 * math.log(5), (first, last)
    _, blind_last = loss_after_training(build(load(name, mutate=blind), cls, vocab_size=5, dropout=0.1), window)
    assert blind_last > 0.9 * math.log(5), blind_last
