"""`kedi` run as a user runs it: a fresh process of this checkout, output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_kedi(
    *args: str, history: str | os.PathLike[str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m kedi ARGS` with the history store at `history`, from the checkout's root."""
    return subprocess.run(
        [sys.executable, "-m", "kedi", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KEDI_HISTORY": str(history)},
        check=False,
    )
