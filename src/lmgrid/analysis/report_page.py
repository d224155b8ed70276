"""The report's first page (results/report.html): the results first, the workflow last.

One self-contained HTML file (every figure embedded as a data URI) built from the pipeline's own files, nothing
computed here: the summary table (each model's best cell, chosen on valid, from summary.csv through
summary.headline), then each study with its question (the config's `description`), one sentence from its
findings.md (answer_items) and its main figure (layout.main_figure); then every run, each study's table, findings and
word-vector line, the equal-compute study's figure, findings and table where the run has one (budget_section),
and last the link to Snakemake's own report (job graph, every output with its caption, run times).
A section without data is one `p.no-data` line saying why.  `print_page` is the same first view laid out for one
printed page (the column-width figures), which `report.write_pdf` prints to results/report.pdf.
"""
from __future__ import annotations

import base64
import re
import struct
from html import escape
from pathlib import Path

import pandas as pd

from lmgrid.analysis import layout
from lmgrid.analysis.summary import display_table, headline
from lmgrid.run.key import expand_study

STYLE = """<style>
body{font-family:system-ui,sans-serif;font-size:14px;margin:0;color:#222}
header{padding:10px 20px 4px;border-bottom:1px solid #ccc}
h1{font-size:20px;margin:0 0 2px}h2{font-size:16px;margin:4px 0 6px}h3{font-size:14px;margin:0 0 4px}
p{margin:3px 0}.lede,.note,.question{color:#555;font-size:12px}#summary .note{max-width:420px}.question{font-style:italic}
#first{display:grid;grid-template-columns:max-content 1fr;gap:16px;padding:8px 20px}
#studies .grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:12px}
.study{border:1px solid #ddd;border-radius:4px;padding:6px 8px}.study img{width:100%;max-width:640px;height:auto}
.answer{font-size:12.5px}.answer li{margin:2px 0}ul.answer{padding-left:16px;margin:3px 0}
table{border-collapse:collapse;font-size:13px}th,td{padding:2px 8px;white-space:nowrap;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child,th:nth-child(2),td:nth-child(2){text-align:left}thead th{border-bottom:2px solid #333}
.no-data{color:#777;font-style:italic;font-size:12px}caption{text-align:left;font-size:12px;color:#555}
#more,#workflow{padding:4px 20px 12px;border-top:1px solid #ccc}details{margin:4px 0}summary{cursor:pointer}
@media print{#more,#workflow{display:none}#first{grid-template-columns:1fr}}
</style>"""
# The printed page: A4, the first view only, the column-width figures three to a row; a script at the end zooms the
# sheet down until it fits one page (the figures' sizes are fixed by their width/height attributes, so the layout
# is known before any image decodes).
PRINT_STYLE = """<style>
@page{size:A4;margin:10mm}body{font-family:system-ui,sans-serif;margin:0;color:#222}
#sheet{width:190mm;height:276mm;overflow:hidden}#fit{font-size:9pt;transform-origin:0 0}
h1{font-size:14pt;margin:0 0 1mm}h2{font-size:11pt;margin:2mm 0 1mm}h3{font-size:9.5pt;margin:0}
p{margin:0.5mm 0}.lede,.note,.question{color:#555;font-size:8pt}.question{font-style:italic}
table{border-collapse:collapse;font-size:8.5pt}th,td{padding:0.3mm 2.5mm;text-align:right;border-bottom:0.2mm solid #ccc}
th:first-child,td:first-child,th:nth-child(2),td:nth-child(2){text-align:left}thead th{border-bottom:0.4mm solid #333}
.grid{display:grid;grid-template-columns:repeat(3,1fr);gap:3mm}.study img{width:100%;height:auto}
.answer{font-size:7.5pt}ul.answer{padding-left:4mm;margin:0.5mm 0}.no-data{color:#777;font-style:italic;font-size:7.5pt}
</style>"""
FIT_SCRIPT = """<script>
(function(){const sheet=document.getElementById('sheet'),fit=document.getElementById('fit');let z=1;
while(fit.scrollHeight*z>sheet.clientHeight&&z>0.3){z*=0.97;fit.style.transform='scale('+z+')';
fit.style.width=(100/z)+'%';}})();
</script>"""
WORKFLOW_REPORT = "report_workflow.html"


def _png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height in pixels, from its IHDR chunk."""
    return struct.unpack(">II", data[16:24])


def image(path: Path, alt: str) -> str:
    """An <img> holding the PNG as a data URI, with its pixel size (so the layout does not wait for decoding)."""
    data = path.read_bytes()
    w, h = _png_size(data)
    return (f'<img alt="{escape(alt)}" width="{w}" height="{h}" '
            f'src="data:image/png;base64,{base64.b64encode(data).decode()}">')


def no_data(why: str) -> str:
    return f'<p class="no-data">{escape(why)}</p>'


def _md_inline(text: str) -> str:
    """A findings item's markdown (only **bold** is used) as HTML."""
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escape(text))


