"""`SourceFile` is the one place that turns offsets into lines and columns."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kedi.source import SourceFile, Span

# Text built from the characters that matter for positions: line breaks (LF and
# CRLF), tabs, spaces, and a few ordinary and non-ASCII characters.
texts = st.lists(
    st.sampled_from(["\n", "\r\n", "\r", "\t", " ", "a", "é", ">>", "#"]), max_size=60
).map("".join)


def expected_location(text: str, offset: int) -> tuple[int, int]:
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


@settings(max_examples=300, derandomize=True, deadline=None)
@given(texts, st.data())
def test_location_matches_counting_newlines(text: str, data: st.DataObject) -> None:
    offset = data.draw(st.integers(min_value=-2, max_value=len(text) + 2))
    assert SourceFile(text).location(offset) == expected_location(text, offset)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(texts, st.data())
def test_span_covers_start_to_end(text: str, data: st.DataObject) -> None:
    start = data.draw(st.integers(min_value=0, max_value=len(text)))
    end = data.draw(st.integers(min_value=start, max_value=len(text)))
    span = SourceFile(text, "flow.kedi").span(start, end)
    assert span == Span("flow.kedi", *expected_location(text, start), *expected_location(text, end))


@settings(max_examples=200, derandomize=True, deadline=None)
@given(texts)
def test_line_text_drops_the_line_break(text: str) -> None:
    source = SourceFile(text)
    lines = text.split("\n")
    assert source.line_count == len(lines)
    for number, line in enumerate(lines, start=1):
        assert source.line_text(number) == line.rstrip("\r")
    assert source.line_text(0) == source.line_text(len(lines) + 1) == ""


def test_tabs_and_crlf_count_as_one_column_each() -> None:
    source = SourceFile("a\r\n\tb")
    assert source.location(2) == (1, 3)  # the "\n" of the CRLF pair
    assert source.location(4) == (2, 2)  # "b", after one tab
    assert source.path == "<string>"


@settings(max_examples=200, derandomize=True, deadline=None)
@given(texts)
def test_whole_span_is_the_span_of_every_offset(text: str) -> None:
    """`whole_span` counts line breaks instead of building the line index; the result is the same."""
    source = SourceFile(text, "flow.kedi")
    assert source.whole_span() == source.span(0, len(text))
