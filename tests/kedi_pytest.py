"""Run pytest with kedi's plugin over a folder in a subprocess, as a user's project would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_pytest_with_the_kedi_plugin(folder: Path) -> subprocess.CompletedProcess[str]:
    """`pytest -p kedi.pytest_plugin -q FOLDER` in FOLDER, this checkout's kedi on the path.

    Autoload off, the plugin named: the same one plugin whether or not kedi is
    pip-installed (an installed kedi registers it through its pytest11 entry
    point too).
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "kedi.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            str(folder),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=120,
    )
