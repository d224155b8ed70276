"""Hand-typed Penn Treebank results in README.md and docs/**/*.md: every PTB perplexity, wall time or CPU time there
must be written by the renderer (lmgrid.analysis.docs_render), inside a `<!-- lmgrid:render ... -->` block.

What `lmgrid docs --check` flags (typed_ptb_figures), line by line outside the render blocks:

* A *figure* is a perplexity-like number, a decimal with at least two digits before the point and at least one
  after it (94.71, 114.5, 87.73, 854.666; not 0.25, 1.8%, a version such as 2.13.0 or a date), a signed difference
  with two decimals (+3.88; a gate slope such as +0.0357 has four and is not one), or a duration, a number with a time
  unit: `h`, `min`, `s`, `hours`, `minutes`, `seconds`, `CPU-min`, `CPU-minutes`, `CPU-hours`, `CPU min`
  (`1 h 51 min 27 s` is one figure, `383 CPU-min` another).  Ratios, percentages, token rates and parameter counts
  are not figures.
* A figure is in *PTB context* when its line, its paragraph (the run of non-blank lines around it, a list item
  being a paragraph of its own; for a table row, the row, its table's header row and the paragraph just above the
  table, its caption, so a PTB row does not taint the other rows), one of the headings above it (a `#` line outside
  a fenced code block), the *lead* of one of those sections below the document's title (the first paragraph
  under its heading, where a benchmark section says which job it times: a table three paragraphs or a sub-section
  below "one epoch over PTB train" times that job), or its file's name mentions the Penn Treebank: `PTB`,
  `Penn Treebank`, `ptb...` (results/ptb, ptb_budget, ptb-paper-medium) or a PTB preset's name (PTB_MARK:
  seed_table, course_report, zaremba_small).  A lead that points back (BACKREF: "the job above", "the same job",
  "as above") takes on the lead of the section before it at its level, so "two `lmgrid train` jobs of the job
  above" under a heading of its own is the PTB job of the previous section.
* It is let through when it is a *published* figure: PUBLISHED (docs_render) names its source and the line names
  that source (the README rule), or its clause (its table cell, or its sentence up to `.`/`;`) cites an author and
  year (`Zaremba et al. 2014`, `Press & Wolf (2017)`) or a URL; or when it is a *setting*, not a result: a setting
  word (SETTING: budget, cap, limit, timeout, `at most`, ...) stands just before it in the same clause, or it is a
  key's value (`lr=20.0`, `time_budget: 60`); a machine's load average (`load 9-10.5`) is not a result either.
Fenced code blocks are scanned too: a pasted log is typed as much as a table is.  What it does not see: a figure
whose PTB context is neither in its paragraph, caption, headings or section leads nor in the lead a back-reference
reaches (a PTB mention in a later paragraph of the section, or a reference such as "the model of issue 18" with no
"above"), a perplexity under 10 without a sign, a time in a column headed `wall s` that is an integer or has one
digit before its point (`9`, `8.5`) without a unit beside it, an integer time in milliseconds (`28 ms`), and a
run's wall written as its clock times (`17:04-17:54 UTC`: the docs give a PTB run's start only); those are for
the reader to keep out.  A non-PTB figure in a section whose lead is about PTB (an import time, a run on random
tokens) is flagged: it belongs in a section of its own.
"""
from __future__ import annotations

import re
from pathlib import Path

PTB_MARK = re.compile(r"\bPTB\b|Penn Treebank|(?<![a-z])ptb|seed_table|course_report|zaremba_small|Zaremba-small",
                      re.I)
_UNIT = r"(?:CPU[- ]min(?:utes)?|CPU[- ]hours?|hours?|minutes?|seconds?|min|h|s)"
FIGURE = re.compile(
    rf"(?<![\w.])(?:\d+(?:\.\d+)? ?{_UNIT}(?: \d+ ?{_UNIT})*)(?![\w-])"  # 1 h 51 min 27 s, 383 CPU-min, 2.89 s
    r"|(?<![\w.])\d{2,}\.\d+(?![\d%]|\.\d)"                            # 94.71, 114.5, 854.666 (not 2.13.0, 1.8%)
    r"|(?<![\w.])[+\-\u2212]\d+\.\d\d(?![\d%]|\.\d)")                    # a difference: +3.88, -0.40
AUTHOR_YEAR = re.compile(r"\b[A-Z][a-zA-Z-]+(?: et al[._]?| (?:&|and) [A-Z][a-zA-Z-]+)?,? \(?(?:19|20)\d\d\b"
                         r"|https?://|arXiv")
SETTING = re.compile(r"\b(?:budgets?|time_budget\w*|caps?|capped|limits?|timeout|at most|max\w*)\b[^.;|]{0,24}$"
                     r"|[\w.]+=$|`?\w*[_.][\w.]*`?: ?$|\bload(?: average)?\b[^.;|]{0,16}$", re.I)
