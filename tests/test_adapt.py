"""Test-time adaptation (lmgrid.testtime.adapt): the continuous cache and SGD dynamic evaluation.

Tiny untrained models on synthetic token streams, so every test takes seconds.  Each test also runs the broken
variant its docstring names and asserts that the check catches it."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from lmgrid.testtime.adapt import cache, dynamic, tune
from lmgrid.testtime.adapt.cache import cache_distribution, cache_logprobs, cache_target_probs
from lmgrid.testtime.adapt.dynamic import dynamic_logprobs
from lmgrid.testtime.adapt.stream import full_log_probs, perplexity_of, stream_states
from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.neural.data import StreamChunks, sentence_rows, stream_tokens
from lmgrid.neural.module import evaluate

PAD, EOS, V, BPTT = 0, 3, 40, 7

# One of each stream model kind: library and hand-written recurrences, both output layers, tied weights, and the
# transformer with its context (stream regime: context_len = bptt, max_len = 2 * bptt).
CONFIGS = {
    "lstm-torch": dict(arch="lstm", impl="torch", layers=2),
    "lstm-cell-adaptive-tied": dict(arch="lstm", impl="cell", layers=1, output_layer="adaptive", cutoffs=[10, 25],
                                    tie_weights=True, emb_dim=12),
    "gru-cell": dict(arch="gru", impl="cell", layers=1),
    "rnn": dict(arch="rnn", layers=1),
    "transformer-adaptive": dict(arch="transformer", layers=1, heads=2, context_len=BPTT, max_len=2 * BPTT,
                                 output_layer="adaptive", cutoffs=[10]),
}


def tiny(name: str, seed: int = 0, **extra):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, emb_dim=16, hidden_dim=16)
    cfg.update(CONFIGS[name], **extra)
    return build_model(model_config_defaults(**cfg)).eval()


def sentences(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, V, size=rng.integers(2, 12)).tolist() for _ in range(n)]


def evaluate_one_row(model, ids) -> tuple[float, int]:
    """lmgrid's own stream evaluation with a batch of one row: (NLL nats, counted targets)."""
    x, y = sentence_rows(ids, 1, EOS, PAD)
    return evaluate(model, StreamChunks(x, y, BPTT), "stream", torch.device("cpu"))


def matches_evaluate(log_probs, nll: float, n: int) -> bool:
    return len(log_probs) == n and math.isclose(-float(np.sum(log_probs, dtype=np.float64)), nll, rel_tol=1e-6)


@pytest.mark.parametrize("name", CONFIGS)
def test_lambda_zero_is_the_single_stream_base_ppl(name, monkeypatch):
    """The cache with lam 0 scores every token exactly as the model does, and the one-row stream is lmgrid's
    evaluate with a batch of one row.  Mutations killed: the state not carried from segment to segment; the
    mixture's weights swapped ((1 - lam) on the cache)."""
    model, ids = tiny(name), sentences(30, 1)
    stream = stream_tokens(ids, EOS)
    nll, n = evaluate_one_row(model, ids)
    _, base, _ = stream_states(model, stream, bptt=BPTT)
    got = cache_logprobs(model, stream, window=50, theta=1.0, lam=0.0, bptt=BPTT)
    assert np.array_equal(got, base.numpy())
    assert matches_evaluate(got, nll, n)

    with monkeypatch.context() as m:  # mutation: every segment starts from a zero state
        features = model.features
        m.setattr(model, "features", lambda x, state=None, *a, **k: features(x, None, *a, **k))
        assert not matches_evaluate(cache_logprobs(model, stream, window=50, theta=1.0, lam=0.0, bptt=BPTT), nll, n)
    with monkeypatch.context() as m:  # mutation: p = lam p_model + (1 - lam) p_cache
        mix = cache.mix
        m.setattr(cache, "mix", lambda lp, cp, has, lam: mix(lp, cp, has, 1 - lam))
        assert not np.array_equal(cache_logprobs(model, stream, window=50, theta=1.0, lam=0.0, bptt=BPTT), got)


