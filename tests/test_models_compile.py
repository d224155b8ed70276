"""ModelConfig.compile: the torch.compile'd step functions of the hand-written cells compute what the eager ones do
(outputs and gradients), across two batch sizes (the second triggers a recompilation). Slow: it compiles."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults

V = 29


@pytest.mark.slow
@pytest.mark.parametrize("arch,impl", [("lstm", "cell"), ("lstm", "concat"), ("gru", "cell")])
def test_compiled_cell_equals_eager(arch, impl):
    models = []
    for compiled in (False, True):
        torch.manual_seed(0)
        models.append(build_model(model_config_defaults(arch=arch, impl=impl, vocab_size=V, emb_dim=8, hidden_dim=12,
                                              layers=2, compile=compiled)))
    eager, comp = models
    g = torch.Generator().manual_seed(1)
    for batch in (3, 5):
        x = torch.randint(0, V, (batch, 6), generator=g)
        y = torch.randint(0, V, (batch, 6), generator=g)
        for m in models:
            m.zero_grad()
            logits, _, gates = m(x, return_gates=True)
            F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)).backward()
        torch.testing.assert_close(comp(x)[0], eager(x)[0], rtol=1e-5, atol=1e-5)
        for (name, a), (_, b) in zip(comp.named_parameters(), eager.named_parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5, msg=name)
        ge, gc = eager(x, return_gates=True)[2], comp(x, return_gates=True)[2]
        assert set(gc) == set(ge)
        for name in ge:
            torch.testing.assert_close(gc[name], ge[name], rtol=1e-5, atol=1e-5)
