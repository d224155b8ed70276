"""The `lmgrid` command in a researcher's first hour: `score` says how much of a text was unknown words, `status`
and `plan` plan with the Snakefile of the folder they run in, docs/cli.md shows the real `lmgrid --help`, and the
README speaks to a user.
Each test also runs the broken variant it guards against and sees its check fail."""
from __future__ import annotations

import contextlib
import difflib
import io
import re
from pathlib import Path

import pytest

from lmgrid import cli, lm
from lmgrid.common.errors import LmgridError
from lmgrid.data.vocab import build
from lmgrid.orchestration import dryrun, progress

REPO = Path(__file__).resolve().parents[1]
HELP_COLUMNS = "120"  # argparse wraps to the terminal; the doc's copy is made at this width


class _Uniform:
    """A language model that gives every target log 0.5: what `score` reads of a model, and nothing else."""

    def __init__(self, train: list[list[str]]):
        self.vocab = build(train)

    def sentence_logprobs(self, sentences):
        return [[-0.6931] * (len(s) + 1) for s in sentences]


def _score(tmp_path, monkeypatch, text: str) -> tuple[int, str]:
    (tmp_path / "text.txt").write_text(text)
    monkeypatch.setattr(lm, "load", lambda run: _Uniform([["the", "dog", "ran", "."], ["a", "dog", "ran"]]))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(["score", "--run", "unused", "--text", str(tmp_path / "text.txt")])
    return status, err.getvalue()


def unknown_line(err: str) -> tuple[int, int, str] | None:
    """(unknown, counted, share) from score's stderr line about unknown words, or None."""
    m = re.search(r"(\d+) of (\d+) counted tokens \(([\d.]+%)\) are not in the run's vocabulary", err)
    return (int(m[1]), int(m[2]), m[3]) if m else None


def test_score_reports_the_unknown_words_of_the_file(tmp_path, monkeypatch):
    """"the cat sat on the mat ." against a vocabulary without cat, sat, on, mat: one stderr line says 4 of 8 counted
    tokens (the 7 words and </s>) were unknown, 50.0%, and names the file; a text of known words says 0.  Kills
    "unknown words mapped to <unk> silently" and "counting only literal <unk>s" (that count, run here as the
    control, reports 0 of 8 for the same file)."""
    status, err = _score(tmp_path, monkeypatch, "the cat sat on the mat .\n")
    assert status == 0
    assert unknown_line(err) == (4, 8, "50.0%"), err
    assert str(tmp_path / "text.txt") in err and len([ln for ln in err.splitlines() if "vocabulary" in ln]) == 1
    assert unknown_line(_score(tmp_path, monkeypatch, "the dog ran .\na dog ran\n")[1]) == (0, 9, "0.0%")
    monkeypatch.setattr(lm, "unknown_tokens", lambda vocab, sents: sum(t == "<unk>" for s in sents for t in s))
    assert unknown_line(_score(tmp_path, monkeypatch, "the cat sat on the mat .\n")[1]) == (0, 8, "0.0%")


def _folder(path: Path) -> Path:
    path.mkdir()
    (path / "Snakefile").write_text("# a workflow\n")
    (path / "config.yaml").write_text((REPO / "config.yaml").read_text())
    return path


def test_status_and_plan_use_the_snakefile_of_the_current_folder(tmp_path, monkeypatch):
    """Two folders with a Snakefile each: `lmgrid status` run in one plans with that folder's Snakefile, and
    --snakefile picks the other; a folder without one stops with one line naming the folder.  Kills "the Snakefile
    beside the installed package" (the old SNAKEFILE, put back as the control: status then plans with the package's
    Snakefile, not the folder's)."""
    here, other = _folder(tmp_path / "here"), _folder(tmp_path / "other")
    used = []
    monkeypatch.setattr(progress, "_one", lambda command, files, assignments, cores, snakefile=None:
                        used.append(snakefile))
    monkeypatch.chdir(here)
    assert cli.main(["status", "--cores", "1"]) == 0
    assert cli.main(["plan", "--cores", "1", "--snakefile", str(other / "Snakefile")]) == 0
    assert used == [str(here / "Snakefile"), str(other / "Snakefile")]
    assert dryrun.snakefile_path() == here / "Snakefile"

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    with pytest.raises(LmgridError) as e:
        dryrun.snakefile_path()
    assert str(empty) in str(e.value) and "in the folder holding the Snakefile" in str(e.value)
    assert len(str(e.value).splitlines()) == 1
    with pytest.raises(LmgridError, match="nope/Snakefile: file not found"):
        dryrun.snakefile_path("nope/Snakefile")

    used.clear()
    monkeypatch.chdir(here)
    monkeypatch.setattr(dryrun, "SNAKEFILE", Path(dryrun.__file__).resolve().parents[3] / "Snakefile")
    assert cli.main(["status", "--cores", "1"]) == 0
    assert used != [str(here / "Snakefile")]


def help_text(monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", HELP_COLUMNS)
    return cli.build_parser().format_help()


def doc_help(doc: str) -> str:
    """The `lmgrid --help` block of docs/cli.md."""
    m = re.search(r"```\n(usage: lmgrid .*?)```", doc, re.S)
    return m[1] if m else ""


def help_differences(doc: str, real: str) -> list[str]:
    return [line for line in difflib.unified_diff(doc_help(doc).splitlines(), real.splitlines(), "docs/cli.md",
                                                  "lmgrid --help", lineterm="", n=0)]


def test_docs_cli_shows_the_real_help(monkeypatch):
    """docs/cli.md's copy of `lmgrid --help` is the help the command prints (at COLUMNS=120).  On a failure, paste
    `COLUMNS=120 lmgrid --help` into the block.  Kills "a command added without its doc line" (the copy that lacked
    `embed`) and any changed help line: the control, run here, edits one line of the doc's copy and sees the check
    fail."""
    doc = (REPO / "docs" / "cli.md").read_text()
    real = help_text(monkeypatch)
    assert "  embed " in real
    assert help_differences(doc, real) == [], "\n".join(help_differences(doc, real))
    edited = doc.replace("sample sentences from a trained run", "sample sentences from a run", 1)
    assert edited != doc and help_differences(edited, real) != []
    assert help_differences(doc.replace("  embed ", "  embedd ", 1), real) != []


def internal_references(text: str) -> list[str]:
    """Words in a user's page that point into the project's own tracker or its machines: "issue 31", "RNN pilots"."""
    return re.findall(r"\bissue \d+|\bissues? #\d+|RNN pilots", text, re.I)


def test_readme_speaks_to_a_user():
    """README.md names no tracker issue and no internal job ("issue 31's target", "RNN pilots").  Kills the README
    before this change: the control, run here, puts one of its old phrases back and sees the check catch it."""
    readme = (REPO / "README.md").read_text()
    assert internal_references(readme) == []
    assert internal_references(readme.replace("## What you get", "## What you get (issue 31)", 1)) == ["issue 31"]
