"""Pydantic AI models at a configured base URL, and the forced first tool call.

- `model_at_base_url`: `openai:NAME` (or `openai-chat:NAME`, a bare `NAME`)
  with a base URL configured means Pydantic AI's chat-completions model at
  that URL (the Responses API that `openai:` means exists only at OpenAI).
- `RunChatModel`: such a model with an HTTP client of its own per run, which
  sends `null` assistant content as `""` (llama.cpp refuses `null`).
- `ForceToolFirst`: a `tool_choice` setting that names a tool, forced until
  the run has a result of it.
- `ReplyText`: every model response with its lone surrogates (and their
  escapes in tool-call arguments) replaced by U+FFFD before the run keeps it.

Imported only by the Pydantic AI adapter's modules, after its import guard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.settings import ModelSettings

from kedi.adapters._openai_wire import string_content_http_client
from kedi.adapters._portable import without_lone_surrogate_escapes, without_lone_surrogates
from kedi.adapters.endpoint import api_key, configured_base_url


class RunChatModel:
    """The chat model at the base URL with an HTTP client of its own, closed by `aclose`.

    The client sends `null` assistant content as `""` (`string_content_http_client`).
    """

    def __init__(self, build: Callable[[Any], Model]) -> None:
        self.client = string_content_http_client()
        self.model = build(self.client)

    async def aclose(self) -> None:
        await self.client.aclose()


@dataclass
class ForceToolFirst(AbstractCapability[Any]):
    """A `tool_choice` setting naming a function tool: forced until the run has a result of it.

    Pydantic AI refuses a static choice that names no output tool (the run
    could never end); servers such as llama.cpp ignore `required` but honour
    a name, so this is how a small model is made to call a tool.
    """

    tool: str
    extra_body: dict[str, Any]
    """The call's own `extra_body` (a run's static one would replace this capability's)."""

    def get_model_settings(self) -> Any:
        def per_step(ctx: RunContext[Any]) -> ModelSettings:
            if self._called(ctx):
                return (
                    ModelSettings(extra_body=self.extra_body)
                    if self.extra_body
                    else ModelSettings()
                )
            # In the body: Pydantic AI sends a one-function choice as `required`.
            choice = {"type": "function", "function": {"name": self.tool}}
            return ModelSettings(extra_body={**self.extra_body, "tool_choice": choice})

        return per_step

    def _called(self, ctx: RunContext[Any]) -> bool:
        """Whether this run has already had a result of the tool.

        A call with bad arguments has none: Pydantic AI answers it with a
        `ToolReturnPart` too, but with the outcome `retried`, and the model's
        next try must stay forced (on llama.cpp the forced choice is what
        constrains the arguments to the tool's schema).
        """
        return any(
            isinstance(part, ToolReturnPart)
            and part.tool_name == self.tool
            and part.outcome != "retried"
            for message in ctx.messages
            if isinstance(message, ModelRequest) and message.run_id == ctx.run_id
            for part in message.parts
        )


class ReplyText(AbstractCapability[Any]):
    """Replaces the lone surrogates of every model response with U+FFFD before the run keeps it.

    A lone surrogate (a `"\\ud800"` escape in the reply's JSON) has no UTF-8
    form: the run's next request could not send it and the lane could not be
    saved (docs/history.md). In a tool call's arguments, still JSON text, the
    escape is written `\\ufffd`: Pydantic AI's parser refuses the arguments
    otherwise (and asks the model to try again).
    """

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        data = ModelMessagesTypeAdapter.dump_python([response])
        cleaned = without_lone_surrogates(data)
        if cleaned is not data:
            [message] = ModelMessagesTypeAdapter.validate_python(cleaned)
            assert isinstance(message, ModelResponse)
            response = message
        parts = [
            replace(part, args=without_lone_surrogate_escapes(part.args))
            if isinstance(part, ToolCallPart) and isinstance(part.args, str)
            else part
            for part in response.parts
        ]
        if parts == response.parts:
            return response
        return replace(response, parts=parts)


def model_at_base_url(name: str) -> tuple[Callable[[Any], Model], str] | None:
    """A builder of the chat-completions model `name` means at the configured base URL
    (given an HTTP client, or None for the provider's own), and its endpoint.

    None without a base URL, or for a name of another provider.
    """
    base_url = configured_base_url()
    provider, _, bare = name.rpartition(":")
    if base_url is None or provider not in ("", "openai", "openai-chat"):
        return None
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    # Local servers need no key, but the openai SDK refuses to start without one.
    key = api_key() or "not-needed"

    def build(http_client: Any) -> Model:
        provider = OpenAIProvider(base_url=base_url, api_key=key, http_client=http_client)
        return OpenAIChatModel(bare, provider=provider)

    return build, f"POST {base_url.rstrip('/')}/chat/completions"
