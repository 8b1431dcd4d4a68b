"""Recording a run into the history store, replaying it, and resuming a failed one.

A `SessionRecorder` sits on the model boundary (`CallLayer.send`). For every
call it either

- **serves** the call from the recording (replay and resume): the recorded
  turn of the same lane whose rendered request equals the current one gives
  back the same result, messages, usage and transcript lines; or
- **sends** it to the adapter and, when recording, commits the turn to the
  store in one transaction *before* the lane commits it in memory (a store
  failure fails the call, so memory and store never disagree).

The rendered request is what a call would send, minus its source line (so
moving code does not break replay): lane, instructions, prompt, a digest of
the history, the output schema, the tool contract and the redacted settings.
On replay the first call whose request differs from the recording stops the
run with a `ReplayMismatch` showing a unified diff of recorded vs current.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any, Literal

import pydantic_core

from kedi.adapters.base import Adapter, CallRequest, CallResult, Exchange, Usage
from kedi.errors import KediError
from kedi.history.identity import new_id
from kedi.history.lanes import Lane, LaneKey, LaneView, canonical_digest, canonical_json
from kedi.history.persistence import dump_lane_messages, load_lane_messages
from kedi.history.store import TurnRecord, encode_lane_key, redact
from kedi.history.store.base import Store

__all__ = ["ReplayMismatch", "SessionRecorder", "render_request"]

Mode = Literal["live", "replay", "resume"]


class ReplayMismatch(KediError):
    """A replayed call's request differs from the recorded one (the program or its inputs changed)."""


def render_request(adapter: Adapter, key: LaneKey, request: CallRequest) -> dict[str, Any]:
    """The call's request as replay compares it (JSON data, no secrets, no source line)."""
    return {
        "lane": key.label(),
        "instructions": request.instructions,
        "prompt": request.prompt,
        "history": {
            "messages": len(request.history),
            "digest": _history_digest(adapter, key, request.history),
        },
        "output_schema": request.output.json_schema if request.output is not None else None,
        "tools": sorted(tool.name for tool in request.tools),
        "tool_contract": key.tools,
        "settings": redact(dict(request.settings)) if request.settings else {},
    }


def _history_digest(adapter: Adapter, key: LaneKey, history: Sequence[Any]) -> str:
    """`canonical_digest` of the history's dump; a lane's snapshot keeps it up to date instead.

    Every recorded call renders its request, so hashing the whole lane each time
    made a run of n calls on one lane cost O(n^2) (800 calls: 16 s instead of 1 s).
    """
    if not history:
        return ""
    if isinstance(history, LaneView):
        state = history.incremental(_HISTORY_DIGEST, lambda: _HistoryDigest(adapter, key))
        if state is not None:
            return state.digest()
    return canonical_digest(dump_lane_messages(key, history, [adapter]))


_HISTORY_DIGEST = "replay digest"


class _HistoryDigest:
    """A lane's history digest, fed each committed turn (an `Incremental` of `kedi.history.lanes`).

    The digest is byte for byte `canonical_digest` of the dumped list, so stored
    recordings still replay: SHA-256 streams, so the list's JSON text is hashed
    item by item and closed on a copy.
    """

    def __init__(self, adapter: Adapter, key: LaneKey) -> None:
        self._adapter = adapter
        self._key = key
        self._hasher = hashlib.sha256(b"[")
        self._separator = b""

    def extend(self, messages: Sequence[Any]) -> None:
        for item in dump_lane_messages(self._key, messages, [self._adapter]):
            self._hasher.update(self._separator + canonical_json(item).encode())
            self._separator = b","

    def digest(self) -> str:
        closed = self._hasher.copy()
        closed.update(b"]")
        return closed.hexdigest()[:16]