@pytest.mark.parametrize("name", ["lstm-torch", "lstm-cell-adaptive-tied", "transformer-adaptive"])
def test_dynamic_lr_zero_is_the_base_ppl(name, monkeypatch):
    """Dynamic evaluation with lr 0 gives the model's own scores and lmgrid's evaluate's PPL (to float32 rounding:
    a forward that records gradients may take another kernel, nn.LSTM's does).  Mutation killed: the adapted copy
    left in train mode (dropout on while scoring)."""
    model, ids = tiny(name, dropout=0.3), sentences(30, 2)
    stream = stream_tokens(ids, EOS)
    nll, n = evaluate_one_row(model, ids)
    _, base, _ = stream_states(model, stream, bptt=BPTT)
    got = dynamic_logprobs(model, stream, lr=0.0, segment=BPTT, clip=0.25, bptt=BPTT)
    assert np.allclose(got, base.numpy(), rtol=0, atol=1e-5)
    assert matches_evaluate(got, nll, n)

    step = dynamic._score_then_update

    def in_train_mode(model, *a, **k):
        model.train()
        return step(model, *a, **k)

    monkeypatch.setattr(dynamic, "_score_then_update", in_train_mode)
    mutated = dynamic_logprobs(model, stream, lr=0.0, segment=BPTT, clip=0.25, bptt=BPTT)
    assert not np.allclose(mutated, base.numpy(), rtol=0, atol=1e-5) and not matches_evaluate(mutated, nll, n)


_SCORE_THEN_UPDATE = dynamic._score_then_update


def _update_then_score(model, opt, params, x, y, state, clip):
    """The leak: step on the segment first, then score it with the weights that have seen it."""
    _, carried, _ = _SCORE_THEN_UPDATE(model, opt, params, x, y, state, clip)
    with torch.no_grad():
        hidden, _, _ = model.features(x, state)
        scored = full_log_probs(model, hidden[0]).gather(1, y[0, :, None])[:, 0]
    return scored, carried, hidden[0]


def test_dynamic_never_scores_a_token_after_updating_on_it(monkeypatch):
    """On i.i.d. uniform tokens nothing read so far predicts the next segment, so honest dynamic evaluation cannot
    beat the base PPL by much, while a segment can be memorised in one step.  Mutation killed: update-then-score
    (which gives a far lower, leaked PPL); the real function does not, and it leaves the caller's model as it was."""
    model = tiny("lstm-torch")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stream = torch.from_numpy(np.random.default_rng(3).integers(4, V, size=600))
    base = perplexity_of(stream_states(model, stream, bptt=BPTT)[1].numpy())

    def no_leak(log_probs) -> bool:
        return perplexity_of(log_probs) > 0.9 * base

    assert no_leak(dynamic_logprobs(model, stream, lr=2.0, segment=10, clip=0.0, bptt=BPTT))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    monkeypatch.setattr(dynamic, "_score_then_update", _update_then_score)
    leaked = dynamic_logprobs(model, stream, lr=2.0, segment=10, clip=0.0, bptt=BPTT)
    assert not no_leak(leaked)


def test_dynamic_learns_from_what_it_has_read(monkeypatch):
    """On a text that repeats one random 50-token passage, dynamic evaluation has read every passage before the
    current one, so it must beat the base PPL by far.  (Weights drawn in +-1, so that the untrained LSTM's states
    tell its inputs apart.)  Mutation killed: no SGD step taken (the optimizer's step skipped), which would pass
    the lr 0 and no-leak checks unchanged."""
    model = tiny("lstm-torch", init_range=1.0)
    passage = np.random.default_rng(4).integers(4, V, size=50)
    stream = torch.from_numpy(np.tile(passage, 12))
    base = perplexity_of(stream_states(model, stream, bptt=BPTT)[1].numpy())

    def learns() -> bool:
        return perplexity_of(dynamic_logprobs(model, stream, lr=2.0, segment=10, clip=0.0, bptt=BPTT)) < 0.5 * base

    assert learns()
    monkeypatch.setattr(torch.optim.SGD, "step", lambda self, closure=None: None)
    assert not learns()


def _unnormalised_weights(queries, keys, first, offset, window, theta):
    """Mutation: exp(theta h_t . h_i) over the window, not divided by its sum."""
    t = torch.arange(offset, offset + len(queries))[:, None]
    i = torch.arange(first, first + len(keys))[None, :]
    allowed = (i < t) & (i >= t - window)
    return torch.exp(theta * (queries @ keys.T)) * allowed, allowed.any(1)


