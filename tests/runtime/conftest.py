"""Helpers for running small Kedi programs in tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import kedi


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def run(source: str, **options: Any) -> Any:
    """Compile and run `source` on the offline model unless told otherwise."""
    options.setdefault("model", "offline")
    return kedi.compile(source, path="test.kedi").run_sync(**options)


@pytest.fixture
def script(tmp_path: Path):
    """Write a `script:` reply file and return the model name for it."""

    def make(replies: list[Any]) -> str:
        path = tmp_path / f"replies{len(list(tmp_path.glob('replies*.json')))}.json"
        path.write_text(json.dumps(replies), encoding="utf-8")
        return f"script:{path}"

    return make
