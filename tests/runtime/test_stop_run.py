"""A tool stops a run on purpose with `kedi.StopRun` (C9: the canceled stage)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import kedi
from kedi.history import INTERRUPTED_RESULT, normalize_history

PROGRAM = kedi.compile(
    "> history: enabled\n> use:\n    note\n    halt\n[answer] << Do the three things.\n= <answer>",
    known_globals=["note", "halt"],
)
CALLS = [
    ("c1", "note", {"text": "first"}),
    ("c2", "halt", {"why": "budget spent"}),
    ("c3", "note", {"text": "third"}),
]


def tools(ran: list[str]) -> dict[str, Any]:
    def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return f"noted {text}"

    def halt(why: str) -> str:
        """Stop everything."""
        raise kedi.StopRun(why)

    return {"note": note, "halt": halt}


def test_a_stop_keeps_earlier_results_closes_the_rest_and_resumes_with_no_repair(
    tmp_path: Path,
) -> None:
    script = tmp_path / "replies.json"
    calls = [{"id": i, "name": n, "args": a} for i, n, a in CALLS]
    script.write_text(json.dumps([{"tool_calls": calls}, "resumed fine"]))
    ran: list[str] = []
    with pytest.raises(
        kedi.KediExecutionError, match="tool 'halt' stopped the run at .*: budget spent"
    ) as caught:
        PROGRAM.run_sync(model=f"script:{script}", env=tools(ran))
    stop = caught.value.original
    assert isinstance(stop, kedi.StopRun) and stop.reason == "budget spent"
    partial = caught.value.partial
    assert partial.stage == "canceled" and partial.tool_calls == 1 and ran == ["first"]
    assert [(m.role, m.tool_call_id, m.content) for m in partial.messages[2:]] == [
        ("tool", "c1", "noted first"),
        ("tool", "c2", INTERRUPTED_RESULT),
        ("tool", "c3", INTERRUPTED_RESULT),
    ]
    # The closings are stamped with the run's identity (unlike repair's synthesized results).
    assert {(m.run_id, m.conversation_id) for m in partial.messages} == {
        (partial.run_id, partial.conversation_id)
    }
    _, report = normalize_history(partial.messages)
    assert report.synthesized == [] and report.dropped == [] and report.truncated == []
    assert pickle.loads(pickle.dumps(stop)).partial.stage == "canceled"
    # Resuming sends the partial as it is: nothing to repair, nothing added.
    resumed = kedi.Conversation()
    resumed.seed(partial.messages)
    records: list[dict[str, Any]] = []
    kedi.compile("> history: enabled\n[a] << Go on.\n= <a>").run_sync(
        conversation=resumed, transcript=records.append
    )
    sent = records[0]["messages"]
    assert (
        sent[:-1] == [m.to_json_dict() for m in partial.messages]
        and sent[-1]["content"] == "Go on."
    )


def test_a_stop_on_pydantic_ai_closes_the_batch_in_call_order() -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=i) for i, n, a in CALLS])
        return ModelResponse(parts=[TextPart("unreachable")])

    ran: list[str] = []
    with pytest.raises(
        kedi.KediExecutionError, match="a tool stopped the run of model .*: budget spent"
    ) as caught:
        PROGRAM.run_sync(model=FunctionModel(model), env=tools(ran))
    partial = caught.value.partial
    assert partial.stage == "canceled"
    *_, response, closing = partial.messages
    assert isinstance(response, ModelResponse) and isinstance(closing, ModelRequest)
    returns = [(p.tool_call_id, p.content) for p in closing.parts if isinstance(p, ToolReturnPart)]
    # Pydantic AI runs a batch concurrently: every result recorded before the stop stays.
    assert returns[1] == ("c2", INTERRUPTED_RESULT) and [i for i, _ in returns] == [
        "c1",
        "c2",
        "c3",
    ]
    assert {content for _, content in returns} <= {"noted first", "noted third", INTERRUPTED_RESULT}
    assert returns[0][1] == ("noted first" if "first" in ran else INTERRUPTED_RESULT)
    assert {m.run_id for m in partial.messages} == {partial.run_id}


class Calling(BaseChatModel):
    """Asks for the three calls, then answers."""

    @property
    def _llm_type(self) -> str:
        return "calling"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        reply = AIMessage("", tool_calls=[{"id": i, "name": n, "args": a} for i, n, a in CALLS])
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def test_a_stop_on_langchain_keeps_earlier_results_and_closes_the_rest() -> None:
    ran: list[str] = []
    with pytest.raises(
        kedi.KediExecutionError, match="tool 'halt' stopped the run in chat model .*: budget spent"
    ) as caught:
        PROGRAM.run_sync(model=Calling(), env=tools(ran))
    partial = caught.value.partial
    assert partial.stage == "canceled" and ran == ["first"]
    closings = [(m.tool_call_id, m.content) for m in partial.messages if isinstance(m, ToolMessage)]
    assert closings == [
        ("c1", "noted first"),
        ("c2", INTERRUPTED_RESULT),
        ("c3", INTERRUPTED_RESULT),
    ]
