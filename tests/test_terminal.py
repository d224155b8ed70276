"""`make run`'s terminal (lmgrid.orchestration.terminal, `snakemake --logger lmgrid`), fed the records Snakemake
emits (the extras of snakemake.jobs.Job.log_info, the scheduler's JOB_FINISHED and PROGRESS, Job.log_error), so no
Snakemake runs: piped, one line per finished job and the final table; a failed job's log in full; on a terminal, a
live block no taller than the screen."""
from __future__ import annotations

import io
import logging
import re
from types import SimpleNamespace

import pytest
from snakemake_interface_logger_plugins.common import LogEvent

from lmgrid.orchestration import terminal
from lmgrid.orchestration.terminal import Board, LogHandler, results_table

SETTINGS = SimpleNamespace(stdout=False, dryrun=False, quiet=None, printshellcmds=False, nocolor=True,
                           debug_dag=False, verbose=False, show_failed_logs=True)


def record(event=None, level=logging.INFO, msg="", **extra) -> logging.LogRecord:
    rec = logging.makeLogRecord({"name": "snakemake.logging", "levelno": level, "levelname": logging.getLevelName(level),
                                 "msg": msg, **({"event": event} if event else {}), **extra})
    return rec


def job_info(jobid: int, rule: str, message: str, wildcards: dict, log: list, shellcmd: str) -> logging.LogRecord:
    return record(LogEvent.JOB_INFO, msg=f" Rule: {rule}, Jobid: {jobid}", jobid=jobid, rule_msg=message,
                  rule_name=rule, local=False, input=[], output=[], log=log, benchmark=None, wildcards=wildcards,
                  reason="Missing output files", resources={}, priority=0, threads=1, indent=False,
                  is_checkpoint=False, printshellcmd=True, is_handover=False, shellcmd=shellcmd)


def cell(seed: int) -> dict:
    return {"corpus": "tiny", "arch": "mkn", "impl": "ngram", "n_step": "3", "layers": "1", "regime": "window",
            "seed": str(seed)}


def handler(monkeypatch, tty: bool = False, height: int = 24, width: int = 100) -> tuple[LogHandler, io.StringIO]:
    monkeypatch.setenv("LMGRID_RESULT_LINES", "1")  # the handler sets it to 0; monkeypatch restores it
    h = LogHandler(SETTINGS, None)
    h.stream, h.tty = io.StringIO(), tty
    monkeypatch.setattr(h, "_size", lambda: (height, width))
    return h, h.stream


def run_grid(h: LogHandler, tmp_path, jobs: int) -> None:
    """`jobs` n-gram cells, each started, its shell command, Snakemake's chatter, finished and counted, as the
    scheduler logs them; each job's log ends on its result line."""
    h.emit(record(LogEvent.RUN_INFO, msg=f"Job stats:\njob    count\n---  -------\nngram  {jobs}\ntotal  {jobs}",
                  stats={"ngram": jobs, "total": jobs}))
    for i in range(1, jobs + 1):
        log = tmp_path / f"ngram{i}.log"
        log.write_text(f"counting\nmkn n3 l1 window s{i}: valid PPL {10 + i}.000, test PPL {11 + i}.000\n")
        h.emit(record(msg="Select jobs to execute..."))
        h.emit(record(msg="Execute 1 jobs..."))
        h.emit(job_info(i, "ngram", f"tiny: mkn order 3 seed {i}", cell(i), [str(log)],
                        f"lmgrid ngram > {log} 2>&1 && tail -n ${{LMGRID_RESULT_LINES:-1}} {log}"))
        h.emit(record(LogEvent.SHELLCMD, msg="Shell command: lmgrid ngram", shellcmd="lmgrid ngram"))
        h.emit(record(LogEvent.JOB_FINISHED, msg=f"Finished jobid: {i} (Rule: ngram)", job_id=i))
        h.emit(record(LogEvent.PROGRESS, msg=None, done=i, total=jobs))
    h.close()


