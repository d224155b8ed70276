"""The Snakemake HTML report: the aggregate rule runs through Snakemake on fixture runs (so the report has the
jobs' metadata), then `snakemake --report` embeds every study's table and figures, under captions.

The studies here are not in config.yaml: a new study needs config only.  `--allowed-rules aggregate study_grids`
keeps Snakemake from retraining the fixture runs (it would otherwise rebuild corpus, vocabulary and models).
"""
from __future__ import annotations

import base64
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
from lmgrid.analysis import layout
from lmgrid.analysis.fixtures import write_fake_results
from lmgrid.run.key import expand_study

pytestmark = pytest.mark.full  # Snakemake runs (tests/tiers.py)

CORPUS = "rep"
STUDIES = {
    "ngram_orders": {"arch": ["kn", "mkn"], "n_step": [2, 3], "description": "a study that is not in config.yaml"},
    "my_depth": {"arch": ["ffnn"], "n_step": [3], "layers": [1, 2], "seed": [1, 2]},
}


def snakemake(cwd, *args):
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "-d", str(cwd),
                           "--cores", "1", "--allowed-rules", "aggregate", "study_grids", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    wd = tmp_path_factory.mktemp("report")
    config = yaml.safe_load((REPO / "config.yaml").read_text())  # every section the schema requires
    config["corpus"]["name"] = CORPUS
    config["studies"] = STUDIES
    (wd / "config.yaml").write_text(yaml.safe_dump(config))
    write_fake_results(wd, CORPUS, STUDIES)
    return wd


def test_report_holds_every_study_table_and_figure(workdir):
    targets = [p.format(corpus=CORPUS) for p in layout.all_outputs(CORPUS, STUDIES)]
    snakemake(workdir, "--", *targets)
    assert all((workdir / t).is_file() for t in targets)
    snakemake(workdir, "--report", "report.html", "--", *targets)
    html = (workdir / "report.html").read_text(encoding="utf-8")
    for name, study in STUDIES.items():
        key = f"results/{CORPUS}/studies/{name}/table.html"
        m = re.search(re.escape(f'"{key}"') + r': \{.*?"data:text/html;charset=utf8;filename=table.html;base64,'
                      r'([A-Za-z0-9+/=]+)"', html, re.S)
        assert m, f"{key} is not in the report"
        table = base64.b64decode(m.group(1)).decode("utf-8")
        # Every configuration's mean test PPL, computed from the fixture files, is in the embedded table.
        groups = {}
        for k in expand_study(study):
            ppl = yaml.safe_load((workdir / k.run_dir(CORPUS) / "metrics.json").read_text())["test"]["ppl"]
            groups.setdefault((k.arch, k.n_step, k.layers), []).append(ppl)
        for values in groups.values():
            assert f"{statistics.fmean(values):.2f}" in table
        assert f"Study {name}" in table
        for fig in ("ppl_vs_nstep.png" if name == "ngram_orders" else "ppl_vs_layers.png",):
            assert f'"results/{CORPUS}/studies/{name}/{fig}"' in html
    assert "Test perplexity against the context length n" in html  # a caption
    assert "a study that is not in config.yaml" in html  # workflow.rst lists the studies


def _embedded(html: str, key: str) -> str:
    """The decoded text of one embedded HTML result of the report."""
    m = re.search(re.escape(f'"{key}"') + r': \{.*?"data:text/html;charset=utf8;filename=[^;]+;base64,'
                  r'([A-Za-z0-9+/=]+)"', html, re.S)
    assert m, f"{key} is not in the report"
    return base64.b64decode(m.group(1)).decode("utf-8")


def report_text_problems(text: str) -> list[str]:
    """Text of the report that reads like code: backticks, '1 seeds', 'layer(s)'."""
    return ["backtick"] * ("`" in text) + re.findall(r"\b1 (?:seeds|layers|runs)\b|\(s\)", text)


def test_report_findings_read_as_text_and_params_stay_short(workdir):
    """The findings embedded in the report (a one-seed n-gram study and a two-seed one) read as text: no backtick,
    '1 seed' not '1 seeds'; no job shows the studies' JSON among its params (the aggregation reads studies.json).
    Control, run here: the same findings with the old wording ('1 seeds') fail the check."""
    targets = [p.format(corpus=CORPUS) for p in layout.all_outputs(CORPUS, STUDIES)]
    if not (workdir / "report.html").is_file():
        snakemake(workdir, "--", *targets)
        snakemake(workdir, "--report", "report.html", "--", *targets)
    html = (workdir / "report.html").read_text(encoding="utf-8")
    texts = {name: _embedded(html, f"results/{CORPUS}/studies/{name}/findings.html") for name in STUDIES}
    assert {name: report_text_problems(t) for name, t in texts.items()} == {name: [] for name in STUDIES}
    assert "over 1 seed " in texts["ngram_orders"] or "over 1 seed (" in texts["ngram_orders"]
    assert "studies=" not in html and "corpus=rep" in html  # the aggregation job's params: short, and shown
    assert report_text_problems(texts["ngram_orders"].replace("1 seed", "1 seeds")) == ["1 seeds"]
