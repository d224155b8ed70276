"""README.md and docs/: every marked block is what `lmgrid docs --render` writes from its snapshot, and README's
results sections hold no hand-typed figure (lmgrid.analysis.docs_render).  Fast tier: no Snakemake, no PTB."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lmgrid.analysis import docs_render, docs_snapshot, docs_tables
from lmgrid.analysis.docs_render import check, render
from lmgrid.common.errors import LmgridError

REPO = Path(__file__).resolve().parents[1]


def _copy_docs(tmp_path: Path) -> Path:
    """README.md, docs/ (with its snapshots) in a tmp folder, to edit without touching the repository."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    return tmp_path


def test_the_repository_docs_are_as_rendered():
    """Kills: a number edited by hand inside a rendered block of README.md or docs/, or a figure typed into README's
    results sections (the negative controls below show check() sees both)."""
    assert check(REPO) == []


def test_a_number_edited_inside_a_block_fails_the_check(tmp_path):
    """Negative control of the test above.  Kills: a check that compares nothing (or only the blocks' count)."""
    root = _copy_docs(tmp_path)
    readme = root / "README.md"
    text = readme.read_text()
    m = next(docs_render.BLOCK.finditer(text), None)
    assert m is not None, "README.md has no rendered block"
    digit = re.search(r"\d", m["body"])
    assert digit is not None, "README.md's first rendered block holds no number"
    at = m.start("body") + digit.start()
    readme.write_text(text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:])
    problems = check(root)
    assert len(problems) == 1 and problems[0].startswith(f"README.md: block '{m['tables']} from={m['src']}'"), problems
    render(root)  # and --render puts the number back
    assert readme.read_text() == text and check(root) == []


def test_a_hand_typed_figure_in_the_results_sections_fails_the_check(tmp_path):
    """Kills: a check that does not scan README's results sections for typed perplexities and times, or one that
    lets a published figure through without its source on the line."""
    root = _copy_docs(tmp_path)
    readme = root / "README.md"
    text = readme.read_text()
    anchor = "## What you get\n"
    for typed, flagged in (("The default run took ~9 min.", "9 min"), ("Our LSTM reached 94.71.", "94.71"),
                           ("The target was 100.9, its source not named.", "100.9"),
                           ("Press & Wolf (2017) give 100.9.", "")):
        readme.write_text(text.replace(anchor, f"{anchor}\n{typed}\n", 1))
        problems = check(root)
        if flagged == "":
            assert problems == [], problems
        else:
            assert len(problems) == 1 and f"'{flagged}' is typed by hand" in problems[0], (typed, problems)


def _snapshot(tmp_path: Path, verdicts=("no difference shown", float("nan"))) -> Path:
    snap = tmp_path / "docs" / "results" / "toy"
    snap.mkdir(parents=True)
    pd.DataFrame({"model": ["A", "B"], "published_test_ppl": [100.9, 78.63], "source": ["P 2017", "slides"],
                  "comparable": ["yes", "setting unknown"], "ours": ["arch=lstm", "arch=gru"], "seeds": [3, 3],
                  "test_ppl_mean": [100.5, 80.0], "test_ppl_std": [0.3, 0.2], "ci95_low": [99.8, 79.5],
                  "ci95_high": [101.2, 80.5], "verdict": list(verdicts), "difference": [-0.4, 1.37],
                  "params": [4600000, 5000000]}).to_csv(snap / "reference.csv", index=False)
    (snap / "run.json").write_text('{"corpus": "toy", "commit": "abc", "date": "2026-01-01", "machine": '
                                   '{"cpu": "CPU X", "avx512_bf16": false, "cores": 2}}')
    return snap


