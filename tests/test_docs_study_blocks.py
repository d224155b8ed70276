"""The docs' study blocks: `gates:<study>` and `scales` (lmgrid.analysis.docs_gates) print each slope with the
simultaneous interval and Holm p that agree with the verdict beside it, and the verdicts as the run wrote them;
`embeddings:<study>` (lmgrid.analysis.docs_embeddings) shows the study's paired comparison as the run's table does."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lmgrid.analysis import docs_embeddings, docs_gates, docs_tables
from lmgrid.common.errors import LmgridError

# Marginal (unadjusted) and simultaneous intervals differ in every digit, so the test can tell which one is printed.
EFFECT = {
    "model": "lstm", "model_name": "LSTM", "layers": 1, "layer": 0, "gate": "f", "n_steps": "2 3 5 7 9", "seeds": 5,
    "slope_per_nstep": 0.0111, "slope_ci_low": 0.0101, "slope_ci_high": 0.0121, "slope_p_holm": 0.0021,
    "slope_sim_low": 0.0091, "slope_sim_high": 0.0131, "direction": "rises",
    "end_matched_positions": "1 2", "end_matched_slope": 0.0222, "end_matched_ci_low": 0.0202,
    "end_matched_ci_high": 0.0242, "end_matched_p_holm": 0.0312, "end_matched_sim_low": 0.0012,
    "end_matched_sim_high": 0.0432, "at_matched_lags": "rises",
    "padfree_slope": -0.0033, "padfree_ci_low": -0.0043, "padfree_ci_high": -0.0023, "padfree_p_holm": 0.4,
    "padfree_sim_low": -0.0093, "padfree_sim_high": 0.0027, "padding_free": "no clear change",
    "padfree_end_positions": "1 2", "padfree_end_slope": 0.0044, "padfree_end_ci_low": 0.0034,
    "padfree_end_ci_high": 0.0054, "padfree_end_p_holm": 0.2, "padfree_end_sim_low": -0.0011,
    "padfree_end_sim_high": 0.0099, "padding_free_at_matched_lags": "no clear change",
}


def _snap(tmp_path: Path, rows: list[dict], name: str) -> Path:
    path = tmp_path / "snap" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return tmp_path / "snap"


def _prints_holm_consistent(text: str) -> bool:
    """Every slope of EFFECT appears with its simultaneous interval and Holm p, and no marginal interval does."""
    sims = ["+0.0111 [+0.0091, +0.0131], p_H 0.0021", "+0.0222 [+0.0012, +0.0432], p_H 0.0312",
            "-0.0033 [-0.0093, +0.0027], p_H 0.4", "+0.0044 [-0.0011, +0.0099], p_H 0.2"]
    marginal = ["[+0.0101, +0.0121]", "[+0.0202, +0.0242]", "[-0.0043, -0.0023]", "[+0.0034, +0.0054]"]
    return all(s in text for s in sims) and not any(m in text for m in marginal)


def test_the_gates_block_prints_the_interval_that_agrees_with_the_holm_verdict(tmp_path, monkeypatch):
    """Kills: the block printing the marginal (unadjusted) t interval beside a Holm verdict, which the issue found
    (an interval clear of 0 beside "no clear change"), or dropping the end-aligned / padding-free answers.  Negative
    control: the answers pointed at the marginal columns fail the same check."""
    snap = _snap(tmp_path, [EFFECT], "studies/lstm_gates/gates_effect.csv")
    text = docs_tables.TABLES["gates"](snap, "lstm_gates")
    assert _prints_holm_consistent(text)
    row = [line for line in text.splitlines() if line.startswith("| LSTM")][0]
    assert row.count("rises") == 2 and row.count("no clear change") == 2 and "(at 1 2)" in row

    marginal = {k: (m, lo.replace("sim", "ci"), hi.replace("sim", "ci"), p, v, w)
                for k, (m, lo, hi, p, v, w) in docs_gates.ANSWERS.items()}
    monkeypatch.setattr(docs_gates, "ANSWERS", marginal)
    assert not _prints_holm_consistent(docs_tables.TABLES["gates"](snap, "lstm_gates"))


def test_a_gates_block_of_an_older_file_says_na_and_a_missing_study_names_the_file(tmp_path):
    """Kills: a KeyError on a gates_effect.csv written before the end-aligned columns existed (an old snapshot
    must render, saying n/a), and a missing study rendered as an empty table instead of an error naming the file."""
    old = {k: v for k, v in EFFECT.items() if not k.startswith(("end_", "padfree", "padding", "at_matched"))}
    snap = _snap(tmp_path, [old], "studies/gates/gates_effect.csv")
    row = [line for line in docs_gates.gates(snap, "gates").splitlines() if line.startswith("| LSTM")][0]
    assert row.count("n/a") == 8  # four answers' slopes and verdicts
    with pytest.raises(LmgridError, match="studies/nope/gates_effect.csv"):
        docs_gates.gates(snap, "nope")
    with pytest.raises(LmgridError, match="gates:<study>"):
        docs_gates.gates(snap, "")


def test_the_scales_block_names_every_answer_the_comparison_tests():
    """Kills: an answer added to analysis.effects.INTERACTIONS (a new scale x n test in orchestration.scales) that
    the docs' block silently leaves out, or one renamed there that the block then prints as n/a."""
    from lmgrid.analysis.effects import INTERACTIONS

    assert list(docs_gates.LABELS) == list(INTERACTIONS)


