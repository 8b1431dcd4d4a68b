"""Fixtures every test shares: a private history store and capability cache, never the user's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kedi.adapters import capability_cache
from tests.adapters.openai_server import OpenAIServer


@pytest.fixture(autouse=True)
def _private_capability_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Each test negotiates structured modes afresh, in a cache of its own (never the user's)."""
    folder = tmp_path_factory.mktemp("kedi-cache")
    monkeypatch.setenv("KEDI_CACHE_DIR", str(folder))
    for name in ("KEDI_BASE_URL", "OPENAI_API_BASE", "KEDI_API_KEY_ENV", "KEDI_STRUCTURED_MODE"):
        monkeypatch.delenv(name, raising=False)
    capability_cache.forget_all()
    yield folder
    capability_cache.forget_all()


@pytest.fixture(autouse=True)
def _private_history_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    path = tmp_path_factory.mktemp("kedi-history") / "history.db"
    monkeypatch.setenv("KEDI_HISTORY", str(path))
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """With KEDI_REQUIRE_ALL=1 (set by .ci/run) a skipped test fails: in CI every service is up."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if (
        report.skipped
        and not hasattr(report, "wasxfail")
        and os.environ.get("KEDI_REQUIRE_ALL") == "1"
    ):
        report.outcome = "failed"
        report.longrepr = f"skipped, but KEDI_REQUIRE_ALL=1 (CI) forbids skips: {report.longrepr}"


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    """A scripted chat-completions endpoint on 127.0.0.1 (tests/adapters/openai_server.py)."""
    with OpenAIServer() as running:
        yield running
