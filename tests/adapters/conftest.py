"""Shared fixtures of the adapter tests."""

from collections.abc import Iterator

import pytest

from tests.adapters.openai_server import OpenAIServer


@pytest.fixture
def anyio_backend() -> str:
    """Adapters run on asyncio (Pydantic AI does not support trio)."""
    return "asyncio"


@pytest.fixture
def endpoint_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    """The scripted server as the configured base URL (`KEDI_BASE_URL`), with no OpenAI key."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with OpenAIServer() as running:
        monkeypatch.setenv("KEDI_BASE_URL", running.base_url)
        yield running
