"""Dynamic evaluation (Krause, Kahembwe, Murray & Renals 2018, "Dynamic evaluation of neural sequence models"),
SGD form, as an evaluation mode of a stream model.

The stream is read in segments s_1, s_2, ..., state carried.  For each segment, in this order:
  1. score it: log p(target) of each of its positions under the current weights (these are the returned values);
  2. then take one SGD step on that segment's mean NLL, theta <- theta - lr * clip(grad), the gradient truncated
     at the segment's start (the carried state is detached, as in truncated BPTT training).
So a token's probability is always computed before any update that has seen it: the weights that score segment
s_i have been fitted to s_1 .. s_{i-1} only.  The model is adapted in a deep copy (the caller's weights never
change), in eval mode (no dropout, as when scoring), in float32; the gradient's global norm is clipped to the run's
`clip`, as training clips it (Lightning's gradient_clip_algorithm="norm").  Krause et al.'s decay back to the
trained weights and their RMS-normalised update are not implemented (plain SGD, their baseline form).
With lr = 0 every step leaves the weights as they are, so the scores are the base model's (to float32 rounding:
a forward that records gradients may take another kernel, as nn.LSTM's does).
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from lmgrid.errors import LmgridError

from .stream import as_stream, full_log_probs, segments, stream_segment


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


def check_settings(lr, segment, clip) -> None:
    for key, value in (("lr", lr), ("clip", clip)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise LmgridError(f"dynamic: {key} {value!r} is not a finite number >= 0")


def dynamic_states(model, token_ids, *, lr: float, segment: int | None = None, clip: float = 0.25, bptt: int = 35):
    """Dynamic evaluation's pass: (hidden [N, H], log p(target) [N], targets [N]), float32, like
    stream.stream_states but with the weights adapted as described above; hidden[t] is the state that scored
    position t (what a cache on top of dynamic evaluation keeps)."""
    check_settings(lr, segment, clip)
    segment = stream_segment(model, segment, bptt)
    ids = as_stream(token_ids)
    adapted = copy.deepcopy(model).float().eval()  # deepcopy keeps tied weights tied (one parameter)
    params = [p for p in adapted.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    logp, hidden, state = [], [], None
    with torch.enable_grad(), torch.autocast(device_type="cpu", enabled=False):
        for x, y in segments(ids, segment):
            scored, state, h = _score_then_update(adapted, opt, params, x, y, state, clip)
            logp.append(scored)
            hidden.append(h)
    return torch.cat(hidden), torch.cat(logp), ids[1:]


def dynamic_logprobs(model, token_ids, *, lr: float, segment: int | None = None, clip: float = 0.25,
                     bptt: int = 35) -> np.ndarray:
    """Natural-log probability of every target of the stream `token_ids` (stream.py) under SGD dynamic
    evaluation, float32 [len(token_ids) - 1], in corpus order.  segment: tokens scored between two updates
    (default bptt; the transformer's is its context_len); clip: the gradient norm bound (0 = none)."""
    return dynamic_states(model, token_ids, lr=lr, segment=segment, clip=clip, bptt=bptt)[1].numpy()
