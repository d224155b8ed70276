"""`dropout_mask: sequence`: one dropout mask per batch row, shared by its positions (models/common.SequenceDropout),
on the embeddings and before the output layer of the recurrent nets.

What a user relies on: in training a unit dropped at one position of a row is dropped at all of them and kept ones
are scaled by 1/(1-p); rows draw their own masks; evaluation is untouched, so a model's PPL does not depend on the
setting once trained; `step` is nn.Dropout exactly as before.  Each test runs its broken variant (the named
mutation) and asserts that it is caught.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from lmgrid.errors import LmgridError
from lmgrid.models import ModelConfig, build_model
from lmgrid.models.common import SequenceDropout

V, EMB, B, T, P = 31, 16, 4, 9, 0.5
ARCHS = ["rnn", "lstm", "gru"]


def kept_pattern(x: torch.Tensor) -> torch.Tensor:
    return x != 0


def test_the_mask_is_one_per_row_over_every_position_and_rescaled():
    """Kills "a new mask at each position" (nn.Dropout, the negative control run here) and "no 1/(1-p) rescale"."""
    torch.manual_seed(0)
    x = torch.ones(B, T, EMB)
    drop = SequenceDropout(P).train()
    y = drop(x)
    keep = kept_pattern(y)
    assert torch.equal(keep, keep[:, :1].expand_as(keep))  # the same units at every position of a row
    assert not torch.equal(keep[0], keep[1])  # rows draw their own (equal by chance with probability 2**-16)
    assert set(y.unique().tolist()) == {0.0, 1 / (1 - P)}
    assert 0.2 < keep[:, 0].float().mean() < 0.8

    torch.manual_seed(0)
    per_step = kept_pattern(nn.Dropout(P).train()(x))  # the mutation
    assert not torch.equal(per_step, per_step[:, :1].expand_as(per_step))


def test_evaluation_passes_x_through_and_zero_draws_nothing():
    """Kills "dropped at evaluation too"; p 0 leaves the random stream as it was."""
    x = torch.randn(B, T, EMB)
    assert torch.equal(SequenceDropout(P).eval()(x), x)
    torch.manual_seed(3)
    assert torch.equal(SequenceDropout(0.0).train()(x), x)
    after = torch.rand(1)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(1))


def make(arch, mask, output_layer="full", seed=0):
    torch.manual_seed(seed)
    cfg = dict(arch=arch, vocab_size=V, emb_dim=EMB, hidden_dim=EMB, dropout=P, dropout_mask=mask, tie_weights=True)
    if output_layer == "adaptive":
        cfg.update(output_layer="adaptive", cutoffs=[10, 20])
    return build_model(ModelConfig(**cfg))


@pytest.mark.parametrize("output_layer", ["full", "adaptive"])
@pytest.mark.parametrize("arch", ARCHS)
def test_the_models_drop_embeddings_and_outputs_per_sequence(arch, output_layer):
    """What the embedding dropout and the output layer's dropout hand on, in a training forward: one kept pattern per
    row.  Kills "the setting not reaching a model or a head" (both nn.Dropout, the negative control: `step`)."""
    def patterns(model):
        seen = []
        hooks = [m.register_forward_hook(lambda mod, inp, out: seen.append(kept_pattern(out)))
                 for m in (model.drop, model.head.drop)]
        model.train()
        model(torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1)))
        for h in hooks:
            h.remove()
        return seen

    def locked(keep):
        keep = keep.view(B, T, -1)  # nn.Dropout in the head sees the positions flattened
        return torch.equal(keep, keep[:, :1].expand_as(keep))

    emb, out = patterns(make(arch, "sequence", output_layer))
    assert locked(emb) and locked(out) and not emb.all() and not out.all()
    emb, out = patterns(make(arch, "step", output_layer))  # the mutation
    assert not locked(emb) and not locked(out)


@pytest.mark.parametrize("arch", ARCHS)
def test_evaluation_is_the_same_model_whichever_mask_trained_it(arch):
    """The same weights score the same in evaluation under either setting.  Kills "SequenceDropout active in eval"
    (the mutation, run here: its forward patched to ignore `training`)."""
    tokens = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(2))
    step, seq = make(arch, "step").eval(), make(arch, "sequence").eval()
    seq.load_state_dict(step.state_dict())
    with torch.no_grad():
        assert torch.equal(step(tokens)[0], seq(tokens)[0])
        real = SequenceDropout.forward
        SequenceDropout.forward = lambda self, x: real(self.train(), x)  # the mutation
        try:
            assert not torch.equal(step(tokens)[0], seq(tokens)[0])
        finally:
            SequenceDropout.forward = real


@pytest.mark.parametrize("changes", [
    {"dropout_mask": "locked"},
    {"dropout_mask": None},
    {"arch": "ffnn", "dropout_mask": "sequence"},
    {"arch": "transformer", "dropout_mask": "sequence"},
])
def test_bad_dropout_mask_is_a_one_line_error(changes):
    with pytest.raises(LmgridError, match=r"\Amodel\.dropout_mask: [^\n]*\Z"):  # one line, naming the key
        build_model(ModelConfig(**{"arch": "rnn", "vocab_size": V, **changes}))
