"""`CaptureText`: the text of `str` fields, decoded from JSON however its pieces split."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from hypothesis import given
from hypothesis import strategies as st

from kedi.adapters._capture_stream import CaptureText
from kedi.adapters._portable import without_lone_surrogates
from kedi.adapters.base import OutputSpec

# Text with every kind of escape: quotes, backslashes, controls, non-BMP (a surrogate pair in ASCII JSON).
TEXTS = st.text(
    alphabet=st.sampled_from(
        ["a", " ", '"', "\\", "\n", "\t", "\x01", "é", "😀", "/", "{", "}", ",", ":"]
    )
)
OTHER_VALUES = st.one_of(
    st.integers(),
    st.none(),
    st.booleans(),
    st.lists(TEXTS, max_size=3),
    st.dictionaries(TEXTS, TEXTS, max_size=2),
)


def streamed(document: str, cuts: list[int], fields: set[str]) -> list[str]:
    """Feed `document` cut at `cuts`; the pieces `on_delta` received."""
    pieces: list[str] = []
    parser = CaptureText(fields, pieces.append)
    bounds = [0, *sorted(set(cut % (len(document) + 1) for cut in cuts)), len(document)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        parser.feed(document[start:end])
    return pieces


@given(
    texts=st.lists(TEXTS, min_size=1, max_size=3),
    others=st.lists(OTHER_VALUES, max_size=3),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(min_value=0), max_size=40),
)
def test_the_pieces_add_up_to_the_str_fields_text_whatever_the_cuts(
    texts: list[str], others: list[Any], ascii_only: bool, cuts: list[int]
) -> None:
    reply: dict[str, Any] = {}
    for index, text in enumerate(texts):  # str fields and other fields interleaved
        reply[f"text{index}"] = text
        if index < len(others):
            reply[f"other{index}"] = others[index]
    document = (
        "Here it is:\n```json\n" + json.dumps(reply, ensure_ascii=ascii_only, indent=1) + "\n```"
    )
    pieces = streamed(document, cuts, {f"text{index}" for index in range(len(texts))})
    assert "".join(pieces) == "\n".join(text for text in texts if text)
    assert all(pieces)  # never an empty delta


@given(cuts=st.lists(st.integers(min_value=0), max_size=20))
def test_escapes_and_surrogates_split_anywhere(cuts: list[int]) -> None:
    # A surrogate pair, a lone high surrogate before a simple escape, an escaped key.
    document = '{"\\u0073ummary": "a\\ud83d\\ude00b\\ud83d\\nc\\u00e9\\"\\\\", "n": 3}'
    # The lone half is sent as U+FFFD, as the reply's value holds it (docs/history.md).
    expected = without_lone_surrogates(json.loads(document)["summary"])
    assert "".join(streamed(document, cuts, {"summary"})) == expected


@given(cuts=st.lists(st.integers(min_value=0), max_size=20))
def test_lone_halves_raw_or_escaped_are_sent_as_u_fffd(cuts: list[int]) -> None:
    # Raw halves (a JSON chunk's escapes decoded) and escaped ones, each alone or at the end.
    document = '{"summary": "a\udc00b\\udc00c\ud83d\\ude00d\ud83d"}'
    pieces = streamed(document, cuts, {"summary"})
    assert "".join(pieces) == "a\ufffdb\ufffdc\U0001f600d\ufffd"
    assert all(piece.encode("utf-8") for piece in pieces)


def test_a_new_reply_starts_a_new_stretch_after_a_line_break() -> None:
    pieces: list[str] = []
    parser = CaptureText({"summary"}, pieces.append)
    parser.feed('{"summary": "first')  # cut off, then corrected
    parser.start()
    parser.feed('{"summary": "second"}')
    parser.feed(' trailing {"summary": "ignored"}')
    assert pieces == ["first", "\nsecond"]


def test_only_str_captures_stream() -> None:
    model = pydantic.create_model(
        "Out", title=(str, ...), count=(int, ...), tags=(list[str], ...), note=(str | None, None)
    )
    assert OutputSpec(model, model.model_json_schema()).text_fields == ("title",)
