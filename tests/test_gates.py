"""Gate statistics count real tokens only: no window <s> padding, no stream tail padding; g saturation is |g|>0.9."""
from __future__ import annotations

import pytest
import torch

from lmgrid.run.gate_facts import saturation_bounds
from lmgrid.models import build_model
from lmgrid.run.spec import model_config_defaults
from lmgrid.neural import gates
from lmgrid.neural.data import IGNORE, sentence_rows, window_examples

BOS, EOS, PAD, V = 2, 3, 0, 20


def lstm(n_step=9, layers=1, hidden=8):
    torch.manual_seed(0)
    return build_model(model_config_defaults(arch="lstm", vocab_size=V, n_step=n_step, layers=layers, emb_dim=6,
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
    assert [positions.get(("i", t), 0) for t in range(8)] == expected
    assert expected[0] == expected[1] == 0  # sentences shorter than 7 words never fill the oldest positions
    # The mean over real positions, computed here from the raw activations.
    _, _, acts = model(x, return_gates=True)
    real = (x != BOS)
    for name in "iog":
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
    assert all(r["count"] == n_targets * 8 for r in rows_by(rows, "all") if r["gate"] != "f")
    # The forget gate of each row's first token multiplies the zero initial cell state: left out, once per row.
    assert [r["count"] for r in rows_by(rows, "all") if r["gate"] == "f"] == [(n_targets - x.shape[0]) * 8]


def _forget_mean_and_truth(n_step):
    """gates.csv's forget-gate mean on windows that are real from position 0, and the mean over the f values
    that multiply a non-zero cell state (positions 1..), computed here from the raw activations."""
    g = torch.Generator().manual_seed(2)
    sents = [torch.randint(4, V, (12,), generator=g).tolist() for _ in range(6)]
    x, y = window_examples(sents, n_step, BOS, EOS)
    model = lstm(n_step=n_step, layers=2)
    with torch.no_grad():  # weights of a trained size, so that the state moves f away from its initial value
        for p in model.parameters():
            p.normal_(0, 1, generator=g)
    rows = gates.collect(model, [(x, y)], "window", "cpu", bos=BOS)
    _, _, acts = model(x, return_gates=True)
    real = (x != BOS)
    real[:, 0] = False
    truth = [acts["f"][k][real].double().mean().item() for k in range(2)]
    got = [r["mean"] for r in sorted(rows_by(rows, "all"), key=lambda r: r["layer"]) if r["gate"] == "f"]
    return got, truth, rows


def test_forget_gate_at_the_zero_cell_state_is_left_out(monkeypatch):
    """The forget gate's statistics use only values that multiply a non-zero cell state: position 0 of every
    window is left out, in every layer; at n_step 2 no f value has an effect and f has no row at all.
    Negative control, run here: kills "f averaged over position 0" (STATE_GATES emptied): the mean then moves."""
    got, truth, rows = _forget_mean_and_truth(5)
    assert len(got) == 2 and all(abs(a - b) < 1e-9 for a, b in zip(got, truth))
    assert not any(r["gate"] == "f" and r["index"] == 0 for r in rows_by(rows, "position"))
    _, _, rows2 = _forget_mean_and_truth(2)
    assert not any(r["gate"] == "f" for r in rows2) and any(r["gate"] == "i" for r in rows2)
    monkeypatch.setattr(gates, "STATE_GATES", ())  # the mutation
    mutated, truth, _ = _forget_mean_and_truth(5)
    assert min(abs(a - b) for a, b in zip(mutated, truth)) > 1e-3


def test_tanh_candidate_saturation_is_near_minus_one_and_plus_one():
    assert saturation_bounds("g") == (-0.9, 0.9)
    assert saturation_bounds("f") == (0.1, 0.9)
    s = gates._Sums("g")
    acts = torch.tensor([-0.95, -0.5, 0.0, 0.5, 0.95, 0.99]).view(1, 1, 6, 1)
    s.add(acts, torch.ones(1, 6, dtype=torch.float64), "unit")
    _, _, left, right, n = s.rows()
    assert n.item() == 6
    assert left.item() == 1 / 6 and right.item() == 2 / 6


def test_the_gate_pass_runs_the_output_layer_on_one_position_only():
    """In the window regime only the last position is a target, so the output layer sees one position per row
    (last_only) in the pass that scores test and gathers the gates, and the
    statistics are those of the full forward. Negative control: the hook sees every position when last_only is
    not passed, so it would catch the mutation (the gate pass scoring the whole 10,000-word layer again)."""
    sents = short_sentences()
    x, y = window_examples(sents, 9, BOS, EOS)
    model = lstm()
    seen = []
    hook = model.head.register_forward_hook(lambda _m, inputs, _out: seen.append(inputs[0].shape[1]))
    rows = gates.collect(model, [(x, y)], "window", "cpu", bos=BOS)
    assert seen == [1]
    seen.clear()
    _, _, acts = model(x, return_gates=True)
    assert seen == [x.shape[1]] and x.shape[1] > 1  # the negative control: without last_only, every position
    hook.remove()
    real = x != BOS
    got = next(r for r in rows_by(rows, "all") if r["gate"] == "i" and r["layer"] == 0)
    assert abs(got["mean"] - acts["i"][0][real].double().mean().item()) < 1e-9


def _study_rows(sents, n_steps=(3, 5, 9)):
    """gates.csv rows of a real gate pass (padfree rows included) at each n_step, as one study's frame, with the
    model and its windows of each n."""
    import pandas as pd

    frames, runs = [], {}
    for n in n_steps:
        x, y = window_examples(sents, n, BOS, EOS)
        model = lstm(n_step=n)
        rows = gates.collect(model, [(x[:23], y[:23]), (x[23:], y[23:])], "window", "cpu", bos=BOS,
                             preceding=gates.preceding_words(sents))
        frames.append(pd.DataFrame(rows).assign(model="lstm", layers=1, seed=1, n_step=n, regime="window"))
        runs[n] = (model, x)
    return pd.concat(frames, ignore_index=True), runs


def _varied_sentences():
    g = torch.Generator().manual_seed(4)
    return [torch.randint(4, V, (int(torch.randint(1, 15, (1,), generator=g)),), generator=g).tolist()
            for _ in range(10)]  # 1..14 words: some targets have 8 words before them, many fewer


def padfree_problems(study, runs, sents) -> list[str]:
    """The study's padding-free rows (positions.padfree_rows: min_context 8 for a largest n of 9) against a hand
    computation: at every n and position, exactly the targets with at least 8 words before them, and the gate i's
    mean, standard deviation and right-saturated share over their windows at that position from the raw
    activations."""
    from lmgrid.analysis import positions

    keep = gates.preceding_words(sents) >= 8
    out = []
    rows = positions.padfree_rows(study)
    for n, (model, x) in runs.items():
        _, _, acts = model(x, return_gates=True)
        for t in range(n - 1):
            r = rows[(rows["n_step"] == n) & (rows["gate"] == "i") & (rows["layer"] == 0) & (rows["position"] == t)]
            vals = acts["i"][0][keep][:, t].double()
            want, sd, right = vals.mean().item(), vals.std(unbiased=False).item(), (vals > 0.9).double().mean().item()
            got = (r["mean"].iloc[0], r["std"].iloc[0], r["frac_right_saturated"].iloc[0]) if len(r) == 1 else ()
            if r["tokens"].tolist() != [int(keep.sum())] or got != pytest.approx((want, sd, right), abs=1e-9):
                out.append(f"n {n}, position {t}: {r[['tokens', 'mean']].to_dict('records')} against "
                           f"{int(keep.sum())} targets, mean {want:.6g}")
    return out


def test_padfree_rows_hold_the_same_targets_at_every_n(monkeypatch):
    """A real gate pass at n_step 3, 5 and 9 on sentences of 1..14 words: the study's padding-free rows (the targets
    with at least 8 words before them) hold the same targets at every n and position, and their means are those of
    the raw activations over exactly those targets.  Mutation killed, run here: per-n subsets (the pass files every
    target whose own window is unpadded under every min_context, GateStats._buckets putting each in the last
    bucket): at n 3 and 5 the rows then hold targets with fewer than 8 words before them."""
    sents = _varied_sentences()
    keep = gates.preceding_words(sents) >= 8
    assert 0 < int(keep.sum()) < len(keep)  # some targets are padding-free at n 9, some are not
    study, runs = _study_rows(sents)
    assert padfree_problems(study, runs, sents) == []
    # thresholds from the smallest run's n - 1 up to the longest sentence's (a row of no target is not written)
    top = min(max(len(s) for s in sents), gates.MAX_PADFREE_CONTEXT)
    assert set(study.loc[study["scope"] == "padfree", "min_context"]) == set(range(2, top + 1))

    real = gates.GateStats._buckets

    def per_n(self, x):
        b = real(self, x)
        if b is None:
            return b
        out = torch.zeros_like(b)
        out[:, -1] = b.sum(1)
        return out

    monkeypatch.setattr(gates.GateStats, "_buckets", per_n)
    study, runs = _study_rows(sents)
    assert padfree_problems(study, runs, sents) != []


def test_end_aligned_lag_1_is_the_last_input_at_every_n(monkeypatch):
    """A real gate pass at n_step 3, 5 and 9: end-aligned (positions.aligned), lag 1's mean is the gate at the
    window's last input (the token just before the target) at every n, from the raw activations.  Mutation killed,
    run here: start alignment (aligned returning the start positions): 'lag 1' is then position 1, the last input
    only at n 3."""
    from lmgrid.analysis import positions

    sents = _varied_sentences()
    study, runs = _study_rows(sents)

    def problems():
        out = []
        lags = positions.aligned(positions.position_rows(study), "end")
        for n, (model, x) in runs.items():
            _, _, acts = model(x, return_gates=True)
            want = acts["o"][0][x[:, -1] != BOS, -1].double().mean().item()  # a sentence's first target has <s>
            r = lags[(lags["n_step"] == n) & (lags["gate"] == "o") & (lags["position"] == 1)]
            if len(r) != 1 or abs(r["mean"].iloc[0] - want) > 1e-9:
                out.append(f"n {n}: lag 1 {r['mean'].tolist()} against the last input's {want:.6g}")
        return out

    assert problems() == []
    monkeypatch.setattr(positions, "aligned", lambda rows, align: rows)
    assert problems() != []
