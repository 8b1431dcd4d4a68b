"""A call over the context window that carried history says how to bound the history.

A stored session (`kedi run --session chat`, `kedi chat`) grows each run; one
day every call fails with the server's "maximum context length is 2048 tokens"
and nothing says that kedi can bound what it sends (`> history:` with
`max_messages` or `max_tokens`).
"""

from __future__ import annotations

import pytest

import kedi
from kedi.adapters.openai import OpenAIAdapter
from kedi.errors import ContextLengthError
from tests.adapters.openai_server import MODEL, OpenAIServer, Reply, completion, error_body

TOO_LONG = Reply(
    status=400,
    body=error_body(
        "This model's maximum context length is 2048 tokens.", code="context_length_exceeded"
    ),
)


def run(server: OpenAIServer, source: str) -> ContextLengthError:
    program = kedi.compile(source, path="chat.kedi")
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key="sk-test")
    with pytest.raises(ContextLengthError) as raised:
        program.run_sync(adapter=adapter)
    return raised.value


def test_a_call_with_history_over_the_context_window_names_the_history_bounds(
    server: OpenAIServer,
) -> None:
    server.add(Reply(body=completion("Hi.")), TOO_LONG)
    error = run(server, "> history: enabled\n[a] << Hello.\n[b] << Again.\n= <b>\n")
    assert "maximum context length is 2048 tokens" in str(error)
    assert (
        str(error)
        .rstrip()
        .endswith(
            "the request carried 2 messages of history: bound them with `> history:` and "
            "`max_messages: N` or `max_tokens: N` (docs/history.md)"
        )
    )
    assert error.status == 400


def test_a_call_without_history_gets_no_such_hint(server: OpenAIServer) -> None:
    server.add(TOO_LONG)
    error = run(server, "[a] << Hello.\n= <a>\n")
    assert "max_messages" not in str(error)
