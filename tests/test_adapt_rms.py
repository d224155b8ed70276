"""Dynamic evaluation's rule rms (Krause et al. 2018): RMS-normalised steps with decay to the trained weights, the
gradient statistics MS_g from the training split.

Tiny untrained models on synthetic token streams, so every test takes seconds.  Each docstring names the mutation
the test kills, and the test also runs that broken variant and asserts that the check catches it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lmgrid.testtime.adapt import dynamic, tune
from lmgrid.testtime.adapt.dynamic import adapted_pass, dynamic_logprobs
from lmgrid.testtime.adapt.stream import full_log_probs, perplexity_of, stream_states
from lmgrid.testtime.combine.adapted import grid_of
from lmgrid.common.errors import LmgridError
from lmgrid.neural.data import stream_tokens

from test_adapt import BPTT, EOS, V, _update_then_score, evaluate_one_row, matches_evaluate, sentences, tiny


def _streams(seed: int = 0):
    """(the model's text, a training stream): different sentences, as the splits are."""
    return stream_tokens(sentences(30, 20 + seed), EOS), stream_tokens(sentences(60, 40 + seed), EOS)


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters() if p.requires_grad]


def test_rms_lr_zero_decay_zero_is_the_base_ppl(monkeypatch):
    """rule rms with lr 0 and decay 0 gives the base model's scores and lmgrid's evaluate's PPL, also after an
    adapting rms pass (lr > 0, decay > 0) over the same model, which must leave the caller's weights as they were.
    Mutation killed: adapting the caller's model in place (no deep copy), which the first pass then changes."""
    model, ids = tiny("lstm-torch", dropout=0.3), sentences(30, 2)
    stream, train = stream_tokens(ids, EOS), _streams()[1]
    nll, n = evaluate_one_row(model, ids)
    _, base, _ = stream_states(model, stream, bptt=BPTT)
    rms = dict(rule="rms", train_ids=train, segment=BPTT, bptt=BPTT)

    def base_after_adapting() -> bool:
        dynamic_logprobs(model, stream, lr=0.05, decay=0.1, **rms)
        got = dynamic_logprobs(model, stream, lr=0.0, decay=0.0, **rms)
        return bool(np.allclose(got, base.numpy(), rtol=0, atol=1e-5)) and matches_evaluate(got, nll, n)

    before = _params(model)
    assert base_after_adapting()
    assert all(torch.equal(a, b) for a, b in zip(before, _params(model)))
    monkeypatch.setattr(dynamic, "_float_copy", lambda m: m.float().eval())  # mutation: adapted in place
    assert not base_after_adapting()


def test_rms_never_scores_a_token_after_updating_on_it(monkeypatch):
    """On i.i.d. uniform tokens nothing read so far predicts the next segment, so honest rms dynamic evaluation
    cannot beat the base PPL by much, while a segment can be memorised in one step.  Mutation killed:
    update-then-score for rule rms (a far lower, leaked PPL)."""
    model = tiny("lstm-torch")
    rng = np.random.default_rng(3)
    stream, train = (torch.from_numpy(rng.integers(4, V, size=n)) for n in (600, 600))
    base = perplexity_of(stream_states(model, stream, bptt=BPTT)[1].numpy())

    def run():
        return dynamic_logprobs(model, stream, lr=0.01, segment=10, bptt=BPTT, rule="rms", decay=0.1,
                                train_ids=train)

    def no_leak(log_probs) -> bool:
        return perplexity_of(log_probs) > 0.9 * base

    assert no_leak(run())
    monkeypatch.setattr(dynamic, "_score_then_update", _update_then_score)
    assert not no_leak(run())


def _hand_ms(model, train, segment: int, train_tokens: int) -> list[torch.Tensor]:
    """MS_g by hand: mean over the training segments of grad^2, the state carried (detached)."""
    m = dynamic._float_copy(model)
    params = [p for p in m.parameters() if p.requires_grad]
    ids = torch.as_tensor(train)[:train_tokens + 1]
    sums, n, state = [torch.zeros_like(p) for p in params], 0, None
    for start in range(0, len(ids) - 1, segment):
        x, y = ids[None, start:start + segment], ids[None, start + 1:start + segment + 1]
        x = x[:, :y.shape[1]]
        h, state, _ = m.features(x, state)
        loss = -full_log_probs(m, h[0]).gather(1, y[0, :, None]).mean()
        for s, g in zip(sums, torch.autograd.grad(loss, params)):
            s += g ** 2
        state, n = m.detach_state(state), n + 1
    return [s / n for s in sums]


