"""The `script:PATH` model: replays scripted replies from a JSON file.

The file holds a JSON list; each entry answers one model request (a call's
first request, or a follow-up of its tool loop or validation retries).
Entries are numbered from 1 in error messages. An entry is either a string
(a text reply) or an object with exactly one reply key:

- `{"text": "..."}`: a text reply. A structured call parses it as JSON.
- `{"outputs": {...}}`: a structured reply, validated like a real model's.
  A text call receives it as compact JSON text.
- `{"error": "message"}`: the request fails with a final (not retried)
  `ProviderError`.
- `{"tool_calls": [{"name": ..., "args": {...} or "raw text", "id": ...}]}`:
  the model calls tools. Each runs through the request's `ToolSpec.handler`
  (a failure goes back to the model as a failed result) and the next entry
  answers the follow-up request. `id` defaults to `call_<entry>_<n>`; at most
  8 tool rounds per call.

and optionally:

- `"delay_ms": 250`: simulated latency (the entry is claimed first, so
  concurrent calls never take the same entry);
- `"when": {"outputs": [names], "prompt_contains": "..."}`: the entry answers
  the first request that matches (every listed name is one of the call's
  outputs, and the prompt contains the text), whatever the order. Requests
  that match no `when` entry take the other entries in order. Follow-up
  requests match like first ones, so a parallel call's tool loop can be
  scripted with several `when` entries.

A structured reply that fails validation is sent back with the errors (a user
correction message) and the next entry answers, up to the
`output_retries` setting (default 1) times; then `OutputValidationError`.
Running out of entries raises `ScriptExhaustedError` naming the call's source
and the script. A malformed file raises `KediConfigError` naming the file,
the entry and the problem when the adapter is created.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import anyio
from pydantic import ValidationError

from kedi.adapters._capture_stream import stream_in_one_piece
from kedi.adapters._portable import (
    PortableTurn,
    at_origin,
    compact_json,
    correction_text,
    decode_outputs,
    validation_problems,
)
from kedi.adapters.base import (
    Adapter,
    AdapterProfile,
    CallRequest,
    CallResult,
    JSONDict,
)
from kedi.errors import (
    AdapterError,
    KediConfigError,
    OutputValidationError,
    ProviderError,
    ScriptExhaustedError,
)
from kedi.history import ToolCall
from kedi.history.persistence import json_kind
from kedi.settings import ANY_KNOWN_SETTING

MAX_TOOL_ROUNDS = 8
"""Tool rounds one call may run before it fails."""

_REPLY_KEYS = ("text", "outputs", "error", "tool_calls")
_ENTRY_KEYS = frozenset({*_REPLY_KEYS, "delay_ms", "when"})
_WHEN_KEYS = frozenset({"outputs", "prompt_contains"})
_CALL_KEYS = frozenset({"name", "args", "id"})


@dataclass(frozen=True, slots=True)
class When:
    """Which request a scripted entry answers, whatever the order."""

    outputs: frozenset[str] | None = None
    """Names that must all be among the call's outputs."""
    prompt_contains: str | None = None
    """Text the prompt must contain."""

    def matches(self, request: CallRequest) -> bool:
        """Whether `request` meets every condition."""
        if self.outputs is not None:
            if request.output is None or not self.outputs <= set(request.output.fields):
                return False
        return self.prompt_contains is None or self.prompt_contains in request.prompt


@dataclass(frozen=True, slots=True)
class ScriptEntry:
    """One scripted reply; exactly one of `text`, `outputs`, `error`, `tool_calls` is set."""

    number: int
    """Position in the file, from 1."""
    text: str | None = None
    outputs: JSONDict | None = None
    error: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    delay_ms: float = 0
    when: When | None = None


def _read_from(path: str | os.PathLike[str]) -> str:
    """Where a relative script path was looked for (`> model: script:` is not relative to the program)."""
    if Path(path).is_absolute():
        return ""
    try:
        folder = os.getcwd()
    except OSError:  # the working directory was removed
        return " (a relative path is read from the working directory)"
    return f" (a relative path is read from the working directory, {folder})"