def _sections(md: str) -> list[tuple[str, list[str]]]:
    """findings.md as (heading, items): the heading line `**...**:` ('' before the first), each `- ` item."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for line in md.splitlines():
        if line.startswith("**") and line.rstrip().endswith(":"):
            out.append((line.strip("*: "), []))
        elif line.startswith("- "):
            out[-1][1].append(line[2:].strip())
    return [s for s in out if s[1]]


def first_sentence(text: str) -> str:
    """Up to the first '. ' followed by a capital letter outside parentheses (the gate items are several)."""
    depth = 0
    for i, c in enumerate(text):
        depth += (c in "([") - (c in ")]")
        if c == "." and depth == 0 and re.match(r"\.\s+[A-Z]", text[i:i + 3]):
            return text[:i + 1]
    return text


def answer_items(md: str, study: dict) -> list[str]:
    """The findings that answer the study's question, as findings.md words them: a study of gated models over
    context lengths (main figure gates_vs_nstep): the first gate's trend, its first sentence; a study of
    implementations: each contrast against nn.LSTM/nn.GRU and the bias ablation; else the best cell chosen on valid
    (the findings' first item)."""
    sections = _sections(md)
    if not sections:
        return []
    by_head = {head.split(" ")[0]: items for head, items in sections}
    if layout.main_figure(study) == "gates_vs_nstep" and "Gates" in by_head:
        return [first_sentence(by_head["Gates"][0])]
    if "Implementations," in by_head and len({k.impl for k in expand_study(study)}) > 1:
        return by_head["Implementations,"]
    return sections[0][1][:1]


def _table_html(path: Path) -> str | None:
    """The first <table> of one of lmgrid's HTML pages (table.html, embeddings.html), or None."""
    m = re.search(r"<table.*?</table>", path.read_text(encoding="utf-8"), re.S) if path.is_file() else None
    return m.group(0) if m else None


def _no_data_line(path: Path) -> str | None:
    m = re.search(r"<p class='no-data'>.*?</p>|<p class=\"no-data\">.*?</p>", path.read_text(encoding="utf-8"),
                  re.S) if path.is_file() else None
    return m.group(0).replace("'", '"') if m else None


def summary_section(csv: Path) -> str:
    table = headline(pd.read_csv(csv))
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in r) + "</tr>"
                   for r in table.itertuples(index=False))
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    return ('<section id="summary"><h2>Each model\'s best cell</h2>'
            f'<table id="summary-table"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
            '<p class="note">Chosen on valid: the cell with the lowest valid perplexity (mean over seeds), shown with '
            "that cell's test perplexity; test takes no part in the choice. Perplexity counts every word and one "
            "&lt;/s&gt; per sentence.</p></section>")


def study_card(study_dir: Path, name: str, study: dict, column: bool = False) -> str:
    """One study in the first view: its name, question, answering findings and main figure (or why none)."""
    parts = [f'<article class="study" id="study-{escape(name)}"><h3>{escape(name)}</h3>']
    if study.get("description"):
        parts.append(f'<p class="question">{escape(study["description"])}</p>')
    findings = study_dir / "findings.md"
    items = answer_items(findings.read_text(encoding="utf-8"), study) if findings.is_file() else []
    if not items:
        parts.append(no_data(f"No findings: {findings} is missing or lists none."))
    elif len(items) == 1:
        parts.append(f'<p class="answer">{_md_inline(items[0])}</p>')
    else:
        parts.append('<ul class="answer">' + "".join(f"<li>{_md_inline(i)}</li>" for i in items) + "</ul>")
    main = layout.main_figure(study)
    png = study_dir / f"{main}{layout.COLUMN_SUFFIX if column else ''}.png" if main else None
    if main is None:
        parts.append(no_data("No main figure: the study varies neither the context length nor the depth (its "
                             "table below and its training curves in the workflow report show it)."))
    elif not png.is_file():
        parts.append(no_data(f"No main figure: {png.name} is not made yet."))
    else:
        parts.append(image(png, f"study {name}: {layout.REPORT_KINDS[main][2]}"))
    return "".join(parts) + "</article>"


