"""The report's first page (lmgrid.analysis.report_page) and its one-page PDF: the results come first.

The fast tests read made-up findings and need no browser; the full ones read the session's finished tiny grid
(tests/tinygrid.py) in headless Chromium.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lmgrid.analysis import report, report_page
from lmgrid.analysis.summary import headline

FINDINGS = """## Findings of study s

Generated from this run's results by lmgrid aggregate; intervals are 95% over seeds.

- Best cell, chosen on valid (lowest mean valid PPL): **LSTM** (n = 5, 1 layer): valid PPL 19.24, test PPL 18.50.
- Training: 9 neural runs; stopped by plateau (9).

**Implementations, each against nn.LSTM/nn.GRU once (paired t intervals; p_H below 0.05)**:

- **LSTM (cell) vs LSTM** (n = 5, 1 layer, window): difference -0.00, 95% interval [-0.00, +0.00]: no clear difference.
- **LSTM (concat) vs LSTM** (n = 5, 1 layer, window): difference +0.06, 95% interval [-0.14, +0.25]: no clear difference.

**Gates against context length n, pooled over the window (slopes per token of context)**:

- **LSTM, layer 1, gate i**: pooled over the window: no clear trend (slope -0.0027, 95% interval [-0.0071, +0.0016] (t, df 2), p_H 1.000). At a fixed window position (position 0): no clear change.
"""


def test_each_study_kind_gets_the_findings_that_answer_it():
    """A gate study over context lengths answers with its first gate trend (its first sentence only), a study of
    implementations with its contrasts, any other study with its best cell chosen on valid.
    Kills: answer_items always taking the findings' first item (the best cell), or the whole gate item."""
    gates = {"arch": ["lstm"], "n_step": [2, 5, 9]}
    impls = {"arch": ["lstm"], "impl": ["torch", "cell", "concat"], "n_step": [5]}
    depth = {"arch": ["lstm", "gru"], "n_step": [5], "layers": [1, 3]}
    gate_items = report_page.answer_items(FINDINGS, gates)
    assert gate_items == ["**LSTM, layer 1, gate i**: pooled over the window: no clear trend (slope -0.0027, 95% "
                          "interval [-0.0071, +0.0016] (t, df 2), p_H 1.000)."]
    assert [i.split("**")[1] for i in report_page.answer_items(FINDINGS, impls)] == [
        "LSTM (cell) vs LSTM", "LSTM (concat) vs LSTM"]
    assert report_page.answer_items(FINDINGS, depth)[0].startswith("Best cell, chosen on valid")
    assert report_page.answer_items("## Findings of study s\n", depth) == []


def test_without_chromium_no_pdf_and_one_line_says_so(tmp_path, monkeypatch):
    """`make run` on a machine without Chromium: no failure, an older PDF removed, one note naming the file.
    Kills: write_pdf raising (make run failing) or leaving an older PDF that no longer matches the results."""
    monkeypatch.setattr(report, "chromium", lambda: None)
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(b"%PDF-old")
    notes = report.write_pdf("<html></html>", pdf)
    assert not pdf.exists() and len(notes) == 1 and str(pdf) in notes[0] and "no Chromium" in notes[0]


# ---- in headless Chromium, on the finished tiny grid ----------------------------------------------------------

def _browser_or_skip():
    from test_workflow import _browser_or_skip as skip

    skip()


def _models(grid: Path) -> list[str]:
    return list(headline(pd.read_csv(grid / "results" / "tiny" / "summary.csv"))["Model"])


@pytest.mark.full
def test_the_first_screen_holds_the_summary_table(tiny_pipeline, tmp_path, monkeypatch):
    """At 1280x800 the run's results/report.html shows the whole summary table, one row per model in the summary's
    order (the screenshot is saved for a person to look at).  Controls, run here: the page built with the summary
    moved after the workflow link fails; so does a summary table missing a model.
    Kills: the results page opening on anything but the results, and a model dropped from the first view."""
    _browser_or_skip()
    from tinygrid import GRID

    models = _models(tiny_pipeline)
    shot = tmp_path / "first_view.png"
    assert report.first_view(tiny_pipeline / "results" / "report.html", models, shot=shot) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    real_summary, real_workflow = report_page.summary_section, report_page.workflow_section
    csv = tiny_pipeline / "results" / "tiny" / "summary.csv"
    with monkeypatch.context() as m:  # the summary moved to the end, after the job graph's link
        m.setattr(report_page, "summary_section", lambda path: "")
        m.setattr(report_page, "workflow_section", lambda link: real_workflow(link) + real_summary(csv))
        moved = tmp_path / "moved.html"
        moved.write_text(report_page.page(tiny_pipeline / "results", "tiny", GRID["studies"]), encoding="utf-8")
    problems = report.first_view(moved, models)
    assert len(problems) == 1 and "not within the first 1280x800 screen" in problems[0], problems
    with monkeypatch.context() as m:  # a model missing from the table
        m.setattr(report_page, "headline", lambda table: headline(table).iloc[:-1])
        short = tmp_path / "short.html"
        short.write_text(report_page.page(tiny_pipeline / "results", "tiny", GRID["studies"]), encoding="utf-8")
    problems = report.first_view(short, models)
    assert len(problems) == 1 and "are not the models" in problems[0], problems


_CUT = """() => { const sheet = document.getElementById("sheet").getBoundingClientRect();
  const fit = document.getElementById("fit").getBoundingClientRect();
  return [fit.bottom - sheet.bottom, fit.right - sheet.right]; }"""


def _cut_px(html: Path) -> list[float]:
    """How far the printed page's content reaches past its A4 sheet (px, bottom and right; <= 0: nothing cut)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = report._browser(pw)
        page = browser.new_page()
        page.goto(html.resolve().as_uri())
        page.emulate_media(media="print")
        cut = page.evaluate(_CUT)
        browser.close()
    return cut


@pytest.mark.full
def test_the_pdf_is_one_page_with_nothing_cut(tiny_pipeline, tmp_path, monkeypatch):
    """report.pdf of the run is one A4 page; with twelve studies (the tiny grid's three, four times) the printed
    view still fits its sheet (the fit script zooms it out) and prints as one page.  Control, run here: without
    the fit script the same view runs past its sheet.
    Kills: a summary PDF of several pages, or one whose sheet clips the results."""
    _browser_or_skip()
    from tinygrid import GRID

    def pages(pdf: Path) -> int:
        return len(re.findall(rb"/Type\s*/Page\b", pdf.read_bytes()))

    assert pages(tiny_pipeline / "results" / "report.pdf") == 1
    source = tiny_pipeline / "results" / "tiny"
    many = tmp_path / "results" / "tiny"
    (many / "studies").mkdir(parents=True)
    shutil.copy(source / "summary.csv", many / "summary.csv")
    studies = {}
    for i in range(4):
        for name, study in GRID["studies"].items():
            shutil.copytree(source / "studies" / name, many / "studies" / f"{name}{i}")
            studies[f"{name}{i}"] = study
    html = tmp_path / "print.html"
    html.write_text(report_page.print_page(tmp_path / "results", "tiny", studies), encoding="utf-8")
    assert max(_cut_px(html)) <= 0
    pdf = tmp_path / "report.pdf"
    assert report.write_pdf(html.read_text(encoding="utf-8"), pdf) == [] and pages(pdf) == 1
    monkeypatch.setattr(report_page, "FIT_SCRIPT", "")
    html.write_text(report_page.print_page(tmp_path / "results", "tiny", studies), encoding="utf-8")
    assert _cut_px(html)[0] > 0
