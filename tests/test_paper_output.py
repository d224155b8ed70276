"""What goes into a paper as it is: figures at column or full width with 7-9 pt text and no Type 3 fonts, one table
per .tex file with a short caption, findings as plain text, and the report's order (main figure first, a gate figure
once).  Each test also runs the broken variant it guards against and sees it fail."""
from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.text import Text

from lmgrid.analysis import build, findings, layout, plots, tables
from lmgrid.analysis.fixtures import write_fake_results

REAL_SAVE = plots.save
CORPUS = "pp"
STUDIES = {
    "context": {"arch": ["addk", "kn", "ffnn", "lstm", "gru"], "n_step": [2, 3, 5], "layers": [1], "seed": [1],
                "regime": ["window"], "impl": ["torch"]},
    "depth": {"arch": ["rnn", "lstm"], "n_step": [3], "layers": [1, 2], "seed": [1, 2], "regime": ["window"],
              "impl": ["torch"]},
    "gates": {"arch": ["lstm", "gru"], "n_step": [2, 3, 5], "layers": [1], "seed": [1, 2, 3], "regime": ["window"],
              "impl": ["torch"]},
}
WIDTHS_PT = {round(plots.COLUMN_IN * 72, 1), round(plots.FULL_IN * 72, 1)}


def _keep_figures(monkeypatch) -> dict:
    """plots.save that also keeps each Figure (stem path -> Figure), for looking at its text."""
    figs = {}
    monkeypatch.setattr(plots, "save", lambda fig, stem, *a, **k: (figs.__setitem__(stem, fig),
                                                                   REAL_SAVE(fig, stem, *a, **k))[1])
    return figs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every study built on fixture runs: (root, stem path -> Figure)."""
    root = tmp_path_factory.mktemp("paper")
    with pytest.MonkeyPatch.context() as mp:
        figs = _keep_figures(mp)
        write_fake_results(root, CORPUS, STUDIES)
        build.build_all(CORPUS, STUDIES, str(root / f"results/{CORPUS}/oracle.json"), root)
    yield root, figs
    plt.close("all")


def pdf_problems(path: Path) -> list[str]:
    """A PDF that is not paper-ready: a page neither a column nor the full text width wide, or a Type 3 font."""
    data = path.read_bytes()
    out = []
    for box in re.findall(rb"/MediaBox \[\s*([\d.\s-]+)\]", data):
        width = float(box.split()[2]) - float(box.split()[0])
        if round(width, 1) not in WIDTHS_PT:
            out.append(f"{path.name}: {width / 72:.2f} in wide")
    if b"/Type3" in data:
        out.append(f"{path.name}: Type 3 font")
    return out


def text_problems(fig) -> list[str]:
    """Visible text outside 7-9 pt at the printed size (the figure is drawn at its own size)."""
    fig.canvas.draw()
    return [f"{t.get_text()!r}: {t.get_fontsize():g} pt" for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and not 7 <= t.get_fontsize() <= 9]


def clipped_text(fig) -> list[str]:
    """Titles, axis labels and legend entries that reach past the figure's edge (cut off in the saved file)."""
    fig.draw_without_rendering()  # lays the figure out as savefig does (constrained layout included)
    texts = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label,
                                            ax.yaxis.label)]
    texts += [t for t in (fig._supxlabel, fig._supylabel, fig._suptitle) if t is not None]
    texts += [t for leg in fig.legends + [ax.get_legend() for ax in fig.axes] if leg for t in leg.get_texts()]
    box = fig.bbox
    return [repr(t.get_text()) for t in texts if t.get_visible() and t.get_text().strip() and
            ((e := t.get_window_extent()).x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y0 < box.y0 - 1
             or e.y1 > box.y1 + 1)]


def test_no_title_or_label_runs_off_the_figure(built, tmp_path, monkeypatch):
    """Every title, axis label and legend entry of three studies' figures, and of an LSTM-only gate study's (four
    panels in one full-width row, as course_report's full scale), lies inside the figure.  Kills "panel titles
    that name what every panel shares": the control, run here, titles the LSTM-only study's position panels
    "LSTM: candidate g, layer 1" (the titles before, in a one-layer study) and sees that title run off the right
    edge, as it did in the full scale's figure."""
    _, figs = built
    assert any(stem.endswith("gates_vs_position") for stem in figs)
    assert {stem: p for stem, fig in figs.items() if (p := clipped_text(fig))} == {}

    from lmgrid.analysis import gate_plots
    lstm_only = {**STUDIES["gates"], "arch": ["lstm"]}

    def position_figure(root):
        kept = _keep_figures(monkeypatch)
        write_fake_results(root, CORPUS, {"gates": lstm_only})
        build.build_study(CORPUS, "gates", lstm_only, None, root)
        return next(fig for stem, fig in kept.items() if stem.endswith("gates_vs_position"))

    assert clipped_text(position_figure(tmp_path / "titled")) == []
    monkeypatch.setattr(gate_plots, "GATE_NAMES", {g: f"{n}, layer 1" for g, n in gate_plots.GATE_NAMES.items()})
    assert "'LSTM: candidate g, layer 1'" in clipped_text(position_figure(tmp_path / "mutant"))


