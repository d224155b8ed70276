"""The typed-PTB-figure detector (lmgrid.analysis.docs_figures) on benchmark tables whose PTB context is a section's
lead or the section a lead refers back to, not the table's own paragraph.  Fast tier: no Snakemake, no PTB."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from lmgrid.analysis import docs_figures
from lmgrid.analysis.docs_render import check

REPO = Path(__file__).resolve().parents[1]
NOTHING = re.compile(r"(?!)")


def _old_reader(monkeypatch) -> None:
    """The detector as it was before section leads: no lead is read, so no back-reference either."""
    monkeypatch.setattr(docs_figures, "_lead", lambda lines, heading: "")


def _doc(tmp_path: Path, text: str) -> Path:
    doc = tmp_path / "docs" / "notes.md"
    doc.parent.mkdir(exist_ok=True)
    doc.write_text(text)
    return doc


def _flagged_lines(tmp_path: Path) -> list[int]:
    return [int(p.split(":")[1]) for p in check(tmp_path)]


SUBSECTION = """# Benchmarks

## lmgrid train against a plain script

One epoch over the first 10,000 lines of PTB train, 2 threads.

The targets were set by issue 18.

### The same command again

After two changes to the training loop:

| process | wall s |
|---|---|
| plain fp32 | 28.4 |
"""


def test_a_timing_in_a_sub_section_of_a_ptb_section_is_caught(tmp_path, monkeypatch):
    """A table two paragraphs and a sub-heading below the lead that names PTB train.  Kills: a PTB context read
    only from the figure's paragraph, caption and headings (the negative control puts that reader back: the typed
    28.4 passes)."""
    _doc(tmp_path, SUBSECTION)
    assert _flagged_lines(tmp_path) == [15]
    _old_reader(monkeypatch)
    assert check(tmp_path) == [], "negative control: the old reader should miss the table"


BACKREF = """# Benchmarks

## lmgrid train against a plain script

One epoch over the first 10,000 lines of PTB train, 2 threads.

## One thread a job

Two `lmgrid train` jobs of the job above, in turn or at once; medians of 2 rounds.

| precision | in turn | at once |
|---|---|---|
| 32-true | 66.6 s | 56.3 s |

## Start-up

Process start to the first training step on the default corpus.

| what | figure |
|---|---|
| own process | 6.71 s |
"""


def test_a_section_about_the_job_above_inherits_its_ptb_lead_and_its_sibling_does_not(tmp_path, monkeypatch):
    """"Two jobs of the job above" under its own heading times the previous section's PTB job; the next section,
    which does not refer back, keeps its own (default-corpus) context.  Kills: a lead that never follows its
    back-reference (negative control: BACKREF matching nothing lets 66.6 s pass), and leads that leak into every
    later sibling section (the start-up row would be flagged: run by hand as a mutation of _contexts)."""
    _doc(tmp_path, BACKREF)
    assert _flagged_lines(tmp_path) == [13, 13]  # 66.6 s and 56.3 s
    monkeypatch.setattr(docs_figures, "BACKREF", NOTHING)
    assert check(tmp_path) == [], "negative control: without the back-reference the row should pass"


def test_the_documents_own_lead_does_not_make_every_section_ptb(tmp_path):
    """presets.md opens with "the default grid, then the Penn Treebank presets": its default-grid figures are not
    PTB.  Kills: the title's (level 1) lead read as every section's context (run by hand: `level > 1` made
    `level > 0` flags the 9 min 40 s)."""
    _doc(tmp_path, "# Presets\n\nThe default grid, then the Penn Treebank presets.\n\n## Default grid\n\n"
                   "It took 9 min 40 s on 2 cores.\n")
    assert check(tmp_path) == []


# A typed PTB timing put back into the repository's own benchmark tables: (document, the line it goes after, row).
TYPED_BACK = [
    ("docs/benchmarks.md", "| precision | wall of two 1-thread jobs at once / two 2-thread jobs in turn |",
     "| 32-true, in turn | 66.6 s |"),
    ("docs/benchmarks-history.md", "| process | training tokens/s | peak RSS MiB | wall / plain fp32 | tokens/s / "
     "plain fp32 | RSS / plain fp32 |", "| plain fp32 (wall 28.9 s) | 10,248 | 669 | 1.00 | 1.00 | 1.00 |"),
    ("docs/benchmarks-history.md", "| repeat | count | estimate + ARPA + score | peak RSS |",
     "| 1 | 179 MiB, 1.48 s CPU | 270 MiB, 2.07 s CPU | 270 MiB |"),
]


@pytest.mark.parametrize("doc,after,row", TYPED_BACK)
def test_a_timing_typed_back_into_the_repositorys_benchmark_tables_fails_the_check(tmp_path, monkeypatch, doc, after,
                                                                                    row):
    """The tables whose typed PTB times were removed (one thread a job, the vs-plain rounds, the n-gram job's
    repeats): a time typed back into one fails `lmgrid docs --check` at its line.  Kills: the gap the detector had
    before section leads and back-references (negative control: the old reader lets each row pass)."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    path = tmp_path / doc
    text = path.read_text()
    assert after + "\n|---" in text, f"{doc} has no table headed {after!r}"
    at = text.index(after + "\n|---") + len(after) + 1  # its first such table
    at = text.index("\n", at) + 1  # after the |---| line
    path.write_text(text[:at] + row + "\n" + text[at:])
    line = text[:at].count("\n") + 1
    problems = check(tmp_path)
    assert problems and all(p.startswith(f"{doc}:{line}: ") for p in problems), problems
    _old_reader(monkeypatch)
    assert check(tmp_path) == [], "negative control: the old reader should miss the typed row"