def _hand_two_steps(model, stream, train, *, lr, decay, segment, train_tokens, eps_rel=0.1) -> list[torch.Tensor]:
    """The weights after the first two segments, computed from the formula with recorded g and MS (eps = eps_rel x
    mean(sqrt(MS)), the mean over every element)."""
    ms = _hand_ms(model, train, segment, train_tokens)
    rms = [v.sqrt() for v in ms]
    mean = torch.cat([r.reshape(-1) for r in rms]).double().mean().float()
    eps = eps_rel * mean
    rate = [torch.clamp(decay * r / mean, max=1.0) for r in rms]
    m = dynamic._float_copy(model)
    params = [p for p in m.parameters() if p.requires_grad]
    theta0 = [p.detach().clone() for p in params]
    ids, state = torch.as_tensor(stream), None
    for start in (0, segment):
        x, y = ids[None, start:start + segment], ids[None, start + 1:start + segment + 1]
        h, state, _ = m.features(x, state)
        g = torch.autograd.grad(-full_log_probs(m, h[0]).gather(1, y[0, :, None]).mean(), params)
        state = m.detach_state(state)
        with torch.no_grad():
            new = [p - lr * gi / (r + eps) + k * (p0 - p) for p, gi, r, k, p0 in zip(params, g, rms, rate, theta0)]
            for p, v in zip(params, new):
                p.copy_(v)
    return [p.detach().clone() for p in params]


def test_rms_update_matches_the_hand_computation(monkeypatch):
    """After two segments (the second step is the first with theta != theta_0, so the decay acts), every adapted
    parameter equals theta - lr g / (sqrt(MS) + eps) + min(decay sqrt(MS) / mean(sqrt(MS)), 1) (theta_0 - theta)
    computed by hand from recorded g and MS (MS on train, state carried).  Mutations killed: the decay not
    RMS-scaled (decay itself for every element); MS taken from another split (valid) than train."""
    model = tiny("rnn")
    valid, train = _streams(1)
    stream = valid[:2 * BPTT + 1]
    setting = dict(lr=1e-3, decay=0.5, segment=BPTT, train_tokens=150)
    expected = _hand_two_steps(model, stream, train, **setting)
    theta0 = _params(model)

    def matches(stats_source) -> bool:
        got = adapted_pass(model, stream, bptt=BPTT, rule="rms", train_ids=stats_source, **setting)[3]
        return all(torch.allclose(p, e, rtol=1e-5, atol=1e-7) for p, e in zip(_params(got), expected))

    assert matches(train)
    assert any(not torch.allclose(p, e, rtol=1e-5, atol=1e-7) for p, e in zip(theta0, expected))  # it moved
    assert not matches(valid)  # mutation: MS from valid
    monkeypatch.setattr(dynamic, "decay_rates", lambda rms, decay: [torch.full_like(r, min(decay, 1.0))
                                                                    for r in rms])  # mutation: not RMS-scaled
    assert not matches(train)


