"""The model boundary: turn one `>>` / `<<` statement into an adapter request.

For each call: pick the adapter from the agent state in force, render the
instructions, run the `user_prompt_submit` hooks, and — when history is on —
run the read/call/commit transaction on the call's lane in source order.
Transcript lines are written per model request as the adapter reports them.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio.lowlevel

from kedi.adapters import create_adapter
from kedi.adapters.base import (
    Adapter,
    CallRequest,
    CallResult,
    Exchange,
    OutputSpec,
    ToolSpec,
    Usage,
    build_request,
)
from kedi.errors import CapabilityError, ContextLengthError, KediConfigError, KediUsageError
from kedi.history.identity import new_id
from kedi.history.lanes import Conversation, Lane, LaneKey, canonical_digest
from kedi.redaction import logger, redact
from kedi.runtime.transcripts import LinearRecords, encode_line, write_line
from kedi.settings import MAPPING_SETTINGS, SETTING_NAMES

if TYPE_CHECKING:
    from kedi.runtime.interpreter import Interpreter
    from kedi.runtime.scopes import AgentState
    from kedi.runtime.sessions import SessionRecorder
    from kedi.runtime.tools import ToolBuilder

OFFLINE_NOTICE = "kedi: no model configured; using the offline model (deterministic replies). Set --model or KEDI_MODEL for a real one."
Texts = tuple[str, str] | Callable[[], Awaitable[tuple[str, str]]]
"""A call's rendered (prompt, instructions), or an async function that renders them."""


@dataclass(frozen=True, slots=True)
class AgentPlan:
    """What an agent state means for its calls: computed once per state (see `CallLayer.plan`)."""

    adapter: Adapter
    settings: Mapping[str, Any]
    tools: tuple[ToolSpec, ...]
    key: LaneKey
    history: bool
    processor: Callable[..., Any] | None


class PreparedCall:
    """A call fixed at its place in the source: agent plan, schema, origin and lane ticket.

    A plain slotted class rather than a frozen dataclass: one is built per
    call, and frozen construction costs about 1 µs more (nothing mutates it).
    """

    __slots__ = ("plan", "output", "origin", "lane", "ticket")

    def __init__(
        self,
        plan: AgentPlan,
        output: OutputSpec | None,
        origin: str,
        lane: Lane | None,
        ticket: int,
    ) -> None:
        self.plan = plan
        self.output = output
        self.origin = origin
        self.lane = lane
        self.ticket = ticket


@dataclass(frozen=True, slots=True)
class PromptEvent:
    """What a `user_prompt_submit` hook receives."""

    prompt: str
    origin: str
    adapter: str
    model: str
    run_id: str
    """The run's id: every call of one `program.run` shares it."""
    conversation_id: str
    history: bool
    call_id: str = ""
    """This call's own id (UUIDv7, fresh per call); also in its transcript records."""


class Transcript:
    """Writes one JSON line per model request (never secrets); see `kedi.runtime.transcripts`.

    Each record is one complete line, written in one `write` and flushed. A
    record repeating messages of an earlier one on its lane holds only the new
    ones and a reference, unless `full` (`--transcript-full`).
    """

    def __init__(
        self, target: str | Path | IO[str] | Callable[[dict[str, Any]], None], *, full: bool = False
    ) -> None:
        """Write to a path (created), an open text file, or call `target(record)` (always full records)."""
        self._file: IO[Any] | None = None
        self._sink: Callable[[dict[str, Any]], None] | None = None
        self._owned = isinstance(target, (str, Path))
        self._linear = None if full else LinearRecords()
        if self._owned:
            try:
                self._file = open(target, "wb", buffering=0)  # type: ignore[arg-type]  # noqa: SIM115
            except OSError as error:
                raise KediConfigError(
                    f"cannot write the transcript to {target}: {error.strerror}"
                ) from None
        elif callable(target) and not hasattr(target, "write"):
            self._sink = target
        else:
            self._file = target  # type: ignore[assignment]  # any object with write(); IO[str] is what it is used as
        self.index = 0

    def write(self, record: dict[str, Any]) -> None:
        """Record one model request (numbered in the order requests happen)."""
        # Redacted here, so no record reaches a sink or file with a secret in it.
        record = redact({"index": self.index, **record})
        self.index += 1
        if self._sink is not None:
            self._sink(record)
        if self._file is not None:
            shortened = record if self._linear is None else self._linear.shorten(record)
            try:
                write_line(self._file, encode_line(shortened))
            except OSError as error:
                raise KediConfigError(
                    f"cannot write the transcript: {error.strerror or error}"
                ) from None

    def close(self) -> None:
        """Close the file if this transcript opened it."""
        if self._owned and self._file is not None:
            self._file.close()