@pytest.mark.parametrize("name", ["lstm-torch", "transformer-adaptive"])
def test_cache_mixture_sums_to_one(name, monkeypatch):
    """At several positions (the empty cache at 0, a partial window, full windows) the mixture
    (1 - lam) p_model + lam p_cache sums to 1 over the vocabulary, and its value at the target is what
    cache_logprobs returns.  Mutation killed: the cache weights left unnormalised."""
    model = tiny(name)
    stream = stream_tokens(sentences(40, 4), EOS)
    hidden, _, targets = stream_states(model, stream, bptt=BPTT)
    positions, window, theta, lam = [0, 1, 5, 37, 120, len(targets) - 1], 30, 0.7, 0.3

    @torch.no_grad()
    def totals_and_targets():
        cache_p = cache_distribution(hidden, targets, positions, window=window, theta=theta, vocab_size=V)
        has = torch.tensor([t > 0 for t in positions])[:, None]
        model_p = full_log_probs(model, hidden[positions]).exp()
        mixed = torch.where(has, (1 - lam) * model_p + lam * cache_p, model_p).double()
        scored = cache_logprobs(model, stream, window=window, theta=theta, lam=lam, bptt=BPTT)[positions]
        return mixed.sum(1), mixed[torch.arange(len(positions)), targets[positions]].log(), scored

    totals, at_target, scored = totals_and_targets()
    assert torch.allclose(totals, torch.ones_like(totals), atol=1e-5)
    assert np.allclose(at_target.numpy(), scored, atol=1e-5)
    monkeypatch.setattr(cache, "_window_weights", _unnormalised_weights)
    totals, _, _ = totals_and_targets()
    assert not torch.allclose(totals, torch.ones_like(totals), atol=1e-5)


def _own_target_included(queries, keys, first, offset, window, theta):
    """Mutation: position t's own (h_t, y_t) in its cache (i <= t)."""
    t = torch.arange(offset, offset + len(queries))[:, None]
    i = torch.arange(first, first + len(keys))[None, :]
    allowed = (i <= t) & (i > t - window)
    scores = (theta * (queries @ keys.T)).masked_fill(~allowed, -torch.inf)
    return torch.softmax(scores, 1), allowed.any(1)


def test_cache_is_the_window_before_the_position(monkeypatch):
    """The chunked cache equals a position-by-position reference over exactly the `window` positions before t,
    across chunk boundaries.  Mutation killed: the cache including position t's own target (a leak)."""
    monkeypatch.setattr(cache, "CHUNK", 16)
    g = torch.Generator().manual_seed(5)
    hidden, targets = torch.randn(100, 8, generator=g), torch.randint(0, 6, (100,), generator=g)
    window, theta = 20, 0.5

    def reference(t: int) -> float:
        lo = max(0, t - window)
        if lo == t:
            return 0.0
        w = torch.softmax(theta * hidden[lo:t] @ hidden[t], 0)
        return float(w[targets[lo:t] == targets[t]].sum())

    expected = torch.tensor([reference(t) for t in range(100)])
    got, has = cache_target_probs(hidden, targets, window=window, theta=theta)
    assert torch.allclose(got, expected, atol=1e-6) and not has[0] and has[1:].all()
    monkeypatch.setattr(cache, "_window_weights", _own_target_included)
    got, _ = cache_target_probs(hidden, targets, window=window, theta=theta)
    assert not torch.allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("method,grid", [("cache", {"window": [5, 50], "theta": [0.3, 1.0], "lam": [0.1, 0.2]}),
                                         ("dynamic", {"lr": [0.0, 0.5], "segment": [7]}),
                                         ("dynamic+cache", {"lr": [0.0, 0.5], "segment": [7], "window": [5, 50],
                                                            "theta": [1.0], "lam": [0.1]}),
                                         ("dynamic", {"rule": "rms", "lr": [0.0, 1e-3], "decay": [0.0, 0.1],
                                                      "segment": [7], "train_tokens": 200}),
                                         ("dynamic+cache", {"rule": "rms", "lr": [0.0, 1e-3], "decay": [0.1],
                                                            "segment": [7], "window": [5, 50], "theta": [1.0],
                                                            "lam": [0.1]})])