def test_rms_statistics_come_from_the_training_split_only(monkeypatch):
    """The tuner computes MS_g on the train stream only, once per segment length, and the statistics' source
    changes the scores (so it matters which split it is).  Mutation killed: valid (or test) passed as the
    statistics' source, which the tuner refuses with one line; and rule rms run without a training split, refused."""
    model = tiny("lstm-torch")
    valid, train = _streams(2)
    test = stream_tokens(sentences(30, 77), EOS)
    grid = {"rule": "rms", "lr": [0.0, 0.01], "decay": [0.0, 0.1], "segment": [5, 7], "train_tokens": 200}
    seen = []
    real = tune.gradient_stats

    def spy(model, ids, segment, train_tokens):
        seen.append(("train" if ids is train else "valid" if ids is valid else "test" if ids is test else "?",
                     segment, train_tokens))
        return real(model, ids, segment, train_tokens)

    monkeypatch.setattr(tune, "gradient_stats", spy)
    result = tune.adapt(model, valid, test, "dynamic", grid=grid, bptt=BPTT, train_ids=train)
    assert sorted(seen) == [("train", 5, 200), ("train", 7, 200)]
    assert result["settings"]["rule"] == "rms" and len(result["grid"]) == 8
    for wrong in (valid, test):  # mutation: the statistics from valid or test
        with pytest.raises(LmgridError, match="training split"):
            tune.adapt(model, valid, test, "dynamic", grid=grid, bptt=BPTT, train_ids=wrong.clone())
    with pytest.raises(LmgridError, match="needs the training split"):
        tune.adapt(model, valid, test, "dynamic", grid=grid, bptt=BPTT)
    with pytest.raises(LmgridError, match="needs the training split"):
        dynamic_logprobs(model, test, lr=0.01, segment=7, bptt=BPTT, rule="rms", decay=0.1)
    point = dict(lr=0.01, segment=7, bptt=BPTT, rule="rms", decay=0.1)
    assert not np.allclose(dynamic_logprobs(model, test, train_ids=train, **point),
                           dynamic_logprobs(model, test, train_ids=valid, **point), rtol=0, atol=1e-6)


def test_rms_decay_pulls_the_weights_back(monkeypatch):
    """With a large decay the adapted weights after many segments stay far closer to theta_0 than with decay 0.
    Mutation killed: the decay's sign flipped (theta pushed away from theta_0)."""
    model = tiny("lstm-torch")
    valid, train = _streams(3)
    theta0 = _params(model)

    def distance(decay: float) -> float:
        got = adapted_pass(model, valid[:201], lr=3e-4, segment=10, bptt=BPTT, rule="rms", decay=decay,
                           train_ids=train)[3]
        return float(sum(((p - p0) ** 2).sum() for p, p0 in zip(_params(got), theta0)))

    free = distance(0.0)
    assert free > 0 and distance(0.2) < 0.5 * free
    rates = dynamic.decay_rates
    monkeypatch.setattr(dynamic, "decay_rates", lambda rms, decay: [-r for r in rates(rms, decay)])
    assert not distance(0.2) < 0.5 * free


def test_rule_sgd_config_keeps_the_old_grid():
    """A config that does not ask for rms (the schema's defaults filled in: rule sgd with the rms keys present)
    gives the tuner exactly the grid it gave before rule rms existed, {lr, segment}, so no existing job changes;
    rule rms gives rms_lr as lr, decay, segment and train_tokens.  Mutation killed: the rms-only keys passed through
    for rule sgd (the tuner would refuse them, and every existing dynamic job's params would change)."""
    section = {"lr": [1.0, 3.0, 10.0], "segment": [10, 20], "rule": "sgd", "rms_lr": [1e-4, 1e-3],
               "decay": [0.001, 0.01], "train_tokens": 100000}
    assert grid_of("dynamic", {"dynamic": section}) == {"lr": [1.0, 3.0, 10.0], "segment": [10, 20]}
    assert grid_of("dynamic", {"dynamic": {**section, "rule": "rms"}}) == {
        "rule": "rms", "lr": [1e-4, 1e-3], "decay": [0.001, 0.01], "train_tokens": 100000, "segment": [10, 20]}
    model = tiny("lstm-torch")
    valid, train = _streams(4)
    with pytest.raises(LmgridError, match="decay and train_tokens are settings of rule rms"):  # mutation
        tune.adapt(model, valid, valid, "dynamic", grid={**grid_of("dynamic", {"dynamic": section}),
                                                         "decay": [0.1]}, bptt=BPTT, train_ids=train)


