"""The embeddings block a doc can render from a snapshot (lmgrid.analysis.docs_render): `embeddings:<study>`, the
study's table as the run wrote it (studies/<study>/embeddings.md, by lmgrid.embed.study: rho over the pairs every
vector set covers with a word-resampling interval, the paired difference against the study's cell of lowest valid
PPL, and the spread over seeds), without its title, so the page and the run's table cannot drift apart.  Read from
the run's Markdown rather than re-formatted here: the embed stage sits above analysis (it draws with its plots)."""
from __future__ import annotations

from pathlib import Path

from lmgrid.analysis.docs_io import snapshot_file
from lmgrid.common.errors import LmgridError


def embeddings(snap: Path, study: str) -> str:
    if not study:
        raise LmgridError("lmgrid:render embeddings needs the study's name: embeddings:<study>")
    path = snapshot_file(snap, f"studies/{study}/embeddings.md")
    lines = path.read_text().strip().splitlines()
    return "\n".join(lines[1:] if lines and lines[0].startswith("#") else lines).strip()


TABLES = {"embeddings": embeddings}