def test_the_reference_table_carries_the_rules_verdicts_and_comparable_as_they_are(tmp_path, monkeypatch):
    """Kills: a renderer that drops `comparable` or the verdict, or gives a verdict where reference.py gave none
    (the negative control patches the renderer to fill a missing verdict in and sees this test's check fail)."""
    snap = _snapshot(tmp_path)

    def rows(text):
        lines = [ln for ln in text.splitlines() if ln.startswith("|")]
        heads = [c.strip() for c in lines[0].strip("|").split("|")]
        return [dict(zip(heads, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]

    def verdicts_as_given(text):
        r = rows(text)
        return ([x["comparable"] for x in r] == ["yes", "setting unknown"]
                and [x["verdict"] for x in r] == ["no difference shown", ""]
                and r[0]["our parameters"] == "4,600,000" and r[0]["95% t interval"] == "[99.80, 101.20]")

    assert verdicts_as_given(docs_tables.reference(snap))
    real_text = docs_tables._text
    monkeypatch.setattr(docs_tables, "_text", lambda v: real_text(v) or "beats")  # an invented verdict
    assert not verdicts_as_given(docs_tables.reference(snap))


def test_a_block_without_its_snapshot_says_so_and_an_unknown_table_is_one_line(tmp_path):
    """Kills: a renderer that leaves a block of a missing snapshot as typed, or renders an unknown table name as
    nothing instead of naming the file and line."""
    _snapshot(tmp_path)
    doc = tmp_path / "docs" / "x.md"
    doc.write_text("intro\n<!-- lmgrid:render reference from=docs/results/none -->\nold 1.23\n<!-- /lmgrid:render -->\n"
                   "<!-- lmgrid:render reference from=docs/results/toy -->\n<!-- /lmgrid:render -->\n")
    assert len(check(tmp_path)) == 2
    render(tmp_path)
    text = doc.read_text()
    assert "old 1.23" not in text and "Not rendered yet: `docs/results/none/` does not exist" in text
    assert "from `docs/results/toy`: the `toy` run of commit abc, ended 2026-01-01, on CPU X" in text
    assert check(tmp_path) == []
    doc.write_text("<!-- lmgrid:render refrence from=docs/results/toy -->\n<!-- /lmgrid:render -->\n")
    with pytest.raises(LmgridError, match=r"x\.md:1: lmgrid:render names table 'refrence'"):
        check(tmp_path)


def test_the_snapshot_wall_time_is_the_span_of_the_jobs_not_their_sum(tmp_path, monkeypatch):
    """Kills: a wall time that sums the jobs' walls (two jobs at once would count twice), or that takes a training
    job's CPU from its benchmark (the warm server's client) instead of leaving it to metrics.json."""
    results = tmp_path / "results" / "toy"
    (results / "benchmarks" / "runs").mkdir(parents=True)
    (results / "summary.csv").write_text("model,test_ppl\nx,1.0\n")
    now = 1_800_000_000.0
    for name, wall_s, cpu_s, end in (("a.tsv", 100.0, 90.0, now), ("b.tsv", 100.0, 80.0, now + 50),
                                     ("runs/r.tsv", 40.0, 1.0, now + 20)):
        p = results / "benchmarks" / name
        p.write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{wall_s}\t0:01:40\t10\t{cpu_s}\n")
        os.utime(p, (end, end))
    snap = tmp_path / "docs" / "results" / "toy"
    docs_snapshot.snapshot(results, snap)
    run = pd.read_json(snap / "run.json", typ="series")
    assert (run["wall_s"], run["job_wall_s"], run["jobs_cpu_s"], run["jobs"]) == (150.0, 240.0, 170.0, 3)
    assert (snap / "summary.csv").is_file() and (snap / "runs.csv").is_file()
    with pytest.raises(LmgridError, match="no summary.csv"):
        docs_snapshot.snapshot(tmp_path, snap)


def test_the_combinations_table_shows_the_spread_over_seeds_and_labels_valid_in_sample(tmp_path):
    """Kills: a combinations rendering that drops the std or the t interval over seeds, or shows the valid PPL (the
    settings and weights were fitted on it) without saying it is in-sample."""
    snap = _snapshot(tmp_path)
    (snap / "combine").mkdir()
    pd.DataFrame({"combination": ["all"], "components": [8], "seeds": [3], "seed_list": ["4 5 6"],
                  "test_ppl_mean": [73.5], "test_ppl_std": [0.25], "ci95_low": [72.88], "ci95_high": [74.12],
                  "valid_ppl_in_sample": [74.3], "best_component": ["lstm"], "best_component_valid_ppl": [98.9],
                  "best_component_test_ppl": [94.7]}).to_csv(snap / "combine" / "combinations.csv", index=False)
    lines = [ln for ln in docs_tables.combinations(snap).splitlines()]
    heads = [c.strip() for c in lines[0].strip("|").split("|")]
    row = dict(zip(heads, (c.strip() for c in lines[2].strip("|").split("|"))))
    assert row["test PPL (mean ± std)"] == "73.50 ± 0.25" and row["95% t interval"] == "[72.88, 74.12]"
    assert row["seeds"] == "4 5 6" and row["valid PPL (in-sample: fitted on valid)"] == "74.30"


def test_the_published_parameter_count_reaches_the_rendered_table(tmp_path):
    """Kills: a reference table that drops a row's `published_params` (reference.py) or a rendering that leaves the
    column out, or fills a count the config does not state."""
    from lmgrid.analysis.reference import reference_table

    rows = [{"model": "A", "published_test_ppl": 100.9, "source": "P 2017", "published_params": 2_700_000},
            {"model": "B", "published_test_ppl": 78.63, "source": "slides"}]
    snap = _snapshot(tmp_path)
    reference_table(rows, []).to_csv(snap / "reference.csv", index=False)
    text = docs_tables.reference(snap)
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in text.splitlines() if ln.startswith("|")]
    at = cells[0].index("published parameters")
    assert [r[at] for r in cells[2:]] == ["2,700,000", "not stated"]


def _benchmarks(results: Path, jobs) -> None:
    """Synthetic Snakemake benchmark files: (name, wall_s, end time) each, the end set as the file's mtime."""
    (results / "benchmarks").mkdir(parents=True, exist_ok=True)
    (results / "summary.csv").write_text("model,test_ppl\nx,1.0\n")
    for name, wall_s, end in jobs:
        p = results / "benchmarks" / name
        p.write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{wall_s}\t0:00:00\t10\t1.0\n")
        os.utime(p, (end, end))


def test_a_run_resumed_next_session_counts_its_running_time_not_the_pause(tmp_path, monkeypatch):
    """A run of two segments: jobs 0-1 h (two overlapping), then a stop, then jobs from 9 h to 10 h 30 min, with a
    2-minute gap between two of them (Snakemake between jobs, not a resumption).  Kills: a wall time that is the
    span from the first start to the last end (the negative control puts the old span back and sees it), that sums
    overlapping jobs twice, or that counts a short gap between jobs as a resumption."""
    h = 3600.0
    t0 = 1_800_000_000.0
    _benchmarks(tmp_path / "results" / "toy", [
        ("a.tsv", h, t0 + h), ("b.tsv", h / 2, t0 + 0.75 * h),                     # segment 1: 0 to 1 h
        ("c.tsv", h, t0 + 10 * h), ("d.tsv", 0.5 * h - 120, t0 + 10.5 * h)])       # segment 2: 9 h to 10 h 30 min
    snap = tmp_path / "docs" / "results" / "toy"

    def run_json():
        docs_snapshot.snapshot(tmp_path / "results" / "toy", snap)
        return pd.read_json(snap / "run.json", typ="series")

    run = run_json()
    assert (run["wall_s"], run["span_s"], run["resumptions"]) == (1 * h + 1.5 * h - 120, 10.5 * h, 1)
    text = docs_tables.timing(snap)
    assert "**2 h 28 min** of wall time while its jobs ran (4 jobs, 2 h 58 min of job time summed), resumed once: " \
           "10 h 30 min from its first job's start" in text, text
    # Negative control: the old rule, the span from the first start to the last end, counts the 8-hour pause.
    monkeypatch.setattr(docs_snapshot, "busy", lambda spans, gap_s=600.0: (
        max(e for _, e in spans) - min(s for s, _ in spans),) * 2 + (0,))
    old = run_json()
    assert (old["wall_s"], old["resumptions"]) != (run["wall_s"], run["resumptions"])


def test_a_snapshot_from_before_span_s_says_its_wall_time_is_the_span(tmp_path):
    """Kills: a rendering that calls an old snapshot's span (no span_s in its run.json) the time while jobs ran."""
    snap = _snapshot(tmp_path)
    (snap / "run.json").write_text('{"corpus": "toy", "commit": "abc", "date": "2026-01-01", "machine": '
                                   '{"cpu": "CPU X", "avx512_bf16": false, "cores": 2}, "wall_s": 600, '
                                   '"job_wall_s": 900, "jobs": 3, "runs": 2, "train_cpu_s": 500, "jobs_cpu_s": 60}')
    assert "**10 min 00 s** of wall time from its first job's start to its last job's end" in docs_tables.timing(snap)


EXAMPLES = ("94.71 ± 0.46", "1 h 51 min 27 s", "383 CPU-min", "test 87.73", "course_report 39 min 52 s")


def _insert_after(doc: Path, heading: str, line: str) -> int:
    """Put `line` as a paragraph of its own after the first paragraph under `heading` (not as the section's lead,
    which would make the whole section PTB context: lmgrid.analysis.docs_figures); returns its line number."""
    text = doc.read_text()
    at = text.index(heading + "\n") + len(heading) + 1
    at = text.index("\n\n", text.index(next(t for t in text[at:].splitlines() if t.strip()), at)) + 1
    doc.write_text(text[:at] + f"\n{line}\n" + text[at:])
    return text[:at].count("\n") + 2


@pytest.mark.parametrize("doc,heading", [("docs/benchmarks.md", "## Whole runs"),
                                         ("docs/presets.md", "## The Penn Treebank presets"),
                                         ("docs/adapt.md", "## In the pipeline: score modes")])
def test_a_typed_ptb_figure_anywhere_in_docs_fails_the_check_naming_file_and_line(tmp_path, monkeypatch, doc,
                                                                                   heading):
    """A PTB row typed back into a docs page fails --check, with its file and line; a digit of it edited fails
    too.  Kills: a typed-figure check confined to README.md, or one blind to a PTB context (the negative control
    makes PTB_MARK match nothing and sees the typed row pass)."""
    from lmgrid.analysis import docs_figures

    root = _copy_docs(tmp_path)
    for row in ("The PTB `seed_table` run took 4 h 50 min.", "On PTB the LSTM reached test 94.71 ± 0.46."):
        shutil.copytree(REPO / "docs", root / "docs", dirs_exist_ok=True)
        line = _insert_after(root / doc, heading, row)
        problems = check(root)
        assert problems and all(p.startswith(f"{doc}:{line}: ") for p in problems), problems
        edited = re.sub(r"\d(?=\D*$)", lambda m: str((int(m[0]) + 1) % 10), row)  # its last digit changed
        shutil.copytree(REPO / "docs", root / "docs", dirs_exist_ok=True)
        _insert_after(root / doc, heading, edited)
        assert check(root), edited
    monkeypatch.setattr(docs_figures, "PTB_MARK", re.compile(r"(?!)"))
    assert check(root) == [], "negative control: with no PTB context nothing should be flagged"


@pytest.mark.parametrize("typed", EXAMPLES)
def test_each_of_the_issues_examples_is_caught(tmp_path, typed):
    """Kills: a figure pattern that misses a spread (94.71 ± 0.46), a duration of several units, CPU-minutes, a
    figure after a word, or a preset's name as PTB context (course_report without the word PTB)."""
    doc = tmp_path / "docs" / "notes.md"
    doc.parent.mkdir()
    context = "" if "course_report" in typed else "On PTB: "
    doc.write_text(f"# Notes\n\n{context}{typed}.\n")
    problems = check(tmp_path)
    assert len(problems) == 1 and problems[0].startswith("docs/notes.md:3: "), problems


def test_a_cited_published_figure_or_a_setting_passes_and_an_uncited_one_does_not(tmp_path):
    """Kills: a check that flags a published figure cited with its source, or a budget (a setting, not a result),
    and one that lets a PTB perplexity through because it looks like a published one."""
    doc = tmp_path / "docs" / "notes.md"
    doc.parent.mkdir()
    lines = {"Zaremba et al. 2014 report 114.5 on PTB.": False, "On PTB, Merity et al. (2018) give 57.30.": False,
             "The PTB preset has a time budget of 60 min.": False, "On PTB ours gave 114.61.": True,
             "On PTB ours gave 114.5, Zaremba's figure.": False, "On PTB we got 114.5.": True}
    for line, flagged in lines.items():
        doc.write_text(f"# Notes\n\n{line}\n")
        assert bool(check(tmp_path)) == flagged, line


def test_a_resumed_run_whose_models_predate_the_carried_cpu_time_says_it_is_a_lower_bound(tmp_path, monkeypatch):
    """A run resumed once, whose two trained models have cpu_s but no `attempts` (recorded before metrics.json
    carried a resumed run's earlier attempts over). Kills: rendering their summed CPU time as the whole (the
    caveat dropped or never counted), and counting an n-gram model, which has no attempts to carry, among them.
    In-test controls: the same run with `attempts` recorded gets no caveat, nor one whose models are n-grams."""
    h = 3600.0
    t0 = 1_800_000_000.0
    results = tmp_path / "results" / "toy"
    _benchmarks(results, [("a.tsv", h, t0 + h), ("b.tsv", h, t0 + 10 * h)])
    snap = tmp_path / "docs" / "results" / "toy"

    def rendered(attempts, arch=(None, None)):
        runs = pd.DataFrame({c: [None, None] for c in docs_snapshot.RUNS_COLUMNS})
        runs["cpu_s"], runs["attempts"], runs["arch"] = [600.0, 900.0], attempts, list(arch)
        monkeypatch.setattr(docs_snapshot, "runs_table", lambda _results: runs)
        docs_snapshot.snapshot(results, snap)
        return docs_tables.timing(snap)

    old = rendered([None, None])
    assert "25 min 00 s of CPU time at least (2 of them were recorded before" in old, old
    carried = rendered([1, 2])
    assert "25 min 00 s of CPU time, the other jobs" in carried and "at least" not in carried, carried
    ngrams = rendered([None, None], arch=("mkn", "kn"))
    assert "25 min 00 s of CPU time, the other jobs" in ngrams and "at least" not in ngrams, ngrams
    assert "(1 of them were recorded" in rendered([None, None], arch=("mkn", "lstm"))


def _runs_csv(folder: Path, rows: list[tuple]) -> Path:
    """A snapshot folder with runs.csv rows (arch, impl, seed, epochs, cpu_s) and a run.json naming its run."""
    folder.mkdir(parents=True)
    t = pd.DataFrame([{c: None for c in docs_snapshot.RUNS_COLUMNS} | dict(zip(("arch", "impl", "seed", "epochs",
                                                                                "cpu_s"), r)) for r in rows])
    t.to_csv(folder / "runs.csv", index=False)
    (folder / "run.json").write_text('{"corpus": "toy", "commit": "abc1234567", "date": "2026-11-28", '
                                     '"machine": {"cpu": "Toy CPU", "avx512_bf16": true, "cores": 2}}')
    return folder


def _cells(text: str) -> dict[str, list[str]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    return {c[0]: c[1:] for c in ([x.strip() for x in ln.strip("|").split("|")] for ln in lines)}


def test_train_cost_sums_each_architectures_neural_cpu_time_over_seeds_and_sets_a_run_beside_it(tmp_path,
                                                                                             monkeypatch):
    """train_cost: per architecture the neural models' cpu_s summed over seeds in CPU-minutes, largest first, and
    the total; an n-gram (no epochs) never counts.  With train_cost:<sibling> the other run's minutes (and models)
    and the ratio, n/a where the two rows hold different numbers of models (1 GRU seed against 2); a model
    only the other run trained (its nn.GRU, replaced here by the cell) is a row of its own, so that the other run's
    total is the sum of the rows shown, and says "not trained" in the run that lacks it.  Kills: a mean over seeds
    instead of the sum (LSTM 7.5), a ratio between different numbers of models (GRU 0.400), the other run's own
    models left out (its GRU row missing, its total 70.0 over rows summing to 60.0), a model one run lacks or a ratio
    not taken shown as an empty cell (a figure that reads as lost; seen failing on the blanks of 92cd7e0), and, run
    here, the n-grams counted as neural models (runs.csv read with every row given epochs: the total becomes
    32.0)."""
    after = _runs_csv(tmp_path / "after", [("lstm", "torch", 1, 9, 420.0), ("lstm", "torch", 2, 9, 480.0),
                                           ("gru", "cell", 1, 10, 960.0), ("mkn", "ngram", 0, None, 60.0)])
    _runs_csv(tmp_path / "before", [("lstm", "torch", 1, 9, 600.0), ("lstm", "torch", 2, 9, 600.0),
                                    ("gru", "cell", 1, 10, 1200.0), ("gru", "cell", 2, 10, 1200.0),
                                    ("gru", "torch", 1, 10, 600.0)])

    def counted_right() -> bool:
        alone = _cells(docs_tables.train_cost(after))
        return (list(alone) == ["GRU (cell)", "LSTM", "all"] and alone["LSTM"] == ["2", "15.0"]
                and alone["GRU (cell)"] == ["1", "16.0"] and alone["all"] == ["3", "31.0"])

    assert counted_right()
    text = docs_tables.train_cost(after, "before")
    both = _cells(text)
    assert list(both) == ["GRU (cell)", "LSTM", "GRU", "all"]
    assert both["LSTM"] == ["2", "15.0", "20.0 (2)", "0.750"]
    assert both["GRU (cell)"] == ["1", "16.0", "40.0 (2)", "n/a"]
    assert both["GRU"] == ["0", "not trained", "10.0 (1)", "n/a"]
    assert both["all"] == ["3", "31.0", "70.0 (5)", "n/a"]
    lacked = _cells(docs_tables.train_cost(tmp_path / "before", "after"))  # the other way round: the other run lacks
    assert lacked["GRU"] == ["1", "10.0", "not trained", "n/a"] and lacked["LSTM"][-1] == "1.333"
    assert "`before`: the `toy` run of commit abc1234567" in text
    with pytest.raises(LmgridError, match="train_cost:nowhere"):
        docs_tables.train_cost(after, "nowhere")
    read = docs_tables._read
    monkeypatch.setattr(docs_tables, "_read", lambda folder, name: read(folder, name).fillna({"epochs": 1}))
    assert not counted_right()  # the mutation: the n-gram counted
