"""Shared fixtures of the adapter tests."""

from collections.abc import Iterator

import anyio
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


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits passed to `anyio.sleep` during the test (the adapter's retry waits), in order.

    A test checks the wait the adapter chose here rather than in wall time,
    which a loaded machine stretches. The sleeps still happen.
    """
    waits: list[float] = []
    real_sleep = anyio.sleep

    async def recording_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(delay)

    monkeypatch.setattr(anyio, "sleep", recording_sleep)
    return waits
