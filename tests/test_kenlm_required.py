"""The KenLM fixtures (tests/conftest.py: `kenlm`, the Python module; `kenlm_tools`, lmplz and query): without KenLM
they skip with the reason on a user's machine, and fail when LMGRID_REQUIRE_KENLM=1, as .ci/run sets, so CI never
passes the KenLM tests by skipping them (issue 44, item 8).  Each fixture's own function is called in-process, with
KenLM made missing by monkeypatching the import and the program lookup."""
from __future__ import annotations

import shutil
import sys

import pytest

import conftest

FIXTURES = {"kenlm": conftest.kenlm.__wrapped__, "kenlm_tools": conftest.kenlm_tools.__wrapped__}


def outcome(fixture) -> tuple[str, str]:
    """What calling a fixture's function does: ("fail" | "skip" | "value", its message)."""
    try:
        value = fixture()
    except pytest.fail.Exception as e:
        return "fail", str(e)
    except pytest.skip.Exception as e:
        return "skip", str(e)
    return "value", repr(value)


def outcomes(monkeypatch) -> dict[tuple[str, str], tuple[str, str]]:
    """{(fixture, LMGRID_REQUIRE_KENLM or "unset"): outcome} for each fixture, the variable unset, "1" and "0"."""
    out = {}
    for env in ("unset", "1", "0"):
        if env == "unset":
            monkeypatch.delenv("LMGRID_REQUIRE_KENLM", raising=False)
        else:
            monkeypatch.setenv("LMGRID_REQUIRE_KENLM", env)
        for name, fixture in FIXTURES.items():
            out[name, env] = outcome(fixture)
    return out


def test_a_missing_kenlm_fails_when_required_and_skips_otherwise(monkeypatch):
    """With the kenlm module unimportable and neither lmplz nor query found, each KenLM fixture fails under
    LMGRID_REQUIRE_KENLM=1, naming what is missing, and skips with that reason when the variable is unset (or not
    "1").  Kills: the required fixture falling back to a skip (conftest._kenlm_missing that always skips; negative
    control, run here: the required outcomes turn into skips)."""
    monkeypatch.setitem(sys.modules, "kenlm", None)  # `import kenlm` raises ImportError
    monkeypatch.setattr(shutil, "which", lambda name, path=None: None)
    reasons = {"kenlm": "the kenlm module is not installed", "kenlm_tools": "lmplz and query not found"}
    seen = outcomes(monkeypatch)
    for name, reason in reasons.items():
        kind, message = seen[name, "1"]
        assert kind == "fail" and "KenLM required (LMGRID_REQUIRE_KENLM=1)" in message and reason in message
        for env in ("unset", "0"):
            kind, message = seen[name, env]
            assert kind == "skip" and reason in message, (name, env, kind, message)

    monkeypatch.setattr(conftest, "_kenlm_missing", lambda reason: pytest.skip(reason))
    assert {kind for (_, env), (kind, _) in outcomes(monkeypatch).items() if env == "1"} == {"skip"}

