"""Typed captures, history, tools and validation failures on a real model, for every adapter.

Each test runs one Kedi program on the four ways kedi reaches llama.cpp:
the `openai` adapter (auto mode) and the `pydantic` (OpenAI chat model) and
`langchain` (`init_chat_model` → ChatOpenAI) adapters against llama.cpp's
server, and `--model local` in-process. The assertions are about shape and
protocol (values validate, the second request carries the first turn, the
mode used, the tool round trip), never about what the model says.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import kedi
from kedi.adapters import capability_cache
from kedi.errors import KediError, OutputValidationError

pytestmark = pytest.mark.real_model

ADAPTERS = ("openai", "pydantic", "langchain", "local")
SMALL = {"max_tokens": 96, "temperature": 0.0}
"""Short, repeatable replies: a 135M model may ramble, and the machine has 2 cores."""
SETTINGS: dict[str, dict[str, Any]] = {
    # llama.cpp refuses json_schema (auto steps down to json_object) and ignores
    # `tool_choice: "required"`; these are the settings docs/adapters.md gives for it.
    "openai": {"extra_body": {"repeat_penalty": 1.3}},
    "pydantic": {"output_mode": "json_object", "extra_body": {"repeat_penalty": 1.3}},
    "langchain": {"structured_method": "function_calling", "extra_body": {"repeat_penalty": 1.3}},
    "local": {},
}


@pytest.fixture(params=ADAPTERS)
def target(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    """`run_sync` options reaching the model through one adapter."""
    name = request.param
    if name == "local":
        request.getfixturevalue("local_model")
        yield {"model": "local", "settings": {**SMALL, **SETTINGS[name]}}
        return
    url = request.getfixturevalue("llama_url")
    monkeypatch.setenv("KEDI_BASE_URL", url)
    model = "local" if name == "openai" else "openai:local"
    yield {"adapter": name, "model": model, "settings": {**SMALL, **SETTINGS[name]}}


def run(source: str, target: dict[str, Any], **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    records: list[dict[str, Any]] = []
    program = kedi.compile(source, path="real.kedi", known_globals=tuple(options.get("env", ())))
    result = program.run_sync(transcript=records.append, **target, **options)
    return result, records


def test_scalar_and_literal_captures_validate(target: dict[str, Any]) -> None:
    source = (
        ">> Paris: its name [name], its population [population: int], whether it is a "
        'capital [capital: bool], and its size [size: Literal["small", "large"]].\n'
        "= `[name, population, capital, size]`"
    )
    (name, population, capital, size), records = run(source, target)

    assert isinstance(name, str) and type(population) is int and type(capital) is bool
    assert size in ("small", "large")
    answered = [record for record in records if not record["failed"]]
    assert answered and answered[-1]["output_schema"]["required"] == [
        "name",
        "population",
        "capital",
        "size",
    ]
    if target.get("adapter") in ("openai", None):
        # llama.cpp takes the schema as a json_object response_format.
        assert answered[-1]["structured_mode"] == "json_object"


def test_custom_type_and_list_captures_validate(target: dict[str, Any]) -> None:
    source = (
        "~Place(city: str, country: str)\n"
        ">> A famous place [place: Place] and two of its landmarks [landmarks: list[str]].\n"
        "= `[place, landmarks]`"
    )
    (place, landmarks), _ = run(source, target)

    assert type(place).__name__ == "Place"
    assert isinstance(place.city, str) and isinstance(place.country, str)
    assert isinstance(landmarks, list) and all(isinstance(item, str) for item in landmarks)


def test_a_second_turn_carries_the_first(target: dict[str, Any]) -> None:
    source = (
        "> history: enabled\n"
        ">> My name is Ada Lovelace. Greet me [greeting].\n"
        ">> What is my name? [answer].\n"
        "= `[greeting, answer]`"
    )
    values, records = run(source, target)

    assert all(isinstance(value, str) for value in values)
    answered = [record for record in records if not record["failed"]]
    first, second = answered[0], answered[-1]
    assert not any("What is my name" in str(m.get("content")) for m in first["messages"])
    sent = second["messages"]
    prompts = [m for m in sent if m.get("role") == "user"]
    assert "Ada Lovelace" in str(prompts[0]["content"]) and "What is my name" in str(
        prompts[-1]["content"]
    )
    # The first turn's reply sits between the two prompts.
    assert any(m.get("role") == "assistant" for m in sent[sent.index(prompts[0]) :])


def test_a_tool_named_by_use_is_called_and_its_result_sent_back(target: dict[str, Any]) -> None:
    calls: list[str] = []

    def population(city: str) -> int:
        """The population of a city."""
        calls.append(city)
        return 2100000

    source = (
        "> use: population\n"
        "> settings:\n"
        "    tool_choice: population\n"
        ">> Use the population tool: how many people live in Paris? [count: int]\n"
        "= `count`"
    )
    count, records = run(source, target, env={"population": population})

    assert type(count) is int
    assert len(calls) >= 1 and all(isinstance(city, str) for city in calls)
    answered = [record for record in records if not record["failed"]]
    assert "population" in answered[0]["tools"]
    # A call with invalid arguments (a small model's string may run on to
    # max_tokens) is answered with a failed tool message and retried, still forced.
    results = [
        m for m in answered[-1]["messages"] if m.get("role") == "tool" and not m.get("failed")
    ]
    assert results and "2100000" in str(results[0]["content"])


def test_a_capture_that_never_validates_ends_in_an_output_validation_error(
    target: dict[str, Any],
) -> None:
    source = (
        "```\n"
        "from typing import Annotated\n"
        "from pydantic import AfterValidator\n"
        "def refuse(value: str) -> str:\n"
        "    raise ValueError('rejected on purpose')\n"
        "Refused = Annotated[str, AfterValidator(refuse)]\n"
        "```\n"
        "> settings:\n"
        "    output_retries: 1\n"
        ">> Say anything [word: Refused].\n"
        "= `word`"
    )
    with pytest.raises(KediError) as caught:
        run(source, target)

    error = caught.value
    chain = [error, getattr(error, "original", None), error.__cause__]
    assert any(isinstance(item, OutputValidationError) for item in chain), repr(error)
    assert "real.kedi:10" in str(error)  # the error names the capture's line


def test_the_openai_adapter_remembers_the_mode_the_server_took(llama_url: str) -> None:
    from kedi.adapters.openai import OpenAIAdapter

    source = ">> A number [n: int].\n= <n>"
    records: list[dict[str, Any]] = []
    adapter = OpenAIAdapter("local", base_url=llama_url)
    kedi.compile(source).run_sync(adapter=adapter, transcript=records.append, settings=SMALL)
    capability_cache.forget_all()  # as a new process would
    kedi.compile(source).run_sync(
        adapter=OpenAIAdapter("local", base_url=llama_url),
        transcript=records.append,
        settings=SMALL,
    )

    modes = [(r["structured_mode"], r["attempt"], r["failed"]) for r in records]
    # One rejected json_schema request (HTTP 500, not retried), then json_object from the cache on.
    assert modes == [("json_schema", 1, True), ("json_object", 2, False), ("json_object", 1, False)]
    assert "HTTP 500" in records[0]["error"] and "response_format" in records[0]["error"]


def test_the_local_model_example_runs_in_process(local_model: None) -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "local_model.kedi"
    result = kedi.compile(path.read_text(encoding="utf-8"), path=str(path)).run_sync(model="local")

    assert isinstance(result, str) and " days in " in result and ", bags: " in result


def test_stream_on_the_local_model_shows_the_reply_in_one_piece(local_model: None) -> None:
    """llama.cpp answers whole in-process; `on_delta` still gets what a streaming model sends."""
    program = kedi.compile(
        "[reply] << Say hello.\n>> Name a colour: [colour] and a number: [n: int]\n= <reply>|<colour>"
    )
    pieces: list[str] = []
    result = program.run_sync(model="local", settings=SMALL, on_delta=pieces.append)

    reply, colour = result.split("|")
    assert pieces == [reply, colour] if colour else pieces == [reply]
