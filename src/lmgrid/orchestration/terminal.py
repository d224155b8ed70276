"""`make run`'s terminal: lmgrid's Snakemake logger plugin (`snakemake --logger lmgrid`; the plugin package
snakemake_logger_plugin_lmgrid only re-exports this module's LogHandler).

Why a plugin of lmgrid's own rather than snakemake-logger-plugin-rich: the Rich plugin draws Snakemake's view of a
run (a progress bar of done/total jobs, the running rules, Snakemake's own error blocks); it knows nothing of what a
training job is doing inside (its epoch and last valid PPL live in the cell's progress.json, which
lmgrid.neural.train writes and `lmgrid status` reads) nor of a finished cell's result (its metrics.json), so it cannot
show the growing results table.  It is also one more dependency, and Rich itself is not in requirements.lock; this
module draws with plain ANSI escapes.

Two views from the same records (Snakemake's LogEvent records, read off the queue in one listener thread):
  - a terminal (TTY): one live block redrawn in place, never taller than the screen: jobs done / running / pending,
    each running job's `message:` with, for a training job, its epoch and last valid PPL, and the newest rows of the
    results table; a failed job's error (Snakemake's block with the job's log, in full) is printed above the block
    and stays in the scrollback;
  - anything else (a pipe, a CI log): one line per finished job, errors in full, and at the end the results table.
When the run ends both print a summary line and the whole results table.

While the plugin is active the training and n-gram jobs leave their result line in their log (LMGRID_RESULT_LINES=0,
read by the rules' `tail`): the plugin shows it itself, and a job's own stdout would tear the live block.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent

RESULT_LINES = "LMGRID_RESULT_LINES"  # in a job's command: it ends on its result line (`tail -n` of its log)
REDRAW_S = 1.0  # the live block is redrawn at least this often, so a running epoch's progress shows up
# A redraw overwrites the block's lines in place, each ended by "erase to the end of the line", and erases below
# only after its last line.  Not "up N lines, erase below, write": when the block fills the screen its first line is
# the screen's top, and erasing from the top-left is a whole-screen clear, which tmux (scroll-on-clear, on by default)
# first copies into the scrollback: a run in tmux left 14,064 lines of old blocks in its history.
EOL, BELOW = "\x1b[K", "\x1b[J"
WIDE = 100  # the screen width assumed when the terminal does not say


@dataclass
class Job:
    jobid: int
    rule: str
    message: str
    wildcards: dict = field(default_factory=dict)
    log: list = field(default_factory=list)
    says_result: bool = False  # its log's last line is its result line


@dataclass
class Result:
    cell: str
    valid_ppl: float | None
    test_ppl: float | None


def _last_line(path: str) -> str:
    """A log's last line, without the Python logging prefix ('INFO lmgrid.ngram: ') that some commands print."""
    try:
        lines = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return re.sub(r"^(INFO|WARNING) [\w.]+: ", "", lines[-1].strip()) if lines else ""


def _key(job: Job):
    from lmgrid.run.key import RunKey  # lazily: Snakemake imports this plugin on every start, for its --help too
    try:
        return job.wildcards["corpus"], RunKey.from_wildcards(job.wildcards)
    except (KeyError, ValueError):
        return None, None


def training_detail(job: Job) -> str:
    """'epoch 3/40, valid PPL 19.20' from a training job's progress.json; '' when it has none yet."""
    corpus, key = _key(job)
    if key is None or key.is_ngram:
        return ""
    try:
        progress = json.loads((Path(key.beside(corpus, "ckpt/runs")) / "progress.json").read_text())
    except (OSError, ValueError):
        return ""
    text = f"epoch {progress.get('epoch')}/{progress.get('max_epochs')}"
    ppl = progress.get("valid_ppl")
    return text + (f", valid PPL {ppl:.2f}" if isinstance(ppl, (int, float)) else ", no valid PPL yet")


def cell_result(job: Job) -> Result | None:
    """A finished training or n-gram job's row of the results table, from its metrics.json."""
    from lmgrid.common.errors import LmgridError
    from lmgrid.run.record import RunRecord
    corpus, key = _key(job)
    if key is None:
        return None
    try:
        record = RunRecord.read(key.run_dir(corpus))
    except (OSError, LmgridError):
        return Result(key.name, None, None)
    return Result(key.name, record.valid.ppl, record.test.ppl)