def request_text(rendered: Mapping[str, Any]) -> list[str]:
    """A rendered request (or any JSON data) as the lines a unified diff compares."""
    return json.dumps(rendered, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


class SessionRecorder:
    """One run's link to its session in the store (see the module docstring)."""

    def __init__(
        self,
        store: Store | None,
        session_id: str,
        run_no: int,
        *,
        mode: Mode = "live",
        record: bool = True,
        recorded: Sequence[TurnRecord] = (),
        failure: Mapping[str, Any] | None = None,
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.run_no = run_no
        self.mode = mode
        self.record = record and store is not None
        self._pool: list[TurnRecord | None] = list(recorded)
        self._resume = dict(failure) if failure else None
        self.failure: dict[str, Any] | None = None
        """Set when a call fails: the evidence `kedi run` stores for `--resume`."""
        self.served = 0
        self.sent = 0
        self.model_label = ""
        """The adapter and model of the first recorded call (shown by `kedi history ls`)."""

    # ---------------------------------------------------------------- replay

    def _candidates(self, key: LaneKey) -> list[int]:
        lane = encode_lane_key(key)
        return [
            index
            for index, turn in enumerate(self._pool)
            if turn is not None and encode_lane_key(turn.lane) == lane
        ]

    def recorded_ids(self, key: LaneKey) -> tuple[str, str] | None:
        """The run and call ids the next served call on this lane had (so transcripts replay exactly)."""
        if self.mode == "live":
            return None
        candidates = self._candidates(key)
        if not candidates:
            return None
        turn = self._pool[candidates[0]]
        assert turn is not None
        exchanges = [e for e in turn.exchanges if isinstance(e, dict)]
        call_id = exchanges[0].get("call_id") if exchanges else None
        return turn.run_id, call_id if isinstance(call_id, str) and call_id else new_id()

    def _take(
        self, adapter: Adapter, key: LaneKey, request: CallRequest, rendered: dict[str, Any]
    ) -> TurnRecord | None:
        candidates = self._candidates(key)
        for index in candidates:
            turn = self._pool[index]
            assert turn is not None
            if without_origin(turn.request) == rendered:
                self._pool[index] = None
                return turn
        if self.mode == "resume" and not candidates:
            return None  # past the recording: continue live
        if not candidates:
            raise ReplayMismatch(
                f"replay: {request.origin or 'a call'} makes a call on lane {key.label()} that the recording "
                "does not have (the program, its inputs or the model changed since it was recorded); re-record it with --record"
            )
        recorded = self._pool[candidates[0]]
        assert recorded is not None
        diff = difflib.unified_diff(
            request_text(without_origin(recorded.request)),
            request_text(rendered),
            f"recorded ({recorded.origin or 'turn ' + str(recorded.seq)})",
            f"current ({request.origin or 'call'})",
            lineterm="",
        )
        raise ReplayMismatch(
            f"replay: the request of {request.origin or 'a call'} differs from the recording "
            "(re-record with --record):\n" + "\n".join(diff)
        )

    def _serve(
        self,
        adapter: Adapter,
        key: LaneKey,
        request: CallRequest,
        turn: TurnRecord,
        lane: Lane | None,
    ) -> CallResult:
        if request.on_exchange is not None:
            for item in turn.exchanges:
                request.on_exchange(
                    Exchange(
                        messages=tuple(item["messages"]),
                        response=item["response"],
                        output_schema=item.get("output_schema"),
                        tools=tuple(item.get("tools") or ()),
                    )
                )
        value = (
            turn.value
            if request.output is None
            else request.output.validate_json(json.dumps(turn.value))
        )
        rewritten = None
        if turn.rewritten is not None:
            rewritten = tuple(load_lane_messages(key, turn.rewritten, [adapter]))
        self.served += 1
        return CallResult(
            value=value,
            new_messages=tuple(load_lane_messages(key, turn.messages, [adapter])),
            usage=Usage(
                **{
                    name: int(turn.usage.get(name, 0))
                    for name in ("input_tokens", "output_tokens", "requests", "tool_calls")
                }
            ),
            rewritten_history=rewritten,
            rewrites=max(turn.epoch - (lane.epoch if lane is not None else 0), 0)
            if rewritten is not None
            else 0,
        )

    # ---------------------------------------------------------------- one call

    async def send(
        self,
        adapter: Adapter,
        key: LaneKey,
        request: CallRequest,
        lane: Lane | None,
        live: Callable[[CallRequest], Awaitable[CallResult]],
    ) -> CallResult:
        """Serve `request` from the recording or send it with `live`, recording the turn."""
        rendered = render_request(adapter, key, request)
        if self.mode != "live":
            turn = self._take(adapter, key, request, rendered)
            if turn is not None:
                return self._serve(adapter, key, request, turn, lane)
        resumed = self._resumed(adapter, key, request, lane)
        if resumed is not None:
            request, rendered = resumed, render_request(adapter, key, resumed)
        exchanges: list[dict[str, Any]] = []
        sink = request.on_exchange

        def capture(exchange: Exchange) -> None:
            exchanges.append(
                {
                    "messages": list(exchange.messages),
                    "response": exchange.response,
                    "output_schema": exchange.output_schema,
                    "tools": list(exchange.tools),
                    "call_id": request.call_id,
                }
            )
            if sink is not None:
                sink(exchange)

        try:
            result = await live(replace(request, on_exchange=capture))
        except BaseException as error:
            self._note_failure(adapter, key, request, error)
            raise
        self.sent += 1
        if resumed is not None and result.rewritten_history is None:
            # the lane now continues from the partial: installed like a processor's rewrite
            result = replace(result, rewritten_history=tuple(request.history), rewrites=1)
        if self.record:
            await self.persist(self._turn(adapter, key, request, rendered, lane, result, exchanges))
        return result

    async def persist(self, turn: TurnRecord) -> None:
        """Commit one call's turn to the store, before its lane commits it in memory.

        One transaction, on the caller's thread. A recorder that shares its
        store with many concurrent runs (`kedi batch`) overrides this to hand
        the turn to a writer of its own; a failure must still raise here.
        """
        assert self.store is not None
        self.store.commit_turn(turn)

    def _resumed(
        self, adapter: Adapter, key: LaneKey, request: CallRequest, lane: Lane | None
    ) -> CallRequest | None:
        """The first live call on the failed call's lane continues from its partial messages.

        The lane key includes the tool contract, so a tool-using call's partial
        goes back to the lane of the same tools. Returns the changed request.
        """
        failure = self._resume
        if (
            failure is None
            or lane is None
            or failure.get("lane") != encode_lane_key(key)
            or not failure.get("messages")
        ):
            return None
        self._resume = None
        history = tuple(load_lane_messages(key, failure["messages"], [adapter]))
        return replace(request, history=history)

    def _turn(
        self,
        adapter: Adapter,
        key: LaneKey,
        request: CallRequest,
        rendered: dict[str, Any],
        lane: Lane | None,
        result: CallResult,
        exchanges: list[dict[str, Any]],
    ) -> TurnRecord:
        self.model_label = self.model_label or model_label(key)
        history_on = lane is not None
        rewritten = result.rewritten_history
        epoch = 0
        if lane is not None:
            epoch = lane.epoch + (max(result.rewrites, 1) if rewritten is not None else 0)
        return TurnRecord(
            session_id=self.session_id,
            run_no=self.run_no,
            lane=key,
            history=history_on,
            epoch=epoch,
            messages=dump_lane_messages(key, result.new_messages, [adapter]),
            rewritten=None if rewritten is None else dump_lane_messages(key, rewritten, [adapter]),
            run_id=request.run_id,
            origin=request.origin,
            request={**rendered, "origin": request.origin},
            value=json.loads(pydantic_core.to_json(result.value, fallback=str)),
            usage=usage_dict(result.usage) if isinstance(result.usage, Usage) else {},
            exchanges=exchanges,
        )

    def _note_failure(
        self, adapter: Adapter, key: LaneKey, request: CallRequest, error: BaseException
    ) -> None:
        # A session whose first call failed is labelled by it too (`kedi history ls`),
        # not by the command line's bare model name.
        self.model_label = self.model_label or model_label(key)
        partial = getattr(error, "partial", None)
        record: dict[str, Any] = {
            "lane": encode_lane_key(key),
            "lane_label": key.label(),
            "origin": request.origin,
            "run_id": request.run_id,
            "error": f"{type(error).__name__}: {error}",
        }
        if partial is not None:
            record.update(
                stage=partial.stage,
                # A native lane's partial holds its framework's messages: stored as
                # the lane stores them, and read back by `_resumed` with the same adapter.
                messages=dump_lane_messages(key, partial.messages, [adapter]),
                usage=usage_dict(partial.usage) if isinstance(partial.usage, Usage) else None,
                requests=partial.requests,
                tool_calls=partial.tool_calls,
            )
        elif not isinstance(error, Exception):
            record["stage"] = "canceled"
        if self.failure is None:
            self.failure = record


def model_label(key: LaneKey) -> str:
    """`adapter:model` as `kedi history ls` shows a session's model (`offline` stays `offline`)."""
    return key.model if key.model.startswith(key.adapter) else f"{key.adapter}:{key.model}"


_USAGE_FIELDS = tuple(field.name for field in fields(Usage))


def usage_dict(usage: Usage) -> dict[str, int]:
    """`dataclasses.asdict(usage)` without its recursive deep copy (paid for every recorded call)."""
    return {name: getattr(usage, name) for name in _USAGE_FIELDS}


def without_origin(request: Mapping[str, Any]) -> dict[str, Any]:
    """A stored request without its source line (moved code is the same request)."""
    return {name: value for name, value in request.items() if name != "origin"}
