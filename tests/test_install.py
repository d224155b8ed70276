"""The Makefile's install (issue 46): uv installs the locks with pip's configuration handed over by tools/uv_pip.py,
and pip installs them where uv cannot be installed or fails. The Makefile runs here against a fake virtual
environment whose python and uv only record their calls: nothing is downloaded."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("uv_pip", REPO / "tools" / "uv_pip.py")
uv_pip = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_pip)

# What `pip config list` prints on a machine whose pip finds torch's +cpu wheel in a local folder.
PIP_CONFIG = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
download.find-links='/elsewhere'
global.cert='/other.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/ignored-because-env-wins'
install.index-url='https://mirror.example/simple'
"""


def pairs(args: list[str], flag: str) -> list[str]:
    return [value for name, value in zip(args, args[1:]) if name == flag]


def test_pip_configuration_reaches_uv(monkeypatch):
    """Kills: a lost option (find-links dropped: uv fetches the CUDA torch from the index instead of the +cpu wheel;
    one extra index of two), the wrong precedence (the global or another command's value over a PIP_* variable),
    uv's own first-index rule instead of pip's best version over all indexes, and every installed module's bytecode
    compiled at install (17,055 files, most never imported; the venv's processes write what they import:
    test_the_venv_processes_write_their_bytecode)."""
    monkeypatch.setattr(uv_pip.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=PIP_CONFIG, stderr=""))
    args, env = uv_pip.uv_options(uv_pip.pip_config("python"))
    assert pairs(args, "--find-links") == ["/opt/wheels"]
    assert pairs(args, "--extra-index-url") == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert pairs(args, "--index-url") == ["https://mirror.example/simple"]
    assert pairs(args, "--constraint") == ["/etc/xdg/pip/constraints.txt"]
    assert pairs(args, "--index-strategy") == ["unsafe-best-match"]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}
    assert "--compile-bytecode" not in args
    assert "--compile-bytecode" not in uv_pip.uv_options({"no-compile": "yes"})[0]


def test_the_venv_processes_write_their_bytecode(tmp_path):
    """The Makefile's recipes run with PYTHONDONTWRITEBYTECODE empty, where the machine sets it (as ours do), so the
    first import of a module writes its bytecode and later processes read it.  Kills: the Makefile's export removed
    (the install compiles no bytecode, so each process would compile torch and the rest again); seen failing."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run(["make", "-s", "-f", str(Path(__file__).resolve().parents[1] / "Makefile"), "--eval",
                        "shown:; @echo \"[$$PYTHONDONTWRITEBYTECODE]\"", "shown"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_pip_option_uv_is_not_told_stops_it(monkeypatch, capsys):
    """A setting that changes what pip installs and that uv would silently ignore: exit 3 and one line naming it, so
    the Makefile installs with pip. Kills: unknown options passed over in silence (uv installs other builds)."""
    monkeypatch.setattr(uv_pip, "pip_config", lambda python: {"only-binary": ":all:", "quiet": "1"})
    ran = []
    monkeypatch.setattr(uv_pip.subprocess, "run", lambda *a, **k: ran.append(a))
    assert uv_pip.main(["uv", "python", "-r", "requirements.lock"]) == uv_pip.NO_TRANSLATION
    assert ran == []
    assert capsys.readouterr().err.strip().splitlines() == [
        "tools/uv_pip.py: pip's setting only-binary=':all:' has no uv translation here; install with pip"]


FAKE_PYTHON = """#!/bin/sh
# a venv's python that records its calls: pip config, pip install (--target: uv's own install), tools/uv_pip.py
echo "python $*" >> "$CALLS"
case "$1 $2 $3" in
"-m pip config") echo "global.find-links='/opt/wheels'" ;;
"-m pip install")
  case "$*" in *--target*)
    [ -n "$UV_INSTALLABLE" ] || exit 1
    mkdir -p "$VENV/.uv/bin"
    printf '#!/bin/sh\\necho "uv $*" >> "$CALLS"\\nexit $UV_RC\\n' > "$VENV/.uv/bin/uv"
    chmod +x "$VENV/.uv/bin/uv" ;;
  esac ;;
*) exec "$REAL_PYTHON" "$@" ;;
esac
"""


def make_install(tmp_path: Path, makefile: Path, *, uv_installable: bool, uv_rc: int):
    """`make <venv>/.installed-stamp` with the fake python; make's result and the python's and uv's calls."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "CALLS": str(calls), "VENV": str(venv), "REAL_PYTHON": sys.executable,
           "UV_INSTALLABLE": "1" if uv_installable else "", "UV_RC": str(uv_rc)}
    done = subprocess.run(["make", "-s", "-f", str(makefile), f"VENV={venv}", f"{venv}/.installed-stamp"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    return done, calls.read_text().splitlines() if calls.exists() else []


def pip_installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("python -m pip install") and "--target" not in c]


@pytest.mark.parametrize("case", ["uv works", "uv fails", "no uv"])
def test_uv_installs_and_pip_stands_in(tmp_path, case):
    """uv installs the lock and lmgrid itself with pip's configuration and pip installs nothing; where uv fails or
    cannot be installed, pip installs both, with one line saying so. A negative control runs the Makefile with
    the pip fallback removed and sees the failing case break. Kills: uv not used, pip's configuration not handed
    to it, the fallback removed, the fallback silent."""
    uv_rc = 1 if case == "uv fails" else 0
    done, calls = make_install(tmp_path, REPO / "Makefile", uv_installable=case != "no uv", uv_rc=uv_rc)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "venv" / ".installed-stamp").exists()
    uv_calls = [c for c in calls if c.startswith("uv pip install")]
    if case == "uv works":
        assert len(uv_calls) == 2 and pip_installs(calls) == [] and done.stdout == ""
        assert "--find-links /opt/wheels" in uv_calls[0] and uv_calls[0].endswith("-r requirements.lock")
        assert uv_calls[1].endswith("--no-deps -e .")
        return
    assert [c.split("--disable-pip-version-check ")[1] for c in pip_installs(calls)] == \
        ["-r requirements.lock", "--no-deps -e ."]
    said = done.stdout.strip().splitlines()
    if case == "no uv":
        assert uv_calls == [] and len(said) == 1 and said[0].startswith("uv 0.13.8 could not be installed")
        return
    assert said == ["uv did not install -r requirements.lock (its output in "
                    f"{tmp_path}/venv/pip-install.log); pip installs it",
                    f"uv did not install --no-deps -e . (its output in {tmp_path}/venv/pip-install.log); "
                    "pip installs it"]
    # negative control: the same Makefile without its fallback to pip fails here
    text = (REPO / "Makefile").read_text()
    assert "\t$(PIP); fi" in text, "the fallback this control removes was rewritten"
    mutated = tmp_path / "Makefile.nofallback"
    mutated.write_text(text.replace("\t$(PIP); fi", "\texit 1; fi"))
    (tmp_path / "venv").rename(tmp_path / "venv-before")
    broken, _ = make_install(tmp_path, mutated, uv_installable=True, uv_rc=1)
    assert broken.returncode != 0
