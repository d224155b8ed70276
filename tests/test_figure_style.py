"""Figures as a researcher meets them: one fixed colour per model in every figure, sizes that fit ACL and IEEE
columns, a column-wide copy of each study's main figure, and an embeddings map whose label sits on no word.  Each
test also runs the broken variant it guards against and sees its check fail."""
from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from lmgrid.analysis import build, collect, layout, names, palette, plots, run_curves, tables
from lmgrid.analysis.fixtures import write_fake_results
from lmgrid.embed import study as embed_study
from lmgrid.run.key import expand_study

CORPUS = "fs"
OLD_ZIP = dict(zip(names.DISPLAY, [*(plt.get_cmap("tab10")(i) for i in range(10)), "#8c6d31", "#393b79"]))


def _kept(monkeypatch, module=plots) -> list:
    """module.save replaced by one that keeps each figure and writes nothing."""
    figs: list = []
    monkeypatch.setattr(module, "save", lambda fig, stem, *a, **k: figs.append(fig) or [])
    return figs


def _summary(models: list[str]) -> pd.DataFrame:
    rows = [{"model": m, "arch": m.split("/")[0], "impl": m.split("/")[1] if "/" in m else "torch", "n_step": n,
             "layers": 1, "regime": "window", "seed": 1, "valid_ppl": v, "test_ppl": v}
            for i, m in enumerate(models) for n, v in ((2, 100.0 + 10 * i), (5, 90.0 + 10 * i))]
    return tables.summarise(pd.DataFrame(rows))


def _line_colours(fig) -> dict[str, str]:
    """Legend label -> line colour (hex) of an errorbar figure."""
    return {c.get_label(): to_hex(c.lines[0].get_color()) for ax in fig.axes for c in ax.containers}


def test_every_model_has_a_colour_and_marker_of_its_own():
    """Each of the 13 models of names.DISPLAY has a colour and a marker that no other model has.  Kills "12 colours
    zipped with 13 names" (the old MODEL_COLOURS, checked here: the Transformer had none), "a model's colour
    removed" and "two models given one colour"."""
    assert len(names.DISPLAY) == 13
    assert palette.problems() == []
    assert "transformer: no colour" in palette.problems(colours={m: to_hex(c) for m, c in OLD_ZIP.items()})
    assert "gru: no colour" in palette.problems(colours={m: c for m, c in palette.MODEL_COLOURS.items() if m != "gru"})
    shared = {**palette.MODEL_COLOURS, "gru/cell": palette.MODEL_COLOURS["gru"]}
    assert any("gru and gru/cell: the same colour" in p for p in palette.problems(colours=shared))
    assert any("same marker" in p for p in palette.problems(markers={**palette.MODEL_MARKERS, "rnn": "o"}))


def test_a_model_keeps_its_colour_across_figures_with_other_models(monkeypatch):
    """The GRU is drawn in its own colour in two PPL figures with different other models, and in a gate figure.
    Kills "colours taken in line order" (the old tab10 fallback, run here as the control: the GRU changes colour
    between the two figures)."""
    figs = _kept(monkeypatch)
    plots.ppl_vs_nstep(_summary(["ffnn", "lstm", "gru"]), None, "a")
    plots.ppl_vs_nstep(_summary(["gru", "transformer", "lstm/cell"]), None, "b")
    first, second = (_line_colours(f) for f in figs)
    gru = palette.MODEL_COLOURS["gru"].lower()
    assert first["GRU"] == second["GRU"] == gru
    assert second["Transformer"] == palette.MODEL_COLOURS["transformer"].lower()

    cmap = plt.get_cmap("tab10")
    monkeypatch.setattr(plots, "_colours", lambda series: {label: cmap(i % 10) for i, (label, _, _)
                                                           in enumerate(series)})
    figs.clear()
    plots.ppl_vs_nstep(_summary(["ffnn", "lstm", "gru"]), None, "a")
    plots.ppl_vs_nstep(_summary(["gru", "transformer", "lstm/cell"]), None, "b")
    first, second = (_line_colours(f) for f in figs)
    assert first["GRU"] != second["GRU"]