def test_piped_one_line_per_finished_job_and_the_table(monkeypatch, tmp_path):
    """A pipe gets one line per finished job (its message and its result line), then a summary line and the
    results table (a header and a row per cell): 5 jobs, 5 + 1 + 6 lines, whatever else Snakemake logged.
    Kills: every Snakemake record printed (the negative control below prints each record's message too, as the
    default handler does, and the count no longer holds)."""
    monkeypatch.chdir(tmp_path)

    def piped_lines() -> list[str]:
        h, out = handler(monkeypatch)
        run_grid(h, tmp_path, jobs=5)
        return out.getvalue().splitlines()

    lines = piped_lines()
    assert len(lines) == 5 + 1 + 1 + 5, lines
    assert lines[0] == "[1/5] tiny: mkn order 3 seed 1  ->  mkn n3 l1 window s1: valid PPL 11.000, test PPL 12.000"
    assert lines[5] .startswith("lmgrid: 5 of 5 jobs done (")
    assert re.match(r"cell\s+valid PPL\s+test PPL$", lines[6]) and lines[7].startswith("mkn n3 l1 window s1")

    emit = LogHandler._emit  # the mutant: every record printed, as Snakemake's own handler does
    monkeypatch.setattr(LogHandler, "_emit", lambda self, rec: (self._write([str(rec.getMessage())]), emit(self, rec)))
    assert len(piped_lines()) > 12


def test_failed_job_error_in_full(monkeypatch, tmp_path):
    """A failed job shows Snakemake's error block and every line of the job's log (the traceback, the one
    `lmgrid: error:` line), in a pipe as on a terminal.  Kills: errors swallowed or cut to one line (the negative
    control formats errors without the failed job's log)."""
    log = tmp_path / "train.log"
    trace = ["Traceback (most recent call last):", '  File "train.py", line 9, in main', "    fit()",
             "lmgrid: error: results/tiny/runs/rnn: valid PPL is nan after epoch 2 (lr 30.0 too high?)"]
    log.write_text("\n".join(trace) + "\n")
    error = record(LogEvent.JOB_ERROR, level=logging.ERROR, msg="Error in rule train, jobid: 7", rule_name="train",
                   rule_msg="tiny: train rnn", jobid=7, input=[], output=["results/tiny/runs/rnn/metrics.json"],
                   log=[str(log)], conda_env=None, container_img=None, aux={}, indent=False,
                   shellcmd="lmgrid train --spec spec.json")

    def shown(tty: bool) -> str:
        h, out = handler(monkeypatch, tty=tty)
        h.emit(job_info(7, "train", "tiny: train rnn", {}, [str(log)], "lmgrid train"))
        h.emit(error)
        h.close()
        return out.getvalue()

    for tty in (False, True):
        text = shown(tty)
        assert "Error in rule train:" in text and all(line in text for line in trace), (tty, text)

    from snakemake.logging import DefaultFormatter
    monkeypatch.setattr(terminal.LogHandler, "__post_init__", _without_logs(LogHandler.__post_init__, DefaultFormatter))
    assert not all(line in shown(False) for line in trace)


def _without_logs(post_init, formatter_cls):
    def mutant(self):
        post_init(self)
        self.errors = formatter_cls(quiet=set(), show_failed_logs=False)
    return mutant


def plain(text: str) -> str:
    """The text without the erase escapes (to the end of the line, below)."""
    return re.sub(r"\x1b\[[KJ]", "", text)


def last_screen(text: str) -> list[str]:
    """The live block as it stands on the screen: what was written after the last move up to its first line
    (ESC [ n F; each redraw writes the block over the old one from there)."""
    return plain(re.split(r"\x1b\[\d+F", text)[-1]).splitlines()


@pytest.mark.parametrize("height", [6, 12, 40])
def test_tty_view_stays_within_the_screen(monkeypatch, tmp_path, height):
    """On a terminal of `height` lines, with 30 running jobs and 60 finished cells, the live block is at most
    height - 1 lines (the cursor's line below it) and no line is wider than the screen, so a redraw replaces it
    in place.  Kills: a view that grows without bound (the negative control draws as if the screen had no
    height: the block then holds every running job and every result)."""
    monkeypatch.chdir(tmp_path)

    def block() -> list[str]:
        h, out = handler(monkeypatch, tty=True, height=height, width=60)
        h.emit(record(LogEvent.RUN_INFO, msg="", stats={"total": 120}))
        for i in range(1, 61):
            h.emit(job_info(i, "ngram", f"tiny: mkn order 3 seed {i}", cell(i), [], "lmgrid ngram"))
            h.emit(record(LogEvent.JOB_FINISHED, msg="", job_id=i))
            h.emit(record(LogEvent.PROGRESS, msg=None, done=i, total=120))
        for i in range(61, 91):
            h.emit(job_info(i, "ngram", f"tiny: a long running job message, seed {i} " + "x" * 80, cell(i), [],
                            "lmgrid ngram"))
        return last_screen(out.getvalue())

    lines = block()
    assert 1 < len(lines) <= height - 1 and all(len(line) < 60 for line in lines), lines
    assert lines[0].startswith("lmgrid: 60 of 120 jobs done, 30 running, 30 pending")

    screen = Board.screen
    monkeypatch.setattr(Board, "screen", lambda self, rows, cols: screen(self, 10**6, cols))
    assert len(block()) > height - 1


