"""Where a `kind: ptb` corpus's three files come from, and their sha256 check.

Sources, first match wins:
  1. `corpus.files` in the config: local paths;
  2. the environment variable LMGRID_PTB_DIR: a folder holding ptb.train.txt, ptb.valid.txt, ptb.test.txt;
  3. `corpus.download`: one URL per split, fetched by the workflow (Snakemake's http storage plugin) into
     results/<corpus>/raw/ptb.<split>.txt, each checked against `corpus.sha256` before it is kept.
Local files are checked too when `corpus.sha256` gives the sums (by the corpus stage).  Kept free of heavy
imports: the Snakefile calls this while building the DAG.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from lmgrid.data.corpus import SPLITS
from lmgrid.common.errors import LmgridError
from lmgrid.common.fileio import atomic_write, sha256_of

PTB_DIR_ENV = "LMGRID_PTB_DIR"
PTB_NAMES = {split: f"ptb.{split}.txt" for split in SPLITS}


@dataclass(frozen=True)
class PtbSources:
    origin: str                                   # "files", "env" or "download"
    files: dict[str, str] = field(default_factory=dict)  # split -> local path (files, env)
    urls: dict[str, str] = field(default_factory=dict)   # split -> URL (download)

    @property
    def downloads(self) -> bool:
        return self.origin == "download"


def ptb_sources(corpus: dict, environ=None) -> PtbSources | None:
    """The source of a ptb corpus's files (config `corpus` node, defaults filled in); None when it names none."""
    environ = os.environ if environ is None else environ
    if "files" in corpus:
        return PtbSources("files", files=dict(corpus["files"]))
    folder = environ.get(PTB_DIR_ENV)
    if folder:
        return PtbSources("env", files={s: str(Path(folder) / PTB_NAMES[s]) for s in SPLITS})
    if "download" in corpus:
        return PtbSources("download", urls=download_urls(corpus["download"]))
    return None


def download_urls(download: dict) -> dict[str, str]:
    """split -> URL from `corpus.download`: per-split URLs, or `base_url` + ptb.<split>.txt."""
    if "base_url" in download:
        base = download["base_url"].rstrip("/")
        return {s: download.get(s, f"{base}/{PTB_NAMES[s]}") for s in SPLITS}
    return {s: download[s] for s in SPLITS}


def verify(path: str | Path, want: str, name: str | None = None) -> None:
    """Raise the one-line error when the file's sha256 is not `want`; `name` is how the error names the file."""
    got = sha256_of(path)
    if got != want.lower():
        raise LmgridError(f"{name or path}: sha256 {got} does not match the expected {want.lower()}")


def verified_copy(src: str | Path, out: str | Path, want: str, name: str | None = None) -> None:
    """Copy `src` to `out` only when its sha256 is `want`; nothing is written otherwise."""
    verify(src, want, name)
    with open(src, "rb") as fh, atomic_write(out, "wb") as dst:
        shutil.copyfileobj(fh, dst)


__all__ = ["PTB_DIR_ENV", "PTB_NAMES", "PtbSources", "ptb_sources", "download_urls", "sha256_of", "verify",
           "verified_copy"]
