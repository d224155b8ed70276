"""Each override example of docs/configuration.md ("Configuration and overrides"; README.md links it) through the real
command line, dry-run only: the shell's quoting, then make's (`make dry`, which passes CONFIG/SET to Snakemake exactly as `make run` does), then
Snakemake's --config parsing, then lmgrid.orchestration.config's."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lmgrid.orchestration.config import parse_assignments

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)


def readme_examples() -> list[str]:
    text = (REPO / "docs" / "configuration.md").read_text()
    block = text.split("Override settings without editing the file", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    return [line for line in block.splitlines() if line.strip()]


def test_make_run_and_make_dry_pass_the_same_arguments():
    """`make dry` stands for `make run` in the test below: both hand Snakemake the same $(SMKCFG) (what follows it
    only sets how much the terminal shows)."""
    rules = (REPO / "Makefile").read_text()
    run = re.search(r"^run:.*\n((?:\t.*\n)+)", rules, re.M).group(1).splitlines()
    dry = re.search(r"^dry:.*\n((?:\t.*\n)+)", rules, re.M).group(1).splitlines()
    # Each: the config's scales first (lmgrid.orchestration.scales, with the same CONFIG, and SET from the environment), then the
    # config itself.
    assert re.search(r"scales-run \$\(if \$\(CONFIG\),--configfile \$\(CONFIG\)\) -- \$\(SMK\) --cores \$\(CORES\)",
                     run[0]), run
    assert re.search(r"scales-run \$\(if \$\(CONFIG\),--configfile \$\(CONFIG\)\) -- \$\(SMK\) --dry-run --cores "
                     r"\$\(CORES\)", dry[0]), dry
    assert re.search(r"\$\(SMK\) --cores \$\(CORES\) \$\(SMKCFG\)( \$\(SMKOUT\))?$", run[1]), run
    assert re.search(r"\$\(SMK\) --dry-run --cores \$\(CORES\) \$\(SMKCFG\)( \$\(DRYOUT\))?$", dry[1]), dry


@pytest.mark.full
@pytest.mark.skipif(not (VENV / "bin" / "snakemake").is_file(), reason="snakemake is not in this environment")
@pytest.mark.parametrize("line", readme_examples())
def test_readme_override_example_dry_runs(line, tmp_path):
    """kills: `set=` split at every blank (shlex), so `studies={ctx: {arch: [mkn, lstm], ...}}` breaks apart."""
    (tmp_path / "my.yaml").write_text("train: {epochs: 3}\n")
    cmd = line.replace("CONFIG=my.yaml", f"CONFIG={tmp_path / 'my.yaml'}")
    if cmd.startswith("make run "):  # the stamp is up to date by fiat: a test never installs anything
        stamp = VENV / ".installed-stamp"
        cmd = cmd.replace("make run ", f"make --no-print-directory -o {stamp} dry VENV={VENV} ", 1)
    else:
        assert cmd.startswith(".venv/bin/snakemake "), line
        cmd = cmd.replace(".venv/bin/snakemake ", f"{VENV}/bin/snakemake --dry-run ", 1)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "LMGRID_WARM": "0"}
    r = subprocess.run(["bash", "-c", cmd], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "error" not in out.lower(), f"{cmd}\n{out[-2000:]}"
    assert "This was a dry-run" in out or "Nothing to be done" in out, out[-2000:]


def test_the_readme_values_parse_as_written():
    assert parse_assignments("studies={ctx: {arch: [mkn, lstm], n_step: [2, 5]}}") == [
        (["studies"], {"ctx": {"arch": ["mkn", "lstm"], "n_step": [2, 5]}})]
    assert parse_assignments("train.epochs=5 train.per_arch.gru.lr=0.02") == [
        (["train", "epochs"], 5), (["train", "per_arch", "gru", "lr"], 0.02)]
    assert parse_assignments("studies.context.description='Test PPL against n_step'") == [
        (["studies", "context", "description"], "Test PPL against n_step")]
    assert parse_assignments("a={k: 'x y'} b=\"c d\"") == [(["a"], {"k": "x y"}), (["b"], "c d")]


def test_a_set_value_whose_end_quote_snakemake_stripped_gets_it_back():
    """Snakemake's --config strips the quotes at both ends of a value: `set="a='x y'"` arrives as `a='x y`."""
    from lmgrid.orchestration.config import apply_overrides

    config: dict = {}
    apply_overrides(config, cli_config={"set": "studies.s.description='x y"})
    assert config["studies"]["s"]["description"] == "x y"
