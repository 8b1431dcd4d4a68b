"""Untrusted conversation documents: `loads` and `load` refuse them with `HistoryError` only.

The hypothesis tests feed arbitrary text, arbitrary JSON, and valid documents
with one value replaced by arbitrary JSON; whatever comes in, nothing but
`HistoryError` escapes. The cases the fault probe of issue 18 found are
pinned one by one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kedi.errors import HistoryError
from kedi.history.lanes import Conversation, LaneKey
from kedi.history.messages import Message
from kedi.history.persistence import dumps, load, loads, save

KEY = {"adapter": "script", "model": "replies.json", "settings": "d", "mcp": "", "tools": ""}


def document(**changes: Any) -> dict[str, Any]:
    lane = {
        "key": dict(KEY),
        "epoch": 0,
        "format": "portable",
        "messages": [{"role": "user", "content": "hi"}],
    }
    return {"version": 1, "conversation_id": "c1", "lanes": [lane], **changes}


def refused(text: str | bytes) -> str:
    with pytest.raises(HistoryError) as caught:
        loads(text)
    return str(caught.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text() | st.binary())
def test_arbitrary_text_is_a_conversation_or_a_history_error(text: str | bytes) -> None:
    try:
        loads(text)
    except HistoryError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_arbitrary_json_is_a_conversation_or_a_history_error(value: Any) -> None:
    try:
        loads(json.dumps(value))
    except HistoryError:
        pass


PLACES = [
    "version",
    "conversation_id",
    "lanes",
    "lane",
    "key",
    "adapter",
    "format",
    "epoch",
    "messages",
    "message",
    "role",
    "content",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PLACES), json_values)
def test_a_valid_document_with_any_value_swapped_in_loads_or_is_a_history_error(
    place: str, value: Any
) -> None:
    data = document()
    lane = data["lanes"][0]
    if place in ("version", "conversation_id", "lanes"):
        data[place] = value
    elif place == "lane":
        data["lanes"][0] = value
    elif place in ("key", "format", "epoch", "messages"):
        lane[place] = value
    elif place == "adapter":
        lane["key"]["adapter"] = value
    elif place == "message":
        lane["messages"][0] = value
    else:
        lane["messages"][0][place] = value
    try:
        loads(json.dumps(data))
    except HistoryError:
        pass


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested less deeply"),
        ('{"a":' * 50_000 + "1" + "}" * 50_000, "nested less deeply"),
        (json.dumps(document(version=True)), "version True"),
        (json.dumps(document(version=1.0)), "version 1.0"),
        (json.dumps(document(conversation_id=True)), "conversation_id"),
        (json.dumps(document()).replace('"epoch": 0', '"epoch": true'), "epoch"),
        (json.dumps(document()).replace('"content": "hi"', '"content": true'), "content"),
        (
            json.dumps(document()).replace('"hi"', '"a\\ud800b"'),
            "lanes[0].messages[0].content: the lone surrogate",
        ),
        (json.dumps(document()).replace('"hi"', '"\\udc00"'), "lone surrogate"),
        (
            json.dumps(document()).replace('"c1"', '"c\\ud800"'),
            "conversation_id: the lone surrogate",
        ),
        (json.dumps(document()).replace('"hi"', '"a\ud800b"'), "lone surrogate '\\ud800'"),
        ("\ud83d", "lone surrogate"),
        (b"\xed\xa0\x80", "UTF-8"),  # an encoded surrogate: not UTF-8
        (b"\xff\xfe{", "UTF-8"),
        (
            json.dumps(document(lanes=[{**document()["lanes"][0], "format": "pydantic-ai"}])),
            "lanes[0]",
        ),
    ],
)
def test_hostile_documents_are_refused_with_the_place_named(
    text: str | bytes, problem: str
) -> None:
    assert problem in refused(text)


def test_a_surrogate_pair_is_one_character_and_loads() -> None:
    text = json.dumps(document()).replace('"hi"', '"\\ud83d\\ude00"')
    (lane,) = loads(text).lanes.values()
    assert lane.messages[0].content == "\U0001f600"


def conversation_with(content: str) -> Conversation:
    conversation = Conversation("c1")
    conversation.lane(LaneKey(**KEY, format="portable")).messages  # noqa: B018 (creates it)
    (lane,) = conversation.lanes.values()
    lane._messages.append(Message(role="user", content=content))
    return conversation


def test_save_refuses_a_lone_surrogate_and_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "conv.json"
    save(conversation_with("fine"), path)
    with pytest.raises(
        HistoryError, match=r"lanes\[0\]\.messages\[0\]\.content: the lone surrogate"
    ):
        save(conversation_with("a\ud800b"), path)
    assert [m.content for m in load(path).lanes[next(iter(load(path).lanes))].messages] == ["fine"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.json"]  # no temporary left


def test_a_save_killed_midway_leaves_a_temporary_the_next_save_removes(tmp_path: Path) -> None:
    path = tmp_path / "conv.json"
    # A child that creates its temporary file and is killed before it can move it.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, tempfile, time; "
            f"tempfile.mkstemp(dir={str(tmp_path)!r}, prefix='.conv.json.' + str(os.getpid()) + '.', suffix='.tmp'); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    save(conversation_with("x"), path)  # the child is alive: its temporary stays
    assert len(list(tmp_path.glob(".conv.json.*.tmp"))) == 1
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    save(conversation_with("y"), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.json"]


def test_a_round_trip_of_dumps_still_loads() -> None:
    conversation = conversation_with("plain text ✓")
    assert dumps(loads(dumps(conversation))) == dumps(conversation)
