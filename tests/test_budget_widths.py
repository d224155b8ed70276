"""The equal-compute study's width choice (lmgrid.analysis.budget.choose_widths): per budget and architecture the
width with the lowest mean VALID PPL, test read there only; every width kept in compute.csv (column `chosen`), the
figure and the findings at the chosen widths.  Runs written by hand so that valid and test disagree on every
choice: two budgets, two architectures, widths 100 and 200, three seeds."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from lmgrid.analysis import budget, budget_plot
from lmgrid.analysis.budget_cli import budget_label
from lmgrid.common.errors import LmgridError
from lmgrid.run.record import RunRecord, SplitScore

# (budget, arch, width): (valid PPL, test PPL) of seed 1; seeds 2 and 3 add 1 and 2.  In every (budget, arch) the
# width with the lower valid has the higher test: a choice on test picks the other width everywhere.
PPL = {("b1", "lstm", 100): (130.0, 120.0), ("b1", "lstm", 200): (135.0, 110.0),
       ("b1", "gru", 100): (160.0, 150.0), ("b1", "gru", 200): (150.0, 158.0),
       ("b4", "lstm", 100): (112.0, 105.0), ("b4", "lstm", 200): (108.0, 111.0),
       ("b4", "gru", 100): (118.0, 100.0), ("b4", "gru", 200): (125.0, 96.0)}
CHOSEN_ON_VALID = {("b1", "lstm"): 100, ("b1", "gru"): 200, ("b4", "lstm"): 200, ("b4", "gru"): 100}
FLOPS = {"b1": 1e12, "b4": 4e12}


def score(ppl: float) -> SplitScore:
    return SplitScore(ppl=ppl, nll_nats=math.log(ppl), tokens=1000, oov_tokens=0)


def write_runs(tmp_path, ppl=PPL) -> list[tuple[str, str]]:
    """Each run as its scale's label names it (b1_w100, ...), read under its budget's label (budget_label)."""
    runs = []
    for (label, arch, width), (valid, test) in ppl.items():
        for seed in (1, 2, 3):
            path = tmp_path / f"{label}_w{width}-{arch}-{seed}.json"
            tokens = int(FLOPS[label] / 5e6)
            RunRecord(name=f"{arch}_{seed}", arch=arch, impl="torch", n_step=0, layers=2, regime="stream", seed=seed,
                      valid=score(valid + seed - 1), test=score(test + seed - 1), params=1,
                      extra={"cpu_s": 60.0, "budget_tokens_trained": tokens, "budget_flops": FLOPS[label],
                             "train_flops_per_token": 5e6, "budget_tokens": tokens,
                             "hparams": {"hidden_dim": width}}).write(path)
            runs.append((budget_label(f"{label}_w{width}"), str(path)))
    return runs


def chosen_on_valid(table: pd.DataFrame) -> bool:
    """One chosen row per budget and architecture, at the width valid picks, with that width's test mean."""
    picked = table[table["chosen"]]
    if sorted(zip(picked["budget"], picked["model"])) != sorted(CHOSEN_ON_VALID):
        return False
    return all(CHOSEN_ON_VALID[(r.budget, r.model)] == r.width
               and r.test_ppl_mean == pytest.approx(PPL[(r.budget, r.model, r.width)][1] + 1)
               for r in picked.itertuples())


def test_the_width_is_chosen_on_valid_never_on_test(tmp_path, monkeypatch):
    """Kills: the width chosen on test PPL (the negative control below: choose_widths on test_ppl_mean picks the
    other width at every budget and architecture), or on the last width listed; a table without the unchosen widths
    (8 rows: every width stays, so a reader sees the choice)."""
    assert all(min(PPL[(b, a, w)][1] for w in (100, 200)) != PPL[(b, a, c)][1]
               for (b, a), c in CHOSEN_ON_VALID.items())  # the data: valid and test disagree on every choice
    rows = budget.run_rows(write_runs(tmp_path))
    table = budget.compute_table(rows)
    assert len(table) == len(PPL) and (table["seeds"] == 3).all()
    assert chosen_on_valid(table)
    on_test = lambda t: t.assign(chosen=t.index.isin(  # noqa: E731 - the mutant: the choice made on test
        t.groupby(["budget", "model"])["test_ppl_mean"].idxmin().values))
    monkeypatch.setattr(budget, "choose_widths", on_test)
    assert not chosen_on_valid(budget.compute_table(rows))


def _outputs(tmp_path, monkeypatch) -> tuple[pd.DataFrame, str, dict[str, list[float]]]:
    """compute.csv, findings.md and the figure's lines (label -> y values of its points, panel (a))."""
    figs = []
    monkeypatch.setattr(budget_plot, "save", lambda fig, stem: figs.append(fig) or [stem])
    out = tmp_path / "out"
    budget.write(budget.compute_table(budget.run_rows(write_runs(tmp_path))), budget.references([]), str(out))
    lines = {c.get_label(): [float(y) for y in c.lines[0].get_ydata()] for c in figs[0].axes[0].containers}
    return pd.read_csv(out / "compute.csv"), (out / "findings.md").read_text(), lines


def shows_the_chosen_widths_only(csv: pd.DataFrame, findings: str, lines: dict[str, list[float]]) -> bool:
    neural = csv[csv["kind"] == "neural"]
    if len(neural) != len(PPL) or neural["chosen"].astype(bool).sum() != len(CHOSEN_ON_VALID):
        return False
    for arch, display in (("lstm", "LSTM"), ("gru", "GRU")):
        want = [PPL[(b, arch, CHOSEN_ON_VALID[(b, arch)])][1] + 1 for b in ("b1", "b4")]
        if lines.get(display) != pytest.approx(want):
            return False
    return ("widths chosen on valid: GRU 200, LSTM 100" in findings
            and "widths chosen on valid: GRU 100, LSTM 200" in findings)


def test_the_figure_and_findings_show_each_architecture_at_its_chosen_width(tmp_path, monkeypatch):
    """compute.csv keeps all 8 rows (4 chosen); the figure has one line per architecture with one point per budget,
    at the chosen width's test mean; findings.md names the chosen widths.  Kills: the `chosen` column ignored (the
    negative control: budget.chosen returning every width draws lines through both widths and compares them)."""
    assert shows_the_chosen_widths_only(*_outputs(tmp_path, monkeypatch))
    monkeypatch.setattr(budget, "chosen", lambda t: t)
    assert not shows_the_chosen_widths_only(*_outputs(tmp_path / "ignored", monkeypatch))


def test_a_budget_label_names_one_budget_and_a_width_runs_once(tmp_path):
    """Kills: scales of one label at different FLOP budgets pooled (b1_w200 at b4's budget), two scales of the same
    width at one budget pooled (a seed counted twice); each is one line naming a file."""
    assert budget_label("b1x_w100") == "b1x" and budget_label("b1x") == "b1x" and budget_label("b_1_w2") == "b_1"
    runs = write_runs(tmp_path)
    mixed = [("b1" if label == "b4" and "_w200-" in path else label, path) for label, path in runs]
    with pytest.raises(LmgridError, match=r"budget 'b1' has runs at 1e\+12, 4e\+12 FLOPs") as e:
        budget.run_rows(mixed)
    assert "\n" not in str(e.value)
    with pytest.raises(LmgridError, match=r"seed 1 twice"):
        budget.run_rows(runs + runs[:1])
