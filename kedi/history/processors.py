"""History processors: run a user callback on native history and check its edit (Part B).

An adapter configured with `history_processor=` calls `run_history_processor`
before every logical model request (tool-loop follow-ups included) with the
native messages about to be sent, the last being the current request. The
processor sees a frozen `HistoryProcessorContext` holding deep copies of
them, cut into lifecycle groups (`kedi.history.grouping`), and returns the
messages to send instead.

The fast path is the caller's job: `processor=None` means no work at all, so
call sites test for it and skip this module entirely (no copies, no grouping)::

    if request.history_processor is not None:
        outcome = await run_history_processor(request.history_processor, messages, PORTABLE, ...)

What the processor may return is checked by `kedi.history.grouping.validate_edit`
(see that module for the edit rules); a violation is a
`HistoryProcessingValidationError`, a failing callback a `HistoryProcessingError`.
kedi never falls back to sending the unprocessed history.

Sync processors run in a worker thread (never blocking the event loop) and
async ones are awaited. Cancelling the caller cancels an async processor and
abandons a sync one: its thread runs on, and its late result is discarded.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import anyio.to_thread

from kedi.errors import HistoryProcessingError, HistoryProcessingValidationError, KediUsageError
from kedi.history.grouping import (
    CheckedEdit,
    Classifier,
    Group,
    MessageInfo,
    copy_messages,
    groups_from_infos,
    validate_edit,
)
from kedi.history.trimming import _check_bound

__all__ = [
    "HistoryProcessor",
    "HistoryProcessorContext",
    "MessageT",
    "ProcessorChain",
    "ProcessorOutcome",
    "TokenEstimator",
    "chain_processors",
    "check_not_reentrant",
    "compose_bounds",
    "max_messages",
    "max_tokens",
    "processor_guard",
    "processor_name",
    "reject_process_history",
    "run_history_processor",
]

TokenEstimator = Callable[[Sequence[Any]], int]
"""Estimates the tokens of a run of native messages; must be additive over messages."""

_NO_METADATA: Mapping[str, Any] = MappingProxyType({})

MessageT = TypeVar("MessageT")
"""The adapter's native message type (Pydantic AI `ModelMessage`, LangChain `BaseMessage`, kedi `Message`)."""


@dataclass(frozen=True, slots=True)
class HistoryProcessorContext(Generic[MessageT]):
    """What a history processor sees for one model request. Frozen; edit the copies freely.

    Generic in the native message type, so a processor can be annotated
    `HistoryProcessorContext[ModelMessage]` or stay generic over `MessageT`.
    """

    messages: tuple[MessageT, ...]
    """Deep copies of the native messages about to be sent; the last is the current request."""
    groups: tuple[Group, ...]
    """The lifecycle groups of `messages`, in order, covering every message."""
    adapter_shortname: str
    """The adapter's short name, e.g. `offline`."""
    model_id: str
    """The model the request goes to."""
    request_index: int
    """1-based index of this model request within the call (tool-loop follow-ups count up)."""
    cache_epoch: int
    """The lane's cache epoch."""
    estimated_tokens: int
    """A conservative estimate of the tokens in `messages`."""
    metadata: tuple[Mapping[str, Any], ...]
    """Per-message metadata (read-only), e.g. run and conversation stamps; `{}` when none."""
    infos: tuple[MessageInfo, ...] = field(repr=False)
    """How the classifier sees each message (role, tool calls, protection)."""
    classifier: Classifier = field(repr=False)
    """The classifier of the native message type, for adapter-neutral processors."""
    token_estimator: TokenEstimator = field(repr=False)
    """The estimator behind `estimated_tokens`."""

    def group_messages(self, group: Group) -> tuple[MessageT, ...]:
        """The messages of `group`."""
        return self.messages[group.entry_start : group.entry_end]