def load_script(path: str | os.PathLike[str]) -> tuple[ScriptEntry, ...]:
    """Read and check a script file; raises `KediConfigError` naming any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise KediConfigError(
            f"cannot read script {os.fspath(path)}: {error.strerror or error}{_read_from(path)}"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise KediConfigError(
            f"script {os.fspath(path)} is not valid JSON: {error.msg} "
            f"(line {error.lineno}, column {error.colno})"
        ) from None
    if not isinstance(data, list):
        raise KediConfigError(
            f"script {os.fspath(path)} must hold a JSON list of replies, not {json_kind(data)}"
        )
    entries = []
    for number, item in enumerate(data, start=1):
        try:
            entries.append(_entry(number, item))
        except ValueError as error:
            raise KediConfigError(f"script {os.fspath(path)}, entry {number}: {error}") from None
    return tuple(entries)


def _entry(number: int, item: Any) -> ScriptEntry:
    if isinstance(item, str):
        return ScriptEntry(number, text=item)
    if not isinstance(item, dict):
        raise ValueError(f"expected a string or an object, not {json_kind(item)}")
    unknown = sorted(set(item) - _ENTRY_KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_ENTRY_KEYS))})")
    replies = [key for key in _REPLY_KEYS if key in item]
    if len(replies) != 1:
        found = ", ".join(replies) or "none"
        raise ValueError(f"needs exactly one of {', '.join(_REPLY_KEYS)} (found: {found})")
    reply = replies[0]
    value = item[reply]
    if reply in ("text", "error") and not isinstance(value, str):
        raise ValueError(f"{reply!r} must be a string, not {json_kind(value)}")
    if reply == "outputs" and not isinstance(value, dict):
        raise ValueError(f"'outputs' must be an object of capture values, not {json_kind(value)}")
    delay = item.get("delay_ms", 0)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
        raise ValueError(f"'delay_ms' must be a number of milliseconds >= 0, not {delay!r}")
    return ScriptEntry(
        number,
        text=value if reply == "text" else None,
        outputs=value if reply == "outputs" else None,
        error=value if reply == "error" else None,
        tool_calls=_tool_calls(number, value) if reply == "tool_calls" else (),
        delay_ms=delay,
        when=_when(item["when"]) if "when" in item else None,
    )


def _tool_calls(number: int, value: Any) -> tuple[ToolCall, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("'tool_calls' must be a non-empty list of calls")
    calls = []
    for index, call in enumerate(value, start=1):
        where = f"tool call {index}"
        if not isinstance(call, dict):
            raise ValueError(f"{where} must be an object, not {json_kind(call)}")
        unknown = sorted(set(call) - _CALL_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key {unknown[0]!r} (allowed: args, id, name)")
        name, args = call.get("name"), call.get("args", {})
        call_id = call.get("id", f"call_{number}_{index}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where} needs a 'name' string")
        if not isinstance(args, dict | str):
            raise ValueError(
                f"{where}: 'args' must be an object or raw text, not {json_kind(args)}"
            )
        if not isinstance(call_id, str) or not call_id:
            raise ValueError(f"{where}: 'id' must be a non-empty string")
        calls.append(ToolCall(id=call_id, name=name, args=args))  # type: ignore[arg-type]  # RawArgs' validator takes an object too
    return tuple(calls)


def _when(value: Any) -> When:
    if not isinstance(value, dict) or not value:
        raise ValueError("'when' must be an object with 'outputs' and/or 'prompt_contains'")
    unknown = sorted(set(value) - _WHEN_KEYS)
    if unknown:
        raise ValueError(f"'when': unknown key {unknown[0]!r} (allowed: outputs, prompt_contains)")
    outputs = value.get("outputs")
    if outputs is not None and (
        not isinstance(outputs, list) or not outputs or not all(isinstance(n, str) for n in outputs)
    ):
        raise ValueError("'when.outputs' must be a non-empty list of output names")
    contains = value.get("prompt_contains")
    if contains is not None and not isinstance(contains, str):
        raise ValueError("'when.prompt_contains' must be a string")
    return When(frozenset(outputs) if outputs is not None else None, contains)


class ScriptAdapter(Adapter):
    """Replays the replies of a JSON script file (see the module docstring)."""

    shortname: ClassVar[str] = "script"
    checks_requests: ClassVar[bool] = True
    profile: ClassVar[AdapterProfile] = AdapterProfile(
        structured_output=True,
        tools=True,
        history=True,
        offline=True,
        settings=ANY_KNOWN_SETTING,
    )

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        if path is None:  # `--adapter script` without a model names no file
            raise KediConfigError(
                "the script adapter needs a replies file: pass --model script:PATH "
                "or use `> model: script:PATH` (see docs/replies.md)"
            )
        self.model_name = os.fspath(path)
        self.path = Path(path)
        self._entries = load_script(path)
        self._unused = list(self._entries)
        # A plain lock: claims never await, and adapters may serve several threads.
        self._lock = threading.Lock()

    @classmethod
    def capability_rows(cls) -> dict[str, str]:
        """What this adapter supports: every setting name, so a program runs unchanged on it."""
        return {
            **super().capability_rows(),
            "settings": "every name kedi knows; only output_retries is used",
        }

    @property
    def remaining(self) -> int:
        """How many entries no request has used yet."""
        return len(self._unused)

    async def request(self, request: CallRequest) -> CallResult:
        """Answer one call from the script, running its tool loop and retries."""
        self.check(request)
        retries = _output_retries(request.settings)
        turn = PortableTurn.start(request)
        rounds = 0
        rejected = ""  # why this call's last reply did not validate, for the exhaustion message
        while True:
            await turn.process(self)
            try:
                entry = self._claim(request, turn)
            except ScriptExhaustedError as error:
                if not rejected:
                    raise
                raise ScriptExhaustedError(
                    f"{error.message}; {rejected}", partial=error.partial
                ) from None
            if entry.delay_ms:
                await anyio.sleep(entry.delay_ms / 1000)
            if entry.error is not None:
                turn.record({"error": entry.error})
                raise ProviderError(
                    f"{entry.error} ({self._source(entry)})",
                    retryable=False,
                    partial=turn.partial("model"),
                )
            if entry.tool_calls:
                turn.respond(turn.stamp(role="assistant", tool_calls=list(entry.tool_calls)))
                rounds += 1
                if rounds > MAX_TOOL_ROUNDS:
                    raise AdapterError(
                        f"the call{at_origin(request)} ran more than {MAX_TOOL_ROUNDS} tool rounds "
                        f"({self._source(entry)})",
                        partial=turn.partial("loop"),
                    )
                await turn.run_tools(entry.tool_calls)
                continue
            reply: str | JSONDict = entry.text if entry.text is not None else entry.outputs or {}
            content = reply if isinstance(reply, str) else compact_json(reply)
            turn.respond(turn.stamp(role="assistant", content=content))
            stream_in_one_piece(request, content)
            if request.output is None:
                return turn.result(content)
            try:
                return turn.result(decode_outputs(request.output, reply))
            except ValidationError as error:
                problems = validation_problems(error)
            rejected = _rejection(entry, request, problems)
            if retries == 0:
                raise OutputValidationError(
                    f"the reply to the call{at_origin(request)} did not validate "
                    f"({self._source(entry)}): {'; '.join(problems)}",
                    partial=turn.partial("decode"),
                )
            retries -= 1
            turn.add(turn.stamp(role="user", content=correction_text(problems, request.output)))

    def _claim(self, request: CallRequest, turn: PortableTurn) -> ScriptEntry:
        """Take the entry answering this request: a matching `when` entry, else the next plain one."""
        with self._lock:
            entry = next(
                (e for e in self._unused if e.when is not None and e.when.matches(request)), None
            )
            if entry is None:
                entry = next((e for e in self._unused if e.when is None), None)
            if entry is not None:
                self._unused.remove(entry)
                return entry
        raise ScriptExhaustedError(
            f"script {self.model_name} has no reply left for the call{at_origin(request)} "
            f"(prompt {_preview(request.prompt)}; {len(self._entries)} entries, "
            f"{len(self._unused)} unused, none for this call)",
            partial=turn.partial("model"),
        )

    def _source(self, entry: ScriptEntry) -> str:
        return f"script {self.model_name}, entry {entry.number}"


def _rejection(entry: ScriptEntry, request: CallRequest, problems: list[str]) -> str:
    """Why `entry` did not answer a structured call, with how to write one that does."""
    names = ", ".join(request.output.fields) if request.output is not None else ""
    text = "a text reply" if entry.text is not None else "its outputs"
    return (
        f"entry {entry.number} ({text}) did not validate for the typed captures ({names}): "
        f"{'; '.join(problems)}. A call with typed captures is answered by "
        '{"outputs": {"<capture>": <value>, ...}} (see docs/replies.md)'
    )


def _output_retries(settings: Mapping[str, Any]) -> int:
    retries = settings.get("output_retries", 1)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise KediConfigError(
            f"the output_retries setting must be an integer >= 0, not {retries!r}"
        )
    return retries


def _preview(prompt: str, limit: int = 60) -> str:
    flat = " ".join(prompt.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")
