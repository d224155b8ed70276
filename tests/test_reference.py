"""The reference table: published figures beside ours, matched by model class, mean and std over seeds."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from lmgrid.errors import LmgridError, write_json
from lmgrid.reference import COLUMNS, NOT_RUN, reference_table, write


def _metrics(tmp_path, name, arch, layers, seed, test_ppl, regime="stream", n_step=0):
    path = tmp_path / f"{name}.json"
    write_json(path, {"name": name, "arch": arch, "impl": "torch", "n_step": n_step, "layers": layers,
                      "regime": regime, "seed": seed, "valid": {"ppl": test_ppl + 5}, "test": {"ppl": test_ppl},
                      "params": 1000, "epochs": 12, "stopped_because": "lr_schedule_end", "wall_s": 600.0,
                      "device": "cpu (2 threads)", "precision": "bf16-mixed"})
    return str(path)


ROWS = [{"model": "LSTM 2x200", "published_test_ppl": 114.5, "source": "Zaremba et al. 2014",
         "runs": {"arch": "lstm", "layers": 2}},
        {"model": "LSTM large (GPU)", "published_test_ppl": 78.4, "source": "Zaremba et al. 2014"},
        {"model": "KN5", "published_test_ppl": 141.2, "source": "Mikolov 2012", "runs": {"arch": "mkn", "n_step": 5}}]


def test_each_published_row_gets_the_matching_runs_over_seeds(tmp_path):
    """Kills: a match on arch alone (the 1-layer LSTM would join the 2x200 row), std over one seed, a number for a
    row that was not run."""
    paths = [_metrics(tmp_path, f"l2s{s}", "lstm", 2, s, p) for s, p in ((1, 110.0), (2, 112.0), (3, 114.0))]
    paths.append(_metrics(tmp_path, "l1", "lstm", 1, 1, 150.0))
    paths.append(_metrics(tmp_path, "kn5", "mkn", 1, 1, 141.19, regime="window", n_step=5))
    table = reference_table(ROWS, paths)
    assert list(table.columns) == COLUMNS
    lstm, large, kn = (table.iloc[i] for i in range(3))
    assert lstm["seeds"] == 3 and lstm["test_ppl_mean"] == pytest.approx(112.0)
    assert lstm["test_ppl_std"] == pytest.approx(pd.Series([110.0, 112.0, 114.0]).std())
    assert lstm["difference"] == pytest.approx(112.0 - 114.5) and lstm["epochs"] == "12 12 12"
    assert large["ours"] == NOT_RUN and math.isnan(large["test_ppl_mean"])
    assert kn["seeds"] == 1 and math.isnan(kn["test_ppl_std"]) and kn["difference"] == pytest.approx(-0.01)
    write(ROWS, paths, *(str(tmp_path / f"reference.{e}") for e in ("csv", "md", "tex", "html")))
    md = " ".join((tmp_path / "reference.md").read_text().split())
    assert "| LSTM 2x200 | 114.5 | Zaremba et al. 2014 | 112.0 ± 2.0 |" in md and NOT_RUN in md
    assert "table*" in (tmp_path / "reference.tex").read_text()


def test_an_unknown_match_key_is_one_line(tmp_path):
    with pytest.raises(LmgridError, match=r"reference\[0\]\.runs: unknown key 'width'"):
        reference_table([{"model": "x", "published_test_ppl": 1.0, "source": "s", "runs": {"width": 3}}], [])
