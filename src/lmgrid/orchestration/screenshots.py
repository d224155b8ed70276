"""The README's screenshots, from a real run: `make run`'s terminal while jobs run and when it ends, and the HTML
report's first view, each a PNG with a JSON sidecar naming the run, the commit and the machine it came from.

The terminal is a real one: a detached tmux session of a fixed size (a private tmux server, so no user's tmux
settings or environment leak in) runs the same two commands `make run` runs (the pipeline with lmgrid's logger,
then the report); `tmux capture-pane -e -p` takes the pane with its colours every second.  A frame is turned into
HTML by `ansi_html` (SGR colours and bold only: capture-pane emits nothing else) and photographed by headless
Chromium, driven by Playwright as lmgrid.analysis.report's browser check drives it.

`python -m lmgrid.orchestration.screenshots --snakemake .venv/bin/snakemake --cores 2 [--configfile F] [--set S]`
(`make screenshots`); results land where `make run` puts them (results/ under the current folder).
"""
from __future__ import annotations

import argparse
import html
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from lmgrid.analysis import report
from lmgrid.common import gitinfo
from lmgrid.common.errors import LmgridError

FG, BG = "#d0d0d0", "#1c1c1c"  # the pane's default colours (a dark theme)
# The 16 standard colours (xterm's defaults, black brightened a little so it shows on the dark background).
BASE16 = ["#000000", "#cd0000", "#00cd00", "#cdcd00", "#0000ee", "#cd00cd", "#00cdcd", "#e5e5e5",
          "#7f7f7f", "#ff0000", "#00ff00", "#ffff00", "#5c5cff", "#ff00ff", "#00ffff", "#ffffff"]
_CSI = re.compile(r"\x1b\[([0-9;:]*)([A-Za-z])")
_COUNTS = re.compile(r"lmgrid: (\d+) of (\d+) jobs done, (\d+) running")


