"""The code base stays lint-clean (ruff: pyflakes, pycodestyle, isort, bugbear, pyupgrade)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format=concise", "kedi", "tests", "bench"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
