"""Fixtures every test shares."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kedi.adapters import capability_cache


@pytest.fixture(autouse=True)
def _private_capability_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test negotiates structured modes afresh, in a cache of its own (never the user's)."""
    folder = tmp_path_factory.mktemp("kedi-cache")
    monkeypatch.setenv("KEDI_CACHE_DIR", str(folder))
    for name in ("KEDI_BASE_URL", "OPENAI_API_BASE", "KEDI_API_KEY_ENV", "KEDI_STRUCTURED_MODE"):
        monkeypatch.delenv(name, raising=False)
    capability_cache.forget_all()
    yield folder
    capability_cache.forget_all()