class CallLayer:
    """Per-run model-call state: adapters, the conversation, hooks and transcript."""

    def __init__(
        self,
        *,
        adapter: Any = None,
        model: Any = None,
        conversation: Conversation | None = None,
        transcript: Transcript | None = None,
        hooks: Sequence[Callable[..., Any]] = (),
        history_processor: Callable[..., Any] | None = None,
        quiet: bool = False,
        run_id: str | None = None,
        on_delta: Callable[[str], None] | None = None,
    ) -> None:
        self.on_delta = on_delta
        """Streaming sink: text calls pass each piece of reply text to it as it arrives."""
        self._streamed = False
        """Whether a call of the run has passed text to `on_delta` yet."""
        self.run_id = run_id or new_id()
        """The run's id, stamped on every message its calls add (C8)."""
        self.added: list[Any] = []
        """Every message the run's calls added, in the order the calls finished."""
        self.usage = Usage()
        """The usage of the run's calls, summed."""
        self.default_adapter = adapter
        self.default_model = model
        self.conversation = conversation or Conversation()
        self.transcript = transcript
        self.hooks = tuple(hooks)
        self.history_processor = history_processor
        self.quiet = quiet
        self.limiter: Any = None
        """Set by a parallel run: bounds model requests in flight."""
        self.recorder: SessionRecorder | None = None
        """Set when the run is recorded to, replayed from or resumed from the history store."""
        self.adapter_factory: Callable[[Any, Any], Adapter] = create_adapter
        """Builds the adapter for an (adapter, model) pair on its first use in the run."""
        self._adapters: dict[tuple[Any, ...], Adapter] = {}
        self._tool_builder: ToolBuilder | None = None
        self._plans: dict[int, tuple[AgentState, AgentPlan]] = {}
        self._noticed = False

    def _call_delta(self, on_delta: Callable[[str], None]) -> Callable[[str], None]:
        """`on_delta` for one call: its text after a line break when an earlier call streamed.

        Without it the replies of two calls read as one (`Hi there.Bye.`), as a
        retry's would, which is why a retry starts after a line break too.
        """
        first = True

        def deliver(text: str) -> None:
            nonlocal first
            if first and text:
                first = False
                if self._streamed:
                    text = "\n" + text
                self._streamed = True
            on_delta(text)

        return deliver

    # ------------------------------------------------------------------ adapters

    def adapter_for(self, adapter: Any, model: Any) -> Adapter:
        """The adapter instance for the agent state's (adapter, model), cached per run."""
        adapter = adapter if adapter is not None else self.default_adapter
        model = model if model is not None else self.default_model
        if isinstance(adapter, Adapter) and model is None:
            return adapter
        # Adapter instances and model objects may be unhashable (FunctionModel):
        # they are cached by identity, and the cache keeps them alive.
        key = tuple(
            part if part is None or isinstance(part, str) else id(part) for part in (adapter, model)
        )
        instance = self._adapters.get(key)
        if instance is None:
            if adapter is None and model is None and not self._noticed and not self.quiet:
                logger.warning(OFFLINE_NOTICE)
                self._noticed = True
            instance = self._adapters[key] = self.adapter_factory(adapter, model)
        return instance

    # ------------------------------------------------------------------ calls

    def prepare(self, plan: AgentPlan, output: OutputSpec | None, origin: str) -> PreparedCall:
        """Everything about a call that is fixed where it stands in the source (`origin`).

        Takes the call's ticket on its lane, so calls sharing a lane run their
        transactions in source order whatever order they are executed in.
        Once the ticket is taken, only `execute` releases it.
        """
        if not plan.history:
            return PreparedCall(plan, output, origin, None, -1)
        lane = self.conversation.lane(plan.key)
        return PreparedCall(plan, output, origin, lane, lane.reserve())

    def plan(self, interp: Interpreter, agent: AgentState) -> AgentPlan:
        """What an agent state means for calls: adapter, settings, tools, lane key.

        Agent states are immutable and shared by every call in their scope, so
        the plan is computed once per state object (checked by identity).
        """
        cached = self._plans.get(id(agent))
        if cached is not None and cached[0] is agent:
            return cached[1]
        adapter = self.adapter_for(agent.adapter, agent.model)
        settings = dict(agent.settings)
        if agent.effort is not None:
            settings["effort"] = agent.effort
        declared = adapter.settings_taken()
        if declared is not None and not declared.issuperset(settings):
            raise _undeclared_setting(adapter, declared, settings, agent)
        for name in MAPPING_SETTINGS.intersection(settings):
            if not isinstance(settings[name], Mapping):
                raise KediConfigError(
                    # The value is not shown: extra_headers may hold a key.
                    f"the setting `{name}` (set by {_setting_origin(name, agent)}) must be a "
                    f"mapping, not a {type(settings[name]).__name__}; e.g. "
                    f'{name}: `{{"key": "value"}}`'
                )
        tools, tools_digest = self._tools(interp, agent.tools)
        history = agent.history
        if history.compaction_mode == "native":
            raise CapabilityError(
                f"`compaction_mode: native` is not available for adapter {adapter.shortname!r} "
                f"model {adapter.model_name!r}; kedi never substitutes a summarizer: remove it "
                "from `> history:` (or write `compaction_mode: disabled`) and bound the history "
                "with `max_messages: N` or `max_tokens: N` instead"
            )
        plan = AgentPlan(
            adapter=adapter,
            settings=settings,
            tools=tools,
            key=LaneKey.for_call(adapter, settings, tools_digest=tools_digest),
            history=history.enabled,
            processor=bounded_processor(
                self.history_processor, history.max_messages, history.max_tokens
            ),
        )
        self._plans[id(agent)] = (agent, plan)
        return plan

    async def execute(self, call: PreparedCall, texts: Texts) -> Any:
        """Run a prepared call; return the captures (dict) or the reply text.

        `texts` are the call's (prompt, instructions), or an async function
        rendering them when the call's turn comes (a scheduled call). With
        history on, the whole read/call/commit transaction runs in the call's
        turn on its lane and commits only if the call succeeded.
        """
        lane = call.lane
        if lane is None:
            return (await self.send(call.plan, call.output, call.origin, texts)).value
        async with lane.transaction(call.ticket) as txn:
            result = await self.send(call.plan, call.output, call.origin, texts, lane, txn.snapshot)
            txn.commit(
                result.new_messages, rewritten=result.rewritten_history, rewrites=result.rewrites
            )
        return result.value

    async def send(
        self,
        plan: AgentPlan,
        output: OutputSpec | None,
        origin: str,
        texts: Texts,
        lane: Lane | None = None,
        history: Sequence[Any] = (),
    ) -> CallResult:
        """Build the request of one call and send it; `lane` and `history` when history is on.

        A call without history needs no ticket: the interpreter sends it
        straight away, without `prepare` and `execute` (the path of every
        sequential call without history).
        """
        prompt, instructions = texts if isinstance(texts, tuple) else await texts()
        adapter = plan.adapter
        recorder = self.recorder
        # Replayed and resumed calls keep the run and call ids they were recorded with.
        run_id, call_id = (recorder is not None and recorder.recorded_ids(plan.key)) or (
            self.run_id,
            new_id(),
        )
        conversation_id = self.conversation.conversation_id
        history_on = lane is not None
        transcript = self.transcript
        if self.hooks:
            prompt = await self._run_hooks(
                PromptEvent(
                    prompt,
                    origin,
                    adapter.shortname,
                    adapter.model_name,
                    run_id,
                    conversation_id,
                    history_on,
                    call_id,
                )
            )
        request = build_request(
            prompt=prompt,
            instructions=instructions,
            history=history,
            output=output,
            tools=plan.tools,
            settings=plan.settings,
            model=adapter.model_name,
            run_id=run_id,
            call_id=call_id,
            conversation_id=conversation_id,
            cache_key=None if lane is None else lane.cache_key,
            cache_epoch=0 if lane is None else lane.epoch,
            history_processor=plan.processor,
            origin=origin,
            # Text calls stream their reply; structured calls only the text of their `str` captures.
            on_delta=None
            if self.on_delta is None or (output is not None and not output.text_fields)
            else self._call_delta(self.on_delta),
            on_exchange=None
            if transcript is None
            else _exchange_sink(
                transcript,
                adapter,
                plan.key,
                history_on,
                (run_id, call_id, conversation_id),
                plan.settings,
            ),
        )
        if recorder is not None:
            return await recorder.send(
                adapter, plan.key, request, lane, lambda sent: self._request(sent, adapter)
            )
        return await self._request(request, adapter)

    async def _request(self, request: CallRequest, adapter: Adapter) -> CallResult:
        """Check and send one request to its adapter (within the parallel limiter)."""
        if not adapter.checks_requests:
            adapter.check(request)
        try:
            if self.limiter is None:
                result = await adapter.request(request)
            else:
                async with self.limiter:
                    result = await adapter.request(request)
        except ContextLengthError as error:
            if request.history:
                _hint_history_bounds(error, len(request.history))
            raise
        # A call that outlived its cancel scope (a tool blocking in its thread past the
        # deadline) must not commit: a cancelled call commits nothing, store or lane.
        await anyio.lowlevel.checkpoint_if_cancelled()
        self.added.extend(result.new_messages)
        self.usage += result.usage
        return result

    def _tools(
        self, interp: Interpreter, bound: Mapping[str, Any]
    ) -> tuple[tuple[ToolSpec, ...], str]:
        """Tool specs for the tools in scope, and the digest of that tool contract."""
        if not bound:
            return (), ""
        if self._tool_builder is None:
            from kedi.runtime.tools import ToolBuilder  # only programs with tools load it

            self._tool_builder = ToolBuilder(
                lambda proc, expr: interp.resolve_type_in(expr, proc.scope)
            )
        specs, digests = [], []
        for name, target in bound.items():
            spec, digest = self._tool_builder.spec(name, target)
            specs.append(spec)
            digests.append(digest)
        return tuple(specs), canonical_digest(sorted(digests))

    async def _run_hooks(self, event: PromptEvent) -> str:
        prompt = event.prompt
        for hook in self.hooks:
            edited = hook(PromptEvent(prompt, *_rest(event)))
            if inspect.isawaitable(edited):
                edited = await edited
            if edited is not None:
                if not isinstance(edited, str):
                    raise KediUsageError(
                        f"user_prompt_submit hook {getattr(hook, '__name__', hook)!r} returned "
                        f"{type(edited).__name__}; return a str or None"
                    )
                prompt = edited
        return prompt


