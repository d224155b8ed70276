"""The equal-compute study in the docs and the report: a snapshot copies budget/compute.csv and its figure
(lmgrid.analysis.docs_snapshot), the `budget` block renders each budget and architecture at its width chosen on valid
(lmgrid.analysis.docs_tables.budget), and the report page shows the figure, findings and table
(lmgrid.analysis.report_page.budget_section).  From the hand-written runs of tests/test_budget_widths.py, where valid
and test disagree on every choice."""
from __future__ import annotations

import shutil

import pandas as pd

from lmgrid.analysis import budget, docs_snapshot, docs_tables, report_page

from test_budget_widths import CHOSEN_ON_VALID, PPL, write_runs


def _budget_dir(tmp_path):
    out = tmp_path / "results" / "toy" / "budget"
    runs = tmp_path / "runs"
    runs.mkdir()
    budget.write(budget.compute_table(budget.run_rows(write_runs(runs))), budget.references([]), str(out))
    return out


def _rows(text: str) -> list[dict[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    heads = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(heads, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]


def renders_the_chosen_widths(text: str) -> bool:
    """One row per budget and architecture, at the width valid chose, with that width's test mean; the widths tried;
    the separations at those widths; the figure."""
    want = {(b, {"lstm": "LSTM", "gru": "GRU"}[a]): (str(w), f"{PPL[(b, a, w)][1] + 1:.2f} ± 1.00")
            for (b, a), w in CHOSEN_ON_VALID.items()}
    got = {(r["budget"], r["model"]): (r["width (chosen on valid)"], r["test PPL"]) for r in _rows(text)}
    return (got == want and all(r["widths tried"] == "100, 200" for r in _rows(text))
            and "widths chosen on valid: GRU 200, LSTM 100" in text
            and "(/docs/results/snap/budget/ppl_vs_compute.png)" in text)


def test_the_budget_block_renders_each_architecture_at_its_width_chosen_on_valid(tmp_path):
    """Kills: a renderer that ignores `chosen` (every width a row, or the first width: the rows differ), reads
    `chosen` wrong from the CSV (pandas gives bools; the string 'False' is truthy), or leaves the figure out; a
    snapshot that does not copy the budget table and figure.  The negative control: compute.csv with its `chosen`
    column flipped (the widths test would pick) fails the check."""
    out = _budget_dir(tmp_path)
    results = out.parent
    pd.DataFrame({"model": ["mkn"]}).to_csv(results / "summary.csv", index=False)
    (results / "benchmarks").mkdir()
    (results / "benchmarks" / "budget.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n1.0\t0:00:01\t1\t1.0\n")
    snap = tmp_path / "docs" / "results" / "snap"
    docs_snapshot.snapshot(results, snap)
    assert (snap / "budget" / "compute.csv").is_file() and (snap / "budget" / "ppl_vs_compute.png").is_file()
    assert renders_the_chosen_widths(docs_tables.budget(snap, ""))
    csv = pd.read_csv(snap / "budget" / "compute.csv")
    csv["chosen"] = csv["chosen"].map({True: False, False: True})  # the negative control
    csv.to_csv(snap / "budget" / "compute.csv", index=False)
    assert not renders_the_chosen_widths(docs_tables.budget(snap, ""))


def test_the_report_page_shows_the_budget_figure_findings_and_table(tmp_path, monkeypatch):
    """Kills: a report page without the equal-compute study when results/<corpus>/budget exists (budget_section not
    called by page), or with it when it does not (a run of another config)."""
    out = _budget_dir(tmp_path)
    pd.DataFrame({"model": ["mkn"]}).to_csv(out.parent / "summary.csv", index=False)
    monkeypatch.setattr(report_page, "first_view", lambda base, studies: "")  # the summary's own tests cover it
    monkeypatch.setattr(report_page, "display_table", lambda summary: summary)
    html = report_page.page(tmp_path / "results", "toy", {})
    assert 'id="budget"' in html and "data:image/png;base64," in html
    assert "widths chosen on valid: GRU 200, LSTM 100" in html and "<table" in html
    shutil.rmtree(out)
    assert report_page.budget_section(out.parent) == "" and 'id="budget"' not in report_page.page(
        tmp_path / "results", "toy", {})


def states_the_study_cost(text: str, runs: int, cpu_min: float) -> bool:
    return f"Training the study's {runs} neural models (every width and seed, chosen or not) took **{cpu_min:,.1f} " \
           "CPU-minutes**" in text


def test_the_budget_block_states_the_training_cost_of_every_width_and_seed(tmp_path):
    """The study's cost is every trained model's CPU time, the widths not chosen included: here 24 models of
    60 CPU-s each, 24.0 CPU-minutes.  Kills: a sum over the chosen widths only (12.0), and a sum of the per-row
    means that forgets the seeds (8.0).  The negative control: the same check against the chosen rows alone
    fails."""
    out = _budget_dir(tmp_path)
    table = pd.read_csv(out / "compute.csv")
    neural = table[table["kind"] == "neural"]
    assert len(neural) == 8 and (neural["seeds"] == 3).all()
    assert states_the_study_cost(docs_tables._budget_cost(neural), 24, 24.0)
    chosen_only = neural[neural["chosen"].astype(str).str.lower() == "true"]  # the negative control
    assert not states_the_study_cost(docs_tables._budget_cost(chosen_only), 24, 24.0)
