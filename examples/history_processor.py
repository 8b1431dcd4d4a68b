"""A history processor on a tool loop, offline: Pydantic AI's FunctionModel, no key, no network.

    python examples/history_processor.py

Three questions in one conversation; the model looks each one up with a tool
(two tool rounds per question) before answering. The processor keeps the
protected groups and the most recent closed cycle, and prints what every model
request carried before and after it: watch the older cycles leave the request
while the tool loop of the question in progress always stays whole.
"""

from __future__ import annotations

from typing import TypeVar

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
from kedi.agent_adapter import HistoryProcessorContext, PydanticAdapter

MessageT = TypeVar("MessageT")
KEEP_CYCLES = 1


def describe(messages: list[ModelMessage] | tuple[ModelMessage, ...]) -> str:
    """One short token per part: `user:...`, `call:...`, `result:...`, `text:...`."""
    tokens: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                tokens.append(f"user:{part.content}")
            elif isinstance(part, ToolCallPart):
                tokens.append(f"call:{part.tool_name}({part.args_as_dict()['topic']})")
            elif isinstance(part, ToolReturnPart):
                tokens.append(f"result:{part.tool_call_id}")
            elif isinstance(part, TextPart):
                tokens.append("text")
    return " ".join(tokens)


def keep_recent_cycles(ctx: HistoryProcessorContext[MessageT]) -> list[MessageT]:
    """Send protected groups and the last KEEP_CYCLES closed cycles; print before and after."""
    eligible = [group for group in ctx.groups if group.closed and not group.protected]
    dropped = {group.group_id for group in eligible[:-KEEP_CYCLES]}
    kept = [
        message
        for group in ctx.groups
        if group.group_id not in dropped
        for message in ctx.group_messages(group)
    ]
    print(f"  request {ctx.request_index}, {len(ctx.groups)} groups")
    print(f"    before: {describe(ctx.messages)}")  # type: ignore[arg-type]
    print(f"    after:  {describe(kept)}")  # type: ignore[arg-type]
    return kept


def researcher(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Look the question up twice (one tool call per request), then answer."""
    question = next(
        part.content
        for message in reversed(messages)
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    )
    lookups = 0
    for message in reversed(messages):
        if any(isinstance(p, UserPromptPart) for p in message.parts):
            break
        lookups += sum(isinstance(p, ToolCallPart) for p in message.parts)
    if lookups < 2:
        topic = f"{question}#{lookups + 1}"
        call_id = f"{question}-{lookups + 1}"
        return ModelResponse(parts=[ToolCallPart("lookup", {"topic": topic}, tool_call_id=call_id)])
    return ModelResponse(parts=[TextPart(f"{question}: answered from 2 lookups")])


def lookup(topic: str) -> str:
    """Look a topic up in the notes."""
    return f"notes on {topic}"


PROGRAM = kedi.compile(
    "> history: enabled\n> use: lookup\n[answer] << <`args.question`>\n= <answer>",
    known_globals=["lookup"],
)


def main() -> None:
    """Ask three questions in one conversation and print every request."""
    adapter = PydanticAdapter(history_processor=keep_recent_cycles)
    model = FunctionModel(researcher, model_name="researcher")
    conversation = kedi.Conversation()
    for question in ("tides", "comets", "lichens"):
        print(f"question {question!r}")
        answer = PROGRAM.run_sync(
            args={"question": question},
            adapter=adapter,
            model=model,
            conversation=conversation,
            env={"lookup": lookup},
        )
        print(f"  answer: {answer}")


if __name__ == "__main__":
    main()
