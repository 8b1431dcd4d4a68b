"""The adapter contract: one async method, capabilities as data.

The interpreter builds a `CallRequest` for every `>>` and `<<` statement and
awaits `Adapter.request`. The adapter owns everything model-specific (wire
format, tool loop, structured-output mode, validation retries, history
processing over its own native messages) and returns a `CallResult` holding the
validated value, the complete turn to commit, and usage. It never touches the
conversation itself: committing is the interpreter's job, done only after the
call succeeded.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from kedi._frozen import constructor
from kedi.errors import CapabilityError, KediError
from kedi.history.processors import check_not_reentrant

JSONDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token and request counts of one call (summed over its model requests)."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    tool_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
            self.tool_calls + other.tool_calls,
        )


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What a structured call must produce: one object whose fields are the captures."""

    model: type[BaseModel]
    """A pydantic model with one field per capture, in source order."""
    json_schema: JSONDict
    """`model.model_json_schema()`, computed once."""

    @property
    def name(self) -> str:
        return self.model.__name__

    @property
    def fields(self) -> tuple[str, ...]:
        """The capture names, in source order."""
        return tuple(field.alias or name for name, field in self.model.model_fields.items())

    @property
    def text_fields(self) -> tuple[str, ...]:
        """The captures whose type is `str`, in source order: the ones `on_delta` streams."""
        return tuple(
            field.alias or name
            for name, field in self.model.model_fields.items()
            if field.annotation is str
        )

    def validate_json(self, text: str | bytes) -> dict[str, Any]:
        """Validate a JSON reply strictly; return the captures by name."""
        instance = self.model.model_validate_json(text, strict=True)
        return {
            field.alias or name: getattr(instance, name)
            for name, field in self.model.model_fields.items()
        }

    def validate_python(self, data: Any) -> dict[str, Any]:
        """Validate JSON-shaped Python data (as decoded from a reply)."""
        return self.validate_json(_dumps(data))


def _dumps(data: Any) -> str:
    import json

    return json.dumps(data)


ToolHandler = Callable[[Mapping[str, Any]], Awaitable[Any]]


class ToolArgumentsError(KediError, ValueError):
    """Raised by a `ToolHandler` when the model's arguments do not validate: the tool did not run.

    Adapters that tell a call with bad arguments from a tool's own failure
    (Pydantic AI: a retry, not a result) catch this one.
    """


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call during one request."""

    name: str
    description: str
    parameters: JSONDict
    """JSON Schema (an object) of the arguments."""
    handler: ToolHandler
    """Validates the arguments, runs the tool, returns its result; raises on failure."""


@dataclass(frozen=True, slots=True)
class Exchange:
    """One model request as a transcript records it (portable C1 JSON)."""

    messages: tuple[JSONDict, ...]
    """Exactly what was sent: instructions first, then history, then the prompt."""
    response: Any
    output_schema: JSONDict | None = None
    tools: tuple[str, ...] = ()
    mode: str | None = None
    """The structured-output mode the request used (`json_schema`, `tool`, ...), if any."""
    attempt: int = 1
    """The request's number within its call, failed requests included."""
    failed: bool = False
    """The request failed (an HTTP error) or its reply did not validate."""
    error: str | None = None
    """Why it failed (never holding a secret)."""


