"""Every test gets its own history store: `kedi run` records by default, never into the user's."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_history_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path_factory.mktemp("kedi-history") / "history.db"
    monkeypatch.setenv("KEDI_HISTORY", str(path))
    return path
