"""`uv pip install ARGS` into a virtual environment with pip's own configuration, for the Makefile's install.

uv reads neither pip.conf nor the PIP_* variables, so on its own it can install other builds than `pip install ARGS`
would: where pip's find-links folder holds torch's +cpu wheel, uv would fetch the CUDA build from the index instead.
This hands uv what `<python> -m pip config list` reports (indexes, local wheel folders, constraints, certificate,
trusted hosts, timeout, proxy), pip's rule of taking the best version over all indexes and pip's compiling of the
bytecode, so both install the same set. A pip option that would change what is installed and has no translation here stops it with exit status 3 and one
line naming the option: the Makefile then installs with pip.

usage: python tools/uv_pip.py UV PYTHON ARGS...   (UV: the uv binary; PYTHON: the venv's interpreter)
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

# pip options that change only how pip talks or reports, not what it installs: nothing to hand on.
HARMLESS = {"disable-pip-version-check", "progress-bar", "quiet", "verbose", "no-color", "no-input", "log", "retries",
            "cache-dir", "no-cache-dir", "root-user-action", "no-warn-script-location", "no-python-version-warning"}
LISTS = {"extra-index-url", "find-links", "constraint", "trusted-host"}  # pip splits these at blanks
NO_TRANSLATION = 3


def pip_config(python: str) -> dict[str, str]:
    """pip's settings as `python -m pip config list` reports them (files merged, PIP_* variables as `:env:.name`),
    each option once, with pip's precedence: a variable over the install section over the global one."""
    out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
    rank = {":env:": 0, "install": 1, "global": 2}
    best: dict[str, tuple[int, str]] = {}
    for line in out.splitlines():
        key, _, raw = line.partition("=")
        section, _, option = key.rpartition(".")
        if section not in rank or not raw:
            continue  # another command's section (download, wheel, ...)
        value = ast.literal_eval(raw)  # pip prints each value as a quoted Python string
        if option not in best or rank[section] < best[option][0]:
            best[option] = (rank[section], value)
    return {option: value for option, (_, value) in best.items()}


def is_true(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def uv_options(config: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's arguments and environment variables for pip's `config`; ValueError names an option with no translation."""
    args = ["--index-strategy", "unsafe-best-match"]  # pip's rule: the highest version over every index and folder
    # No bytecode is compiled here (pip's default is to compile it): compiling every installed module, 17,055 files,
    # was most of a fresh install's time (52 of its 70 s under first-run's AVX2 emulation, 2026-12-02), and most of
    # them are never imported.  The Makefile exports PYTHONDONTWRITEBYTECODE empty, so the venv's processes write
    # the bytecode of what they import, once; with it set, each process would compile torch, Lightning, MLflow and
    # Snakemake again (16 CPU-seconds instead of 6, measured 2026-11-27).
    env: dict[str, str] = {}
    for option, value in sorted(config.items()):
        items = value.split() if option in LISTS else [value]
        if option == "index-url":
            args += ["--index-url", value]
        elif option == "extra-index-url":
            args += [a for url in items for a in ("--extra-index-url", url)]
        elif option == "find-links":
            args += [a for place in items for a in ("--find-links", place)]
        elif option == "constraint":
            args += [a for path in items for a in ("--constraint", path)]
        elif option == "trusted-host":
            args += [a for host in items for a in ("--allow-insecure-host", host)]
        elif option == "no-index":
            args += ["--no-index"] if is_true(value) else []
        elif option == "no-compile":
            pass  # uv compiles nothing anyway (above)
        elif option == "pre":
            args += ["--prerelease", "allow"] if is_true(value) else []
        elif option == "cert":
            env["SSL_CERT_FILE"] = value
        elif option in {"timeout", "default-timeout"}:
            env["UV_HTTP_TIMEOUT"] = value
        elif option == "proxy":
            env["HTTPS_PROXY"] = env["HTTP_PROXY"] = value
        elif option not in HARMLESS:
            raise ValueError(f"pip's setting {option}={value!r} has no uv translation here")
    return args, env


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    uv, python, rest = argv[0], argv[1], argv[2:]
    try:
        args, env = uv_options(pip_config(python))
    except ValueError as err:
        print(f"tools/uv_pip.py: {err}; install with pip", file=sys.stderr)
        return NO_TRANSLATION
    command = [uv, "pip", "install", "--python", python, *args, *rest]
    print("+", " ".join(command), flush=True)  # into the install log, for the record
    return subprocess.run(command, env={**os.environ, **env}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