def _ppl(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def results_table(rows: list[Result], by_ppl: bool = True) -> list[str]:
    """The results as aligned text lines, a header first; sorted by valid PPL (unreadable cells last), or as they
    finished (by_ppl=False: the live view, whose newest rows are its last)."""
    if by_ppl:
        rows = sorted(rows, key=lambda r: (r.valid_ppl is None, r.valid_ppl or 0.0, r.cell))
    width = max([len("cell")] + [len(r.cell) for r in rows])
    lines = [f"{'cell':<{width}}  {'valid PPL':>10}  {'test PPL':>10}"]
    lines += [f"{r.cell:<{width}}  {_ppl(r.valid_ppl):>10}  {_ppl(r.test_ppl):>10}" for r in rows]
    return lines


def _fmt_s(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Board:
    """What the run has shown so far, built from Snakemake's records; knows nothing of terminals."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.running: list[int] = []
        self.done = 0
        self.total = 0
        self.results: list[Result] = []
        self.started = time.time()

    def start(self, record) -> Job:
        job = Job(record.jobid, record.rule_name, record.rule_msg or record.rule_name,
                  dict(record.wildcards or {}), list(record.log or []),
                  RESULT_LINES in (getattr(record, "shellcmd", None) or ""))
        self.jobs[job.jobid] = job
        if job.jobid not in self.running:
            self.running.append(job.jobid)
        return job

    def finish(self, jobid: int) -> tuple[Job | None, str]:
        """The finished job and its line for the log: its message, and for a cell its own result line."""
        if jobid in self.running:
            self.running.remove(jobid)
        job = self.jobs.get(jobid)
        if job is None:
            return None, f"job {jobid} done"
        line = job.message
        from lmgrid.run.key import CELL_RULES  # lazily, as in _key: jobs that finish a grid cell (a results row)

        if job.rule in CELL_RULES:
            result = cell_result(job)
            if result is not None:
                self.results.append(result)
        said = _last_line(job.log[0]) if job.says_result and job.log else ""
        line += f"  ->  {said}" if said else ""
        return job, line

    def counts(self) -> str:
        pending = max(self.total - self.done - len(self.running), 0)
        return (f"lmgrid: {self.done} of {self.total} jobs done, {len(self.running)} running, {pending} pending "
                f"({_fmt_s(time.time() - self.started)})")

    def screen(self, height: int, width: int) -> list[str]:
        """The live block: never more than `height` lines, none wider than `width`."""
        head = [self.counts()]
        running = [f"  {self.jobs[j].message}" + (f"  [{d}]" if (d := training_detail(self.jobs[j])) else "")
                   for j in self.running]
        table = results_table(self.results, by_ppl=False) if self.results else []
        room = max(height - 1, 1)  # the cursor's own line below the block
        # Running jobs first (at most half the room when there are results), the newest results in the rest.
        run_room = min(len(running), room - 1 if not table else max(room // 2, 1) - 1)
        if running and run_room < len(running):
            running = running[:max(run_room - 1, 0)] + [f"  ... and {len(running) - max(run_room - 1, 0)} more"]
        lines = head + running[:max(run_room, 0)]
        if table and room - len(lines) >= 3:
            rows = room - len(lines) - 2  # a title and the header
            shown = table[1:][-rows:] if rows < len(table) - 1 else table[1:]
            lines += [f"results ({len(self.results)} cells, newest {len(shown)}):" if len(shown) < len(table) - 1
                      else f"results ({len(self.results)} cells):", "  " + table[0]] + ["  " + r for r in shown]
        return [line[:width] for line in lines[:room]]


class LogHandler(LogHandlerBase):
    """Snakemake's records to the board, and the board to the terminal (see the module doc)."""

    def __post_init__(self) -> None:
        self.stream = sys.stdout if getattr(self.common_settings, "stdout", False) else sys.stderr
        self.tty = self.stream.isatty() and os.environ.get("TERM") != "dumb"
        self.board = Board()
        self.screen_lock = threading.Lock()  # not `lock`: logging.Handler.handle holds self.lock around emit
        self.drawn = 0  # lines of the live block now on screen
        self.closed = False
        from snakemake.logging import DefaultFormatter  # Snakemake's error blocks, with the failed job's log
        self.errors = DefaultFormatter(quiet=set(), show_failed_logs=True)
        os.environ["LMGRID_RESULT_LINES"] = "0"  # the rules' `tail -n`: the result lines come from here
        if self.tty:
            threading.Thread(target=self._tick, daemon=True).start()

    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False

    def _size(self) -> tuple[int, int]:
        """The size of the terminal the block is drawn on, asked of that terminal: LINES and COLUMNS in the
        environment can be stale (a tmux pane started from a process that had them said 24 lines in a 12-line pane,
        and a block taller than the screen cannot be redrawn in place); shutil's answer when it cannot be asked."""
        try:
            size = os.get_terminal_size(self.stream.fileno())
        except (AttributeError, OSError, ValueError):
            size = shutil.get_terminal_size((WIDE, 24))
        return size.lines, size.columns

    def _up(self) -> str:
        """To the live block's first line (it is then written over, see EOL); '' when none is drawn."""
        up, self.drawn = (f"\x1b[{self.drawn}F" if self.tty and self.drawn else ""), 0
        return up

    def _lines(self, lines: list[str]) -> str:
        return "".join(f"{line}{EOL}\n" if self.tty else f"{line}\n" for line in lines)

    def _write(self, lines: list[str]) -> None:
        """Lines that stay (finished jobs in a pipe, errors): above the live block on a terminal, written over its
        old first lines; the block follows them."""
        self.stream.write(self._up() + self._lines(lines) + (BELOW if self.tty and self.closed else ""))
        if self.tty and not self.closed:
            self._draw()
        self.stream.flush()

    def _draw(self) -> None:
        height, width = self._size()
        lines = self.board.screen(height, width - 1)
        self.stream.write(self._up() + self._lines(lines) + BELOW)
        self.stream.flush()
        self.drawn = len(lines)

    def _tick(self) -> None:
        while not self.closed:
            time.sleep(REDRAW_S)
            self.redraw()

    def redraw(self) -> None:
        """The ticker's step: the live block again (running epochs move on between records), until the run ends."""
        with self.screen_lock:
            if not self.closed and self.drawn:
                self._draw()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            with self.screen_lock:
                self._emit(record)
        except Exception:
            self.handleError(record)

    def _emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        dry = getattr(self.common_settings, "dryrun", False)
        if event == LogEvent.JOB_INFO and not dry:
            self.board.start(record)
            if self.tty and not self.closed:
                self._draw()
        elif event == LogEvent.JOB_FINISHED:
            job, line = self.board.finish(record.job_id)
            self.board.done += 1
            self._write([] if self.tty else [f"[{self.board.done}/{self.board.total}] {line}"])
        elif event == LogEvent.PROGRESS:
            self.board.done, self.board.total = record.done, record.total
            if self.board.done >= self.board.total:
                self._final()  # now, before the Snakefile's onsuccess prints its headline below
            elif self.tty:
                self._draw()
        elif event in (LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR):
            if event == LogEvent.JOB_ERROR and record.jobid in self.board.running:
                self.board.running.remove(record.jobid)
            self._write(self.errors.format(record).splitlines())
        elif event == LogEvent.RUN_INFO and not self.board.total:
            stats = getattr(record, "stats", None) or {}
            self.board.total = stats.get("total") or self._planned(record.getMessage())
        elif record.levelno >= logging.WARNING and event not in (LogEvent.JOB_INFO, LogEvent.SHELLCMD):
            self._write(record.getMessage().splitlines())  # Snakemake's own errors and warnings, in full

    @staticmethod
    def _planned(stats: str) -> int:
        """The job count of Snakemake's 'Job stats' table (its 'total' row), before the first progress record."""
        for line in stats.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == "total" and words[1].isdigit():
                return int(words[1])
        return 0

    def _final(self) -> None:
        """The live block replaced, once, by the summary line and the whole results table; no redraw after it,
        which would erase what the Snakefile's onsuccess handler prints next."""
        if self.closed:
            return
        self.closed = True
        head = [self.board.counts().replace(", 0 running, 0 pending", "")] if self.board.total or self.board.results else []
        table = results_table(self.board.results) if self.board.results else []
        if self.tty and len(table) > (rows := max(self._size()[0] // 2, 5)):
            # the best cells in half a screen, the Snakefile's headline table below: the end fits one screen too
            table = table[:rows] + [f"... and {len(table) - rows} more cells (every cell: the report)"]
        self.stream.write(self._up() + self._lines(head + table) + (BELOW if self.tty else ""))
        self.stream.flush()

    def close(self) -> None:
        with self.screen_lock:
            self._final()  # a run that failed or was stopped ends here
        super().close()