def test_tty_view_shows_a_training_jobs_epoch_and_valid_ppl(monkeypatch, tmp_path):
    """A running training job's line carries its epoch and last valid PPL, read from the progress.json its
    training writes (the file `lmgrid status` reads), and follows the file as it is rewritten.  Kills: the running
    jobs shown by name only (the negative control removes the file: the line loses its epoch)."""
    from lmgrid.run.key import RunKey
    monkeypatch.chdir(tmp_path)
    wildcards = {**cell(1), "arch": "lstm", "impl": "torch", "n_step": "5"}
    progress = tmp_path / RunKey.from_wildcards(wildcards).beside("tiny", "ckpt/runs") / "progress.json"
    progress.parent.mkdir(parents=True)
    progress.write_text('{"epoch": 3, "max_epochs": 40, "valid_ppl": 19.2}')
    h, out = handler(monkeypatch, tty=True)
    h.emit(job_info(4, "train_gated", "tiny: train lstm/torch n5 l1 window s1", wildcards, [], "lmgrid train"))
    assert "  tiny: train lstm/torch n5 l1 window s1  [epoch 3/40, valid PPL 19.20]" in last_screen(out.getvalue())
    progress.write_text('{"epoch": 4, "max_epochs": 40, "valid_ppl": 18.75}')
    h.redraw()  # what the handler's ticker does every REDRAW_S seconds
    assert "  tiny: train lstm/torch n5 l1 window s1  [epoch 4/40, valid PPL 18.75]" in last_screen(out.getvalue())
    progress.unlink()
    h.redraw()
    assert not any("epoch" in line for line in last_screen(out.getvalue()))


FAKE_PIP = """#!/bin/sh
# stands for the venv's python: `python -m pip install ...` prints pip's noise and exits with $FAKE_PIP_RC
i=0; while [ $i -lt 40 ]; do echo "WARNING: pip noise $i"; i=$((i+1)); done
exit ${FAKE_PIP_RC:-0}
"""


def test_make_setup_prints_pip_only_when_it_fails(tmp_path):
    """`make`'s install step with a stand-in pip that prints 40 warning lines: silent when pip succeeds (the lines
    are in .venv/pip-install.log), all of them and the log's path when it fails, and make fails.  Kills: pip's
    output in the terminal on success (the issue's 159 lines), and a failure whose reason is hidden."""
    import os
    import subprocess
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_PIP)
    (venv / "bin" / "python").chmod(0o755)

    def make(rc: int) -> subprocess.CompletedProcess:
        (venv / ".installed-stamp").unlink(missing_ok=True)
        return subprocess.run(["make", "--no-print-directory", f"VENV={venv}", f"{venv}/.installed-stamp"],
                              cwd=repo, capture_output=True, text=True, env={**os.environ, "FAKE_PIP_RC": str(rc)})

    ok = make(0)
    assert ok.returncode == 0 and (ok.stdout + ok.stderr).strip() == "", ok.stdout + ok.stderr
    assert "WARNING: pip noise 39" in (venv / "pip-install.log").read_text()
    failed = make(1)
    shown = failed.stdout + failed.stderr
    assert failed.returncode != 0 and all(f"pip noise {i}\n" in shown for i in range(40)) and "pip-install.log" in shown


