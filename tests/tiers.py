"""The suite's two tiers, and the guard that keeps whole pipelines out of the fast one (a pytest plugin, loaded by
conftest.py).

`make test` runs the fast tier, `pytest -m "not full"`: unit and component tests that start no Snakemake, read no
Penn Treebank and start no server.  `make test-full` (and .ci/run) runs every test.  A test is in the full tier by
its marker: `@pytest.mark.full`, or `slow` or `ptb`, which imply it.

The guard runs in every tier.  A test that is not marked `full` fails, with one line naming what it did, when during
its own setup or call, or during the setup of any fixture it uses:
  - a Snakemake process starts (a `snakemake` program or shell line, `python -m snakemake`, or `lmgrid plan`,
    `status` or `scales-run`, which build Snakemake's DAG in the child),
  - Snakemake's API is entered in this process (snakemake.api.SnakemakeApi), or
  - the test uses the Penn Treebank (the `ptb_dir` fixture).
The full tier runs every test, so CI catches a fast test that grew into a pipeline even though `make test` never
selects it.  Measured by behaviour rather than by reading the source: a helper or fixture that starts Snakemake is
caught wherever it hides.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

FULL = "full"
IMPLY_FULL = ("slow", "ptb")
# lmgrid's user commands that build Snakemake's DAG in their own process (lmgrid.orchestration.dryrun)
DAG_COMMANDS = frozenset({"plan", "status", "scales-run"})
# Fixtures that are the full tier by what they are, before anything runs
HEAVY_FIXTURES = {"ptb_dir": "reads the Penn Treebank"}


def _is_folder(word: str) -> bool:
    """Whether a command-line word is a path to an existing folder; a word that cannot be a path (a `python -c`
    script longer than a file name may be) is not one."""
    if "/" not in word:
        return False
    try:
        return Path(word).is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte
        return False


def starts_snakemake(args) -> bool:
    """Whether a command line (a list, or a shell string) runs Snakemake."""
    if isinstance(args, (bytes, Path)):
        args = str(args)
    if isinstance(args, str):
        try:
            words = shlex.split(args)
        except ValueError:
            words = args.split()
    else:
        words = [str(a) for a in args]
    # A folder given by its path runs nothing, whatever it is called: `git -C ~/src/lmgrid status` (a clone named
    # after the project, as `git clone` names it) is not `lmgrid status`.  A bare word is a program's name.
    names = ["" if _is_folder(w) else Path(w).name for w in words]
    if "snakemake" in names:
        return True
    for i, name in enumerate(names):
        if words[i] == "-m" and i + 1 < len(words):
            module = words[i + 1]
            if module == "snakemake" or (module == "lmgrid" and i + 2 < len(words) and words[i + 2] in DAG_COMMANDS):
                return True
        if name == "lmgrid" and i + 1 < len(words) and words[i + 1] in DAG_COMMANDS:
            return True
    return False


class _Watch:
    """What the test being run, and the fixtures being set up, did."""

    def __init__(self) -> None:
        self.item = None
        self.fixtures: list[str] = []
        self.heavy_fixtures: dict[str, str] = dict(HEAVY_FIXTURES)
        self.did: dict[str, str] = {}

    def saw(self, what: str) -> None:
        if self.fixtures:  # charged to every fixture being set up: each test that uses one is charged in turn
            for name in self.fixtures:
                self.heavy_fixtures.setdefault(name, what)
        elif self.item is not None:
            self.did.setdefault(self.item.nodeid, what)

    def reason(self, item) -> str | None:
        if item.nodeid in self.did:
            return self.did[item.nodeid]
        for name in item.fixturenames:
            if name in self.heavy_fixtures:
                return f"uses the fixture {name!r}, which {self.heavy_fixtures[name]}"
        return None


_WATCH = _Watch()


def in_full_tier(item) -> bool:
    return any(item.get_closest_marker(name) is not None for name in (FULL, *IMPLY_FULL))


def _watch_popen() -> None:
    original = subprocess.Popen.__init__
    if getattr(original, "_lmgrid_tier_watch", False):
        return

    def init(self, args, *rest, **kwargs):
        if starts_snakemake(args):
            line = args if isinstance(args, str) else " ".join(map(str, args))
            _WATCH.saw(f"starts Snakemake ({line[:80]})")
        original(self, args, *rest, **kwargs)

    init._lmgrid_tier_watch = True
    subprocess.Popen.__init__ = init


def _patch_api(module) -> None:
    original = module.SnakemakeApi.__enter__
    if getattr(original, "_lmgrid_tier_watch", False):
        return

    def enter(self):
        _WATCH.saw("enters Snakemake's API in the test process")
        return original(self)

    enter._lmgrid_tier_watch = True
    module.SnakemakeApi.__enter__ = enter


class _ApiFinder(importlib.abc.MetaPathFinder):
    """Patches snakemake.api when something imports it: importing Snakemake up front would cost every test run a
    second or more, the fast tier included, though most never touch it."""

    def find_spec(self, name, path=None, target=None):
        if name != "snakemake.api":
            return None
        sys.meta_path.remove(self)  # find the real spec, once
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _patch_api(module)

        spec.loader.exec_module = exec_module
        return spec


def _watch_api() -> None:
    if "snakemake.api" in sys.modules:
        _patch_api(sys.modules["snakemake.api"])
    elif not any(isinstance(f, _ApiFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _ApiFinder())


def pytest_configure(config):
    config.addinivalue_line("markers", f"{FULL}: in the full tier only (make test-full, .ci/run): runs Snakemake, "
                                       "reads the Penn Treebank, starts a server, or is long (tests/tiers.py)")
    _watch_popen()
    _watch_api()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    # `slow` and `ptb` imply `full`, so that `-m "not full"` leaves them out
    for item in items:
        if in_full_tier(item) and item.get_closest_marker(FULL) is None:
            item.add_marker(FULL)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    _WATCH.fixtures.append(fixturedef.argname)
    try:
        yield
    finally:
        _WATCH.fixtures.pop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _WATCH.item = item
    try:
        yield
    finally:
        _WATCH.item = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when not in ("setup", "call") or in_full_tier(item) or report.failed:
        return
    if report.when == "setup" and report.passed:
        return  # judged after the call, which may start Snakemake itself
    reason = _WATCH.reason(item)
    if reason:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} {reason}, but it is in the fast tier: mark it @pytest.mark.{FULL} "
                           "(tests/tiers.py)")
