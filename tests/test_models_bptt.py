"""models/bptt.py: the hand-written cells' whole-layer path (forward loop without autograd, backward through time
written out) computes what their step-by-step loop under autograd computes: outputs, final states, the gradients
of every parameter and of the initial state, over two chunks of truncated BPTT, in training mode with dropout."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmgrid.models import bptt, build_model
from lmgrid.run.spec import model_config_defaults

V, EMB, HID, LAYERS, B, T = 37, 16, 24, 3, 4, 9
TOL = dict(rtol=1e-5, atol=1e-5)  # tests/test_models.py's
CELLS = [("lstm", "cell"), ("lstm", "concat"), ("lstm", "cellonebias"), ("gru", "cell")]


def tokens(seed):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def make(arch, impl, hand_bptt, residual):
    torch.manual_seed(0)
    model = build_model(model_config_defaults(arch=arch, impl=impl, vocab_size=V, emb_dim=EMB, hidden_dim=HID,
                                              layers=LAYERS, dropout=0.3, residual=residual))
    model.rnn.hand_bptt = hand_bptt
    return model.train()


def two_chunks(model, arch):
    """(outputs of both chunks, final state, gradients of the parameters and of the initial state): the second chunk
    starts from the first's detached state, as training carries it; dropout masks drawn from one seed."""
    g = torch.Generator().manual_seed(5)
    state0 = tuple(torch.randn(LAYERS, B, HID, generator=g).mul_(0.5).requires_grad_() for _ in range(2))
    state0 = state0 if arch == "lstm" else state0[0]
    torch.manual_seed(7)
    logits1, state1, _ = model(tokens(1), state0)
    logits2, state2, _ = model(tokens(2), model.detach_state(state1))
    loss = F.cross_entropy(logits1.reshape(-1, V), tokens(3).reshape(-1)) \
        + F.cross_entropy(logits2.reshape(-1, V), tokens(4).reshape(-1))
    model.zero_grad()
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    grads.update({f"state0[{k}]": s.grad for k, s in enumerate(state0 if arch == "lstm" else (state0,))})
    return torch.cat([logits1, logits2], 1), state2, grads


def assert_same(got, want):
    torch.testing.assert_close(got[0], want[0], **TOL)
    torch.testing.assert_close(got[1], want[1], **TOL)
    assert set(got[2]) == set(want[2])
    for name, grad in want[2].items():
        torch.testing.assert_close(got[2][name], grad, **TOL, msg=name)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("arch,impl", CELLS)
def test_whole_layer_bptt_equals_the_step_by_step_cell(arch, impl, residual, monkeypatch):
    """Kills: "the backward pairs step t's gradient with h_t (and c_t) instead of the state it started from,
    h_{t-1}" (a shifted time index; the forward is untouched, so only the gradient comparison can see it), and with
    it "the whole-layer path is never taken" (the mutant would then pass).  Both run here as a negative control."""
    want = two_chunks(make(arch, impl, False, residual), arch)
    assert_same(two_chunks(make(arch, impl, True, residual), arch), want)
    monkeypatch.setattr(bptt, "previous", lambda states: states[1:])  # the mutation
    mutant = two_chunks(make(arch, impl, True, residual), arch)
    torch.testing.assert_close(mutant[0], want[0], **TOL)  # same forward
    with pytest.raises(AssertionError):
        assert_same(mutant, want)


@pytest.mark.parametrize("arch,impl", CELLS)
def test_whole_layer_path_without_gradients_equals_the_step_by_step_cell(arch, impl, monkeypatch):
    """Evaluation (no_grad) runs the same forward.  Kills: "the forward loop drops the carried state" (every step
    from h_0, c_0), run here: patched into the model's layer function, it must change the outputs."""
    x = tokens(11)
    ref = make(arch, impl, False, False).eval()
    fast = make(arch, impl, True, False).eval()
    with torch.no_grad():
        want, got = ref(x)[0], fast(x)[0]
    torch.testing.assert_close(got, want, **TOL)
    layer = bptt.LSTMLayer if arch == "lstm" else bptt.GRULayer
    one_step = layer.forward

    def from_h0_every_step(ctx, x_proj, *rest):  # the mutation: T one-step chunks, each from the initial state
        outs = [one_step(ctx, x_proj[:, t:t + 1], *rest) for t in range(x_proj.shape[1])]
        return (torch.cat([o[0] for o in outs], 1), *outs[-1][1:])

    monkeypatch.setattr(layer, "forward", staticmethod(from_h0_every_step))
    with torch.no_grad():
        mutant = fast(x)[0]
    assert not torch.allclose(mutant, want, atol=1e-3)
