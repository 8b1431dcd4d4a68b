"""Transcript records: linear on disk, crash-safe to write, tolerant to read.

A transcript is JSON lines, one record per model request (see
`kedi.runtime.calls.Transcript`, which writes them). Two promises:

- **Crash-safe.** Each record goes out as one complete line in one `write`,
  then is flushed, so a process killed at any moment leaves every earlier
  record whole; at most the last line is torn. `read_transcript` skips a
  torn last line and reports it (a torn line anywhere else is an error:
  that file was not written by kedi alone).
- **Linear.** A request with history on resends the lane's whole history, so
  records holding every message grow quadratically with the run. Unless the
  transcript is asked for in full (`--transcript-full`), a record whose
  messages repeat an earlier record of its lane holds only what is new, plus
  a reference: `"messages_from": {"index": J, "start": A, "stop": B, "at": P}`
  means its full messages are `messages[:P] + base(J)[A:B] + messages[P:]`,
  where `base(J)` is record J's full messages followed by its `response`.
  `expand_records` (and `kedi transcript expand FILE`) rebuilds full records.
  Every other field is written as given, so fields added by other features
  merge untouched. The history store keeps its `exchanges` the same way
  (`kedi.history.linear` holds the shared code).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from kedi.errors import KediUsageError
from kedi.history.linear import REFERENCE, Expander, MissingBase, base_of, shorten


def encode_line(record: dict[str, Any]) -> bytes:
    """One record as a complete UTF-8 JSON line.

    A lone surrogate in a string (which UTF-8 cannot hold) is written as its
    JSON escape (`\\ud800`), so the line stays valid JSON and reads back the same.
    """
    text = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    return text.encode("utf-8", "backslashreplace")


def write_line(file: IO[Any], line: bytes) -> None:
    """Write one whole line and flush it: one `os.write` when `file` has a descriptor."""
    try:
        descriptor = file.fileno()
    except (AttributeError, OSError, ValueError):
        descriptor = -1
    if descriptor >= 0 and "b" in getattr(file, "mode", "") and getattr(file, "raw", file) is file:
        view = memoryview(line)
        while view:  # a regular file takes it all at once; a pipe may take it in parts
            view = view[os.write(descriptor, view) :]
        return
    file.write(line if "b" in getattr(file, "mode", "") else line.decode("utf-8"))
    file.flush()


@dataclass
class LinearRecords:
    """Replaces the messages a record repeats from the previous record of its lane by a reference."""

    _last: dict[str, tuple[int, list[Any]]] = field(default_factory=dict)
    """Per lane: the index of its last record and that record's base (full messages + response)."""

    def shorten(self, record: dict[str, Any]) -> dict[str, Any]:
        """`record` with its repeated messages replaced by a reference (a new dict when shortened)."""
        lane, messages = record.get("lane"), record.get("messages")
        if not isinstance(lane, str) or not isinstance(messages, list):
            return record
        previous = self._last.get(lane)
        self._last[lane] = (record["index"], base_of(record))
        return shorten(record, previous)


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class TranscriptRead:
    """The records of a transcript file and what was skipped."""

    records: list[dict[str, Any]]
    torn: str | None
    """A note on the torn last line that was skipped, if there was one."""


def read_transcript(path: str | os.PathLike[str]) -> TranscriptRead:
    """The records of the transcript at `path`; a torn last line is skipped and reported.

    Raises `KediUsageError` when the file cannot be read or a line other than
    the last is not a JSON object.
    """
    try:
        with open(path, "rb") as file:
            lines = file.read().split(b"\n")
    except OSError as error:
        raise KediUsageError(
            f"cannot read transcript {os.fspath(path)}: {error.strerror or error}"
        ) from None
    records: list[dict[str, Any]] = []
    torn = None
    ended = lines[-1] == b""  # the file ends with a line end
    body = lines[:-1] if ended else lines
    for number, line in enumerate(body, start=1):
        record = _record(line)
        if record is not None:
            records.append(record)
        elif number == len(body) and not ended:
            torn = f"{os.fspath(path)}:{number}: skipped a torn last record ({len(line)} bytes; the writer was killed mid-line)"
        elif line.strip():
            raise KediUsageError(
                f"{os.fspath(path)}:{number}: not a transcript record (a JSON object)"
            )
    return TranscriptRead(records, torn)


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def expand_records(records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Full records (every message each request sent) from linear ones, in order.

    Raises `KediUsageError` when a reference points at a record that is not there.
    """
    expander = Expander()
    for record in records:
        index = record.get("index")
        try:
            yield expander.expand(record, index if isinstance(index, int) else None)
        except MissingBase as missing:
            raise KediUsageError(
                f"transcript record {index} refers to record {missing.index}, which is missing"
            ) from None


__all__ = [
    "REFERENCE",
    "LinearRecords",
    "TranscriptRead",
    "encode_line",
    "expand_records",
    "read_transcript",
    "write_line",
]
