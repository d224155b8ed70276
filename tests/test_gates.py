"""Gate statistics count real tokens only: no window <s> padding, no stream tail padding; g saturation is |g|>0.9."""
from __future__ import annotations

import torch

from lmgrid.gate_facts import saturation_bounds
from lmgrid.models import ModelConfig, build_model
from lmgrid.neural import gates
from lmgrid.neural.data import IGNORE, sentence_rows, window_examples

BOS, EOS, PAD, V = 2, 3, 0, 20


def lstm(n_step=9, layers=1, hidden=8):
    torch.manual_seed(0)
    return build_model(ModelConfig(arch="lstm", vocab_size=V, n_step=n_step, layers=layers, emb_dim=6,
                                   hidden_dim=hidden)).eval()


def short_sentences(n=12):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(4, V, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]  # 1..6 words: every window of n_step 9 starts with <s>


def rows_by(rows, scope):
    return [r for r in rows if r["scope"] == scope]


def test_window_n_step_9_on_short_sentences_counts_no_padded_position():
    sents = short_sentences()
    x, y = window_examples(sents, 9, BOS, EOS)
    model = lstm()
    rows = gates.collect(model, [(x[:17], y[:17]), (x[17:], y[17:])], "window", "cpu", bos=BOS)
    positions = {(r["gate"], r["index"]): r["count"] for r in rows_by(rows, "position") if r["layer"] == 0}
    # Position t of the 8-token window holds a real token only when at least 8 - t words precede the target.
    expected = [sum(1 for s in sents for j in range(len(s) + 1) if j >= 8 - t) for t in range(8)]
    assert [positions[("f", t)] for t in range(8)] == expected
    assert expected[0] == expected[1] == 0  # sentences shorter than 7 words never fill the oldest positions
    # The mean over real positions, computed here from the raw activations.
    _, _, acts = model(x, return_gates=True)
    real = (x != BOS)
    for name in "ifog":
        a = acts[name][0]  # [N, T, H]
        want = a[real].double().mean().item()
        got = next(r for r in rows_by(rows, "all") if r["gate"] == name and r["layer"] == 0)
        assert abs(got["mean"] - want) < 1e-9 and got["count"] == int(real.sum()) * 8
    # The padded positions alone would shift the mean: the statistic really excludes them.
    assert abs(acts["o"][0][~real].mean().item() - acts["o"][0][real].mean().item()) > 1e-4


def test_stream_tail_padding_is_not_counted():
    sents = short_sentences(9)
    x, y = sentence_rows(sents, 4, EOS, PAD)
    rows = gates.collect(lstm(), [(x[:, :5], y[:, :5]), (x[:, 5:], y[:, 5:])], "stream", "cpu", bos=BOS)
    n_targets = sum(len(s) + 1 for s in sents)
    assert int((y != IGNORE).sum()) == n_targets
    assert all(r["count"] == n_targets * 8 for r in rows_by(rows, "all"))


def test_tanh_candidate_saturation_is_near_minus_one_and_plus_one():
    assert saturation_bounds("g") == (-0.9, 0.9)
    assert saturation_bounds("f") == (0.1, 0.9)
    s = gates._Sums("g")
    acts = torch.tensor([-0.95, -0.5, 0.0, 0.5, 0.95, 0.99]).view(1, 1, 6, 1)
    s.add(acts, torch.ones(1, 1, 6, 1, dtype=torch.float64), (1, 2))
    _, _, left, right = s.rows(torch.tensor(6.0, dtype=torch.float64))
    assert left.item() == 1 / 6 and right.item() == 2 / 6
