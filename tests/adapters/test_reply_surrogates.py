"""A lone surrogate in a model's reply becomes U+FFFD where the reply enters kedi.

The decision (docs/history.md, "Lone surrogates in replies"): a reply's JSON
may hold a lone surrogate escape (`"\\ud800"`), which has no UTF-8 form. Kept,
it would make the call's next request fail to encode and the conversation
unsaveable (`save` refuses it). Each adapter replaces it with U+FFFD as it
decodes the reply (and a tool's result as it takes it), so the run succeeds,
the value is what the lane holds, and the conversation saves and loads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kedi
from kedi.adapters._portable import without_lone_surrogates
from tests.adapters.openai_server import (
    OpenAIServer,
    Reply,
    chunk,
    completion,
    sse,
    tool_call,
)

ADAPTERS = pytest.mark.parametrize("adapter", ["openai", "pydantic", "langchain"])
PROGRAM = (
    "> history: enabled\n> use: population\n[reply] << How many people live in Paris?\n= <reply>"
)
LONE = "\ud800"
REPLACED = "\ufffd"


def run(
    adapter: str, conversation: kedi.Conversation, tool: Callable[[str], Any], **options: Any
) -> Any:
    extra = {
        "pydantic": ("pydantic_ai", "pydantic-ai"),
        "langchain": ("langchain_openai", "langchain"),
    }
    if adapter in extra:
        module, name = extra[adapter]
        pytest.importorskip(module, reason=f'needs {module}: pip install "kedi[{name}]"')
    model = "local" if adapter == "openai" else "openai:local"
    program = kedi.compile(PROGRAM, known_globals=("population",))
    return program.run_sync(
        adapter=adapter, model=model, env={"population": tool}, conversation=conversation, **options
    )


def unused_tool(city: str) -> int:
    """The population of a city."""
    raise AssertionError("the model never calls it here")


def assert_saveable(conversation: kedi.Conversation, path: Path, text: str) -> None:
    """The conversation saves, loads back and still holds `text`."""
    assert text in conversation.dumps()
    kedi.Conversation.loads(conversation.dumps())
    conversation.save(path)
    assert text in kedi.Conversation.load(path).dumps()


@ADAPTERS
@pytest.mark.parametrize(
    "arguments",
    # The reply's JSON escapes the half, so the arguments' text holds it; or the arguments'
    # JSON text holds the escape `\ud800` (ASCII), which decodes to it when the tool runs.
    ['{"city": "P' + LONE + 'ris"}', '{"city": "P\\ud800ris"}'],
    ids=["raw", "escaped"],
)
def test_a_lone_surrogate_in_content_and_arguments_becomes_u_fffd(
    endpoint_server: OpenAIServer, adapter: str, arguments: str, tmp_path: Path
) -> None:
    endpoint_server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "population", arguments)])),
        Reply(body=completion(f"About 2{LONE} million.")),
        Reply(body=completion("Still about 2 million.")),
    )
    cities: list[str] = []

    def population(city: str) -> int:
        """The population of a city."""
        cities.append(city)
        return 2100000

    conversation = kedi.Conversation()
    assert run(adapter, conversation, population) == f"About 2{REPLACED} million."
    assert cities == [f"P{REPLACED}ris"]
    assert_saveable(conversation, tmp_path / "conversation.json", f"About 2{REPLACED} million.")
    # The lane can be sent again: the next call's request carries the replaced text.
    assert run(adapter, conversation, population) == "Still about 2 million."
    assert f"About 2{REPLACED} million." in str(endpoint_server.bodies[-1]["messages"])


def assert_utf8(pieces: list[str]) -> None:
    """Each piece `on_delta` received is text UTF-8 can hold: no surrogate half."""
    assert pieces
    for piece in pieces:
        piece.encode("utf-8")  # raises UnicodeEncodeError on a surrogate half


@ADAPTERS
@pytest.mark.parametrize(
    ("pieces", "text"),
    [
        # "\ud83d" and "\ude00" arrive in two chunks (each chunk's JSON alone holds half a pair).
        (["Paris ", "\ud83d", "\ude00", f" 2{LONE}1M"], f"Paris \U0001f600 2{REPLACED}1M"),
        # The pair's halves end one chunk and begin the next; a high half ends the reply.
        (
            ["Paris \ud83d", "\ude00 2", "\udc00M \ud83d"],
            f"Paris \U0001f600 2{REPLACED}M {REPLACED}",
        ),
    ],
    ids=["alone", "at-the-edges"],
)
def test_a_streamed_reply_joins_a_split_pair_and_replaces_a_lone_half(
    endpoint_server: OpenAIServer, adapter: str, pieces: list[str], text: str, tmp_path: Path
) -> None:
    endpoint_server.add(
        Reply(
            events=sse(
                *(chunk({"role": "assistant", "content": piece}) for piece in pieces),
                chunk(finish_reason="stop"),
            )
        )
    )
    streamed: list[str] = []
    conversation = kedi.Conversation()

    value = run(adapter, conversation, unused_tool, on_delta=streamed.append)

    assert value == text
    # What streamed is the value, piece by piece, and never half a pair.
    assert_utf8(streamed)
    assert "".join(streamed) == value
    assert_saveable(conversation, tmp_path / "conversation.json", value)


SUMMARY = "> history: enabled\n>> Summarise Paris: [summary: str]\n= <summary>"


# Not langchain: with a JSON schema its openai SDK parses the content so far after every
# chunk, and a surrogate half in it fails the stream before kedi sees the reply.
@pytest.mark.parametrize("adapter", ["openai", "pydantic"])
def test_a_streamed_str_capture_never_passes_a_surrogate_half(
    endpoint_server: OpenAIServer, adapter: str
) -> None:
    # The capture's JSON holds a pair split across chunks and two lone halves (each
    # chunk's JSON holding `\\udXXX` escapes, so its decoded content holds the halves).
    pieces = ['{"summary": "Paris \ud83d', "\ude00 2", f"{LONE}1M \udc00", '!"}']
    endpoint_server.add(
        Reply(
            events=sse(
                *(chunk({"role": "assistant", "content": piece}) for piece in pieces),
                chunk(finish_reason="stop"),
            )
        )
    )
    streamed: list[str] = []
    if adapter == "pydantic":
        pytest.importorskip(
            "pydantic_ai", reason='needs pydantic_ai: pip install "kedi[pydantic-ai]"'
        )
    model = "local" if adapter == "openai" else "openai:local"
    program = kedi.compile(SUMMARY)
    program.run_sync(adapter=adapter, model=model, on_delta=streamed.append)
    assert_utf8(streamed)
    assert "".join(streamed) == f"Paris \U0001f600 2{REPLACED}1M {REPLACED}!"


@ADAPTERS
@pytest.mark.parametrize("fails", [False, True], ids=["result", "error"])
def test_a_tool_result_or_error_with_a_lone_surrogate_is_kept_saveable(
    endpoint_server: OpenAIServer, adapter: str, fails: bool, tmp_path: Path
) -> None:
    # A file name read with errors="surrogateescape" holds lone surrogates.
    endpoint_server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "population", '{"city": "Paris"}')])),
        Reply(body=completion("Done.")),
    )

    def population(city: str) -> str:
        """The population of a city."""
        if fails:
            raise OSError("cannot read census-\udcff.csv")
        return "census-\udcff.csv"

    conversation = kedi.Conversation()
    assert run(adapter, conversation, population) == "Done."
    [result] = [m for m in endpoint_server.bodies[1]["messages"] if m["role"] == "tool"]
    assert f"census-{REPLACED}.csv" in result["content"]
    assert_saveable(conversation, tmp_path / "conversation.json", f"census-{REPLACED}.csv")


def test_clean_values_come_back_as_they_are() -> None:
    clean = {"text": "é\U0001f600", "items": ["a", ("b",)]}
    assert without_lone_surrogates(clean) is clean
    dirty = {"k": ["ok", (f"x{LONE}",)]}
    assert without_lone_surrogates(dirty) == {"k": ["ok", (f"x{REPLACED}",)]}
    assert dirty == {"k": ["ok", (f"x{LONE}",)]}  # a copy: the original is untouched