HistoryProcessor = Callable[
    [HistoryProcessorContext[Any]], Sequence[Any] | Awaitable[Sequence[Any]]
]
"""A sync (run in a worker thread) or async callback returning the messages to send."""


@dataclass(frozen=True, slots=True)
class ProcessorOutcome:
    """The history to send, and whether the processor actually changed it."""

    messages: Sequence[Any]
    """The input sequence itself when `rewritten` is false."""
    rewritten: bool
    """True for an accepted edit: a new cache generation, committed only with the call."""


@dataclass(frozen=True, slots=True)
class _Settings:
    """Everything about a request except its messages."""

    adapter_shortname: str
    model_id: str
    request_index: int
    cache_epoch: int
    classifier: Classifier
    token_estimator: TokenEstimator


# --------------------------------------------------------------------------- recursion guard

_OWNERS: ContextVar[tuple[int, ...]] = ContextVar("kedi_history_processor_owners", default=())


@contextmanager
def processor_guard(owner: object | None) -> Iterator[None]:
    """Mark `owner` (an adapter) as running its history processor, for `check_not_reentrant`.

    The mark lives in a context variable, so it follows the processor into its
    worker thread and any tasks it starts, and nowhere else. `None` marks nothing.
    """
    if owner is None:
        yield
        return
    token = _OWNERS.set((*_OWNERS.get(), id(owner)))
    try:
        yield
    finally:
        _OWNERS.reset(token)


def check_not_reentrant(owner: object) -> None:
    """Raise `KediUsageError` if `owner`'s own history processor is running this call.

    Adapters call this first thing in `request`.
    """
    if id(owner) in _OWNERS.get():
        name = getattr(owner, "shortname", type(owner).__name__)
        raise KediUsageError(
            f"adapter {name!r} was called from inside its own history processor; "
            "use a separate model configured without a history processor (e.g. to write a summary)"
        )


# --------------------------------------------------------------------------- running


def processor_name(processor: object) -> str:
    """How errors name a processor: its qualified name, else its repr."""
    name = getattr(processor, "__qualname__", None)
    return name if isinstance(name, str) else repr(processor)


async def run_history_processor(
    processor: HistoryProcessor | None,
    messages: Sequence[Any],
    classifier: Classifier,
    *,
    adapter_shortname: str,
    model_id: str,
    request_index: int,
    cache_epoch: int,
    metadata: Sequence[Mapping[str, Any]] | None = None,
    token_estimator: TokenEstimator | None = None,
    owner: object | None = None,
) -> ProcessorOutcome:
    """Run `processor` on native `messages` and return the validated history to send.

    Args:
        processor: The callback; `None` returns `messages` untouched without any work.
        messages: The native messages about to be sent, ending with the current request.
        classifier: Describes the native message type (e.g. `PORTABLE`).
        adapter_shortname: Passed to the context.
        model_id: Passed to the context.
        request_index: 1-based index of the model request within the call.
        cache_epoch: The lane's cache epoch.
        metadata: One mapping per message (stamps and the like), or None.
        token_estimator: Overrides `classifier.estimate_tokens`.
        owner: The adapter running the processor; calling it again from inside
            the processor then fails (see `check_not_reentrant`).

    Raises:
        HistoryProcessingError: the processor raised, or the input could not be copied.
        HistoryProcessingValidationError: the processor returned an invalid edit.
    """
    if processor is None:
        return ProcessorOutcome(messages, rewritten=False)
    if not messages:
        raise HistoryProcessingError(
            f"history processor {processor_name(processor)} got no messages; "
            "a request always ends with its current request"
        )
    settings = _Settings(
        adapter_shortname,
        model_id,
        request_index,
        cache_epoch,
        classifier,
        token_estimator or classifier.estimate_tokens,
    )
    with processor_guard(owner):
        checked = await _run_stage(
            processor, messages, _entry_metadata(metadata, len(messages)), settings
        )
    return ProcessorOutcome(checked.messages, checked.rewritten)


