"""The code base stays lint-clean (ruff: pyflakes, pycodestyle, isort, bugbear, pyupgrade)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--output-format=concise",
            "kedi",
            "tests",
            "bench",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing() -> None:
    """Types are checked with the config in pyproject.toml ([tool.mypy]): zero errors."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "kedi"], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_type_ignore_names_its_code_and_reason() -> None:
    """`# type: ignore[code]  # why`: a bare ignore hides every future error on its line."""
    import re

    bare = re.compile(r"# type: ignore(?!\[[a-z, -]+\]  # \S)")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "kedi").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if bare.search(line)
    ]
    assert not found, f"give these a code and a reason: {found}"


def test_mypy_needs_no_extra_outside_dev(tmp_path: Path) -> None:
    """`pip install -e ".[dev]"` leaves out kedi[local] (llama.cpp compiles for 15 minutes).

    mypy must pass without it, so its import is checked as if nothing were
    installed (`--no-site-packages`) under the project's mypy config.
    """
    probe = tmp_path / "probe.py"
    probe.write_text("import llama_cpp\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-site-packages", "--config-file", "pyproject.toml"]
        + [str(probe)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