def colour256(n: int) -> str:
    """xterm's 256-colour palette: the 16 base colours, a 6x6x6 cube, 24 greys."""
    if n < 16:
        return BASE16[n]
    if n < 232:
        levels = [0, 95, 135, 175, 215, 255]
        n -= 16
        return "#%02x%02x%02x" % (levels[n // 36], levels[n // 6 % 6], levels[n % 6])
    grey = 8 + 10 * (n - 232)
    return "#%02x%02x%02x" % (grey, grey, grey)


def _apply(params: list[int], state: dict) -> None:
    """One SGR sequence's parameters applied to the state (fg, bg, bold)."""
    i = 0
    while i < len(params):
        p = params[i]
        if p == 0:
            state.update(fg=None, bg=None, bold=False)
        elif p == 1:
            state["bold"] = True
        elif p == 22:
            state["bold"] = False
        elif 30 <= p <= 37 or 90 <= p <= 97:
            state["fg"] = BASE16[p - 30 if p < 90 else p - 82]
        elif 40 <= p <= 47 or 100 <= p <= 107:
            state["bg"] = BASE16[p - 40 if p < 100 else p - 92]
        elif p in (39, 49):
            state["fg" if p == 39 else "bg"] = None
        elif p in (38, 48) and i + 2 < len(params) and params[i + 1] == 5:  # 256 colours
            state["fg" if p == 38 else "bg"] = colour256(params[i + 2] % 256)
            i += 2
        elif p in (38, 48) and i + 4 < len(params) and params[i + 1] == 2:  # 24-bit colour
            state["fg" if p == 38 else "bg"] = "#%02x%02x%02x" % tuple(v % 256 for v in params[i + 2:i + 5])
            i += 4
        i += 1  # anything else (italic, underline, ...) is left as plain text


def _span(text: str, state: dict) -> str:
    style = ";".join(s for s in (f"color:{state['fg']}" if state["fg"] else "",
                                 f"background:{state['bg']}" if state["bg"] else "",
                                 "font-weight:bold" if state["bold"] else "") if s)
    text = html.escape(text, quote=False)
    return f'<span style="{style}">{text}</span>' if style else text


def ansi_html(text: str) -> str:
    """Terminal text with ANSI SGR sequences as HTML (spans with inline styles; <, & and > escaped); other
    control sequences are dropped."""
    state, out, pos = {"fg": None, "bg": None, "bold": False}, [], 0
    for m in _CSI.finditer(text):
        if m.start() > pos:
            out.append(_span(text[pos:m.start()], state))
        if m.group(2) == "m":
            _apply([int(p) if p else 0 for p in re.split("[;:]", m.group(1))], state)
        pos = m.end()
    if pos < len(text):
        out.append(_span(text[pos:], state))
    return "".join(out)


def page(frame: str, columns: int) -> str:
    """A captured pane as a page: a dark, monospaced block `columns` characters wide."""
    return ("<!doctype html><meta charset='utf-8'><style>body{margin:0;background:#000}"
            f"pre{{margin:0;display:inline-block;padding:10px 12px;width:{columns}ch;background:{BG};color:{FG};"
            "font:14px/1.3 'DejaVu Sans Mono','Liberation Mono',monospace}</style>"
            f"<pre id='pane'>{ansi_html(frame)}</pre>")


def tmux_capture(command: str, size: tuple[int, int], every_s: float = 1.0, env: dict | None = None,
                 history: list | None = None):
    """Run `command` (a shell line) in a detached tmux pane of size (columns, lines); returns
    (its exit status, [(seconds since start, captured pane with colours), ...], the last one taken after it ended).
    With a `history` list, the pane's whole text after the end (its scrollback too) is appended to it: what the run
    left in the terminal, the interactive counterpart of a piped run's line count."""
    with tempfile.TemporaryDirectory() as tmp:
        conf, rc_file, sock = Path(tmp, "tmux.conf"), Path(tmp, "rc"), Path(tmp, "socket")
        # No status line: a detached pane is the whole size anyway; this keeps it so when someone attaches.
        conf.write_text("set -g status off\nset -g default-terminal tmux-256color\nset -g history-limit 100000\n")
        shell = f"{command}; echo $? > {shlex.quote(str(rc_file))}; exec sleep 86400"
        tmux = ["tmux", "-S", str(sock), "-f", str(conf)]  # a server of our own, its socket gone with `tmp`
        # without LINES and COLUMNS: programs in the pane then see the pane's own size, not the caller's
        pane_env = {k: v for k, v in (os.environ if env is None else env).items() if k not in ("LINES", "COLUMNS")}
        subprocess.run([*tmux, "new-session", "-d", "-s", "shots", "-x", str(size[0]), "-y", str(size[1]),
                        "sh", "-c", shell], check=True, env=pane_env)
        frames, started = [], time.time()
        try:
            while True:
                ended = rc_file.is_file()  # read before the capture: the last frame comes after the end
                frames.append((time.time() - started, subprocess.run(
                    [*tmux, "capture-pane", "-e", "-p", "-t", "shots"], check=True, capture_output=True,
                    text=True).stdout))
                if ended:
                    if history is not None:
                        history.append(subprocess.run([*tmux, "capture-pane", "-p", "-S", "-", "-E", "-", "-t", "shots"],
                                                      check=True, capture_output=True, text=True).stdout)
                    return int(rc_file.read_text().strip() or 1), frames
                time.sleep(every_s)
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True)


def half_done(frames: list[tuple[float, str]]) -> tuple[float, str] | None:
    """The frame with jobs running whose share of jobs done is nearest one half (the logger's count line)."""
    scored = []
    for t, frame in frames:
        m = _COUNTS.search(frame)
        if m and int(m.group(2)) > 0 and int(m.group(3)) > 0:
            scored.append((abs(int(m.group(1)) / int(m.group(2)) - 0.5), t, frame))
    return min(scored)[1:] if scored else None


def shoot(source: Path, png: Path, viewport=(1280, 900), element: str | None = None) -> None:
    """A PNG of the page at `source` (its first `viewport`), or of one element of it, by headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = report._browser(pw)
        tab = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        tab.goto(source.resolve().as_uri())
        (tab.locator(element) if element else tab).screenshot(path=str(png))
        browser.close()
    fit_png(png)


def fit_png(png: Path, limit_kb: int = 300) -> None:
    """Over `limit_kb`, the PNG saved again with a palette of 256 colours (a screenshot's text and flat figures lose
    nothing a reader sees), so the README's images stay small in the repository."""
    if png.stat().st_size > limit_kb * 1024:
        from PIL import Image

        Image.open(png).convert("RGB").quantize(256).save(png, optimize=True)


def machine() -> dict:
    """The machine as a results snapshot records it (lmgrid.common.machine, from lscpu), under the sidecars' key
    names."""
    from lmgrid.common.machine import machine as snapshot_machine

    m = snapshot_machine()
    return {"cpu_model": m["cpu"], "avx512_bf16": m["avx512_bf16"], "cores": m["cores"]}


def provenance(args, command: str) -> dict:
    here = gitinfo.commit(".", short=None)
    return {"run": {"config": ["config.yaml", *([args.configfile] if args.configfile else [])], "set": args.set,
                    "results": str(Path("results").resolve()), "command": command, "cores": args.cores},
            "commit": here["commit"], "uncommitted_changes": here["dirty"],
            "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "machine": machine()}


def run_command(args) -> str:
    """`make run`'s two commands (the pipeline with lmgrid's logger, then the report), as one shell line."""
    cfg = (["--configfile", args.configfile] if args.configfile else []) + (["--config", f"set={args.set}"]
                                                                            if args.set else [])
    pipeline = [args.snakemake, "--cores", str(args.cores), *cfg, "--logger", "lmgrid"]
    report_run = [sys.executable, "-m", "lmgrid.orchestration.report_run", args.snakemake, "--cores", "1", *cfg,
                  "--report", report.WORKFLOW_REPORT]
    return f"LMGRID_REPORT=0 {shlex.join(pipeline)} && {shlex.join(report_run)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lmgrid.orchestration.screenshots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--snakemake", default="snakemake")
    ap.add_argument("--cores", default="all")
    ap.add_argument("--configfile", default="")
    ap.add_argument("--set", default="")
    ap.add_argument("--size", default="110x34", help="the pane, COLUMNSxLINES")
    ap.add_argument("--out", default="docs/img")
    args = ap.parse_args(argv)
    try:
        if not shutil.which("tmux"):
            raise LmgridError("screenshots: no tmux (apt-get install -y tmux)")
        if report.chromium() is None:
            raise LmgridError("screenshots: no Chromium (make browser installs it)")
        if importlib.util.find_spec("playwright") is None:
            raise LmgridError("screenshots: no Playwright in this venv (make test installs it)")
        if not re.fullmatch(r"\d+x\d+", args.size):
            raise LmgridError(f"screenshots: --size {args.size!r} is not COLUMNSxLINES (e.g. 110x34)")
    except LmgridError as e:
        print(e, file=sys.stderr)
        return 2
    size = tuple(int(v) for v in args.size.split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = run_command(args)
    meta = provenance(args, command)  # the commit and date the run started from
    print(f"screenshots: running in a {args.size} tmux pane: {command}", file=sys.stderr)
    history: list[str] = []
    rc, frames = tmux_capture(command, size, history=history)
    # the lines the run left in the terminal, its scrollback included (the pane's blank bottom rows not counted)
    terminal_lines = len(history[0].rstrip("\n").splitlines()) if history else None
    if rc != 0:
        tail = [line for line in frames[-1][1].splitlines() if line.strip()][-10:]
        print("\n".join(tail) + f"\nscreenshots: the run failed (exit {rc}); no PNG written", file=sys.stderr)
        return 1
    middle = half_done(frames)
    shots = ([("terminal_running", middle)] if middle else []) + [("terminal_done", frames[-1])]
    for name, (t, frame) in shots:
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "pane.html").write_text(page(frame, size[0]), encoding="utf-8")
            shoot(Path(tmp, "pane.html"), out / f"{name}.png", element="#pane")
        m = _COUNTS.search(frame)
        meta_t = {**meta, "pane": args.size, "captured_at_s": round(t),
                  "jobs_done": f"{m.group(1)} of {m.group(2)}" if m else None,
                  **({"terminal_lines_at_end": terminal_lines} if name == "terminal_done" else {})}
        (out / f"{name}.json").write_text(json.dumps(meta_t, indent=1) + "\n")
    if middle is None:
        print("screenshots: no frame showed jobs running; terminal_running.png not written", file=sys.stderr)
    shoot(Path(report.REPORT), out / "report_first_view.png", viewport=(1280, 900))
    (out / "report_first_view.json").write_text(json.dumps({**meta, "page": report.REPORT, "viewport": "1280x900"},
                                                           indent=1) + "\n")
    for name in [n for n, _ in shots] + ["report_first_view"]:
        print(f"screenshots: {out / name}.png ({(out / name).with_suffix('.png').stat().st_size // 1024} KiB)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