def _entry_metadata(
    metadata: Sequence[Mapping[str, Any]] | None, count: int
) -> tuple[Mapping[str, Any], ...]:
    if metadata is None:
        return (_NO_METADATA,) * count
    if len(metadata) != count:
        raise HistoryProcessingError(f"got {len(metadata)} metadata entries for {count} messages")
    return tuple(MappingProxyType(dict(entry)) for entry in metadata)


async def _run_stage(
    processor: HistoryProcessor,
    messages: Sequence[Any],
    metadata: tuple[Mapping[str, Any], ...],
    settings: _Settings,
) -> CheckedEdit:
    """Build the context, run one processor, validate what it returned."""
    name = processor_name(processor)
    classifier = settings.classifier
    infos = tuple(classifier.info(message) for message in messages)
    groups = tuple(groups_from_infos(infos))
    try:
        tokens = settings.token_estimator(messages)
    except Exception as error:
        raise HistoryProcessingError(
            f"estimating tokens for history processor {name} failed: {error}"
        ) from error
    context = HistoryProcessorContext(
        messages=tuple(copy_messages(classifier, messages, name)),
        groups=groups,
        adapter_shortname=settings.adapter_shortname,
        model_id=settings.model_id,
        request_index=settings.request_index,
        cache_epoch=settings.cache_epoch,
        estimated_tokens=tokens,
        metadata=metadata,
        infos=infos,
        classifier=classifier,
        token_estimator=settings.token_estimator,
    )
    result = await _invoke(processor, context, name)
    return validate_edit(result, messages, infos, groups, classifier, name)


def _is_async(processor: object) -> bool:
    # An instance with an `async def __call__` (e.g. ProcessorChain) is async too.
    return inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
        type(processor).__call__
    )


async def _invoke(
    processor: HistoryProcessor, context: HistoryProcessorContext[Any], name: str
) -> Any:
    """Call the processor: awaited if async, else in a worker thread that cancellation abandons."""
    try:
        if _is_async(processor):
            return await processor(context)  # type: ignore[misc]  # _is_async checked it returns an awaitable
        result = await anyio.to_thread.run_sync(processor, context, abandon_on_cancel=True)
        # A sync callable may still hand back an awaitable (a lambda around an async def).
        return await result if inspect.isawaitable(result) else result
    except (HistoryProcessingError, HistoryProcessingValidationError):
        # Already names the failing processor (a stage of a ProcessorChain).
        raise
    except Exception as error:
        raise HistoryProcessingError(
            f"history processor {name} failed: {type(error).__name__}: {error}"
        ) from error


# --------------------------------------------------------------------------- composition


@dataclass(frozen=True, slots=True)
class ProcessorChain:
    """Processors applied in turn; each stage is validated against the previous stage's output."""

    stages: tuple[HistoryProcessor, ...]

    async def __call__(self, context: HistoryProcessorContext[Any]) -> Sequence[Any]:
        """Run every stage on the previous one's accepted output; return the last output."""
        settings = _Settings(
            context.adapter_shortname,
            context.model_id,
            context.request_index,
            context.cache_epoch,
            context.classifier,
            context.token_estimator,
        )
        messages: Sequence[Any] = context.messages
        metadata = context.metadata
        for stage in self.stages:
            checked = await _run_stage(stage, messages, metadata, settings)
            if checked.rewritten:
                messages = checked.messages
                metadata = tuple(
                    _NO_METADATA if origin is None else metadata[origin]
                    for origin in checked.origins
                )
        return messages

    def __repr__(self) -> str:
        """`ProcessorChain(name, name, ...)`: how errors and transcripts name the chain."""
        return f"ProcessorChain({', '.join(processor_name(stage) for stage in self.stages)})"


