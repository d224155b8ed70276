"""Issue 44, item 1: every "best" a reader sees is chosen on valid, never on test.

Each fixture has a best-valid cell that is not the best-test cell.  Each test asserts the real code picks the
best-valid one and shows its test PPL, and, as its negative control, runs the old test-based choice (the module's
selection key switched to test, or the old expression copied here) and asserts that it picks the other cell, which
the real code does not.
"""
from __future__ import annotations

import json

import pandas as pd

from lmgrid.analysis import findings, summary
from lmgrid.testtime.combine import table as combine_table
from lmgrid.tracking import mirror

# Two LSTM cells over two seeds and one n-gram cell: n=5 is best on valid (95) but not on test (99 > 90 at n=2).
CELLS = {  # (arch, impl, n_step): [(valid, test) per seed]
    ("lstm", "torch", 2): [(101.0, 89.0), (99.0, 91.0)],  # mean valid 100, test 90: best on test
    ("lstm", "torch", 5): [(94.0, 98.0), (96.0, 100.0)],  # mean valid 95, test 99: best on valid
    ("kn", "ngram", 3): [(120.0, 115.0)],
}


def _ppl_table() -> pd.DataFrame:
    """A summary.ppl_table-shaped frame of CELLS plus the oracle."""
    rows = [{"model": "oracle", "arch": "oracle", "valid_ppl": 50.0, "test_ppl": 51.0}]
    for (arch, impl, n), seeds in CELLS.items():
        for seed, (v, t) in enumerate(seeds, 1):
            rows.append({"model": f"{arch}-{n}-{seed}", "arch": arch, "impl": impl, "n_step": n, "layers": 1,
                         "regime": "window", "seed": seed, "valid_ppl": v, "test_ppl": t, "valid_tokens": 10,
                         "test_tokens": 10, "params": 1})
    table = pd.DataFrame(rows, columns=summary.PPL_COLUMNS)
    for col in ("n_step", "layers", "seed", "valid_tokens", "test_tokens", "params"):
        table[col] = table[col].astype("Int64")
    return table


def _lstm_row(top: pd.DataFrame) -> dict:
    return top[top["Model"] == "LSTM"].iloc[0].to_dict()


def test_headline_picks_each_models_cell_on_valid(monkeypatch):
    """summary.headline: the LSTM's best cell is n = 5 (lowest mean valid PPL, 95.00), shown with its test PPL 99.00,
    and the column says the choice was made on valid.  Mutation killed: the best cell chosen by the lowest mean test
    PPL (the old `idxmin()` over test_ppl), which picks n = 2.  Negative control, run here: the same function with its
    selection key switched to test (summary.SELECT_ON = 'test_ppl') picks n = 2, which the real code does not."""
    top = summary.headline(_ppl_table())
    assert summary.BEST_CELL in top.columns and "chosen on valid" in summary.BEST_CELL
    row = _lstm_row(top)
    assert (row[summary.BEST_CELL], row["Valid PPL"], row["Test PPL"]) == ("n = 5, 1 layer", "95.00", "99.00")
    assert top["Model"].tolist()[-1] == "Oracle"

    monkeypatch.setattr(summary, "SELECT_ON", "test_ppl")  # the old choice
    broken = _lstm_row(summary.headline(_ppl_table()))
    assert (broken[summary.BEST_CELL], broken["Test PPL"]) == ("n = 2, 1 layer", "90.00")
    assert broken[summary.BEST_CELL] != row[summary.BEST_CELL]


def test_headline_text_names_the_choice(tmp_path):
    """headline_text (the end of `make run`) reads summary.csv and shows the best-valid cell under a header that says
    'chosen on valid'.  Mutation killed: the terminal headline picking on test or losing the header's wording.
    Negative control: the n = 2 row (the best-test cell) is absent from the LSTM's line.  Also kills a table wider
    than summary.TERMINAL_WIDTH, which wraps every row at the end of a run (the pipe table did, at 121 characters,
    with the reset column and a 19-letter model name: both are in this frame)."""
    path = tmp_path / "summary.csv"
    frame = _ppl_table()
    long_name = frame.iloc[[1]].assign(arch="mkn", impl="ngram", model="mkn")
    frame = pd.concat([frame, long_name], ignore_index=True).assign(test_ppl_reset=frame["test_ppl"].iloc[0])
    frame.to_csv(path, index=False)
    text = summary.headline_text(str(path))
    assert "chosen on valid" in text
    lstm = next(line for line in text.splitlines() if line.startswith("LSTM "))
    assert "n = 5" in lstm and "99.00" in lstm and "n = 2" not in lstm
    assert "Modified Kneser-Ney" in text and "reset" in text
    assert max(len(line) for line in text.splitlines()) <= summary.TERMINAL_WIDTH