def test_figures_are_a_column_or_the_full_width_with_7_to_9_pt_truetype_text(built, tmp_path, monkeypatch):
    """Every figure PDF of three studies is a column or the full text wide (plots.COLUMN_IN, FULL_IN), holds no Type 3 font, and all its text is 7-9 pt;
    axis labels are words, not code names.  Controls, run here: the same figure under the old settings (10 pt text,
    Type 3 fonts) and saved with bbox_inches='tight' (a size nobody chose) fails each check."""
    root, figs = built
    pdfs = sorted(root.rglob("*.pdf"))
    assert len(pdfs) == len(figs) >= 10
    assert [p for pdf in pdfs for p in pdf_problems(pdf)] == []
    assert [p for stem, fig in figs.items() for p in text_problems(fig)] == []
    labels = {ax.get_xlabel() for fig in figs.values() for ax in fig.axes} | {
        fig._supxlabel.get_text() for fig in figs.values() if fig._supxlabel}
    assert plots.NSTEP_LABEL in labels and not any("n_step" in label for label in labels), labels

    figs = _keep_figures(monkeypatch)
    old = {**plots.PAPER_STYLE, "font.size": 10, "axes.labelsize": 10, "xtick.labelsize": 9, "pdf.fonttype": 3}
    monkeypatch.setattr(plots, "PAPER_STYLE", old)
    summary = tables.summarise(pd.DataFrame([{"model": a, "arch": a, "impl": "torch", "n_step": n, "layers": 1,
                                              "regime": "window", "seed": 1, "valid_ppl": v, "test_ppl": v}
                                             for a, v0 in (("ffnn", 30.0), ("lstm", 29.0)) for n, v in
                                             ((2, v0), (5, v0 - 5))]))
    plots.ppl_vs_nstep(summary, None, str(tmp_path / "old"))
    assert any("Type 3" in p for p in pdf_problems(tmp_path / "old.pdf"))
    assert text_problems(figs[str(tmp_path / "old")]) != []
    fig = figs[str(tmp_path / "old")]
    fig.savefig(tmp_path / "tight.pdf", bbox_inches="tight")
    assert any("in wide" in p for p in pdf_problems(tmp_path / "tight.pdf"))


def tex_problems(tex: str) -> list[str]:
    """A .tex file that a paper cannot \\input as one table with a short caption and readable headers."""
    out = []
    n = len(re.findall(r"\\begin\{table\*?\}", tex))
    if n != 1:
        out.append(f"{n} tables")
    for caption in re.findall(r"\\caption\{(.*)\}", tex):
        if re.search(r"docs/|results/|\.md\b", caption):
            out.append(f"a path in the caption: {caption}")
        if len(caption) > 300:
            out.append(f"a caption of {len(caption)} characters")
    header = tex.split("\\toprule", 1)[-1].split("\\midrule", 1)[0]
    if re.search(r"n\\_step|values\\_per\\_run|\bL=", header):
        out.append(f"code names in the header: {header.strip()}")
    return out


def test_one_table_per_tex_file_with_a_short_caption(built, tmp_path):
    """Every .tex file of the built studies holds exactly one table, its caption names no file and stays short, its
    header has display names; large numbers have thousands separators.  Control, run here: the old layout (the test
    and valid tables in one file) fails the check."""
    root, _ = built
    texs = sorted(root.rglob("*.tex"))
    assert {p.name for p in texs} >= {"table.tex", "table_valid.tex", "gates_effect.tex", "gate_steps.tex",
                                       "gate_means.tex"}
    assert {p.name: tex_problems(p.read_text()) for p in texs} == {p.name: [] for p in texs}
    d = root / f"results/{CORPUS}/studies/gates"
    both = (d / "table.tex").read_text() + (d / "table_valid.tex").read_text()
    assert tex_problems(both) == ["2 tables"]  # the control: two tables in one file

    summary = pd.DataFrame([{"model": a, "arch": a, "impl": "ngram" if a == "addk" else "torch", "n_step": n,
                             "layers": 1, "regime": "window", "seeds": 1, "valid_ppl_mean": v,
                             "valid_ppl_std": math.nan, "test_ppl_mean": v, "test_ppl_std": math.nan, "params": 1}
                            for a, v in (("addk", 1234.5), ("lstm", 98.7)) for n in (2, 3)])
    paths = [tmp_path / f"big.{e}" for e in layout.TABLE_EXTS]
    tables.write_tables("big", "", summary, None, *paths)
    assert "1,234.50" in paths[1].read_text() and "1,234.50" in paths[2].read_text()


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no pdflatex (apt-get install texlive-latex-recommended)")
def test_tables_compile_in_one_column_of_a_two_column_page(built, tmp_path):
    """Each study table, \\input alone into a two-column article, compiles; a `table` is no wider than the column
    (no overfull box).  Control, run here: a table set in `table` although its estimate says table* overflows."""
    texs = sorted(built[0].rglob("*.tex"))
    wide = [p for p in texs if "table*" in p.read_text()]

    def compile_(files) -> str:
        doc = tmp_path / "doc.tex"
        doc.write_text("\\documentclass[twocolumn]{article}\\usepackage{booktabs}\\begin{document}\n"
                       + "".join(f"\\input{{{p}}}\\clearpage\n" for p in files) + "\\end{document}\n")
        r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout[-2000:]
        return r.stdout

    assert "Overfull \\hbox" not in compile_([p for p in texs if p not in wide])
    assert wide, "no table* among the fixture tables: the control below needs one"
    squeezed = tmp_path / "squeezed.tex"
    squeezed.write_text(wide[0].read_text().replace("table*", "table"))
    assert "Overfull \\hbox" in compile_([squeezed])