def _exchange_sink(
    transcript: Transcript,
    adapter: Adapter,
    key: LaneKey,
    history_on: bool,
    identity: tuple[str, str, str],
    settings: Mapping[str, Any],
) -> Callable[[Exchange], None]:
    """The `on_exchange` sink of one call: a transcript line per model request.

    `identity` is the call's (run id, call id, conversation id).
    """
    shown = dict(settings)
    run_id, call_id, conversation_id = identity

    def record(exchange: Exchange) -> None:
        transcript.write(
            {
                "adapter": adapter.shortname,
                "model": adapter.model_name,
                "lane": key.label(),
                "history": history_on,
                "run_id": run_id,
                "call_id": call_id,
                "conversation_id": conversation_id,
                "messages": list(exchange.messages),
                "output_schema": exchange.output_schema,
                "tools": list(exchange.tools),
                "settings": shown,
                "response": exchange.response,
                "structured_mode": exchange.mode,
                "attempt": exchange.attempt,
                "failed": exchange.failed,
                **({"error": exchange.error} if exchange.failed else {}),
            }
        )

    return record


def _hint_history_bounds(error: ContextLengthError, messages: int) -> None:
    """End `error`'s message with how to bound the history its request carried.

    A stored session grows with every run until each call overflows the
    window; the server's text says nothing of kedi's bounds. The error is
    changed in place, so its class, status, partial and cause stay.
    """
    error.message = (
        f"{error.message.rstrip('.')}; the request carried {messages} messages of history: "
        "bound them with `> history:` and `max_messages: N` or `max_tokens: N` (docs/history.md)"
    )
    error.args = (error.message,)


