"""`weight_drop`: DropConnect on the hidden-to-hidden weights of the library recurrences (models/lstm.hh_dropped).

What a user relies on: in training the recurrence runs with one masked, rescaled W_hh per forward call (per BPTT
chunk), the gradient reaches W_hh through the kept entries, evaluation uses W_hh whole, and 0 is the model as it
was. Each test runs its broken variant (the named mutation) and asserts that it is caught.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from lmgrid.common.errors import LmgridError
from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.models import lstm as lstm_mod

V, EMB, HID, B, T, P = 29, 12, 16, 3, 7, 0.5
ARCHS = ["rnn", "lstm", "gru"]


def make(arch, layers=2, residual=False, weight_drop=P, seed=0):
    """No `dropout` (its default 0), so weight_drop is the only randomness in a training forward."""
    torch.manual_seed(seed)
    return build_model(model_config_defaults(arch=arch, vocab_size=V, emb_dim=EMB, hidden_dim=HID, layers=layers,
                                   residual=residual, weight_drop=weight_drop))


def tokens(seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_hh_dropped_masks_and_rescales_only_the_recurrent_weights():
    """Every weight_hh_l* entry is 0 or w / (1 - p), about p of them 0; W_ih and the biases are not touched.
    Kills "no 1/(1-p) rescale" (the kept entries equal w, so evaluation would see a larger recurrence than
    training did); run here as the negative control."""
    rnn = nn.LSTM(EMB, HID, 2, batch_first=True)
    torch.manual_seed(5)
    dropped = lstm_mod.hh_dropped(rnn, P, training=True)
    assert sorted(dropped) == ["weight_hh_l0", "weight_hh_l1"]

    def well_formed(dropped):
        ok = True
        for name, w in dropped.items():
            orig = getattr(rnn, name)
            kept = w != 0
            ok &= torch.allclose(w[kept], orig[kept] / (1 - P))
            ok &= 0.4 < 1 - kept.float().mean().item() < 0.6
        return ok

    assert well_formed(dropped)
    mutant = {name: torch.where(w != 0, getattr(rnn, name), 0.0) for name, w in dropped.items()}  # the mutation
    assert not well_formed(mutant)
    assert lstm_mod.hh_dropped(rnn, P, training=False) == {} == lstm_mod.hh_dropped(rnn, 0.0, training=True)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("residual", [False, True])
def test_training_runs_the_recurrence_with_one_dropped_matrix_per_chunk(arch, residual):
    """In training the model equals the same model whose W_hh were replaced, for the whole chunk, by the dropped
    matrices hh_dropped draws (the same generator state): one mask shared by every time step, for the fused
    module and for the residual per-layer stack.  Kills "weight_drop ignored in training" (the output then equals
    the undropped model's), run here as the negative control."""
    model = make(arch, residual=residual).train()
    x = tokens()
    torch.manual_seed(11)
    got, _, _ = model(x)

    modules = list(model.rnn) if isinstance(model.rnn, nn.ModuleList) else [model.rnn]
    torch.manual_seed(11)
    masks = [lstm_mod.hh_dropped(m, P, True) for m in modules]  # drawn in the order the forward draws them
    with torch.no_grad():
        for m, dropped in zip(modules, masks):
            for name, w in dropped.items():
                getattr(m, name).copy_(w)
    model.cfg.weight_drop = 0.0
    want, _, _ = model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    plain, _, _ = make(arch, residual=residual, weight_drop=0.0).train()(x)  # the mutation: the same weights with nothing dropped
    assert not torch.allclose(got, plain, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("arch", ARCHS)
def test_evaluation_uses_the_whole_matrix_and_zero_is_the_model_as_before(arch):
    """eval(): the output with weight_drop 0.5 equals weight_drop 0's; and in training weight_drop 0 draws nothing
    from the generator (0.5 does), so a run at 0 computes what runs computed before the setting existed.
    Kills "dropped at evaluation too" (hh_dropped ignoring `training`), run here as the negative control."""
    x = tokens()
    with torch.no_grad():
        a = make(arch).eval()(x)[0]
        b = make(arch, weight_drop=0.0).eval()(x)[0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)

    def draws(weight_drop):
        model = make(arch, weight_drop=weight_drop).train()
        before = torch.random.get_rng_state()
        model(x)
        return not torch.equal(before, torch.random.get_rng_state())

    assert not draws(0.0) and draws(P)

    real = lstm_mod.hh_dropped
    try:
        lstm_mod.hh_dropped = lambda m, p, training: real(m, p, True)  # the mutation
        with torch.no_grad():
            mutant = make(arch).eval()(x)[0]
    finally:
        lstm_mod.hh_dropped = real
    assert not torch.allclose(mutant, b, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_gradient_reaches_w_hh_through_the_kept_entries_only(arch):
    """Training with weight_drop: W_hh gets a gradient, zero exactly where the mask dropped an entry.  Kills "the
    mask applied to a detached copy" (W_hh would then never train), run here as the negative control."""
    model = make(arch, layers=1).train()
    x = tokens()
    torch.manual_seed(7)
    model(x)[0].float().logsumexp(-1).sum().backward()
    grad = model.rnn.weight_hh_l0.grad
    torch.manual_seed(7)
    dropped = lstm_mod.hh_dropped(model.rnn, P, True)["weight_hh_l0"]
    assert grad is not None and grad.abs().sum() > 0
    assert torch.all(grad[dropped == 0] == 0) and (grad[dropped != 0] != 0).float().mean() > 0.5

    real = lstm_mod.hh_dropped
    model.zero_grad(set_to_none=True)
    try:
        lstm_mod.hh_dropped = lambda m, p, training: {k: v.detach() for k, v in real(m, p, training).items()}
        model(x)[0].float().logsumexp(-1).sum().backward()  # the mutation
    finally:
        lstm_mod.hh_dropped = real
    assert model.rnn.weight_hh_l0.grad is None or model.rnn.weight_hh_l0.grad.abs().sum() == 0


@pytest.mark.parametrize("changes", [
    {"weight_drop": 1.0},
    {"weight_drop": -0.1},
    {"weight_drop": True},
    {"arch": "ffnn", "weight_drop": 0.3},
    {"arch": "transformer", "weight_drop": 0.3},
    {"arch": "lstm", "impl": "cell", "weight_drop": 0.3},
    {"arch": "gru", "impl": "cell", "weight_drop": 0.3},
])
def test_bad_weight_drop_is_a_one_line_error(changes):
    """Kills: a weight_drop the model does not support passing silently, or failing in torch with a traceback
    that does not name the key and value (the negative control: weight_drop 0.25 on the same model builds)."""
    build_model(model_config_defaults(**{"arch": "rnn", "vocab_size": V, "weight_drop": 0.25}))
    values = {"arch": "rnn", "vocab_size": V, **changes}
    with pytest.raises(LmgridError) as err:
        build_model(model_config_defaults(**values))
    message = str(err.value)
    assert message.startswith("model.weight_drop:") and "\n" not in message
    assert repr(changes["weight_drop"]) in message
