"""The numbers of README.md and docs/*.md, rendered from results snapshots (lmgrid.analysis.docs_snapshot), never typed.

A document marks each rendered block with an HTML comment pair (invisible on GitHub):

    <!-- lmgrid:render TABLE[,TABLE...] from=docs/results/<name> -->
    ... what `lmgrid docs --render` writes ...
    <!-- /lmgrid:render -->

`lmgrid docs --render` (`make docs`) rewrites every block from its snapshot; each block ends with one line naming
the snapshot, the commit, the date and the machine of its run.  A block whose snapshot does not exist yet holds
one line saying so.  `lmgrid docs --check` fails when a block differs from what the renderer writes, naming the
file and the block; when README.md's results sections (HAND_CHECKED_SECTIONS) hold a perplexity-like or time-like
figure outside a block, unless it is a published figure cited with its source (PUBLISHED); and when any of README.md
and docs/**/*.md holds a Penn Treebank perplexity, wall time or CPU time outside a block (lmgrid.analysis.docs_figures
says what counts).  The tables (TABLES) are those of docs_tables.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lmgrid.common.errors import LmgridError

# docs_tables (pandas) is imported where a block is read, not here: every `lmgrid` command builds the parser that
# registers `lmgrid docs`, and a workflow job must not pay pandas' import for it (lmgrid.cli, PLUGINS).

# A marker is a line of its own (a marker quoted inside a sentence, as docs/cli.md does, is none).
BLOCK = re.compile(r"^(?P<open><!-- lmgrid:render (?P<tables>\S+) from=(?P<src>\S+) -->\n)(?P<body>.*?)"
                   r"^(?P<close><!-- /lmgrid:render -->)", re.S | re.M)
OPEN = re.compile(r"^<!-- lmgrid:render\b", re.M)
# The README sections whose figures must come from a block; a figure there outside one is flagged.
HAND_CHECKED_SECTIONS = ("Quick start: two commands", "What you get")
# 1.23, 12.3 or 123.45 (not a version such as 2.13.0: no digit or ".digit" after it), and 9 min, 2 h, 04 s.
FIGURE = re.compile(r"(?<![\w.])(\d{2,}\.\d\d?|\d+\.\d\d)(?!\d|\.\d)|(?<![\w.])(\d+ ?(?:h|min|s))\b")
# Published figures cited with their source: allowed where the same line names the source.
PUBLISHED = {"141.2": "Mikolov", "140.2": "Mikolov", "124.7": "Mikolov", "100.9": "Press", "114.5": "Zaremba",
             "78.63": "slides", "3.11": "Python"}


@dataclass
class Block:
    path: Path
    line: int
    tables: tuple[str, ...]
    src: str
    body: str

    @property
    def label(self) -> str:
        return f"{self.path}: block '{','.join(self.tables)} from={self.src}' (line {self.line})"


def documents(root: Path) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if p.is_file()]


def blocks(path: Path, text: str) -> list[Block]:
    from lmgrid.analysis.docs_tables import TABLES

    found = []
    for m in BLOCK.finditer(text):
        tables = tuple(m["tables"].split(","))
        line = text.count("\n", 0, m.start()) + 1
        for t in tables:
            if t.split(":")[0] not in TABLES:
                raise LmgridError(f"{path}:{line}: lmgrid:render names table {t!r} (known: {', '.join(TABLES)})")
        found.append(Block(path, line, tables, m["src"], m["body"]))
    if len(found) != len(OPEN.findall(text)):
        raise LmgridError(f"{path}: an <!-- lmgrid:render ... --> marker without its <!-- /lmgrid:render --> or "
                          "without from=DIR")
    return found


def render_body(block: Block, root: Path) -> str:
    """What a block holds: its tables from the snapshot, then the line naming the run (or, with no snapshot, one
    line saying so)."""
    snap = root / block.src
    if not (snap / "run.json").is_file():
        return (f"*Not rendered yet: `{block.src}/` does not exist; after the run, `lmgrid docs --from "
                f"results/<corpus> --snapshot {block.src}` writes it and `make docs` renders this block.*\n")
    from lmgrid.analysis.docs_tables import TABLES, provenance

    parts = []
    for t in block.tables:
        name, _, arg = t.partition(":")
        parts.append(TABLES[name](snap, arg).rstrip("\n"))
    return "\n\n".join([*parts, provenance(snap, block.src)]) + "\n"


def rendered(path: Path, root: Path) -> str:
    text = path.read_text()
    out, last = [], 0
    for m, b in zip(BLOCK.finditer(text), blocks(path, text)):
        out += [text[last:m.start()], m["open"], render_body(b, root), m["close"]]
        last = m.end()
    return "".join(out) + text[last:]


def render(root: str | Path = ".") -> list[Path]:
    """Rewrite every marked block of README.md and docs/**.md; returns the files that changed."""
    root = Path(root)
    changed = []
    for path in documents(root):
        new = rendered(path, root)
        if new != path.read_text():
            path.write_text(new)
            changed.append(path)
    return changed


def sections(text: str, titles=HAND_CHECKED_SECTIONS) -> list[tuple[int, str]]:
    """(line number, line) of the lines under the `## title` headings named, blocks left out."""
    keep, inside_block, out = False, False, []
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            keep = line[3:].strip() in titles
        if OPEN.match(line):
            inside_block = True
        elif line.startswith("<!-- /lmgrid:render"):
            inside_block = False
        elif keep and not inside_block:
            out.append((i, line))
    return out


def hand_typed(path: Path) -> list[str]:
    """The perplexity-like (12.34) and time-like (9 min, 2 h, 04 s) figures typed in the hand-checked sections."""
    problems = []
    for i, line in sections(path.read_text()):
        for m in FIGURE.finditer(line):
            figure = m[0]
            if PUBLISHED.get(figure, "\0") in line:
                continue
            problems.append(f"{path}:{i}: {figure!r} is typed by hand; render it from a snapshot (lmgrid docs)")
    return problems


def check(root: str | Path = ".") -> list[str]:
    """Every difference between a document's blocks and what the renderer writes, every hand-typed figure in
    README.md's results sections and every typed PTB figure of README.md and docs/: one line each ([] when the docs
    are as rendered)."""
    from lmgrid.analysis.docs_figures import typed_ptb_figures

    root = Path(root)
    problems = []
    for path in documents(root):
        text = path.read_text()
        shown = path.relative_to(root)
        for b in blocks(shown, text):
            if b.body != render_body(b, root):
                problems.append(f"{b.label} differs from what `lmgrid docs --render` writes")
        if path.name == "README.md" and path.parent == root:
            problems += [p.replace(str(root) + "/", "", 1) for p in hand_typed(path)]
        # A figure the README rule flagged already is not named twice.
        seen = {p.split(" is typed by hand")[0].replace("'", "") for p in problems}
        problems += [p for p in typed_ptb_figures(path, PUBLISHED, str(shown))
                     if p.split(" is a PTB result")[0].replace("'", "") not in seen]
    return problems


def cmd_docs(a) -> None:
    import sys

    from lmgrid.analysis.docs_snapshot import snapshot

    if a.source or a.snapshot:
        if not (a.source and a.snapshot):
            raise LmgridError("docs: --from and --snapshot go together (--from results/<corpus> --snapshot "
                              "docs/results/<name>)")
        from lmgrid.analysis import docs_gpu

        files = (docs_gpu.snapshot(a.source, a.snapshot, a.commit) if docs_gpu.is_gpu_check(Path(a.source))
                 else snapshot(a.source, a.snapshot))
        print(f"lmgrid docs: {len(files)} files in {a.snapshot}", file=sys.stderr)
    if a.render:
        for p in render(a.root):
            print(f"lmgrid docs: rendered {p}", file=sys.stderr)
    if a.check:
        problems = check(a.root)
        if problems:
            raise LmgridError(f"{len(problems)} document problem(s):\n" + "\n".join(problems))
        print("lmgrid docs: every rendered block is as the renderer writes it", file=sys.stderr)
    if not (a.source or a.render or a.check):
        raise LmgridError("docs: give --from/--snapshot, --render or --check")


def register(sub) -> None:
    s = sub.add_parser("docs", help="README.md and docs/ tables: snapshot a finished run, render the marked blocks "
                                    "from snapshots, or check them")
    s.add_argument("--from", dest="source", metavar="RESULTS", help="a finished run's results/<corpus> folder")
    s.add_argument("--snapshot", metavar="DIR", help="where its snapshot goes (docs/results/<name>)")
    s.add_argument("--commit", metavar="REV", help="with --from a GPU check's folder: the commit it ran at, where "
                                                   "its gpu-check.json does not record one")
    s.add_argument("--render", action="store_true", help="rewrite every marked block from its snapshot")
    s.add_argument("--check", action="store_true", help="fail when a block differs from what --render writes, "
                                                        "README.md's results sections hold a hand-typed figure, or "
                                                        "README.md or docs/ a typed PTB result")
    s.add_argument("--root", default=".", help="the folder holding README.md and docs/ (default: current folder)")
    s.set_defaults(func=cmd_docs)
