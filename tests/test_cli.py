"""The `lmgrid` command line as a user meets it: grouped help, --version, one-line errors for bad counts, and help
on every option."""
from __future__ import annotations

import argparse
import contextlib
import io
import re

import pytest

import lmgrid
from lmgrid import cli

RULE_COMMANDS = {"warm-server", "synth", "verify", "corpus", "vocab", "oracle", "summary", "reference",
                 "ngram-counts", "ngram", "train", "aggregate", "mlflow-sync", "embeddings", "token-scores", "combine",
                 "combinations", "adapt", "scales-run", "scales-compare", "reset-scores", "budget-compare"}


def run(argv: list[str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of parsing `argv` as `lmgrid` does (nothing is run: a parse that succeeds is
    status 0)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.build_parser().parse_args(argv)
            status = 0
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
    return status, out.getvalue(), err.getvalue()


def help_groups(text: str) -> dict[str, list[str]]:
    """The commands `lmgrid --help` lists under each heading ending in ':' (in order of appearance)."""
    groups, current = {}, None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            current = line[:-1]
            groups[current] = []
        elif current and (m := re.match(r"^  (\S+)\s{2,}\S", line)):
            groups[current].append(m[1])
    return groups


def grouped_as_expected(text: str) -> bool:
    groups = help_groups(text)
    user = groups.get("commands you run", [])
    rules = next((v for k, v in groups.items() if k.startswith("commands the workflow's rules run")), [])
    return (list(groups).index("commands you run") < len(groups) - 1 if user else False) and \
        set(user) == set(cli.USER_COMMANDS) == {"status", "plan", "score", "generate", "embed", "docs"} and set(rules) == RULE_COMMANDS


def test_help_lists_the_user_commands_apart_from_the_rules_ones(monkeypatch):
    """`lmgrid --help` lists status, plan, score, generate and embed under "commands you run", before every command a rule
    runs (warm-server, ngram-counts, mlflow-sync, ...), each with its help.  Negative controls, the mutations they
    kill: argparse's one ungrouped listing (no grouping step); an internal command (warm-server) among the user's."""
    status, out, _ = run(["--help"])
    assert status == 0 and grouped_as_expected(out), out
    assert "usage: lmgrid [-h] [--version] COMMAND ..." in out
    with monkeypatch.context() as m:
        m.setattr(cli, "_group_commands", lambda p, sub: None)
        assert not grouped_as_expected(run(["--help"])[1])
    with monkeypatch.context() as m:
        m.setattr(cli, "USER_COMMANDS", (*cli.USER_COMMANDS, "warm-server"))
        assert not grouped_as_expected(run(["--help"])[1])


def prints_version(argv=("--version",)) -> bool:
    status, out, _ = run(list(argv))
    return status == 0 and out.strip() == f"lmgrid {lmgrid.__version__}"


def test_version(monkeypatch):
    """`lmgrid --version` prints `lmgrid <version>` (lmgrid.__version__, which pyproject.toml reads) and exits 0.
    Negative control, the mutation it kills: no --version option (exit 2)."""
    from importlib import metadata

    assert prints_version()
    assert metadata.version("lmgrid") == lmgrid.__version__
    original = cli.Parser.add_argument
    monkeypatch.setattr(cli.Parser, "add_argument",
                        lambda self, *names, **kw: None if "--version" in names else original(self, *names, **kw))
    assert not prints_version()


BAD = {("plan", "--cores", "0"): "lmgrid plan: error: argument --cores: must be at least 1, got 0",
       ("status", "--cores", "-2"): "lmgrid status: error: argument --cores: must be at least 1, got -2",
       ("generate", "--run", "r", "-n", "0"): "lmgrid generate: error: argument -n: must be at least 1, got 0",
       ("generate", "--run", "r", "--max-tokens", "0"):
           "lmgrid generate: error: argument --max-tokens: must be at least 1, got 0",
       ("generate", "--run", "r", "--top-k", "-1"):
           "lmgrid generate: error: argument --top-k: must be at least 0, got -1",
       ("generate", "--run", "r", "--temperature", "0"):
           "lmgrid generate: error: argument --temperature: must be above 0, got 0"}


def one_line_errors() -> dict[tuple, bool]:
    """Per bad command line: does it stop at parsing (exit 2) with one line, the expected message?"""
    out = {}
    for argv, message in BAD.items():
        status, _, err = run(list(argv))
        out[argv] = status == 2 and len(err.splitlines()) == 1 and err.startswith(message)
    return out


def test_bad_counts_are_one_line_errors(monkeypatch):
    """`plan --cores 0`, `generate -n 0` and the like stop before anything runs with one line naming the command,
    the option and the value.  Negative controls, the mutations they kill: the counts typed as plain int (accepted:
    `generate -n 0` printed nothing and exited 0); argparse's own error (usage lines, then the error)."""
    assert all(one_line_errors().values()), one_line_errors()
    with monkeypatch.context() as m:
        m.setattr(cli, "count", lambda low: int)
        m.setattr(cli, "positive", float)
        assert not any(one_line_errors().values())
    with monkeypatch.context() as m:
        m.setattr(cli.Parser, "error", argparse.ArgumentParser.error)
        assert not any(one_line_errors().values())


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """`command option` for every option or argument of every command that has no help text."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [f"{name} {(a.option_strings or [a.dest])[0]}" for name, p in sub.choices.items() for a in p._actions
            if not isinstance(a, argparse._HelpAction) and not a.help]


def test_every_option_has_help():
    """Every option of every command says what it is.  Negative control, the mutation it kills: an option added
    without help (one is added to `generate` here, and found)."""
    parser = cli.build_parser()
    assert undocumented(parser) == []
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["generate"].add_argument("--undocumented")
    assert undocumented(parser) == ["generate --undocumented"]
