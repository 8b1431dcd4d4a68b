"""`kedi run --base-url URL` reaches a local server through every OpenAI-compatible adapter.

A local server (llama.cpp, vLLM, Ollama) needs no key. `KEDI_BASE_URL` or
`OPENAI_BASE_URL` worked without one through the `pydantic` and `langchain`
adapters, but `--base-url`, which the docs rank above them, failed at start-up
asking for `OPENAI_API_KEY`: the start-up check built the adapter before the
command line's endpoint options applied.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kedi.cli import main
from tests.adapters.openai_server import MODEL, OpenAIServer, Reply, completion


@pytest.mark.parametrize(
    ("adapter", "model"),
    [("openai", MODEL), ("pydantic", f"openai:{MODEL}"), ("langchain", f"openai:{MODEL}")],
)
def test_base_url_on_the_command_line_needs_no_key(
    adapter: str,
    model: str,
    server: OpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "KEDI_API_KEY_ENV", "KEDI_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    server.add(Reply(body=completion("Hello from the server.")))
    flow = tmp_path / "flow.kedi"
    flow.write_text("[reply] << Say hello.\n= <reply>\n")
    options = ["--adapter", adapter, "--model", model, "--base-url", server.base_url]
    result = CliRunner().invoke(main, ["run", str(flow), "--no-store", *options])
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello from the server.\n"
    assert [received.path for received in server.received] == ["/v1/chat/completions"]
