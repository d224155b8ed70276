"""Shared fixtures. Data-dependent tests find the Penn Treebank through LMGRID_PTB_DIR; they skip with the
reason on a user's machine, and fail instead when LMGRID_REQUIRE_DATA=1 (as .ci/run sets)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PTB_FILES = ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")


@pytest.fixture(scope="session")
def ptb_dir() -> Path:
    value = os.environ.get("LMGRID_PTB_DIR")
    reason = None
    if not value:
        reason = "LMGRID_PTB_DIR is not set (point it at a folder with ptb.{train,valid,test}.txt)"
    elif not all((Path(value) / f).is_file() for f in PTB_FILES):
        reason = f"LMGRID_PTB_DIR={value} does not hold {', '.join(PTB_FILES)}"
    if reason:
        if os.environ.get("LMGRID_REQUIRE_DATA") == "1":
            pytest.fail(f"required data missing: {reason}")
        pytest.skip(reason)
    return Path(value)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
