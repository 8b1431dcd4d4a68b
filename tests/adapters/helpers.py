"""What the adapter tests share: a call request, an output spec and a tool."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, create_model

from kedi.adapters.base import CallRequest, OutputSpec, ToolSpec

RUN = "run-1"
CONVERSATION = "conversation-1"


def call(prompt: str, *, run_id: str = RUN, **kwargs: Any) -> CallRequest:
    """A request in run RUN (unless `run_id` says otherwise) and conversation CONVERSATION."""
    return CallRequest(prompt=prompt, run_id=run_id, conversation_id=CONVERSATION, **kwargs)


def spec(**fields: Any) -> OutputSpec:
    """An output spec like the runtime builds: one strict model, one field per capture."""
    model = create_model("Outputs", __config__=ConfigDict(strict=True), **fields)
    return OutputSpec(model, model.model_json_schema())


def add_tool(log: list[Any]) -> ToolSpec:
    """The `add` tool: logs its arguments, adds `a` and `b`, and refuses a negative `a`."""

    async def add(args: Any) -> int:
        log.append(dict(args))
        if args["a"] < 0:
            raise ValueError("negative numbers are not allowed")
        return int(args["a"] + args["b"])

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    return ToolSpec("add", "Add two numbers.", schema, add)
