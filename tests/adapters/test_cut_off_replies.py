"""A reply the server cut off at `max_tokens` (`finish_reason: "length"`) is named as such.

A small model under a tight `max_tokens` stops mid-JSON (SmolLM2 on llama.cpp
repeats a list item until the limit); the user must learn that the limit cut
the reply, not only that the JSON "ended early", and the model's correction
must say so too, or the retry is cut off in the same place.
"""

from __future__ import annotations

import logging

import pytest

import kedi
from kedi.adapters.openai import OpenAIAdapter
from kedi.errors import OutputValidationError
from tests.adapters.openai_server import MODEL, OpenAIServer, Reply, chunk, completion, sse

CITY = kedi.compile(
    "> settings:\n    max_tokens: 6\n~City(name: str, country: str)\n"
    ">> Name a city: [city: City].\n= `city.name`",
    path="city.kedi",
)
CUT = '{"city": {"name": "Par'


def adapter(server: OpenAIServer) -> OpenAIAdapter:
    return OpenAIAdapter(
        MODEL, base_url=server.base_url, api_key="sk-test", structured_mode="json_object"
    )


def test_a_capture_cut_off_at_max_tokens_says_so_to_the_model_and_the_user(
    server: OpenAIServer,
) -> None:
    server.add(*[Reply(body=completion(CUT, finish_reason="length")) for _ in range(3)])
    with pytest.raises(OutputValidationError) as raised:
        CITY.run_sync(adapter=adapter(server))
    message = str(raised.value)
    assert "did not validate after 3 attempts" in message
    assert 'cut off at the max_tokens limit (finish_reason "length")' in message
    assert message.rstrip().endswith("raise the max_tokens setting (6)")
    # The correction the model gets asks for a shorter answer.
    correction = server.bodies[1]["messages"][-1]["content"]
    assert "cut off at the max_tokens limit" in correction


def test_a_streamed_capture_cut_off_at_max_tokens_says_so(server: OpenAIServer) -> None:
    named = kedi.compile(
        "> settings:\n    max_tokens: 6\n>> Name a city: [name: str].\n= <name>", path="name.kedi"
    )
    events = sse(chunk({"content": '{"name": "Par'}), chunk(finish_reason="length"))
    server.add(*[Reply(events=events) for _ in range(3)])
    pieces: list[str] = []
    with pytest.raises(OutputValidationError, match="cut off at the max_tokens limit"):
        named.run_sync(adapter=adapter(server), on_delta=pieces.append)
    assert server.bodies[0]["stream"] is True and pieces


def test_a_reply_that_stopped_on_its_own_is_not_called_cut_off(server: OpenAIServer) -> None:
    server.add(*[Reply(body=completion(CUT, finish_reason="stop")) for _ in range(3)])
    with pytest.raises(OutputValidationError) as raised:
        CITY.run_sync(adapter=adapter(server))
    assert "max_tokens" not in str(raised.value)
    assert "max_tokens" not in server.bodies[1]["messages"][-1]["content"]


def test_a_cut_off_reply_that_still_validates_is_the_value(server: OpenAIServer) -> None:
    whole = '{"city": {"name": "Paris", "country": "France"}}'
    server.add(Reply(body=completion(whole, finish_reason="length")))
    assert CITY.run_sync(adapter=adapter(server)) == "Paris"


def test_a_reply_sent_back_for_correction_is_logged_at_info(
    server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    """`kedi run -v` shows output retries as it shows HTTP retries (a user sees why a call is slow)."""
    whole = '{"city": {"name": "Paris", "country": "France"}}'
    server.add(
        Reply(body=completion(CUT, finish_reason="length")),
        Reply(body=completion(whole)),
    )
    with caplog.at_level(logging.INFO, logger="kedi"):
        assert CITY.run_sync(adapter=adapter(server)) == "Paris"
    (record,) = [r for r in caplog.records if "did not validate" in r.getMessage()]
    assert record.getMessage().startswith(
        "kedi: the reply to the call at city.kedi:4 did not validate; asking again (retry 1 of 2): "
    )
    assert "cut off at the max_tokens limit" in record.getMessage()