def findings_problems(text: str) -> list[str]:
    """Findings that do not read as text: code quotes, a wrong plural, a dash or nothing where an interval is
    missing."""
    out = []
    if "`" in text:
        out.append("backtick")
    out += [m.group(0) for m in re.finditer(r"\b1 (seeds|runs|layers|paired seeds)\b|\(s\)", text)]
    if re.search(r"per \S+ –|interval –", text):
        out.append("a dash for a missing interval")
    return out


def test_findings_render_as_text(built, tmp_path, monkeypatch):
    """findings.md and findings.html of a one-seed and a three-seed study: no backtick, '1 seed' (never '1 seeds',
    never 'layer(s)'), 'n/a (one seed)' where a slope's interval cannot exist, a real interval with 3 seeds.
    Control, run here: the plural left to a blind 's' (the old text) gives '1 seeds' and fails the check."""
    d = built[0] / f"results/{CORPUS}/studies"
    one = {e: (d / "context" / f"findings.{e}").read_text() for e in ("md", "html")}
    three = {e: (d / "gates" / f"findings.{e}").read_text() for e in ("md", "html")}
    for text in (*one.values(), *three.values()):
        assert findings_problems(text) == []
    assert "n/a (one seed)" in one["html"] and "over 1 seed)" in one["html"] and "1 layer" in one["html"]
    assert "n/a (one seed)" not in three["html"] and "over 3 seeds)" in three["html"]
    assert re.search(r"95% interval \[[-+]\d", three["html"])

    monkeypatch.setattr(findings, "_count", lambda n, word: f"{n} {word}s")
    write_fake_results(tmp_path, CORPUS, {"context": STUDIES["context"]})
    build.build_study(CORPUS, "context", STUDIES["context"], None, tmp_path, tmp_path / "out")
    assert "1 seeds" in findings_problems((tmp_path / "out" / "findings.html").read_text())


def _report_labels(studies: dict) -> dict[str, list[str]]:
    """Study -> the labels of its report items, in the report's (lexicographic) order."""
    items: dict[str, list[str]] = {}

    def report(path, **kw):
        items.setdefault(kw["subcategory"], []).append(kw["labels"]["output"])
        return path

    layout.snakemake_outputs(studies, report)
    # sorted as the report sorts them (places zero-padded to one width), then read without the padding
    return {name: [re.sub(r"^0+(?=\d)", "", label) for label in sorted(labels)] for name, labels in items.items()}


def test_report_lists_the_main_figure_first_and_each_gate_figure_once(monkeypatch):
    """In the report each study opens with the figure that answers it (context: PPL against context length; gates,
    a study of LSTM/GRU runs: the gate means), then its table and findings; the gate figures and tables of the
    one-seed context study are left out, since the gates study draws the same models over 3 seeds (depth keeps its
    own: 2 layers).  Control, run here: without report_skips the context study repeats every gate output."""
    labels = _report_labels(STUDIES)
    assert labels["context"][:3] == ["1. test PPL against context length", "2. perplexity table", "3. findings"]
    assert labels["gates"][0] == "1. gate means against context length"
    assert labels["depth"][0] == "1. test PPL against layers"
    assert not any("gate" in label for label in labels["context"])
    assert any("saturation" in label for label in labels["depth"])
    # figures against n and against window position, trend, position and means tables, 2 saturation figures
    assert sum("gate" in label for label in labels["gates"]) == 7

    monkeypatch.setattr(layout, "report_skips", lambda studies: set())
    assert any("gate" in label for label in _report_labels(STUDIES)["context"])
