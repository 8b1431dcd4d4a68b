"""The state of one Pydantic AI call: its history, processor edits, archives, transcript and evidence.

A `CallState` lives for one `agent.run`: it processes the lane snapshot before
the first model request and (through `ProcessHistory`) before each later one,
archives long tool loops into checkpoints and expands them again before
anything is committed, stamps the call's messages as a lane keeps them,
reports each model request to the transcript sink, and builds the partial
evidence of a run that failed or that a tool stopped.

Imported only by the Pydantic AI adapter's modules, after its import guard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, ProcessHistory
from pydantic_ai.messages import (
    BaseToolReturnPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext

from kedi.adapters._pydantic_endpoint import ForceToolFirst, ReplyText
from kedi.adapters._pydantic_messages import CLASSIFIER, _PydanticClassifier, portable_json
from kedi.adapters._pydantic_state import (
    CALL_ID,
    RUN_ID,
    FreshAfterEdit,
    as_stored,
    checkpoint_of,
    continues_responses,
)
from kedi.adapters._pydantic_state import CHECKPOINT as CHECKPOINT_KEY
from kedi.adapters.base import CallRequest, Exchange, Usage
from kedi.history import (
    INTERRUPTED_RESULT,
    PartialResult,
    new_id,
    resolve_conversation_id,
    resolve_run_id,
)
from kedi.history.archive import archive_exchanges, expand_checkpoints
from kedi.history.partial import PartialStage
from kedi.history.processors import ProcessorOutcome, run_history_processor

if TYPE_CHECKING:
    from kedi.adapters.pydantic_ai import PydanticAdapter


def without_instructions(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """Clear the `instructions` Pydantic AI records on each request: instructions are never stored."""
    return [
        replace(message, instructions=None)
        if isinstance(message, ModelRequest) and message.instructions is not None
        else message
        for message in messages
    ]


def without_system_parts(history: Sequence[ModelMessage]) -> list[ModelMessage]:
    """Drop system prompt parts from supplied history (the call's instructions replace them)."""
    kept: list[ModelMessage] = []
    for message in history:
        if isinstance(message, ModelRequest) and any(
            isinstance(p, SystemPromptPart) for p in message.parts
        ):
            parts = [part for part in message.parts if not isinstance(part, SystemPromptPart)]
            if not parts:
                continue
            message = replace(message, parts=parts)
        kept.append(message)
    return kept


@dataclass
class CallState:
    """The state of one call: identity, the history in force, processor bookkeeping."""

    adapter: PydanticAdapter
    request: CallRequest
    processor: Callable[..., Any] | None
    run_id: str = ""
    """The kedi run's id, stamped on the messages the call adds."""
    call_id: str = ""
    """The call's own id: Pydantic AI's `run_id` while the call runs, which tells its messages apart."""
    conversation_id: str = ""
    history: list[ModelMessage] = field(default_factory=list)
    """The prior history the run is working from (after any accepted processor edit)."""
    requests: int = 0
    """Model requests started so far (the processor's `request_index`)."""
    rewrites: int = 0
    stale: bool = False
    """An accepted edit since the last response: the next request may not continue server-side state."""
    archives: dict[str, list[ModelMessage]] = field(default_factory=dict)
    """Archive id -> the exact messages a checkpoint of this call stands for."""
    recorded: int = 0
    """Model requests reported to the transcript so far (the next one's `attempt` - 1)."""
    mode: str = ""
    """The call's output mode (`tool`, `native`, `prompted`, `json_object`), for transcripts."""
    forced: ForceToolFirst | None = None
    """The tool a `tool_choice` setting forces until it has returned a result, if any."""

    def __post_init__(self) -> None:
        self.run_id = resolve_run_id(self.request.run_id)
        self.call_id = self.request.call_id or new_id()
        self.conversation_id = resolve_conversation_id(
            self.request.conversation_id, self.request.history
        )
        self.history = list(self.request.history)

    async def first_history(self) -> list[ModelMessage]:
        """The run's `message_history`: the lane snapshot, processed for request 1 (C2).

        The processor sees the history as stored; system parts are dropped
        from what is sent afterwards.
        """
        history = self._archived(self.history, own=False)
        if self.processor is not None:
            current = ModelRequest(parts=[UserPromptPart(self.request.prompt)])
            outcome = await self._process([*history, current], request_index=1)
            if outcome.rewritten:
                history = list(outcome.messages[:-1])
                self.history = self.expanded(history)
                self.stale = True
        return without_system_parts(history)

    def _archived(self, messages: list[ModelMessage], *, own: bool) -> list[ModelMessage]:
        """`messages` with long tool loops archived into checkpoints (`history_archive=`).

        The archives are remembered, so `expanded` can put the exact messages
        back before anything is committed; a checkpoint of the call's own
        messages carries the call's id, so it counts as one of them.
        """
        policy = self.adapter.history_archive
        if policy is None:
            return messages

        def checkpoint(archive_id: str, text: str) -> ModelRequest:
            return ModelRequest(
                parts=[UserPromptPart(text)],
                metadata={CHECKPOINT_KEY: archive_id},
                run_id=self.call_id if own else None,
            )

        archived, archives = archive_exchanges(
            messages,
            CLASSIFIER,
            policy,
            dump=self.adapter.dump_messages,
            make_checkpoint=checkpoint,
        )
        self.archives.update(archives)
        return archived

    def expanded(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        """`messages` with every checkpoint of this call replaced by the messages it archived."""
        if not self.archives:
            return list(messages)
        return expand_checkpoints(messages, self.archives, checkpoint_of)

    async def follow_up(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """`ProcessHistory` hook: process the history before each request after the first."""
        self.requests += 1
        if self.requests == 1:  # kedi processed the first request before the run started
            return messages
        if self.adapter.history_archive is not None:
            mine = len(messages) - sum(1 for message in messages if message.run_id == self.call_id)
            messages = [
                *self._archived(list(messages[:mine]), own=False),
                *self._archived(list(messages[mine:]), own=True),
            ]
        if self.processor is None:
            return messages
        outcome = await self._process(messages, request_index=self.requests)
        if not outcome.rewritten:
            return messages
        self.stale = True
        own = sum(1 for message in messages if message.run_id == self.call_id)
        # The call's own messages are protected, so they come back whole and last.
        self.history = self.expanded(outcome.messages[: len(outcome.messages) - own])
        return list(outcome.messages)

    async def _process(
        self, messages: list[ModelMessage], *, request_index: int
    ) -> ProcessorOutcome:
        outcome = await run_history_processor(
            self.processor,
            messages,
            _PydanticClassifier(self.call_id),
            adapter_shortname=self.adapter.shortname,
            model_id=self.adapter.model_name,
            request_index=request_index,
            cache_epoch=self.request.cache_epoch + self.rewrites,
            metadata=[{"run_id": m.run_id, "conversation_id": m.conversation_id} for m in messages],
            owner=self.adapter,
        )
        self.rewrites += outcome.rewritten
        return outcome

    def stamped(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        """The call's messages as a lane keeps them: no instructions, stamped with the run's id.

        The call's id goes to `metadata` (`kedi_call_id`, with `kedi_run_id`):
        Pydantic AI's continuation digests cover the stamps a message had when
        it was sent, so `_as_sent` puts the call's id back for such models.
        """
        ids = {CALL_ID: self.call_id, RUN_ID: self.run_id}
        return [
            replace(message, run_id=self.run_id, metadata={**(message.metadata or {}), **ids})
            if message.run_id == self.call_id
            else message
            for message in without_instructions(messages)
        ]

    def capabilities(self) -> list[AbstractCapability[Any]]:
        """The per-run capabilities: reply text that a lane can hold, the processor hook and the transcript, when wanted."""
        extra: list[AbstractCapability[Any]] = [ReplyText()]
        if self.processor is not None or self.adapter.history_archive is not None:
            extra.append(ProcessHistory(self.follow_up))
        if self.request.on_exchange is not None:
            extra.append(_Transcript(self))
        if continues_responses(self.adapter._model):
            extra.append(FreshAfterEdit(self))
        if self.forced is not None:
            extra.append(self.forced)
        return extra

    def record(self, context: ModelRequestContext, response: ModelResponse) -> None:
        """Report one model request to the transcript sink."""
        sink = self.request.on_exchange
        assert sink is not None  # only installed with a sink
        self.recorded += 1
        parts = context.model_request_parameters.instruction_parts or []
        instructions = "\n\n".join(part.content for part in parts if part.content)
        sent = [{"role": "system", "content": instructions}] if instructions else []
        for message in context.messages:
            sent.extend(portable_json(message))
        output = self.request.output
        sink(
            Exchange(
                messages=tuple(sent),
                response=portable_json(response)[0],
                output_schema=None if output is None else output.json_schema,
                tools=tuple(tool.name for tool in self.request.tools),
                mode=None if output is None else self.mode,
                attempt=self.recorded,
            )
        )

    def stopped(self, captured: Sequence[ModelMessage]) -> PartialResult | None:
        """The partial of a run a tool stopped: its last batch closed, resumable with no repair.

        Results the batch recorded before the stop stay (Pydantic AI leaves
        them in an interrupted request); every other call of the batch gets
        the interrupted result.
        """
        own = [message for message in captured if message.run_id == self.call_id]
        last = max((i for i, m in enumerate(own) if isinstance(m, ModelResponse)), default=None)
        if last is None:
            return None
        response = own[last]
        recorded = {
            part.tool_call_id: part
            for message in own[last + 1 :]
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        }
        closing = ModelRequest(
            parts=[
                recorded.get(part.tool_call_id)
                or ToolReturnPart(
                    part.tool_name, INTERRUPTED_RESULT, tool_call_id=part.tool_call_id
                )
                for part in response.parts
                if isinstance(part, ToolCallPart)
            ],
            run_id=self.call_id,
            conversation_id=self.conversation_id,
        )
        return self.partial("canceled", [*own[: last + 1], closing])

    def partial(
        self, stage: PartialStage, captured: Sequence[ModelMessage]
    ) -> PartialResult | None:
        """Evidence of a failed run: history through its last completed model turn."""
        own = [message for message in captured if message.run_id == self.call_id]
        # A streamed request that failed leaves an empty response behind it (Pydantic
        # AI appends the response it was building): not a completed model turn.
        ends = [
            i
            for i, message in enumerate(own)
            if (isinstance(message, ModelResponse) and message.parts) or _tool_returns(message)
        ]
        if not ends:
            return None
        done = own[: ends[-1] + 1]
        responses = [message for message in done if isinstance(message, ModelResponse)]
        tools = {tool.name for tool in self.request.tools}
        succeeded = sum(
            1
            for message in done
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
            and part.outcome == "success"
            and part.tool_name in tools
            and part.content != INTERRUPTED_RESULT
        )
        usage = Usage(
            input_tokens=sum(r.usage.input_tokens for r in responses),
            output_tokens=sum(r.usage.output_tokens for r in responses),
            requests=len(responses),
            tool_calls=succeeded,
        )
        return PartialResult(
            stage=stage,
            messages=[*map(as_stored, self.history), *self.stamped(self.expanded(done))],  # type: ignore[list-item]  # native messages; PartialResult holds Any
            usage=usage,
            requests=usage.requests,
            tool_calls=usage.tool_calls,
            run_id=self.run_id,
            conversation_id=self.conversation_id,
        )


def _tool_returns(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(
        isinstance(p, BaseToolReturnPart) for p in message.parts
    )


@dataclass
class _Transcript(AbstractCapability[Any]):
    """Reports every model request of a run to the call's transcript sink."""

    call: CallState

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        self.call.record(request_context, response)
        return response
