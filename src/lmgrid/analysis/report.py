"""The Snakemake HTML report: rebuilt after every successful run, never left older than the results, and checked
in a real browser.

`snakemake --report` reads the finished workflow, so the Snakefile's `onsuccess` hook runs it as a child process
with the run's own config; a failed run removes a report that is older than the results it would describe.
`check` opens a report in headless Chromium (Playwright drives the system's browser) and lists what is wrong:
a console error, a page error or a failed request while it loads and while each entry of its results menu
opens, an embedded image the browser cannot decode, an embedded HTML table that is not one.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPORT = "results/report.html"
# How long building the report took, as a Snakemake benchmark file: `lmgrid status` / `plan` count the report in
# what is left.
REPORT_BENCHMARK = "results/benchmarks/report.tsv"
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def build(snakefile: str, workdir: str, configfiles, config_args, out: str = REPORT) -> str | None:
    """Write the report of the workflow as configured; returns a one-line error, or None when it worked."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir),
           "--cores", "1", "--nolock", "--report", out]
    for f in configfiles or []:
        cmd += ["--configfile", str(f)]
    if config_args:
        cmd += ["--config", *config_args]
    started = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LMGRID_WARM": "0"})
    if r.returncode != 0 or not Path(workdir, out).is_file():
        lines = [line for line in (r.stderr + r.stdout).splitlines() if line.strip()]
        return f"{out}: the report could not be built ({lines[-1] if lines else f'exit {r.returncode}'})"
    record_s(time.time() - started, Path(workdir, REPORT_BENCHMARK))
    return None


def record_s(seconds: float, path: str | Path = REPORT_BENCHMARK) -> None:
    """Write `seconds` as a Snakemake benchmark file (columns s and h:m:s)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    whole = int(seconds)
    path.write_text(f"s\th:m:s\n{seconds:.4f}\t{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}\n")


def timed(command: list[str]) -> int:
    """Run the report command (`make run`: snakemake ... --report), recording its wall time when it succeeds.  Its
    output (a line per embedded file) is shown only when it fails; on success one line says where the report is."""
    started = time.time()
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        return r.returncode
    record_s(time.time() - started)
    out = Path(command[command.index("--report") + 1] if "--report" in command else REPORT)
    print(f"lmgrid: report {out}: open {out.resolve().as_uri()} in a browser", file=sys.stderr)
    return 0


def drop_if_stale(results: Path, out: str = REPORT) -> str | None:
    """After a failed run: remove the report when a result is newer (it would show numbers that are no longer the
    results'); returns what was done, or None."""
    report = Path(out)
    if not report.is_file():
        return None
    newest = max((p.stat().st_mtime for p in results.rglob("*") if p.is_file() and "/logs/" not in p.as_posix()),
                 default=0.0)
    if newest > report.stat().st_mtime:
        report.unlink()
        return f"removed {out}: older than the results of this run; the next successful run rebuilds it"
    return None


def chromium() -> str | None:
    return next((c for c in CHROMIUM if os.access(c, os.X_OK)), None)


# Run in the page: every embedded result of Snakemake's report (the global `results`) decoded by the browser
# itself: images through <img>, HTML results (tables) through DOMParser, which must hold a table.
_DECODE_ALL = """async () => {
  const bad = [];
  for (const [path, r] of Object.entries(results)) {
    const data = r.data_uri || "";
    if (!data.startsWith("data:")) {
      bad.push(`${path}: no embedded data`);
    } else if (data.startsWith("data:image/")) {
      const ok = await new Promise(done => { const img = new Image(); img.onload = () => done(img.naturalWidth > 0);
                                             img.onerror = () => done(false); img.src = data; });
      if (!ok) bad.push(`${path}: image does not decode`);
    } else if (data.startsWith("data:text/html")) {
      const html = await (await fetch(data)).text();
      // a table (tables, summary), a list (a study's findings), or the one line a result with no data has in
      // their place, saying why (p.no-data: e.g. word-vector benchmarks the vocabulary does not cover)
      const page = new DOMParser().parseFromString(html, "text/html");
      if (!page.querySelector("table, ul, p.no-data")) bad.push(`${path}: no table, list or no-data line`);
    }
  }
  return [Object.keys(results).length, bad];
}"""


def check(path: str | Path) -> tuple[int, list[str]]:
    """Open the report in headless Chromium, decode every result, open every Results entry; (results, problems)."""
    from playwright.sync_api import sync_playwright

    browser_path = chromium()
    if browser_path is None:
        raise FileNotFoundError("no Chromium found (apt-get install chromium)")
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page()
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url[:120]}"))
        page.goto(Path(path).resolve().as_uri())
        n, bad = page.evaluate(_DECODE_ALL)
        problems += bad
        # Every entry of the results menu opens, and every entry below it, each from a fresh load (errors are
        # caught by the handlers above).  One category shows as "Results"; several are listed by name.
        def links() -> list[str]:
            return [t for t in page.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.innerText.trim())")
                    if t and t not in ("Workflow", "Statistics", "About")]

        def open_path(names) -> None:
            page.goto(Path(path).resolve().as_uri())
            for name in names:
                page.get_by_role("link", name=name, exact=True).first.click()

        top = links()
        if not top:
            problems.append("the report lists no results")
        for entry in top:
            open_path([entry])
            for sub in [t for t in links() if t not in top]:
                open_path([entry, sub])
        browser.close()
    return n, problems


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--timed"]:
        return timed(argv[1:])
    path = (argv or [REPORT])[0]
    n, problems = check(path)
    for p in problems:
        print(f"{path}: {p}", file=sys.stderr)
    print(f"{path}: {n} results, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