# A lead that refers back to the previous section's job ("two jobs of the job above", "the same job as above").
BACKREF = re.compile(r"\b(?:job|run|model|command|recipe|setting)s? above\b|\b(?:as|from) above\b|\bthe same job\b",
                     re.I)
# A list item starts a paragraph of its own: one item about PTB does not make its neighbours PTB.
ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.) ")
OPEN, CLOSE = "<!-- lmgrid:render", "<!-- /lmgrid:render"


def _clause(line: str, start: int, end: int) -> str:
    """The table cell or sentence part of `line` holding [start, end): cut at `|`, `;` and a sentence's `. `."""
    text = line.replace("et al.", "et al_")  # the same length: start and end still point at the figure
    cuts = [m.end() for m in re.finditer(r"\||;|\.\s", text[:start])]
    ends = [m.start() for m in re.finditer(r"\||;|\.\s", text[end:])]
    return text[cuts[-1] if cuts else 0: end + ends[0] if ends else len(text)]


def published(line: str, start: int, end: int, cited: dict[str, str]) -> bool:
    figure = line[start:end]
    return cited.get(figure, "\0") in line or bool(AUTHOR_YEAR.search(_clause(line, start, end)))


def setting(line: str, start: int) -> bool:
    """A setting word just before the figure, in its clause (the clause's text up to the figure only)."""
    return bool(SETTING.search(_clause(line[:start], start, start)))


def _lead(lines: list[str], heading: int) -> str:
    """The first paragraph under the heading at index `heading`: its non-blank lines up to a blank line, a heading,
    a table, a fence or a list item ("" when a table or list comes first: its caption is read with its rows)."""
    out = []
    for line in lines[heading + 1:]:
        if not line.strip():
            if out:
                break
            continue
        if line.startswith("#") or line.lstrip().startswith(("|", "```")) or (out and ITEM.match(line)):
            break
        out.append(line)
    return "\n".join(out)


def _contexts(lines: list[str]) -> list[str]:
    """For each line, the text its PTB context is judged on: its headings and their sections' leads (a lead that
    refers back with the lead before it), its paragraph (or table caption, header and row)."""
    out, headings, para_start, fenced = [], {}, 0, False
    leads: dict[int, str] = {}     # level -> the lead (with what it refers back to) of the open section
    previous: dict[int, str] = {}  # level -> the same for the last section closed at that level
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if line.startswith("#") and not fenced:
            level = len(line) - len(line.lstrip("#"))
            headings = {k: v for k, v in headings.items() if k < level} | {level: line}
            # A document's own lead (under its `#` title) says what its sections hold, not which job they time:
            # presets.md's "the default grid, then the Penn Treebank presets" does not make the default grid PTB.
            lead = _lead(lines, i) if level > 1 else ""
            if BACKREF.search(lead) and level in previous:
                lead = f"{lead}\n{previous[level]}"
            # A new section at this level closes the deeper ones: their siblings' chain starts again under it.
            previous = {k: v for k, v in previous.items() if k < level} | {level: lead}
            leads = {k: v for k, v in leads.items() if k < level} | {level: lead}
        if not line.strip():
            para_start = i + 1
        elif ITEM.match(line):
            para_start = i
        if line.lstrip().startswith("|"):
            top = i
            while top > 0 and lines[top - 1].lstrip().startswith("|"):
                top -= 1
            cap_end = top - 1 if top > 0 and not lines[top - 1].strip() else top
            cap_start = cap_end
            while cap_start > 0 and lines[cap_start - 1].strip() and not lines[cap_start - 1].startswith("#"):
                cap_start -= 1
            para = "\n".join([*lines[cap_start:cap_end], lines[top], line])
        else:
            stop = next((j for j in range(i + 1, len(lines)) if not lines[j].strip() or ITEM.match(lines[j])),
                        len(lines))
            para = "\n".join(lines[para_start:stop])
        out.append("\n".join([*headings.values(), *leads.values(), para]))
    return out


def typed_ptb_figures(path: Path, cited: dict[str, str], shown: str | None = None) -> list[str]:
    """'FILE:LINE: FIGURE ...' for each PTB figure typed outside a render block (module docstring)."""
    lines = path.read_text().splitlines()
    file_is_ptb = bool(PTB_MARK.search(path.name))
    problems, inside = [], False
    for i, (line, context) in enumerate(zip(lines, _contexts(lines)), 1):
        if line.startswith(OPEN):
            inside = True
            continue
        if line.startswith(CLOSE):
            inside = False
            continue
        if inside or not (file_is_ptb or PTB_MARK.search(context)):
            continue
        for m in FIGURE.finditer(line):
            if published(line, m.start(), m.end(), cited) or setting(line, m.start()):
                continue
            problems.append(f"{shown or path}:{i}: {m[0]!r} is a PTB result typed by hand; render it from a "
                            "snapshot (lmgrid docs) or cite its published source")
    return problems
