"""Dynamic evaluation (Krause, Kahembwe, Murray & Renals 2018, "Dynamic evaluation of neural sequence models"),
as an evaluation mode of a stream model: rule sgd (their baseline) or rule rms (their RMS form with decay).

The stream is read in segments s_1, s_2, ..., state carried.  For each segment, in this order:
  1. score it: log p(target) of each of its positions under the current weights (these are the returned values);
  2. then take one SGD step on that segment's mean NLL, theta <- theta - lr * clip(grad), the gradient truncated
     at the segment's start (the carried state is detached, as in truncated BPTT training).
So a token's probability is always computed before any update that has seen it: the weights that score segment
s_i have been fitted to s_1 .. s_{i-1} only.  The model is adapted in a deep copy (the caller's weights never
change), in eval mode (no dropout, as when scoring), in float32; the gradient's global norm is clipped to the run's
`clip`, as training clips it (Lightning's gradient_clip_algorithm="norm").  This is rule "sgd", their baseline form.
With lr = 0 every step leaves the weights as they are, so the scores are the base model's (to float32 rounding:
a forward that records gradients may take another kernel, as nn.LSTM's does).

Rule "rms" is the paper's better form, RMS-normalised updates with a decay back to the trained weights theta_0:

* before adapting, MS_g = the mean over training segments of grad^2 (per parameter element), each grad that of one
  segment's mean NLL under theta_0, the segments of the same length as the adaptation's, state carried (detached)
  from one to the next, over the first `train_tokens` targets of the TRAINING stream (gradient_stats);
* after scoring each segment, with g its gradient (unclipped, as MS_g's) and every term taken at the old theta:
      theta <- theta - lr * g / (sqrt(MS_g) + eps) + min(decay_eff, 1) * (theta_0 - theta),
      decay_eff = decay * sqrt(MS_g) / mean(sqrt(MS_g)),
  elementwise; mean(sqrt(MS_g)) is over every element of every adapted parameter, and min(., 1) keeps the pull back
  from overshooting theta_0.  eps = EPS_REL x mean(sqrt(MS_g)) (0.1 of the mean RMS): scaled to the gradients, so
  that an element whose training gradient was exactly 0 (a word of an adaptive softmax's tail cluster that the
  `train_tokens` read never reached, or an untied input embedding row of an absent word) steps by at most
  lr * g / eps with eps of the model's gradient scale, not lr * g / 1e-8; docs/adapt.md.
Both rules score before they update, in a float32 deep copy, in eval mode; lr = 0 and decay = 0 keep theta_0.
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from lmgrid.common.errors import LmgridError

from lmgrid.testtime.adapt.stream import as_stream, full_log_probs, segments, stream_segment


def _score_then_update(model, opt, params, x, y, state, clip: float):
    """Segment (x, y) [1, T]: its targets' log-probs [T] under the weights before the step; then the step on them.
    Returns (log-probs, the carried state, detached, and the hidden states [T, H] that scored them)."""
    hidden, new_state, _ = model.features(x, state)
    token_logp = full_log_probs(model, hidden[0]).gather(1, y[0, :, None])[:, 0]
    scored = token_logp.detach().clone()  # fixed now: nothing below can change what was scored
    opt.zero_grad(set_to_none=True)
    (-token_logp.mean()).backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    return scored, model.detach_state(new_state), hidden[0].detach()


EPS_REL = 0.1  # rule rms: sqrt(MS_g) + EPS_REL * mean(sqrt(MS_g)), the guard against a zero training gradient
RULES = ("sgd", "rms")
TRAIN_TOKENS = 100_000  # rule rms: training targets whose gradients make MS_g


def check_settings(lr, segment, clip, rule: str = "sgd", decay: float = 0.0) -> None:
    if rule not in RULES:
        raise LmgridError(f"dynamic: rule {rule!r} is not one of {', '.join(RULES)}")
    for key, value in (("lr", lr), ("clip", clip), ("decay", decay)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise LmgridError(f"dynamic: {key} {value!r} is not a finite number >= 0")
    if rule == "sgd" and decay:
        raise LmgridError(f"dynamic: decay {decay!r} is a setting of rule rms, not of rule sgd")


def _float_copy(model):
    return copy.deepcopy(model).float().eval()  # deepcopy keeps tied weights tied (one parameter)


def gradient_stats(model, train_ids, segment: int, train_tokens: int = TRAIN_TOKENS) -> list[torch.Tensor]:
    """MS_g of rule rms: per adapted parameter (in model.parameters() order, requires_grad ones), the mean over the
    segments of the first `train_tokens` targets of the training stream `train_ids` of grad^2, each grad that of
    one segment's mean NLL under the model's own weights (a float32 eval-mode copy; the model is unchanged), the
    state carried from segment to segment and detached, as dynamic evaluation reads a stream."""
    if isinstance(train_tokens, bool) or not isinstance(train_tokens, int) or train_tokens < 1:
        raise LmgridError(f"dynamic: train_tokens {train_tokens!r} is not a whole number >= 1")
    ids = as_stream(train_ids)[:train_tokens + 1]
    copy_ = _float_copy(model)
    params = [p for p in copy_.parameters() if p.requires_grad]
    sums = [torch.zeros_like(p) for p in params]
    n, state = 0, None
    with torch.enable_grad(), torch.autocast(device_type="cpu", enabled=False):
        for x, y in segments(ids, segment):
            for p in params:
                p.grad = None
            hidden, new_state, _ = copy_.features(x, state)
            token_logp = full_log_probs(copy_, hidden[0]).gather(1, y[0, :, None])[:, 0]
            (-token_logp.mean()).backward()
            for s, p in zip(sums, params):
                if p.grad is not None:
                    s.add_(p.grad.detach() ** 2)
            state, n = copy_.detach_state(new_state), n + 1
    return [s / n for s in sums]


def mean_rms(rms: list[torch.Tensor]) -> float:
    """mean(sqrt(MS_g)) over every element of every parameter (0.0 when there are none)."""
    count = sum(r.numel() for r in rms)
    return sum(float(r.double().sum()) for r in rms) / count if count else 0.0


def decay_rates(rms: list[torch.Tensor], decay: float) -> list[torch.Tensor]:
    """min(decay * rms / mean(rms), 1) elementwise, the mean over every element of every parameter."""
    mean = mean_rms(rms)
    if mean <= 0:
        return [torch.full_like(r, min(decay, 1.0)) for r in rms]
    return [torch.clamp(decay * r / mean, max=1.0) for r in rms]


class RmsStep:
    """Rule rms's update, with the optimizer's two calls (_score_then_update uses it as it uses SGD)."""

    def __init__(self, params, stats: list[torch.Tensor], *, lr: float, decay: float, eps_rel: float = EPS_REL):
        if len(stats) != len(params) or any(s.shape != p.shape for s, p in zip(stats, params)):
            raise LmgridError("dynamic: the gradient statistics do not match the model's parameters")
        self.params, self.lr = params, lr
        self.theta0 = [p.detach().clone() for p in params]
        self.rms = [s.to(p.dtype).sqrt() for s, p in zip(stats, params)]
        self.rates = decay_rates(self.rms, decay)
        self.eps = eps_rel * mean_rms(self.rms) or eps_rel  # no gradient at all in the statistics: eps_rel itself

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p, p0, rms, rate in zip(self.params, self.theta0, self.rms, self.rates):
            delta = rate * (p0 - p)  # at the old theta, as the gradient is
            if p.grad is not None:
                delta -= self.lr * p.grad / (rms + self.eps)
            p.add_(delta)


def adapted_pass(model, token_ids, *, lr: float, segment: int | None = None, clip: float = 0.25, bptt: int = 35,
                 rule: str = "sgd", decay: float = 0.0, train_ids=None, train_tokens: int = TRAIN_TOKENS,
                 stats: list[torch.Tensor] | None = None, eps_rel: float = EPS_REL):
    """dynamic_states' pass, also returning the adapted copy: (hidden [N, H], log-probs [N], targets [N], model).
    Rule rms needs MS_g: `stats` (gradient_stats of this segment length) or else `train_ids`, the TRAINING stream
    they are computed from (never valid or test: tune.adapt passes the train split)."""
    check_settings(lr, segment, clip, rule, decay)
    segment = stream_segment(model, segment, bptt)
    ids = as_stream(token_ids)
    adapted = _float_copy(model)
    params = [p for p in adapted.parameters() if p.requires_grad]
    if rule == "sgd":
        opt = torch.optim.SGD(params, lr=lr)
    else:
        if stats is None:
            if train_ids is None:
                raise LmgridError("dynamic: rule rms needs the training split (its gradient statistics MS_g)")
            stats = gradient_stats(model, train_ids, segment, train_tokens)
        opt, clip = RmsStep(params, stats, lr=lr, decay=decay, eps_rel=eps_rel), 0.0  # rms: g unclipped, as MS_g's
    logp, hidden, state = [], [], None
    with torch.enable_grad(), torch.autocast(device_type="cpu", enabled=False):
        for x, y in segments(ids, segment):
            scored, state, h = _score_then_update(adapted, opt, params, x, y, state, clip)
            logp.append(scored)
            hidden.append(h)
    return torch.cat(hidden), torch.cat(logp), ids[1:], adapted


def dynamic_states(model, token_ids, *, lr: float, segment: int | None = None, clip: float = 0.25, bptt: int = 35,
                   **rms):
    """Dynamic evaluation's pass: (hidden [N, H], log p(target) [N], targets [N]), float32, like
    stream.stream_states but with the weights adapted as described above; hidden[t] is the state that scored
    position t (what a cache on top of dynamic evaluation keeps).  rms: rule, decay, train_ids, train_tokens,
    stats, eps_rel (adapted_pass; the default rule is sgd)."""
    return adapted_pass(model, token_ids, lr=lr, segment=segment, clip=clip, bptt=bptt, **rms)[:3]


def dynamic_logprobs(model, token_ids, *, lr: float, segment: int | None = None, clip: float = 0.25,
                     bptt: int = 35, **rms) -> np.ndarray:
    """Natural-log probability of every target of the stream `token_ids` (stream.py) under dynamic evaluation,
    float32 [len(token_ids) - 1], in corpus order.  segment: tokens scored between two updates (default bptt; the
    transformer's is its context_len); clip: the gradient norm bound of rule sgd (0 = none); rms: rule (sgd |
    rms), decay, train_ids (the training stream, for rule rms), train_tokens, stats, eps_rel (adapted_pass)."""
    return dynamic_states(model, token_ids, lr=lr, segment=segment, clip=clip, bptt=bptt, **rms)[1].numpy()