def test_valid_curves_give_fifteen_runs_their_models_colours(tmp_path, monkeypatch):
    """valid_curves of 5 models x 3 context lengths (15 runs): every line of a model in a shade of that model's
    colour, no two models alike.  Kills "a 10-colour cycle over the runs' configurations" (the old colouring, run as the control)."""
    study = {"arch": ["ffnn", "rnn", "lstm", "gru", "transformer"], "n_step": [2, 3, 5], "layers": [1],
             "seed": [1], "regime": ["window"], "impl": ["torch"]}
    write_fake_results(tmp_path, CORPUS, {"s": study})
    data = collect.load_study(expand_study(study), CORPUS, tmp_path)
    figs = _kept(monkeypatch)

    def by_model() -> dict[str, set]:
        figs.clear()
        run_curves.valid_curves(data["logs"], data["runs"], "v")
        out: dict[str, set] = {}
        for line in figs[0].axes[0].lines[::2]:  # each run's line, then its end marker
            out.setdefault(line.get_label().split(",")[0], set()).add(to_hex(line.get_color()))
        return out

    def distinct(colours: dict[str, set]) -> bool:
        return all(not (a & b) for m, a in colours.items() for n, b in colours.items() if m < n)

    colours = by_model()
    assert len(colours) == 5 and distinct(colours)
    for model in study["arch"]:
        assert palette.MODEL_COLOURS[model].lower() in colours[names.display(model)]
        # its other configurations (n = 3, 5) shades of the same colour
        assert colours[names.display(model)] == {palette.variant(model, k).lower() for k in (0, 1, 2)}

    cmap, configs = plt.get_cmap("tab10"), iter(range(100))  # the control: colours in configuration order
    monkeypatch.setattr(run_curves.palette, "variant", lambda model, k: cmap(next(configs) % 10))
    assert not distinct(by_model())


def too_wide(pdf_bytes: bytes) -> list[str]:
    """Pages wider than a full ACL text width (6.3 in), or neither a column (at most 3.03 in) nor full width."""
    out = []
    for box in re.findall(rb"/MediaBox \[\s*([\d.\s-]+)\]", pdf_bytes):
        width = (float(box.split()[2]) - float(box.split()[0])) / 72
        if width > 6.3 + 1e-6 or 3.03 + 1e-6 < width < 6.3 - 0.2:
            out.append(f"{width:.2f} in wide")
    return out


def test_every_figure_fits_acl_and_ieee_widths(tmp_path):
    """Every figure PDF of a context and a depth study, main and column versions, is at most 3.03 in (a column) or
    6.3 in (the text width) wide, and each study writes its main figure a column wide as <stem>_column.  Kills
    "the old 3.3 and 6.9 in widths" (a 6.9-in figure, saved here as the control, fails) and "no column version of
    the main figure" (the plan without it, the control, misses the file)."""
    assert plots.COLUMN_IN <= 3.03 and plots.FULL_IN <= 6.3
    studies = {"context": {"arch": ["kn", "ffnn", "lstm", "gru"], "n_step": [2, 3, 5], "layers": [1], "seed": [1],
                           "regime": ["window"], "impl": ["torch"]},
               "gates": {"arch": ["lstm", "gru"], "n_step": [2, 5], "layers": [1], "seed": [1, 2],
                         "regime": ["window"], "impl": ["torch"]}}
    write_fake_results(tmp_path, CORPUS, studies)
    build.build_all(CORPUS, studies, str(tmp_path / f"results/{CORPUS}/oracle.json"), tmp_path)
    pdfs = sorted(tmp_path.rglob("*.pdf"))
    assert len(pdfs) >= 10
    assert {p.name: w for p in pdfs if (w := too_wide(p.read_bytes()))} == {}
    for name, main in (("context", "ppl_vs_nstep"), ("gates", "gates_vs_nstep")):
        assert layout.main_figure(studies[name]) == main
        column = tmp_path / f"results/{CORPUS}/studies/{name}/{main}_column.pdf"
        assert too_wide(column.read_bytes()) == []
        width = float(re.search(rb"/MediaBox \[\s*0 0 ([\d.]+)", column.read_bytes()).group(1)) / 72
        assert width == pytest.approx(plots.COLUMN_IN, abs=0.01)
        assert f"{main}_column" in layout.study_plan(studies[name])
        assert f"{main}_column" not in layout._plan(studies[name])  # the control: the plan before this change

    fig, _ = plots.figure(6.9, 2.5)
    fig.savefig(tmp_path / "old.pdf")
    plt.close(fig)
    assert too_wide((tmp_path / "old.pdf").read_bytes()) == ["6.90 in wide"]


