"""models/transformer.py: the last block runs its queries, output projection and MLP at the predicted positions
only, and computes there what the whole block over every position computes (outputs and gradients)."""
from __future__ import annotations

import pytest
import torch

from lmgrid.models import build_model, transformer
from lmgrid.run.spec import model_config_defaults

V, D, T = 41, 16, 7
TOL = dict(rtol=1e-5, atol=1e-5)  # tests/test_models.py's


def make():
    """In float64: the two formulations multiply matrices of other shapes (one query row or seven), which a CPU's
    BLAS sums in other orders, and the LayerNorm backward's cancellations magnify that.  In float32 the gradients
    differed by 1.3e-5 to 2.5e-5 relative on an AMD EPYC (2026-11-28), past TOL (within it on the Intel Xeon of
    earlier CI runs); in float64 they agree to 1e-13, so the check depends on the formulation, not on the CPU."""
    torch.manual_seed(0)
    return build_model(model_config_defaults(arch="transformer", vocab_size=V, hidden_dim=D, heads=4, layers=2,
                                             context_len=T, max_len=2 * T, dropout=0.0)).double().train()


def reference_features(model, tokens, prefix, keep):
    """The whole-block formulation: every block over every position, then the last `keep` positions."""
    inp = torch.cat([prefix, tokens], 1)
    x = model.embedding(inp) + model.position(torch.arange(inp.shape[1]))
    for block in model.blocks:
        x = block(x)
    return model.ln_f(x[:, -keep:])


def outputs_and_grads(model, features):
    model.zero_grad()
    out = features()
    (out.square().sum() + out.sum()).backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}  # no head


def assert_same(got, want):
    torch.testing.assert_close(got[0], want[0], **TOL)
    assert set(got[1]) == set(want[1])
    for name, grad in want[1].items():
        torch.testing.assert_close(got[1][name], grad, **TOL, msg=name)


@pytest.mark.parametrize("last_only", [False, True])
def test_last_block_at_the_predicted_positions_equals_the_whole_block(last_only, monkeypatch):
    """A chunk after a full context (queries T..2T-1 of 2T positions), and with last_only the last position alone.
    Kills: "the trimmed queries' mask aligned at the top-left" (is_causal's alignment: query i then sees keys 0..i
    only), run here as a negative control, which must change the outputs."""
    g = torch.Generator().manual_seed(1)
    prefix, tokens = (torch.randint(0, V, (3, T), generator=g) for _ in range(2))
    model = make()
    keep = 1 if last_only else T
    want = outputs_and_grads(model, lambda: reference_features(model, tokens, prefix, keep))
    got = outputs_and_grads(model, lambda: model.features(tokens, prefix, last_only=last_only)[0])
    assert got[0].shape == (3, keep, D)
    assert_same(got, want)
    monkeypatch.setattr(transformer, "last_queries_mask",
                        lambda n, length, device: torch.ones(n, length, dtype=torch.bool).tril(0))  # the mutation
    mutant = outputs_and_grads(model, lambda: model.features(tokens, prefix, last_only=last_only)[0])
    assert not torch.allclose(mutant[0], want[0], atol=1e-3)
