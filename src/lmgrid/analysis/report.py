"""The HTML report: results/report.html opens on the results; Snakemake's own report is kept beside it
(results/report_workflow.html) and linked at its end; results/report.pdf is the first view on one printed page.

Why a page of lmgrid's own (analysis/report_page.py) in front of Snakemake's report: Snakemake's report is a
single-page application whose first view is the workflow description (workflow.rst) over the job graph; results are
reached only through its menu (category, then item, then a click), and the rst of the description can link to a
result but not embed a table or a figure, so no restructuring of it can put the summary table first, and printing it
gives its menu, not the results.  The page of our own is plain, self-contained HTML (figures as data URIs), built
from the pipeline's files only.

`snakemake --report` reads the finished workflow, so the Snakefile's `onsuccess` hook runs it as a child process
with the run's own config, then writes the page and the PDF; a failed run removes reports older than the results
they would describe.  The PDF is printed by headless Chromium where it is installed (`make browser`); without it one
line says so and nothing fails.  `check` opens the page in headless Chromium (Playwright drives the system's browser)
and lists what is wrong: a console error, a page error or a failed request, an image the browser cannot decode, the
summary table missing or after the workflow link; then the same for Snakemake's report and each entry of its
results menu, and an embedded HTML table that is not one.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPORT = "results/report.html"
WORKFLOW_REPORT = "results/report_workflow.html"  # Snakemake's --report, linked at the end of REPORT
PDF = "results/report.pdf"
# How long building the report took, as a Snakemake benchmark file: `lmgrid status` / `plan` count the report in
# what is left.
REPORT_BENCHMARK = "results/benchmarks/report.tsv"
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def build(snakefile: str, workdir: str, configfiles, config_args, config: dict) -> str | None:
    """Snakemake's report of the workflow as configured, then the results page and its PDF (write_results);
    returns a one-line error, or None when it worked."""
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir),
           "--cores", "1", "--nolock", "--report", WORKFLOW_REPORT]
    for f in configfiles or []:
        cmd += ["--configfile", str(f)]
    if config_args:
        cmd += ["--config", *config_args]
    started = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LMGRID_WARM": "0"})
    if r.returncode != 0 or not Path(workdir, WORKFLOW_REPORT).is_file():
        lines = [line for line in (r.stderr + r.stdout).splitlines() if line.strip()]
        return f"{WORKFLOW_REPORT}: the report could not be built ({lines[-1] if lines else f'exit {r.returncode}'})"
    for note in write_results(Path(workdir), config):
        print(f"lmgrid: {note}", file=sys.stderr)
    record_s(time.time() - started, Path(workdir, REPORT_BENCHMARK))
    return None


def write_results(workdir: Path, config: dict) -> list[str]:
    """results/report.html (report_page.page) and results/report.pdf (where Chromium is); the notes to print."""
    from lmgrid.analysis import report_page
    from lmgrid.common.fileio import atomic_write

    corpus, studies = config["corpus"]["name"], config["studies"]
    results = Path(workdir, REPORT).parent
    with atomic_write(Path(workdir, REPORT)) as fh:
        fh.write(report_page.page(results, corpus, studies, Path(WORKFLOW_REPORT).name))
    return write_pdf(report_page.print_page(results, corpus, studies), Path(workdir, PDF))


def write_pdf(html: str, pdf: Path) -> list[str]:
    """Print the one-page summary with headless Chromium; without Chromium, a note and no PDF (an older one goes)."""
    import tempfile

    browser = chromium()
    if browser is None:
        pdf.unlink(missing_ok=True)
        return [f"no Chromium: {pdf} not written (make browser installs it; the HTML report is complete)"]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "print.html")
        source.write_text(html, encoding="utf-8")
        r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                            f"--user-data-dir={tmp}/profile", f"--print-to-pdf={Path(tmp, 'out.pdf')}",
                            source.as_uri()], capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or not Path(tmp, "out.pdf").is_file():
            return [f"{pdf}: Chromium could not print it (exit {r.returncode}); the HTML report is complete"]
        pdf.parent.mkdir(parents=True, exist_ok=True)
        os.replace(Path(tmp, "out.pdf"), pdf)
    return []


def record_s(seconds: float, path: str | Path = REPORT_BENCHMARK) -> None:
    """Write `seconds` as a Snakemake benchmark file (columns s and h:m:s)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    whole = int(seconds)
    path.write_text(f"s\th:m:s\n{seconds:.4f}\t{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}\n")