def _rest(event: PromptEvent) -> tuple[Any, ...]:
    return (
        event.origin,
        event.adapter,
        event.model,
        event.run_id,
        event.conversation_id,
        event.history,
        event.call_id,
    )


def bounded_processor(
    processor: Callable[..., Any] | None, max_messages: int | None, max_tokens: int | None
) -> Callable[..., Any] | None:
    """The user's history processor composed with `> history:` bounds (None if neither)."""
    if max_messages is None and max_tokens is None:
        return processor
    from kedi.history.processors import compose_bounds

    return compose_bounds(processor, max_messages=max_messages, max_tokens=max_tokens)


__all__ = [
    "AgentPlan",
    "CallLayer",
    "PreparedCall",
    "PromptEvent",
    "Transcript",
    "bounded_processor",
    "OFFLINE_NOTICE",
]


def _setting_origin(name: str, agent: AgentState) -> str:
    """Where the agent state's setting `name` was set, in the program's terms."""
    span = agent.setting_spans.get(name)
    if span is not None:
        return f"`> settings:` at {span.path}:{span.line}"
    if name == "effort" and "effort" not in agent.settings:
        return "`> effort:`"
    return "`settings=` in Python"


def _undeclared_setting(
    adapter: Adapter, declared: frozenset[str], settings: Mapping[str, Any], agent: AgentState
) -> KediConfigError:
    """The error of a call whose settings hold one its adapter does not take.

    It names the setting, where it was set, the adapter and the closest name
    the adapter takes: a setting silently dropped would hide a misspelling,
    or a name that belongs to another adapter (`structured_mode` on langchain).
    """
    name = next(key for key in settings if key not in declared)
    where = _setting_origin(name, agent)
    close = difflib.get_close_matches(name, sorted(declared), n=1, cutoff=0.6)
    hint = f"; did you mean `{close[0]}`?" if close else ""
    if declared >= SETTING_NAMES:  # a stand-in (offline, script): only a name no adapter takes
        return KediConfigError(
            f"unknown setting `{name}` (set by {where}): no adapter takes it{hint}"
        )
    extra = (
        "; provider-specific request fields go in `extra_body`" if "extra_body" in declared else ""
    )
    who = f"adapter {adapter.shortname!r}"
    if name in (adapter.profile.settings or ()):  # the adapter does, but not with this model
        who += f" with model {adapter.model_name!r}"
    return KediConfigError(
        f"{who} does not take the setting `{name}` (set by {where})"
        f"{hint or '.'} It takes {', '.join(sorted(declared))}{extra}."
    )
