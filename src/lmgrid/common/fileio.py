"""Atomic file output and the JSON files every stage reads and writes.

Kept apart from lmgrid.common.errors (which holds only the exception type) so that a module can raise LmgridError without
taking file handling with it, and so that the one place outputs are written is easy to find.  Torch-free and light:
the Snakefile imports modules that use it while building the DAG.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from lmgrid.common.errors import LmgridError

# The process umask, read once (os.umask can only be read by setting it): mkstemp's files get the mode an ordinary
# open() would have given them.
_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w"):
    """Write to a temporary file beside `path` and move it into place only when the block succeeds,
    so a crash or an error never leaves a half-written output behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes owner-only files; outputs get the usual permissions
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj) -> None:
    """Indented, keys in the order given (results are compared byte for byte across runs), atomically."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, sort_keys=False)
        fh.write("\n")


def read_json(path: str | os.PathLike):
    """The file's JSON value; a missing or unparsable file is one line naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LmgridError(f"{path}: not valid JSON ({e})") from None


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        raise LmgridError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise LmgridError(f"{path}: is a directory, expected a file") from None
    return digest.hexdigest()