def test_the_scales_block_prints_each_interaction_verdict_with_its_difference(tmp_path):
    """Kills: the scale comparison rendered as verdict words compared across scales (the issue's "the scales agree")
    instead of the scale x n test: the difference, its simultaneous interval, Holm p and verdict must be printed,
    and the reference scale's row marked as such."""
    base = {"model": "lstm", "layer": 0, "gate": "f", "seeds": 5}
    ref = {**base, "scale": "ptb", **{f"interaction_{a}": "reference" for a in docs_gates.LABELS}}
    other = {**base, "scale": "full", "seeds": 3}
    for a in docs_gates.LABELS:
        other.update({f"{a}_diff": 0.0123, f"{a}_diff_sim_low": 0.0023, f"{a}_diff_sim_high": 0.0223,
                      f"{a}_diff_p_holm": 0.04, f"interaction_{a}": "slope on n higher at full than at ptb"})
        ref.update({f"{a}_diff": math.nan})
    text = docs_gates.scales(_snap(tmp_path, [ref, other], "scales/gates.csv"))
    rows = [line for line in text.splitlines() if line.startswith("| lstm")]
    assert rows[0].count("reference") == len(docs_gates.LABELS)
    assert rows[1].count("+0.0123 [+0.0023, +0.0223], p_H 0.04") == len(docs_gates.LABELS)
    assert rows[1].count("slope on n higher at full than at ptb") == len(docs_gates.LABELS)


SEED_TABLE = Path(__file__).resolve().parents[1] / "docs" / "results" / "ptb_seed_table"


def _paired(text: str) -> bool:
    """The block holds the common-pair rho, the paired difference against the reference and the spread over seeds."""
    header = text.splitlines()[2]
    return all(h in header for h in ("common pairs [95% CI, words]", "reference's [95% CI, words, paired]",
                                     "over seeds (mean ± std)"))


def test_the_embeddings_block_shows_the_paired_comparison_and_the_seed_spread(tmp_path):
    """Kills: a snapshot or block that shows the unpaired per-model table (embeddings/embeddings.csv: intervals per
    vector set over its own pairs, no seeds), which the issue found not comparable between models.  The reference
    row's paired difference is exactly 0.  Negative control: the unpaired table in the study's place fails."""
    text = docs_tables.TABLES["embeddings"](SEED_TABLE, "gated")
    assert _paired(text)
    reference = text.split("the difference against the reference (")[1].split(",")[0]
    row = [line for line in text.splitlines() if line.startswith(f"| {reference.split(' (')[0]} ")][0]
    assert "+0.000 [+0.000, +0.000]" in row

    from lmgrid.embed.study import write_table

    unpaired = tmp_path / "studies" / "gated"
    unpaired.mkdir(parents=True)
    write_table(pd.read_csv(SEED_TABLE / "embeddings" / "embeddings.csv"), unpaired / "embeddings")
    assert not _paired(docs_embeddings.embeddings(tmp_path, "gated"))
    with pytest.raises(LmgridError, match="studies/nope/embeddings.md"):
        docs_embeddings.embeddings(tmp_path, "nope")