def test_an_element_without_training_gradient_steps_by_a_bounded_amount(monkeypatch):
    """An element whose MS_g is 0 (a word the training tokens read never reached) moves by lr * |g| / eps with eps
    = 0.1 x mean(sqrt(MS_g)), the model's own gradient scale, so one step stays of the size of the others'.
    Mutation killed: an absolute eps (1e-8), which turns that element's first nonzero gradient into a step of
    ~1e8 x lr x |g| (on the PTB LSTM such a grid ended in a NaN valid PPL)."""
    model = tiny("rnn")
    valid, train = _streams(2)
    stream = valid[:BPTT + 1]
    params = [p for p in model.parameters() if p.requires_grad]
    stats = dynamic.gradient_stats(model, train, BPTT, 150)
    grads = _one_grad(model, stream)
    k = max(range(len(grads)), key=lambda i: float(grads[i].abs().max()))
    stats[k] = stats[k].clone()
    stats[k].view(-1)[int(grads[k].abs().argmax())] = 0.0  # the element with the largest gradient, never reached
    lr = 1e-3

    def largest_step() -> float:
        got = adapted_pass(model, stream, lr=lr, segment=BPTT, bptt=BPTT, rule="rms", decay=0.0, stats=stats)[3]
        return max(float((a - b).abs().max()) for a, b in zip(_params(got), [p.detach() for p in params]))

    bound = lr / 0.1 * max(float(g.abs().max()) for g in grads) / dynamic.mean_rms(
        [s.sqrt() for s in stats])
    assert 0 < largest_step() <= bound * (1 + 1e-4)
    monkeypatch.setattr(dynamic, "mean_rms", lambda rms: 1e-7)  # mutation: eps = 0.1 x 1e-7 = 1e-8, absolute
    assert not largest_step() <= bound * (1 + 1e-4)


def _one_grad(model, stream) -> list[torch.Tensor]:
    """The gradient of the first segment's mean NLL under the model's own weights (float32 eval copy)."""
    m = dynamic._float_copy(model)
    params = [p for p in m.parameters() if p.requires_grad]
    ids = torch.as_tensor(stream)
    h, _, _ = m.features(ids[None, :BPTT], None)
    return torch.autograd.grad(-full_log_probs(m, h[0]).gather(1, ids[None, 1:BPTT + 1][0, :, None]).mean(), params)


def test_a_diverged_grid_point_is_recorded_and_never_chosen():
    """A point whose pass blows up (lmgrid.data.ppl refuses its non-finite NLL) is kept in the rows with valid_ppl None and
    not chosen; the other points still decide; every point diverged is one line.  Mutation killed: the tuner
    letting the refusal end the whole grid (what the first PTB rms grid did, at 563 s), checked by running the
    same points through a chooser without the guard."""
    from lmgrid.data.ppl import perplexity

    ppl = {1e-4: 120.0, 1e-3: 110.0, 1e-2: None}

    def valid_ppl_of(p):
        return ppl[p["lr"]] if ppl[p["lr"]] is not None else perplexity(float("nan"), 10)

    points = tune.grid_points({"lr": [1e-4, 1e-2, 1e-3]})
    chosen, rows = tune.choose_on_valid(valid_ppl_of, points)
    assert chosen == {"lr": 1e-3} and [r["valid_ppl"] for r in rows] == [120.0, None, 110.0]
    with pytest.raises(LmgridError, match="every point diverged"):
        tune.choose_on_valid(valid_ppl_of, [{"lr": 1e-2}])
    with pytest.raises(ValueError, match="perplexity is infinite"):  # the control: no guard, the grid ends
        [valid_ppl_of(p) for p in points]


def test_only_divergence_is_a_diverged_point_other_errors_end_the_grid():
    """Mutation killed: the guard catching every ValueError (a bug in a pass, such as a shape or a zero token count,
    recorded as 'diverged' and the grid going on without it).  The guard catches lmgrid.data.ppl.InfinitePerplexity,
    a type, not a message's words."""
    from lmgrid.data.ppl import InfinitePerplexity, perplexity

    def bug(p):
        return perplexity(1.0, 0)  # zero counted tokens: a ValueError that is no divergence

    with pytest.raises(ValueError, match="zero counted tokens"):
        tune.choose_on_valid(bug, [{"lr": 1.0}])
    with pytest.raises(InfinitePerplexity):
        perplexity(float("inf"), 3)
    assert tune._valid_ppl_or_none(lambda p: perplexity(float("inf"), 3), {}) is None
