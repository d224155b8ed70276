"""The README's screenshots (lmgrid.orchestration.screenshots): the ANSI-to-HTML converter, the choice of the
running frame and the one-line failures (fast tier); a real tmux pane captured and photographed (full tier)."""
from __future__ import annotations

import shutil
import subprocess
import types

import pytest

from lmgrid.orchestration import screenshots as shots

# Bold red with markup characters, reset, then 256-colour orange on a 256-colour navy, default colours again,
# then bright green (SGR 92).
SAMPLE = "\x1b[1;31m<b>&x\x1b[0m plain \x1b[38;5;208mC\x1b[48;5;17mD\x1b[39;49m E \x1b[92mF"


def _problems(convert) -> list[str]:
    out = convert(SAMPLE)
    want = ['<span style="color:#cd0000;font-weight:bold">&lt;b&gt;&amp;x</span>', " plain ",
            '<span style="color:#ff8700">C</span>', '<span style="color:#ff8700;background:#00005f">D</span>',
            " E ", '<span style="color:#00ff00">F</span>']
    problems = [f"missing {w!r}" for w in want if w not in out]
    if "".join(want) != out:
        problems.append(f"not exactly the spans: {out!r}")
    return problems


def test_ansi_html_keeps_colours_bold_and_reset_and_escapes_markup(monkeypatch):
    """16 and 256 colours (foreground and background), bold, reset (0 and 39/49) become inline styles; <, > and &
    are escaped.  Controls, run here: a converter that drops the colours fails, and so does one that does not escape.
    Kills: colours or bold lost on the way to the PNG, a reset that leaks the colour onward, terminal text taken as
    markup."""
    assert _problems(shots.ansi_html) == []
    with monkeypatch.context() as m:  # drops every colour and bold
        m.setattr(shots, "_apply", lambda params, state: None)
        assert any("missing" in p for p in _problems(shots.ansi_html))
    with monkeypatch.context() as m:  # no escaping
        m.setattr(shots.html, "escape", lambda text, quote=True: text)
        assert any("&lt;b&gt;" in p for p in _problems(shots.ansi_html))


def test_the_256_colour_palette_is_xterms():
    """xterm's palette at its landmarks: the base colours, the cube's corners and an inner step, the grey ramp's ends.
    Kills: an off-by-one in the cube's index or levels, greys taken from the cube."""
    got = {n: shots.colour256(n) for n in (1, 9, 16, 17, 196, 208, 231, 232, 255)}
    assert got == {1: "#cd0000", 9: "#ff0000", 16: "#000000", 17: "#00005f", 196: "#ff0000", 208: "#ff8700",
                   231: "#ffffff", 232: "#080808", 255: "#eeeeee"}


def _frame(done: int, total: int, running: int) -> str:
    return f"lmgrid: {done} of {total} jobs done, {running} running, {total - done - running} pending (1m)\n"


def test_the_running_frame_is_the_one_nearest_half_done():
    """Among frames of the logger's count line, the one with jobs running and the share done nearest one half; none
    when no frame shows jobs running.  Kills: the first or the last frame taken, a frame with nothing running (the
    final 73 of 73 is 0.5 away, but an idle 36 of 72 between jobs is nearer and must not win)."""
    frames = [(0.0, "Using workflow profile\n"), (1.0, _frame(3, 72, 2)), (2.0, _frame(36, 72, 0)),
              (3.0, _frame(33, 72, 2)), (4.0, _frame(50, 72, 1)), (5.0, _frame(72, 72, 0))]
    assert shots.half_done(frames) == frames[3]
    assert shots.half_done([frames[0], frames[2], frames[5]]) is None


@pytest.mark.parametrize("missing", ["tmux", "Chromium"])
def test_without_tmux_or_chromium_one_line_and_no_run(missing, monkeypatch, capsys):
    """No tmux, or no Chromium: exit 2 and one line naming what to install, before anything runs.  Control: the
    run itself is replaced by a stub that records being called.  Kills: a traceback from deep in a subprocess call,
    or a run of half an hour that ends without its PNGs."""
    ran = []
    monkeypatch.setattr(shots, "tmux_capture", lambda *a, **k: ran.append(a) or (1, [(0.0, "")]))
    monkeypatch.setattr(shots.shutil, "which", lambda name: None if missing == "tmux" else f"/usr/bin/{name}")
    if missing == "Chromium":
        monkeypatch.setattr(shots.report, "chromium", lambda: None)
    assert shots.main(["--out", "unused"]) == 2 and ran == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"no {missing}" in err[0]


def test_the_pane_runs_what_make_run_runs():
    """The pane's line: the pipeline with lmgrid's logger and LMGRID_REPORT=0, then the report step, each with the
    config file and the SET overrides as one argument.  Kills: a terminal shot of another command than `make run`'s."""
    args = types.SimpleNamespace(snakemake="/v/bin/snakemake", cores="2", configfile="presets/x.yaml",
                                 set="train.epochs=2 studies={ctx: {arch: [kn]}}")
    line = shots.run_command(args)
    first, second = line.split(" && ")
    cfg = "--configfile presets/x.yaml --config 'set=train.epochs=2 studies={ctx: {arch: [kn]}}'"
    assert first == f"LMGRID_REPORT=0 /v/bin/snakemake --cores 2 {cfg} --logger lmgrid"
    assert " -m lmgrid.orchestration.report_run /v/bin/snakemake --cores 1 " + cfg in second
    assert second.endswith("--report results/report_workflow.html")


# ---- a real tmux pane and a real browser -------------------------------------------------------------------------

def _tmux_and_browser_or_skip():
    import importlib.util

    from lmgrid.analysis.report import chromium

    missing = ("no tmux (apt-get install -y tmux)" if shutil.which("tmux") is None
               else "playwright is not installed" if importlib.util.find_spec("playwright") is None
               else "no Chromium (make browser)" if chromium() is None else None)
    if missing:
        pytest.skip(missing)


@pytest.mark.full
def test_a_tmux_pane_is_captured_with_its_colours_and_photographed(tmp_path, monkeypatch):
    """A command printing red text in a 40x6 pane: the last frame is the pane's 6 lines, it is taken after
    the command's end (it shows the last word), the colour's SGR is in it, and the PNG of it holds red pixels.
    Control, run here: the capture without -e has no colour.  Kills: colours dropped by capture-pane, a pane of another
    size than asked, a last frame taken before the run ended, colours lost between the HTML and the PNG."""
    _tmux_and_browser_or_skip()
    import numpy as np
    from PIL import Image

    command = r"printf '\033[31mRED\033[0m first\n'; sleep 1.5; printf 'end\n'"
    rc, frames = shots.tmux_capture(command, (40, 6), every_s=0.5)
    assert rc == 0 and len(frames) >= 2
    last = frames[-1][1]
    assert "end" in last and len(last.splitlines()) == 6
    assert "\x1b[31mRED" in last
    page = tmp_path / "pane.html"
    page.write_text(shots.page(last, 40), encoding="utf-8")
    png = tmp_path / "pane.png"
    shots.shoot(page, png, element="#pane")
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)
    assert ((rgb[..., 0] > 150) & (rgb[..., 1] < 60) & (rgb[..., 2] < 60)).sum() > 20  # the red letters

    def without_e(cmd, **kw):
        return subprocess.run([a for a in cmd if a != "-e"], **kw)

    monkeypatch.setattr(shots, "subprocess", types.SimpleNamespace(run=without_e))
    rc, frames = shots.tmux_capture(command, (40, 6), every_s=0.5)
    assert "RED" in frames[-1][1] and "\x1b[31m" not in frames[-1][1]