def test_tty_view_ends_when_the_last_job_does(monkeypatch, tmp_path):
    """When the last job is counted the live block gives way to the summary line and the whole results table, and
    the ticker draws nothing after it: the Snakefile's onsuccess handler prints the headline table next, on the
    same terminal, and a redraw would move the cursor up over it and clear it.  Kills: the live block kept up to
    the handler's close (the negative control: the ticker's step then writes over what came after)."""
    monkeypatch.chdir(tmp_path)

    def after_the_run(final: bool) -> tuple[LogHandler, str, str]:
        h, out = handler(monkeypatch, tty=True)
        h.close = lambda: None  # the run is over, Snakemake has not closed the handler yet: onsuccess runs now
        if not final:
            h._final = lambda: None
        run_grid(h, tmp_path, jobs=3)
        ended = out.getvalue()
        h.redraw()
        return h, ended, out.getvalue()

    h, ended, later = after_the_run(final=True)
    assert plain(ended).endswith("\n".join(results_table(h.board.results)) + "\n"), ended[-300:]
    assert len(last_screen(ended)) <= 24  # the summary and the table: one screen
    assert later == ended
    h, ended, later = after_the_run(final=False)
    assert later != ended


def test_tty_final_table_fits_half_a_screen(monkeypatch, tmp_path):
    """At the end a terminal of 12 lines gets the summary line and the best cells in half the screen, with a line
    saying how many more there are (the Snakefile's headline table follows); a pipe gets every cell.  Kills: the
    final table of a 53-cell grid scrolling the live view away (the pipe, run here as the control, shows its
    unbounded length)."""
    monkeypatch.chdir(tmp_path)

    def end(tty: bool) -> list[str]:
        h, out = handler(monkeypatch, tty=tty, height=12)
        run_grid(h, tmp_path, jobs=30)
        return last_screen(out.getvalue())

    shown = end(True)
    assert len(shown) <= 12 - 1 and shown[-1] == "... and 25 more cells (every cell: the report)", shown
    assert shown[2].startswith("mkn n3 l1 window s1 ")  # the best cell (lowest valid PPL) first
    assert len([line for line in end(False) if line.startswith("mkn n3")]) == 30


def test_a_plug_in_cell_is_a_row_of_the_results_table(monkeypatch, tmp_path):
    """A plug-in's cells train in rules of their own (train_plugin, train_plugin_gated); when one finishes its cell
    joins the results table like a built-in's (there without metrics.json: n/a).  Kills: the table's rules left at
    the built-ins' (the negative control, run here: the row is missing), which left the examples out of a run's
    final table."""
    from lmgrid.run import key as key_mod
    monkeypatch.chdir(tmp_path)
    wildcards = {**cell(1), "arch": "min_gru", "impl": "plugin", "n_step": "5"}

    def rows() -> list[str]:
        h, out = handler(monkeypatch)
        h.emit(record(LogEvent.RUN_INFO, msg="", stats={"total": 1}))
        h.emit(job_info(1, "train_plugin_gated", "tiny: train min_gru/plugin n5 l1 window s1", wildcards, [],
                        "lmgrid train"))
        h.emit(record(LogEvent.JOB_FINISHED, msg="", job_id=1))
        h.emit(record(LogEvent.PROGRESS, msg=None, done=1, total=1))
        h.close()
        return [line for line in out.getvalue().splitlines() if line.startswith("min_gru n5 l1 window s1 ")]

    assert len(rows()) == 1
    monkeypatch.setattr(key_mod, "CELL_RULES", ("ngram", "train", "train_gated"))
    assert rows() == []


def test_a_redraw_never_erases_from_the_blocks_first_line(monkeypatch, tmp_path):
    """Each redraw moves up to the block's first line and writes over it, every line ended by erase-to-end-of-line,
    and erases below only after its last line.  Kills the old "up N lines, erase below" (ESC [ n F ESC [ J): when
    the block fills the screen, that erase starts at the top-left, a whole-screen clear that tmux copies into the
    scrollback (tests/test_terminal_tmux.py measures it; the negative control here is the old sequence, which the
    same check rejects)."""
    monkeypatch.chdir(tmp_path)
    h, out = handler(monkeypatch, tty=True, height=8)
    run_grid(h, tmp_path, jobs=12)
    text = out.getvalue()

    def erases_at_the_top(t: str) -> bool:
        return re.search(r"\x1b\[\d+F\x1b\[J", t) is not None

    assert text.count("\x1b[") > 20 and not erases_at_the_top(text)
    assert all(line.endswith("\x1b[K") for line in text.splitlines() if line.startswith("lmgrid: "))
    assert erases_at_the_top("\x1b[5F\x1b[J" + "lmgrid: 1 of 2 jobs done\n")  # the old redraw
