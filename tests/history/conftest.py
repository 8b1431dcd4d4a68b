"""Fixtures of the history tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store location: a SQLite file, then a PostgreSQL server (marker `postgres`) when one is set up."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    dsn = os.environ.get("KEDI_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip('needs PostgreSQL: set KEDI_TEST_POSTGRES_DSN (eval "$(.ci/start-postgres)")')
    return dsn
