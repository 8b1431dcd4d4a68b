"""Shared fixtures of the adapter tests."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Adapters run on asyncio (Pydantic AI does not support trio)."""
    return "asyncio"