def _study_details(study_dir: Path, name: str) -> str:
    """Below the first view: the study's table, its findings in full, its word vectors (or why there is no table)."""
    out = [f"<details><summary>Study {escape(name)}: table, findings, word vectors</summary>"]
    table = _table_html(study_dir / "table.html")
    out.append(table or no_data(f"No table: {name}/table.html is missing."))
    findings = study_dir / "findings.md"
    if findings.is_file():
        for head, items in _sections(findings.read_text(encoding="utf-8")):
            out.append((f"<p><strong>{escape(head)}</strong></p>" if head else "")
                       + "<ul>" + "".join(f"<li>{_md_inline(i)}</li>" for i in items) + "</ul>")
    emb = study_dir / "embeddings.html"
    if emb.is_file():
        out.append(_table_html(emb) or _no_data_line(emb) or no_data("No word-vector table."))
    return "".join(out) + "</details>"


def _header(corpus: str, summary: pd.DataFrame, studies: dict) -> str:
    runs = int((summary["model"] != "oracle").sum())
    return (f"<header><h1>lmgrid results: {escape(corpus)}</h1><p class=\"lede\">{runs} runs in {len(studies)} "
            f"stud{'y' if len(studies) == 1 else 'ies'} on corpus {escape(corpus)}; every number below is read from "
            f"results/{escape(corpus)}/ (summary.csv, each study's findings.md and figures).</p></header>")


def first_view(base: Path, studies: dict) -> str:
    """What the page opens on: the summary table beside the studies (question, answer, main figure)."""
    cards = "".join(study_card(base / "studies" / n, n, s) for n, s in studies.items())
    return (f'<div id="first">{summary_section(base / "summary.csv")}<section id="studies"><h2>Studies</h2>'
            f'<div class="grid">{cards}</div></section></div>')


def budget_section(base: Path) -> str:
    """The equal-compute study (results/<corpus>/budget/, lmgrid.analysis.budget), when the config is one: its figure
    (one line per architecture through the widths chosen on valid), its findings (per budget, the chosen widths and
    which architectures are separated by their intervals) and its table (every width, the choice marked); '' when
    the run has no budget folder."""
    folder = base / "budget"
    if not folder.is_dir():
        return ""
    png = folder / "ppl_vs_compute.png"
    parts = ['<section id="budget" class="study"><h2>Equal compute</h2>',
             image(png, "test PPL against training compute, one line per architecture at its chosen widths")
             if png.is_file() else no_data("No figure: ppl_vs_compute.png is not made yet.")]
    findings = folder / "findings.md"
    if findings.is_file():
        items = [i for _, found in _sections(findings.read_text(encoding="utf-8")) for i in found]
        parts.append('<ul class="answer">' + "".join(f"<li>{_md_inline(i)}</li>" for i in items) + "</ul>")
    table = _table_html(folder / "compute.html")
    if table:
        parts.append(f"<details><summary>Every budget, architecture and width</summary>{table}</details>")
    return "".join(parts) + "</section>"


def workflow_section(workflow_report: str) -> str:
    """The end of the page: the link to Snakemake's own report."""
    return ('<section id="workflow"><h2>Workflow and run details</h2><p>Snakemake\'s report of this run: '
            f'<a id="workflow-link" href="{escape(workflow_report)}">{escape(workflow_report)}</a> (the job '
            "graph, every table and figure of every study with its caption, each job's run time).</p></section>")


def page(results: Path, corpus: str, studies: dict, workflow_report: str = WORKFLOW_REPORT) -> str:
    """The whole report page as HTML (results: the folder holding <corpus>/)."""
    base = results / corpus
    summary = pd.read_csv(base / "summary.csv")
    shown = display_table(summary)
    runs_table = shown.to_html(index=False, border=0, table_id="runs-table")
    more = ('<section id="more"><h2>Every run and every study</h2>'
            f"<details><summary>All {len(shown)} rows of summary.csv</summary>{runs_table}</details>"
            + "".join(_study_details(base / "studies" / n, n) for n in studies) + "</section>")
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>lmgrid results: "
            f"{escape(corpus)}</title>{STYLE}</head><body>{_header(corpus, summary, studies)}"
            f"{first_view(base, studies)}{budget_section(base)}{more}{workflow_section(workflow_report)}"
            "</body></html>\n")


def print_page(results: Path, corpus: str, studies: dict) -> str:
    """The first view for one printed A4 page: the summary table, then the studies three to a row with their
    column-width figures."""
    base = results / corpus
    csv = base / "summary.csv"
    cards = "".join(study_card(base / "studies" / n, n, s, column=True) for n, s in studies.items())
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>lmgrid results: "
            f"{escape(corpus)}</title>{PRINT_STYLE}</head><body><div id=\"sheet\"><div id=\"fit\">"
            f"{_header(corpus, pd.read_csv(csv), studies)}{summary_section(csv)}<section id=\"studies\">"
            f"<h2>Studies</h2><div class=\"grid\">{cards}</div></section></div></div>{FIT_SCRIPT}</body></html>\n")