def drop_if_stale(results: Path, out: str = REPORT) -> str | None:
    """After a failed run: remove the report (with Snakemake's report and the PDF beside it) when a result is newer
    (it would show numbers that are no longer the results'); returns what was done, or None."""
    report = Path(out)
    if not report.is_file():
        return None
    newest = max((p.stat().st_mtime for p in results.rglob("*") if p.is_file() and "/logs/" not in p.as_posix()),
                 default=0.0)
    if newest > report.stat().st_mtime:
        for p in (report, report.with_name(Path(WORKFLOW_REPORT).name), report.with_name(Path(PDF).name)):
            p.unlink(missing_ok=True)
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


# Run in the results page: every <img> decoded by the browser; the summary table there, before the workflow link.
_PAGE_CHECK = """async () => {
  const bad = [];
  for (const img of document.images) {
    await img.decode().catch(() => null);
    if (!(img.complete && img.naturalWidth > 0)) bad.push(`image does not decode: ${img.alt}`);
  }
  const table = document.querySelector("#summary-table"), link = document.querySelector("#workflow-link");
  if (!table) bad.push("no summary table");
  if (!link) bad.push("no link to the workflow report");
  if (table && link && !(table.compareDocumentPosition(link) & Node.DOCUMENT_POSITION_FOLLOWING))
    bad.push("the summary table comes after the workflow link");
  return [document.images.length, bad, link ? link.getAttribute("href") : null];
}"""

# The summary table's place in the first screen and its first column (the models), read from the page's layout.
_FIRST_VIEW = """() => {
  const table = document.querySelector("#summary-table");
  if (!table) return null;
  const r = table.getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
          models: Array.from(table.querySelectorAll("tbody tr")).map(tr => tr.cells[0].innerText.trim())};
}"""


def _browser(pw):
    browser_path = chromium()
    if browser_path is None:
        raise FileNotFoundError("no Chromium found (apt-get install chromium)")
    return pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])


def first_view(path: str | Path, models: list[str], size=(1280, 800), shot: str | Path | None = None) -> list[str]:
    """What is wrong with the page's first screen (size: width, height in CSS px): the summary table not wholly
    in it, or its rows not exactly `models` (summary.headline's Model column, in order).  shot: a PNG of it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = _browser(pw)
        page = browser.new_page(viewport={"width": size[0], "height": size[1]})
        page.goto(Path(path).resolve().as_uri())
        if shot:
            page.screenshot(path=str(shot))
        box = page.evaluate(_FIRST_VIEW)
        browser.close()
    if box is None:
        return ["no summary table"]
    problems = [] if 0 <= box["top"] and box["bottom"] <= size[1] and 0 <= box["left"] and box["right"] <= size[0] \
        else [f"the summary table is not within the first {size[0]}x{size[1]} screen (top {box['top']:.0f}, "
              f"bottom {box['bottom']:.0f}, right {box['right']:.0f})"]
    if box["models"] != list(models):
        problems.append(f"the summary table's rows {box['models']} are not the models {list(models)}")
    return problems


def check(path: str | Path) -> tuple[int, list[str]]:
    """Open the results page in headless Chromium, decode its images, find the summary table before the workflow
    link; then Snakemake's report it links: decode every result, open every Results entry.  (results of
    Snakemake's report, problems)."""
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as pw:
        browser = _browser(pw)
        page = browser.new_page()
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url[:120]}"))
        page.goto(Path(path).resolve().as_uri())
        images, bad, href = page.evaluate(_PAGE_CHECK)
        problems += bad
        workflow = Path(path).parent / href if href else None
        n = 0
        if workflow is not None and not workflow.is_file():
            problems.append(f"the workflow report {workflow} is missing")
        elif workflow is not None:
            n = _check_workflow(page, workflow, problems)
        browser.close()
    return n, problems


def _check_workflow(page, path: Path, problems: list[str]) -> int:
    """Snakemake's report: every embedded result decodes, every entry of its results menu opens; its results."""
    page.goto(path.resolve().as_uri())
    n, bad = page.evaluate(_DECODE_ALL)
    problems += [f"{path.name}: {b}" for b in bad]

    # Every entry of the results menu opens, and every entry below it, each from a fresh load (errors are
    # caught by the page's handlers).  One category shows as "Results"; several are listed by name.
    def links() -> list[str]:
        return [t for t in page.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.innerText.trim())")
                if t and t not in ("Workflow", "Statistics", "About")]

    def open_path(names) -> None:
        page.goto(path.resolve().as_uri())
        for name in names:
            page.get_by_role("link", name=name, exact=True).first.click()

    top = links()
    if not top:
        problems.append(f"{path.name}: the report lists no results")
    for entry in top:
        open_path([entry])
        for sub in [t for t in links() if t not in top]:
            open_path([entry, sub])
    return n


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = (argv or [REPORT])[0]
    n, problems = check(path)
    for p in problems:
        print(f"{path}: {p}", file=sys.stderr)
    print(f"{path}: {n} results, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
