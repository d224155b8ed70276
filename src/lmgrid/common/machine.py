"""The machine a figure was measured on, as every record of one names it: a docs snapshot's run.json
(lmgrid.analysis.docs_snapshot), the screenshots' sidecars (lmgrid.orchestration.screenshots) and a fresh clone's
timed quick start (tools/first_run.py).  Standard library only: the last runs before any virtual environment exists.
"""
from __future__ import annotations

import os
import re
import subprocess


def machine() -> dict:
    """This machine's CPU model, whether it computes bf16 (the avx512_bf16 flag) and its core count, from lscpu."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        text = ""
    fields = dict(re.findall(r"^([^:\n]+):\s*(.*)$", text, flags=re.M))
    return {"cpu": fields.get("Model name", "unknown").strip(),
            "avx512_bf16": "avx512_bf16" in fields.get("Flags", "").split(),
            "cores": os.cpu_count() or 1}