def _runs() -> pd.DataFrame:
    """A collect.load_study()['runs']-shaped frame of CELLS."""
    return pd.DataFrame([{"model": arch, "arch": arch, "impl": impl, "n_step": n, "layers": 1, "regime": "window",
                          "seed": seed, "valid_ppl": v, "test_ppl": t, "stopped_because": "budget",
                          "best_epoch": 1, "epochs": 2}
                         for (arch, impl, n), seeds in CELLS.items() for seed, (v, t) in enumerate(seeds, 1)])


def test_findings_best_cell_is_chosen_on_valid(monkeypatch):
    """findings._ppl_sentences: the study's best cell is the LSTM at n = 5 (mean valid 95.00), reported with its
    test PPL 99.00 and the words 'chosen on valid'.  Mutation killed: 'Lowest test PPL' (the old sort by mean test
    PPL), which names n = 2 at 90.00.  Negative control, run here: findings.SELECT_ON = 'test_ppl' names n = 2."""
    line = findings._ppl_sentences(_runs())[0]
    assert "chosen on valid" in line and "n = 5" in line
    assert "valid PPL 95.00" in line and "test PPL 99.00" in line
    assert "n = 2" not in line and "90.00" not in line

    monkeypatch.setattr(findings, "SELECT_ON", "test_ppl")  # the old choice
    broken = findings._ppl_sentences(_runs())[0]
    assert "n = 2" in broken and "test PPL 90.00" in broken and broken != line


def _result(path, name: str, valid: list[float], test: list[float]) -> str:
    labels = [f"c{i}" for i in range(len(valid))]
    path.write_text(json.dumps({"name": name, "labels": labels, "weights": [1 / len(labels)] * len(labels),
                                "valid_ppl": 80.0, "test_ppl": 82.0, "component_valid_ppl": valid,
                                "component_test_ppl": test, "iterations": 3,
                                "components": [{"label": label} for label in labels]}))
    return str(path)


def test_combination_summary_best_component_is_chosen_on_valid(tmp_path):
    """combine.table.summary: the best component is c1 (lowest valid PPL, 90) with its test PPL 97, not c0 (valid
    95, the lowest test PPL 92); the Markdown and HTML say 'chosen on valid'.  Mutation killed: the old
    `min(component_test_ppl)` (the best component's test PPL taken as the lowest test PPL of any component).
    Negative control, run here: that old expression gives 92, which the real table does not show."""
    result = _result(tmp_path / "result.json", "kn_lstm", valid=[95.0, 90.0, 99.0], test=[92.0, 97.0, 93.0])
    out = [str(tmp_path / f"combinations.{e}") for e in ("csv", "md", "html")]
    table = combine_table.summary([result], *out)
    row = table.iloc[0]
    assert (row["best_component"], row["best_component_valid_ppl"], row["best_component_test_ppl"]) == \
        ("c1", 90.0, 97.0)
    md, html = (open(p).read() for p in out[1:])
    assert "chosen on valid" in md and "chosen on valid" in html
    assert "| c1 " in md and "97.00" in md and "92.00" not in md
    saved = pd.read_csv(out[0]).iloc[0]
    assert saved["best_component"] == "c1" and saved["best_component_test_ppl"] == 97.0

    old = min(json.loads(open(result).read())["component_test_ppl"])  # the old expression
    assert old == 92.0 and old != row["best_component_test_ppl"]


def test_combination_best_component_breaks_ties_by_order():
    """best_component: a tie on valid goes to the first listed component, whatever the test PPLs.  Mutation killed:
    a tie broken by test PPL (which would pick c1, test 80).  Negative control: the test-based key picks c1."""
    r = {"component_valid_ppl": [90.0, 90.0], "component_test_ppl": [95.0, 80.0]}
    assert combine_table.best_component(r) == 0
    assert min(range(2), key=lambda i: (r["component_valid_ppl"][i], r["component_test_ppl"][i])) == 1


def test_mlflow_study_metric_is_chosen_on_valid():
    """mirror.best_on_valid (a study run's metrics): the run with the lowest valid PPL (b, 90) and its test PPL 97,
    not the lowest test PPL (91, run c, which has no valid PPL; 92, run a, among the others); {} when no run has a
    valid PPL.  Mutation killed: the old `best_test_ppl = runs['test_ppl'].min()`.  Negative control, run here: that
    old expression gives 91, which the real metrics do not."""
    runs = pd.DataFrame({"run": ["a", "b", "c"], "valid_ppl": [95.0, 90.0, None], "test_ppl": [92.0, 97.0, 91.0]})
    metrics = mirror.best_on_valid(runs)
    assert metrics == {"best_valid_ppl": 90.0, "test_ppl_of_best_valid": 97.0}
    assert "best_test_ppl" not in metrics
    old = float(runs["test_ppl"].min())  # the old metric
    assert old == 91.0 and old != metrics["test_ppl_of_best_valid"]
    assert mirror.best_on_valid(runs.assign(valid_ppl=None)) == {}
