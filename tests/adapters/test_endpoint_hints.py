"""A 404 from a base URL that already ends in `/chat/completions` says so.

Pasting the endpoint instead of the base URL is a common slip; kedi then
posts to `.../chat/completions/chat/completions`, and its hint asked whether
`/v1` was missing, which sends the user the wrong way.
"""

from __future__ import annotations

import pytest

import kedi
from kedi.adapters.openai import OpenAIAdapter
from kedi.errors import ModelNotFoundError
from tests.adapters.openai_server import MODEL, OpenAIServer, Reply

PROGRAM = kedi.compile("[x] << Hi\n= <x>\n")


def test_a_base_url_ending_in_the_endpoint_is_named_with_the_url_to_give(
    server: OpenAIServer,
) -> None:
    server.add(Reply(404, {"detail": "Not Found"}))
    pasted = f"{server.base_url}/chat/completions"
    with pytest.raises(ModelNotFoundError) as raised:
        PROGRAM.run_sync(adapter=OpenAIAdapter(MODEL, base_url=pasted, api_key="sk-test"))
    message = str(raised.value)
    assert "/v1` missing" not in message
    assert message.rstrip().endswith(
        f"(POST {pasted}/chat/completions; the base URL ends in /chat/completions: "
        f"give it without, as {server.base_url})"
    )
