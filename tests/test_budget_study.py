"""The equal-compute study's table, figure and findings (lmgrid.analysis.budget, analysis.budget_plot), from
metrics.json files written by hand: two budgets, two architectures, three seeds, and two n-gram references."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from lmgrid.analysis import budget, budget_cli, budget_plot
from lmgrid.common.errors import LmgridError
from lmgrid.run.record import RunRecord, SplitScore

PPL = {("b1", "lstm"): [120.0, 122.0, 121.0], ("b1", "gru"): [150.0, 151.0, 149.0],
       ("b4", "lstm"): [100.0, 104.0, 101.0], ("b4", "gru"): [102.0, 99.0, 103.0]}
FLOPS = {"b1": 1e12, "b4": 4e12}


def score(ppl: float) -> SplitScore:
    return SplitScore(ppl=ppl, nll_nats=math.log(ppl), tokens=1000, oov_tokens=0)


def write_runs(tmp_path) -> tuple[list[tuple[str, str]], list[str]]:
    runs, refs = [], []
    for (label, arch), ppls in PPL.items():
        for seed, ppl in enumerate(ppls, 1):
            per_token = 6e6 if arch == "lstm" else 5e6
            tokens = int(FLOPS[label] / per_token)
            path = tmp_path / f"{label}-{arch}-{seed}.json"
            RunRecord(name=f"{arch}_{seed}", arch=arch, impl="torch", n_step=0, layers=2, regime="stream", seed=seed,
                      valid=score(ppl + 5), test=score(ppl), params=1,
                      extra={"cpu_s": 60.0 * FLOPS[label] / 1e12 * (1 + seed / 10), "budget_tokens_trained": tokens,
                             "budget_flops": FLOPS[label], "train_flops_per_token": per_token,
                             "budget_tokens": tokens, "hparams": {"hidden_dim": 200}}).write(path)
            runs.append((label, str(path)))
    for n, ppl in ((3, 160.0), (5, 155.0)):
        path = tmp_path / f"mkn{n}.json"
        RunRecord(name=f"mkn_{n}", arch="mkn", impl="ngram", n_step=n, layers=0, regime="window", seed=0,
                  valid=score(ppl + 4), test=score(ppl), params=1, extra={"cpu_s": 3.0}).write(path)
        refs.append(str(path))
    return runs, refs


def test_one_row_per_architecture_and_budget_with_the_seeds_interval(tmp_path):
    """Kills: seeds pooled into one point (a row per seed, or a std of 0), a model missing, the interval not over
    seeds (its half-width must be t(0.975, 2) x std / sqrt(3)).  The negative control: the table grouped by seed too
    gives 12 one-seed rows, which the test refuses."""
    runs, _ = write_runs(tmp_path)
    rows = budget.run_rows(runs)
    table = budget.compute_table(rows)
    assert sorted(zip(table["budget"], table["model"])) == sorted(PPL)
    assert table["chosen"].all()  # one width each: chosen by being the only one
    assert (table["seeds"] == 3).all()
    lstm1 = table[(table["budget"] == "b1") & (table["model"] == "lstm")].iloc[0]
    assert lstm1["test_ppl_mean"] == pytest.approx(121.0) and lstm1["test_ppl_std"] == pytest.approx(1.0)
    assert lstm1["test_ppl_ci_high"] - 121.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert lstm1["train_flops_mean"] == pytest.approx(1e12, rel=1e-5)
    pooled = rows.assign(model=rows["model"] + "/" + rows["seed"].astype(str))  # the mutant: one point per seed
    assert len(budget.compute_table(pooled)) != len(PPL)


def test_the_findings_name_only_pairs_whose_intervals_do_not_overlap(tmp_path):
    """At b1 the LSTM's and the GRU's intervals are apart, at b4 they overlap.  Kills: pairs ranked by their means
    (b4's LSTM 101.7 vs GRU 101.3 would then be 'separated')."""
    runs, _ = write_runs(tmp_path)
    lines = budget.separations(budget.compute_table(budget.run_rows(runs)))
    b1, b4 = (next(line for line in lines if f"**{b}**" in line) for b in ("b1", "b4"))
    assert "separated: LSTM < GRU." in b1
    assert "separated: none." in b4 and "GRU / LSTM" in b4


def test_the_figure_has_one_line_per_architecture_with_interval_bars_on_both_axes(tmp_path, monkeypatch):
    """Each panel: one errorbar line per architecture, a point per budget, bars of the t interval's half-width (not
    0), and one horizontal line per n-gram reference.  Kills: seeds pooled into one point per run (a line of 6
    points, no bars), an architecture missing, the references left out.  The negative control: with the interval
    dropped (the one-seed case) the bars are empty and the check fails."""
    runs, refs = write_runs(tmp_path)
    table = budget.compute_table(budget.run_rows(runs))
    figs = []
    monkeypatch.setattr(budget_plot, "save", lambda fig, stem: figs.append(fig) or [stem])

    def panels_of(t):
        """Per axes: ({label: (points, smallest bar length)} of its errorbar lines, its horizontal n-gram lines)."""
        figs.clear()
        budget_plot.ppl_vs_compute(t, budget.references(refs), str(tmp_path / "fig"))
        out = []
        for ax in figs[0].axes:
            lines = {c.get_label(): (len(c.lines[0].get_xdata()),
                                     min((s[1][1] - s[0][1] for s in c.lines[2][0].get_segments()), default=0.0)
                                     if c.lines[2] else 0.0) for c in ax.containers}
            flat = sum(1 for line in ax.get_lines() if "gram" in str(line.get_label()))
            out.append((lines, flat))
        return out

    panels = panels_of(table)
    assert len(panels) == 2
    for lines, flat in panels:
        assert set(lines) == {"LSTM", "GRU"} and flat == 2
        assert all(points == 2 and bar > 0 for points, bar in lines.values())
    no_interval = table.assign(test_ppl_ci_low=math.nan, test_ppl_ci_high=math.nan)  # the negative control
    assert any(bar == 0 for lines, _ in panels_of(no_interval) for _, bar in lines.values())


def test_a_run_without_a_flop_budget_is_one_line(tmp_path):
    """Kills: a plain run (no train.budget_flops) read as if it had a budget of 0 FLOPs."""
    path = tmp_path / "plain.json"
    RunRecord(name="lstm_1", arch="lstm", impl="torch", n_step=0, layers=2, regime="stream", seed=1,
              valid=score(100.0), test=score(100.0), params=1, extra={"cpu_s": 1.0}).write(path)
    with pytest.raises(LmgridError, match=r"plain.json: no budget_flops") as e:
        budget.run_rows([("b1", str(path))])
    assert "\n" not in str(e.value)


def test_the_outputs_are_written(tmp_path):
    runs, refs = write_runs(tmp_path)
    budget.write(budget.compute_table(budget.run_rows(runs)), budget.references(refs), str(tmp_path / "out"))
    for name in budget_cli.OUTPUTS:
        assert (tmp_path / "out" / name).is_file(), name
    csv = pd.read_csv(tmp_path / "out" / "compute.csv")
    assert (csv["kind"] == "neural").sum() == 4 and (csv["kind"] == "ngram").sum() == 2
    assert "Modified Kneser-Ney 5-gram" in (tmp_path / "out" / "compute.md").read_text()
