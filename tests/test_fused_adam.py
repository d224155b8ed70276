"""`optimizer: adam` takes torch's fused Adam kernel where every parameter allows it (lmgrid.neural.module
.fused_adam_applies): one pass over each parameter instead of eight.  It is the same update rounded differently in
the last place, so these tests bound the difference from the for-loop Adam and show that the bound tells a
different update apart.  Every test runs its mutation too and checks that it fails."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from lmgrid.neural import module as module_mod
from lmgrid.neural.module import LMModule, fused_adam_applies
from lmgrid.run.spec import model_config_defaults

STEPS = 30
# Relative to the largest weight change over STEPS steps: the fused and the for-loop kernels differ by rounding
# (1e-6 of the change here); a different update (the mutation below, eps 1e-6 for 1e-8) by 8e-3.
ROUNDING_BOUND = 1e-4


def _module(optimizer: str = "adam") -> LMModule:
    cfg = model_config_defaults(arch="lstm", vocab_size=40, emb_dim=8, hidden_dim=8, layers=1, n_step=3)
    return LMModule(dataclasses.asdict(cfg), "stream", optimizer=optimizer, lr=1e-2)


def test_adam_is_fused_on_the_cpu(monkeypatch):
    """configure_optimizers returns Adam with its fused kernel for a CPU model (and SGD is left as it is).
    Negative control, run here: kills "the fused kernel not asked for" (fused_adam_applies answering False)."""
    def fused(optimizer):
        return bool(_module(optimizer).configure_optimizers().defaults.get("fused"))

    assert fused("adam") and not fused("sgd")
    monkeypatch.setattr(module_mod, "fused_adam_applies", lambda params: False)  # the mutation
    assert not fused("adam")


def test_fused_adam_applies_only_to_floating_point_parameters_on_cpu_or_cuda():
    """The kernel takes floating-point tensors on the CPU or CUDA; anything else keeps the for-loop Adam.
    Negative control: an integer parameter, a parameter on the `meta` device and no parameters each answer False."""
    assert fused_adam_applies([torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2, 2))])
    assert not fused_adam_applies([torch.nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False)])
    assert not fused_adam_applies([torch.nn.Parameter(torch.zeros(3, device="meta"))])
    assert not fused_adam_applies([])


def _trajectory(**adam) -> tuple[torch.Tensor, torch.Tensor]:
    """STEPS Adam steps from one start along one fixed sequence of gradients: (final weights, start)."""
    g = torch.Generator().manual_seed(0)
    start = torch.randn(64, 32, generator=g)
    grads = [torch.randn(64, 32, generator=g) * 10 ** torch.randint(-3, 2, (), generator=g) for _ in range(STEPS)]
    p = torch.nn.Parameter(start.clone())
    opt = torch.optim.Adam([p], lr=1e-3, weight_decay=0.01, **adam)
    for grad in grads:
        p.grad = grad.clone()
        opt.step()
    return p.detach(), start


def test_fused_adam_is_the_loop_adam_up_to_rounding():
    """After STEPS steps the fused kernel's weights equal the for-loop Adam's to ROUNDING_BOUND of the weights'
    change.  Negative control, run here: kills "the fused kernel computes another update" (the loop with eps 1e-6
    instead of 1e-8 lies outside the bound)."""
    loop, start = _trajectory(fused=False)
    fused, _ = _trajectory(fused=True)
    scale = float((loop - start).abs().max())

    def gap(w):
        return float((w - loop).abs().max()) / scale

    assert gap(fused) <= ROUNDING_BOUND
    other, _ = _trajectory(fused=False, eps=1e-6)  # the mutation
    assert gap(other) > ROUNDING_BOUND


def _clipped_norm(clip: float) -> float:
    """The gradients' total norm after LMModule's clipping hook with a fused Adam (no trainer: bf16-mixed and
    32-bit runs take this path; Lightning's mixed-precision plugin would refuse a fused optimizer)."""
    module = _module("adam")
    opt = module.configure_optimizers()
    assert opt.defaults["fused"]
    for i, p in enumerate(module.parameters()):
        p.grad = torch.full_like(p, float(i + 1))
    module.configure_gradient_clipping(opt, clip, "norm")
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in module.parameters()])))


def test_fused_adam_gradients_are_clipped_to_the_norm(monkeypatch):
    """With the fused kernel the clip is applied by lmgrid's hook: the total gradient norm ends at `clip`.
    Negative control, run here: kills "the clip skipped for a fused optimizer" (the norm stays far above it)."""
    assert _clipped_norm(0.25) == pytest.approx(0.25, rel=1e-4)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, clip: None)  # the mutation
    assert _clipped_norm(0.25) > 1.0