def _drop_oldest(
    context: HistoryProcessorContext[Any], sizes: Sequence[int], limit: int
) -> Sequence[Any]:
    """Drop the oldest eligible groups until the sizes sum to at most `limit` (or none are left)."""
    total = sum(sizes)
    dropped: set[int] = set()
    for k, group in enumerate(context.groups):
        if total <= limit:
            break
        if group.eligible:
            dropped.add(k)
            total -= sizes[k]
    if not dropped:
        return context.messages
    return [
        message
        for k, group in enumerate(context.groups)
        if k not in dropped
        for message in context.group_messages(group)
    ]


def max_messages(limit: int) -> HistoryProcessor:
    """A processor keeping at most `limit` messages by dropping the oldest eligible groups.

    It never splits a group and never drops a protected or unfinished group or
    the current request. When those alone exceed `limit`, it keeps just them
    and does not fail. Raises `HistoryError` if `limit` is not a positive integer.
    """
    bound = _check_bound("max_messages", "limit", limit)

    def keep_messages(context: HistoryProcessorContext[Any]) -> Sequence[Any]:
        return _drop_oldest(context, [group.size for group in context.groups], bound)

    keep_messages.__qualname__ = f"max_messages({bound})"
    return keep_messages


def max_tokens(limit: int, estimator: TokenEstimator | None = None) -> HistoryProcessor:
    """A processor keeping at most `limit` estimated tokens by dropping the oldest eligible groups.

    Each group is estimated once (`estimator`, else the context's
    `token_estimator`) and a history counts as the sum of its groups. Like
    `max_messages` it never splits or drops what must stay, and keeps just that
    when the bound cannot be met. Raises `HistoryError` if `limit` is not a
    positive integer.
    """
    bound = _check_bound("max_tokens", "limit", limit)

    def keep_tokens(context: HistoryProcessorContext[Any]) -> Sequence[Any]:
        estimate = estimator or context.token_estimator
        return _drop_oldest(
            context, [estimate(context.group_messages(group)) for group in context.groups], bound
        )

    keep_tokens.__qualname__ = f"max_tokens({bound})"
    return keep_tokens


# compose_bounds' keyword parameters shadow the public names.
_max_messages = max_messages
_max_tokens = max_tokens


def chain_processors(*processors: HistoryProcessor | None) -> HistoryProcessor | None:
    """The given processors applied in order (an adapter's own first, then the run's).

    None entries are skipped; returns None when nothing is left, and a single
    processor unwrapped.
    """
    stages = tuple(p for p in processors if p is not None)
    if not stages:
        return None
    return stages[0] if len(stages) == 1 else ProcessorChain(stages)


def compose_bounds(
    processor: HistoryProcessor | None,
    *,
    max_messages: int | None = None,
    max_tokens: int | None = None,
    estimator: TokenEstimator | None = None,
) -> HistoryProcessor | None:
    """The processor for a `> history:` policy: the user's processor, then the bounds.

    Order: `processor` first (it sees the full history), then `max_messages`,
    then `max_tokens`, each validated on the previous stage's output. Returns
    None when there is nothing to run, and a single stage unwrapped.
    """
    stages: list[HistoryProcessor] = [] if processor is None else [processor]
    if max_messages is not None:
        stages.append(_max_messages(max_messages))
    if max_tokens is not None:
        stages.append(_max_tokens(max_tokens, estimator))
    if not stages:
        return None
    return stages[0] if len(stages) == 1 else ProcessorChain(tuple(stages))


def reject_process_history(capabilities: Iterable[object] | None) -> None:
    """Raise `KediUsageError` if a Pydantic AI `ProcessHistory` capability is in `capabilities`.

    Call it when `history_processor=` is configured: the two would both edit
    the history, so they must be composed in one callback. Checks class names
    (subclasses included) so pydantic_ai is never imported here.
    """
    for capability in capabilities or ():
        if any(cls.__name__ == "ProcessHistory" for cls in type(capability).__mro__):
            raise KediUsageError(
                "a Pydantic AI ProcessHistory capability cannot be combined with history_processor=; "
                "compose both in the one history_processor callback"
            )