def test_tuner_only_sees_valid(method, grid, monkeypatch):
    """Design check: every pass the tuner makes while choosing reads valid (rule rms: and its gradient statistics
    read train, nothing else); test is read once with the adaptation, with the chosen settings, after the choice (and
    once more, unadapted, for the base PPL); the choice is the grid point of lowest valid PPL.  Mutation killed: a
    runner that tunes on test (the splits passed the wrong way)."""
    model = tiny("lstm-torch")
    valid, test = stream_tokens(sentences(25, 6), EOS), stream_tokens(sentences(25, 7), EOS)
    train = stream_tokens(sentences(40, 8), EOS)
    calls = []
    for fn in ("stream_states", "cache_logprobs", "dynamic_logprobs", "dynamic_states", "gradient_stats"):
        real = getattr(tune, fn)

        def spy(model, ids, *a, _fn=fn, _real=real, **k):
            calls.append((_fn, "valid" if ids is valid else "test" if ids is test else "train" if ids is train
                          else "?", k))
            return _real(model, ids, *a, **k)

        monkeypatch.setattr(tune, fn, spy)

    def tuned_on_valid(result) -> bool:
        adapted = {"cache": "cache_logprobs", "dynamic": "dynamic_logprobs"}.get(method, "dynamic_states")
        on_test = [i for i, c in enumerate(calls) if c[1] == "test" and c[0] == adapted]
        if len(on_test) != 1:
            return False
        # the lowest valid PPL among the rows of full settings (dynamic+cache also lists the dynamic-only rows)
        full = [r for r in result["grid"] if set(result["settings"]) <= set(r)]
        i, best = on_test[0], min(full, key=lambda r: r["valid_ppl"])
        return (all(c[1] == "valid" or c[:2] == ("gradient_stats", "train") for c in calls[:i])  # valid (MS: train)
                and all(c[0] == "stream_states" for c in calls[i + 1:])  # after it: the unadapted base only
                and all(best[k] == v and calls[i][2].get(k, v) == v for k, v in result["settings"].items()))

    result = tune.adapt(model, valid, test, method, grid=grid, bptt=BPTT, train_ids=train)
    assert tuned_on_valid(result)
    assert (result["settings"].get("rule") == "rms") == (grid.get("rule") == "rms")
    assert any(c[0] == "gradient_stats" for c in calls) == (grid.get("rule") == "rms")
    assert json.dumps({k: v for k, v in result.items() if not k.endswith("_log_probs")})  # a JSON-able record
    calls.clear()
    swapped = tune.adapt(model, test, valid, method, grid=grid, bptt=BPTT, train_ids=train)  # mutation: on test
    assert not tuned_on_valid(swapped)


def _run_folder(tmp_path, regime: str = "stream"):
    """A run folder holding a tiny untrained LSTM's model.ckpt, and valid/test split files."""
    from lmgrid.neural.train import save_model
    from lmgrid.data.vocab import SPECIALS, Vocab

    words = [f"w{i}" for i in range(4, V)]
    vocab = Vocab([*SPECIALS, *words], {w: 1 for w in words})
    model_config = dict(arch="lstm", vocab_size=V, emb_dim=16, hidden_dim=16)
    torch.manual_seed(0)
    model = build_model(model_config_defaults(**model_config))
    run = tmp_path / "run"
    run.mkdir()
    save_model(run / "model.ckpt", model, model_config, vocab, {"regime": regime, "n_step": 0},
               {"bptt": BPTT, "clip": 0.25})
    for split, seed in (("valid", 8), ("test", 9)):
        (tmp_path / f"{split}.txt").write_text("".join(" ".join(words[i - 4] for i in s) + "\n"
                                                       for s in sentences(20, seed)))
    return run, model, sentences(20, 9)


def test_cli_writes_the_tuned_result(tmp_path, monkeypatch, capsys):
    """`lmgrid adapt` on a run folder: the JSON's base test PPL is lmgrid's one-row evaluate of the test file and
    the saved test log-probs give its adapted test PPL; a window-regime run is refused in one line.  Mutation
    killed: the split's stream read without its leading </s> (its first word no longer counted)."""
    from lmgrid import cli
    from lmgrid.testtime.adapt import cli as adapt_cli

    run, model, test_ids = _run_folder(tmp_path)
    nll, n = evaluate_one_row(model, test_ids)

    def result() -> dict:
        args = ["adapt", "--run", str(run), "--valid", str(tmp_path / "valid.txt"), "--test",
                str(tmp_path / "test.txt"), "--method", "cache", "--grid", '{"window": [10], "theta": [1], "lam": '
                '[0.1, 0.2]}', "--out", str(tmp_path / "out.json"), "--log-probs", str(tmp_path / "test.npy")]
        assert cli.main(args) == 0
        return json.loads((tmp_path / "out.json").read_text())

    def right(out: dict) -> bool:
        logp = np.load(tmp_path / "test.npy")
        return (math.isclose(out["base_test_ppl"], math.exp(nll / n), rel_tol=1e-6) and len(logp) == n
                and math.isclose(out["test_ppl"], perplexity_of(logp), rel_tol=1e-12))

    out = result()
    assert right(out) and out["bptt"] == BPTT and out["clip"] == 0.25 and len(out["grid"]) == 2
    split_stream = adapt_cli.split_stream
    monkeypatch.setattr(adapt_cli, "split_stream", lambda vocab, path: split_stream(vocab, path)[1:])
    assert not right(result())
    monkeypatch.undo()

    (tmp_path / "w").mkdir()
    window_run, _, _ = _run_folder(tmp_path / "w", "window")
    capsys.readouterr()
    assert cli.main(["adapt", "--run", str(window_run), "--valid", str(tmp_path / "valid.txt"), "--test",
                     str(tmp_path / "test.txt"), "--method", "dynamic", "--out", str(tmp_path / "w.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "window-regime run" in err and not (tmp_path / "w.json").exists()
