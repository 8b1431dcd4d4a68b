"""`history_archive=`: long tool loops archived exactly into checkpoints (LangChain and Pydantic AI)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import kedi
from kedi.agent_adapter import HistoryProcessorContext, LangChainAdapter, PydanticAdapter
from kedi.history.archive import HistoryArchive, archive_policy

ROUNDS = 5
PROGRAM = kedi.compile(
    "> history: enabled\n> use: step\n[answer] << Work it out.\n= <answer>", known_globals=["step"]
)


def step(n: int) -> str:
    """Take one step."""
    return f"step {n} done"


class Looping(BaseChatModel):
    """Calls `step` ROUNDS times, one call per request, then answers; records every request."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "looping"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        n = len(self.seen)
        if n <= ROUNDS:
            reply = AIMessage("", tool_calls=[{"id": f"c{n}", "name": "step", "args": {"n": n}}])
        else:
            reply = AIMessage("finished")
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def kinds(messages: list[BaseMessage]) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m, HumanMessage):
            out.append("CP" if (m.id or "").startswith("kedi-checkpoint:") else "user")
        elif isinstance(m, ToolMessage):
            out.append(f"T{m.tool_call_id}")
        elif isinstance(m, AIMessage):
            out.append(f"A{m.tool_calls[0]['id']}" if m.tool_calls else "A")
    return out


def test_langchain_archives_completed_exchanges_and_the_lane_keeps_them_verbatim() -> None:
    model = Looping()
    conversation = kedi.Conversation()
    adapter = LangChainAdapter(
        model, history_archive=HistoryArchive(max_exchanges=2, keep_recent=1)
    )
    assert (
        PROGRAM.run_sync(adapter=adapter, env={"step": step}, conversation=conversation)
        == "finished"
    )
    requests = [kinds(sent) for sent in model.seen]
    assert requests[2] == [
        "user",
        "Ac1",
        "Tc1",
        "Ac2",
        "Tc2",
    ]  # two exchanges: not past the threshold
    assert requests[3] == ["user", "CP", "Ac3", "Tc3"]  # three: the older two are archived
    assert requests[5] == ["user", "CP", "Ac5", "Tc5"]
    checkpoint = model.seen[5][1]
    assert (
        checkpoint.content.startswith("[kedi-checkpoint:")
        and "4 earlier tool exchanges" in checkpoint.content
    )
    assert "(calls c1, c2, c3, c4)" in checkpoint.content
    (lane,) = conversation.lanes.values()
    assert kinds(list(lane.messages)) == [
        "user",
        *[f"{k}c{n}" for n in range(1, 6) for k in "AT"],
        "A",
    ]


def test_a_processor_sees_checkpoints_and_may_not_remove_one() -> None:
    seen: list[list[str]] = []

    def drop_checkpoints(ctx: HistoryProcessorContext[BaseMessage]) -> list[BaseMessage]:
        seen.append(kinds(list(ctx.messages)))
        return [m for m in ctx.messages if not (m.id or "").startswith("kedi-checkpoint:")]

    adapter = LangChainAdapter(Looping(), history_archive=2, history_processor=drop_checkpoints)
    with pytest.raises(kedi.KediExecutionError, match="HistoryProcessingValidationError") as caught:
        PROGRAM.run_sync(adapter=adapter, env={"step": step})
    assert "checkpoint" in str(caught.value)
    assert seen[-1] == ["user", "CP", "Ac3", "Tc3"]  # archival ran before the processor


def looping_model(requests: list[list[ModelMessage]]) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(messages)
        n = len(requests)
        if n <= ROUNDS:
            return ModelResponse(parts=[ToolCallPart("step", {"n": n}, tool_call_id=f"c{n}")])
        return ModelResponse(parts=[TextPart("finished")])

    return FunctionModel(reply)


def pydantic_kinds(messages: list[ModelMessage]) -> list[str]:
    out = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                out.append("CP" if str(part.content).startswith("[kedi-checkpoint:") else "user")
            elif isinstance(part, ToolCallPart):
                out.append(f"A{part.tool_call_id}")
            elif isinstance(part, ToolReturnPart):
                out.append(f"T{part.tool_call_id}")
            elif isinstance(part, TextPart):
                out.append("A")
    return out


def test_pydantic_ai_archives_completed_exchanges_and_the_lane_keeps_them_verbatim() -> None:
    requests: list[list[ModelMessage]] = []
    conversation = kedi.Conversation()
    adapter = PydanticAdapter(
        looping_model(requests), history_archive=HistoryArchive(max_exchanges=2, keep_recent=1)
    )
    assert (
        PROGRAM.run_sync(adapter=adapter, env={"step": step}, conversation=conversation)
        == "finished"
    )
    sent = [pydantic_kinds(r) for r in requests]
    assert sent[2] == ["user", "Ac1", "Tc1", "Ac2", "Tc2"]
    assert sent[3][:2] == ["user", "CP"] and sent[3][-2:] == ["Ac3", "Tc3"] and "Ac1" not in sent[3]
    assert sent[5][-2:] == ["Ac5", "Tc5"] and not {"Ac1", "Ac2", "Ac3"} & set(sent[5])
    (lane,) = conversation.lanes.values()
    assert pydantic_kinds(list(lane.messages)) == [
        "user",
        *[f"{k}c{n}" for n in range(1, 6) for k in "AT"],
        "A",
    ]
    assert all(isinstance(m, ModelRequest | ModelResponse) for m in lane.messages)


def test_bad_archive_settings_are_config_errors() -> None:
    with pytest.raises(
        kedi.KediConfigError,
        match="keep_recent must be an integer from 0 to max_exchanges - 1, not 3",
    ):
        HistoryArchive(max_exchanges=3, keep_recent=3)
    with pytest.raises(
        kedi.KediConfigError, match="history_archive takes a HistoryArchive or an int, not str"
    ):
        archive_policy("8")  # type: ignore[arg-type]
    assert archive_policy(1) == HistoryArchive(max_exchanges=1, keep_recent=0)