@dataclass(frozen=True, slots=True)
class CallRequest:
    """Everything one `>>` / `<<` call needs. Immutable: adapters never edit it."""

    prompt: str
    instructions: str = ""
    """Resolved `> system:` text for this call: sent first, never stored in history."""
    history: tuple[Any, ...] = ()
    """The lane snapshot, in the adapter's own message type (read-only)."""
    output: OutputSpec | None = None
    """`None` for a text call (raw invoke, or a template with no captures)."""
    tools: tuple[ToolSpec, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    model: str | None = None
    run_id: str = ""
    """The run's id: stamped on every message the call adds (shared by a run's calls)."""
    conversation_id: str = ""
    call_id: str = ""
    """This call's own id (fresh per call); adapters may use it to tell its messages apart."""
    cache_key: str | None = None
    """The lane's opaque cache identity (usable as a provider prompt-cache key)."""
    cache_epoch: int = 0
    history_processor: Callable[..., Any] | None = None
    origin: str = ""
    """Where the call is in the source (`flow.kedi:12`), for error messages."""
    on_exchange: Callable[[Exchange], None] | None = None
    """Transcript sink: called once per model request."""
    on_delta: Callable[[str], None] | None = None
    """Streaming sink of a text call: each piece of reply text as it arrives (adapters that stream)."""


build_request = constructor(CallRequest)
"""`CallRequest(...)` built with plain slot stores: the same frozen object (see `kedi._frozen`)."""


@dataclass(frozen=True, slots=True)
class CallResult:
    """What a successful call produced."""

    value: Any
    """A `dict` of validated captures for structured calls, else the reply `str`."""
    new_messages: tuple[Any, ...]
    """The whole turn (prompt, tool traffic, reply) in native messages, pair-valid."""
    usage: Usage = Usage()
    rewritten_history: tuple[Any, ...] | None = None
    """History after an accepted processor edit (replaces the lane on commit)."""
    rewrites: int = 0
    """How many times a history processor actually rewrote the history."""


@dataclass(frozen=True, slots=True)
class AdapterProfile:
    """Capability facts. `None` means unknown; never advertise and then ignore."""

    structured_output: bool = True
    tools: bool = False
    streaming: bool = False
    history: bool = True
    offline: bool = False
    message_format: str = "portable"
    """`portable` (kedi `Message`), `pydantic-ai` or `langchain`."""
    settings: frozenset[str] | None = None
    """Setting names the adapter takes; kedi refuses any other before the call is sent.

    A call whose agent state holds a setting not named here fails with a
    `KediConfigError` naming the setting, the adapter, where it was set and
    the closest name the adapter takes (docs/adapters.md, "Settings an adapter
    does not take"). None (the default, for adapters written before settings
    were declared): every setting reaches the adapter unchecked.
    """


class Adapter(ABC):
    """Base class of every model backend."""

    shortname: ClassVar[str]
    profile: ClassVar[AdapterProfile] = AdapterProfile()

    #: The model id this adapter instance talks to (part of the lane key).
    model_name: str = ""

    checks_requests: ClassVar[bool] = False
    """True when `request` starts with `self.check(request)`, as kedi's own adapters do.

    kedi checks a request before sending it only to an adapter that does not
    check it itself: a second check per call is measurable against a fast
    model. A subclass that overrides `request` without setting this again
    is assumed not to check.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "request" in cls.__dict__ and "checks_requests" not in cls.__dict__:
            cls.checks_requests = False

    @abstractmethod
    async def request(self, request: CallRequest) -> CallResult:
        """Run one call (including any tool loop and validation retries)."""

    @classmethod
    def capability_rows(cls) -> dict[str, str]:
        """What this adapter supports, one row per capability-matrix line, read from `profile`.

        Adapters whose facts need more words than the profile's flags override
        this with the same row names (see `kedi.adapters.matrix`).
        """
        profile = cls.profile
        return {
            "structured output": "yes" if profile.structured_output else "no",
            "tools": "yes" if profile.tools else "no",
            "streaming": "yes" if profile.streaming else "no",
            "history": f"yes: {profile.message_format} message lanes" if profile.history else "no",
            "message format": profile.message_format,
            "settings": "any (not declared)"
            if profile.settings is None
            else ", ".join(sorted(profile.settings)),
        }

    def settings_taken(self) -> frozenset[str] | None:
        """The setting names this instance takes: its profile's, or fewer where its model
        cannot carry some (a chat model with no field for one); None takes every setting.

        kedi refuses a call whose settings hold any other name before it is sent.
        """
        return self.profile.settings

    def check(self, request: CallRequest) -> None:
        """Raise before any I/O if the request can't be served.

        `CapabilityError` for a request the adapter cannot represent; an error
        too when the adapter is called from inside its own history processor.
        """
        check_not_reentrant(self)
        if request.output is not None and not self.profile.structured_output:
            raise CapabilityError(
                f"adapter {self.shortname!r} has no structured output; "
                "use a raw invoke `[x] << ...` or another adapter"
            )
        if request.tools and not self.profile.tools:
            raise CapabilityError(f"adapter {self.shortname!r} does not support tools")

    def with_model(self, model: Any) -> Adapter:
        """This adapter bound to `model` (a name or a model object), if it was built without one.

        An adapter that already has a model keeps it and returns itself: a
        program's `> model:` or `run(model=...)` chooses the model only for
        adapters configured without one (`PydanticAdapter(history_processor=f)`).
        """
        return self

    def dump_messages(self, messages: Sequence[Any]) -> list[Any]:
        """Serialize native messages to JSON-compatible data (for persistence)."""
        return [m.model_dump(mode="json", by_alias=True, exclude_defaults=True) for m in messages]

    def load_messages(self, data: Sequence[Any]) -> list[Any]:
        """Inverse of `dump_messages`."""
        from kedi.history.messages import Message

        return [Message.model_validate(item) for item in data]


AdapterT = TypeVar("AdapterT", bound=Adapter)


def copy_per_model(
    copies: dict[Any, tuple[Any, AdapterT]], model: Any, build: Callable[[Any], AdapterT]
) -> AdapterT:
    """The adapter `build(model)` makes, made once per model name or model object.

    For `with_model`: every run of a program on one model shares one copy (and
    its caches). `copies` keeps each model object beside its copy, so no other
    object can take its id, the key.
    """
    key = model if isinstance(model, str) else id(model)
    kept = copies.get(key)
    if kept is None:
        kept = copies[key] = (model, build(model))
    return kept[1]