def test_the_column_figure_is_a_snakemake_output_but_not_a_second_report_item():
    """The workflow's outputs (layout.snakemake_outputs, which the aggregate rule and `all` use) hold the column
    version, and the report keeps one item per figure: the column copy is not wrapped in report().  Kills "the
    column file written but not declared" (Snakemake would reject it) and "the report shows the figure twice"."""
    study = {"arch": ["kn", "lstm"], "n_step": [2, 3], "layers": [1], "seed": [1], "regime": ["window"],
             "impl": ["torch"]}
    plain = layout.snakemake_outputs({"c": study})
    assert "results/{corpus}/studies/c/ppl_vs_nstep_column.pdf" in plain
    assert "results/{corpus}/studies/c/ppl_vs_nstep_column.png" in plain
    wrapped = layout.snakemake_outputs({"c": study}, report=lambda path, **kw: ("report", path))
    shown = [p[1] for p in wrapped if isinstance(p, tuple)]
    assert "results/{corpus}/studies/c/ppl_vs_nstep.png" in shown
    assert not any("_column" in p for p in shown)


class _Vectors:
    """What write_map reads of gensim's KeyedVectors: key_to_index and rows by word list."""

    def __init__(self, words: list[str], points: np.ndarray):
        self.key_to_index = {w: i for i, w in enumerate(words)}
        self.points = points

    def __getitem__(self, words):
        return self.points[[self.key_to_index[w] for w in words]]


def label_overlaps(fig) -> list[str]:
    """Point labels (annotations) that the map's panel label (any text but an annotation or tick) overlaps."""
    from matplotlib.text import Annotation
    fig.canvas.draw()
    ax = fig.axes[0]
    notes = [t for t in ax.texts if isinstance(t, Annotation)]
    panel = [t for t in [*ax.texts, ax.title, ax._left_title] if not isinstance(t, Annotation) and t.get_text()]
    return [f"{p.get_text()!r} on {n.get_text()!r}" for p in panel for n in notes
            if p.get_window_extent().overlaps(n.get_window_extent())]


def test_embeddings_map_label_sits_on_no_word(monkeypatch):
    """The map's panel label ("which vectors") overlaps no word label, on a map whose most frequent words lie along
    its top and bottom edges, and the longest label a cell gets stays inside the figure.  Kills "the label inside
    the axes at the top left" (the old placement, added here as the control: it sits on a word); "the label above
    the axes unwrapped" runs 0.2 in off the right edge (seen with textwrap.fill made the identity)."""
    xs, ys = np.meshgrid(np.linspace(0, 19, 20), np.linspace(0, 9, 10))  # a 20 x 10 grid: PCA keeps its axes
    grid = np.c_[xs.ravel(), ys.ravel()]
    edges = [i for pair in zip(range(0, 20), range(180, 200)) for i in pair]  # bottom and top rows first
    order = edges + [i for i in range(200) if i not in edges]
    words = [f"w{i}" for i in range(200)]
    kv = _Vectors(words, grid)
    figs = _kept(monkeypatch, embed_study)
    embed_study.write_map(kv, [words[i] for i in order], "LSTM n3 l1, input embedding", "map")
    fig = figs[0]
    assert label_overlaps(fig) == []
    assert fig.get_size_inches()[0] <= 3.03 + 1e-6
    fig.axes[0].text(0.01, 0.99, "LSTM n3 l1, input embedding", transform=fig.axes[0].transAxes, fontsize=7,
                     va="top")
    assert label_overlaps(fig) != []

    # the longest label a cell gets stays inside the figure (wrapped) and off the words too
    figs.clear()
    embed_study.write_map(kv, [words[i] for i in order], "LSTM (cell, one bias) n5 l2 window s1, input embedding",
                          "map")
    fig = figs[0]
    assert label_overlaps(fig) == []
    title = fig.axes[0]._left_title.get_window_extent()
    assert fig.bbox.x0 <= title.x0 and title.x1 <= fig.bbox.x1 and title.y1 <= fig.bbox.y1
