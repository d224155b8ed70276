"""`make run`'s live block in a real terminal: tmux (lmgrid.orchestration.screenshots.tmux_capture), where a run left
14,064 lines of old blocks in the scrollback while the old redraw erased from the block's first line (tmux's
scroll-on-clear copies a whole-screen clear into the history).  Full tier: it starts a tmux server; skips with the
reason where tmux is missing."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from lmgrid.orchestration import screenshots

pytestmark = pytest.mark.full

# A grid of 40 cells reported to the handler on the pane's terminal: the block fills the 12-line pane (running jobs
# and the newest results) and is redrawn after every record, about 160 times.
DRIVER = """
import sys, time
sys.path.insert(0, {tests!r})
from test_terminal import LogHandler, LogEvent, SETTINGS, cell, job_info, record
from lmgrid.orchestration import terminal
if {old!r}:  # the negative control: the redraw as it was (up N lines, erase below, write)
    def old_draw(self):
        height, width = self._size()
        lines = self.board.screen(height, width - 1)
        self.stream.write((f"\\x1b[{{self.drawn}}F" if self.drawn else "") + "\\x1b[J" + "".join(l + "\\n" for l in lines))
        self.stream.flush()
        self.drawn = len(lines)
    LogHandler._draw = old_draw
    LogHandler._up = lambda self: (f"\\x1b[{{self.drawn}}F\\x1b[J" if self.drawn else "", setattr(self, "drawn", 0))[0]
h = LogHandler(SETTINGS, None)
print("make run", flush=True)
h.emit(record(LogEvent.RUN_INFO, msg="", stats={{"total": 40}}))
for i in range(1, 41):
    h.emit(job_info(i, "ngram", f"tiny: mkn order 3 seed {{i}}", cell(i), [], "lmgrid ngram"))
    if i > 4:
        h.emit(record(LogEvent.JOB_FINISHED, msg="", job_id=i - 4))
        h.emit(record(LogEvent.PROGRESS, msg=None, done=i - 4, total=40))
h.closed = True
"""


def scrollback_lines(tmp_path: Path, old: bool) -> int:
    script = tmp_path / f"driver_{int(old)}.py"
    script.write_text(DRIVER.format(tests=str(Path(__file__).parent), old=old))
    history: list[str] = []
    rc, _ = screenshots.tmux_capture(f"cd {tmp_path} && {sys.executable} {script}", (80, 12), every_s=0.5,
                                     history=history)
    assert rc == 0, history
    return len(history[0].rstrip("\n").splitlines())


@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux on this machine (apt-get install -y tmux)")
def test_the_live_block_leaves_one_screen_in_a_tmux_terminal(tmp_path, monkeypatch):
    """About 160 redraws of a block that fills a 12-line pane leave at most the pane's lines plus the few printed
    before it.  Kills the old redraw (the negative control, run here: each whole-screen clear goes into tmux's
    scrollback, so the history grows with every redraw)."""
    monkeypatch.setenv("PYTHONPATH", str(Path(screenshots.__file__).parents[2]))
    assert scrollback_lines(tmp_path, old=False) <= 12 + 2
    assert scrollback_lines(tmp_path, old=True) > 100
