"""The documented adapter API: `kedi.agent_adapter`, model-less adapters, model objects."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import kedi
from kedi.history.processors import HistoryProcessorContext

DOCS = Path(__file__).resolve().parent.parent / "docs" / "history.md"
CHAT = kedi.compile("> history: enabled\n[reply] << <`args.message`>\n= <reply>")


def documented_example() -> dict[str, Any]:
    """Run the `keep_recent_cycles` block of docs/history.md exactly as written."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    (block,) = [b for b in blocks if "def keep_recent_cycles" in b]
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block, str(DOCS), "exec"), namespace)
    return namespace


class Recording(BaseChatModel):
    """A LangChain chat model that answers `reply N` and records each request's human texts."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(f"reply {len(self.seen)}"))]
        )


def pydantic_prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def test_the_documented_names_import_and_the_context_is_generic() -> None:
    from kedi.adapters import LangChainAdapter as FromAdapters
    from kedi.agent_adapter import HistoryProcessorContext as Context
    from kedi.agent_adapter import LangChainAdapter, OpenAIAdapter, PydanticAdapter

    assert Context is HistoryProcessorContext and FromAdapters is LangChainAdapter
    assert Context[ModelMessage].__origin__ is HistoryProcessorContext  # type: ignore[attr-defined]
    assert OpenAIAdapter.shortname == "openai" and PydanticAdapter.shortname == "pydantic"


def test_importing_kedi_and_agent_adapter_loads_no_framework() -> None:
    # `dir()` lists the lazy adapter names without importing their modules.
    code = "import sys, kedi, kedi.agent_adapter, kedi.adapters; dir(kedi.agent_adapter); print(sorted(m for m in ('pydantic_ai', 'langchain_core') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_the_lazy_adapter_names_are_the_adapters_classes() -> None:
    import kedi.adapters
    import kedi.agent_adapter as agent_adapter

    assert set(agent_adapter.__all__) <= set(dir(agent_adapter))
    for name in ("LangChainAdapter", "OpenAIAdapter", "PydanticAdapter"):
        assert getattr(agent_adapter, name) is getattr(kedi.adapters, name)
    with pytest.raises(AttributeError, match="kedi.agent_adapter' has no attribute 'Nope'"):
        agent_adapter.Nope  # noqa: B018 - the look-up is the test


def test_keep_recent_cycles_on_pydantic_ai_sends_protected_groups_and_the_last_four_cycles() -> (
    None
):
    example = documented_example()
    requests: list[list[ModelMessage]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(messages)
        return ModelResponse(parts=[TextPart(f"reply {len(requests)}")])

    model = FunctionModel(reply, model_name="recent")
    conversation = kedi.Conversation()
    # A first cycle whose reply holds signed reasoning: a protected group, never dropped.
    conversation.seed(
        [
            ModelRequest(parts=[UserPromptPart("m0")]),
            ModelResponse(parts=[ThinkingPart("why", signature="sig"), TextPart("r0")]),
        ],
        adapter=example["pydantic_agent"],
        model=model,
    )
    for turn in range(1, 8):
        CHAT.run_sync(
            args={"message": f"m{turn}"},
            adapter=example["pydantic_agent"],
            model=model,
            conversation=conversation,
        )
    assert pydantic_prompts(requests[0]) == ["m0", "m1"]
    assert pydantic_prompts(requests[-1]) == ["m0", "m3", "m4", "m5", "m6", "m7"]
    # What the lane keeps after the accepted edits is what was sent, plus the reply.
    assert pydantic_prompts(
        conversation.messages(adapter=example["pydantic_agent"], model=model)
    ) == ["m0", "m3", "m4", "m5", "m6", "m7"]


def test_keep_recent_cycles_on_langchain_sends_protected_groups_and_the_last_four_cycles() -> None:
    example = documented_example()
    model = Recording()
    conversation = kedi.Conversation()
    signed = AIMessage(
        content=[
            {"type": "thinking", "thinking": "why", "signature": "sig"},
            {"type": "text", "text": "r0"},
        ]
    )
    conversation.seed([HumanMessage("m0"), signed], adapter=example["langchain_agent"], model=model)
    for turn in range(1, 8):
        CHAT.run_sync(
            args={"message": f"m{turn}"},
            adapter=example["langchain_agent"],
            model=model,
            conversation=conversation,
        )
    humans = [[m.content for m in sent if isinstance(m, HumanMessage)] for sent in model.seen]
    assert humans[0] == ["m0", "m1"]
    assert humans[-1] == ["m0", "m3", "m4", "m5", "m6", "m7"]


def test_a_model_object_runs_with_or_without_an_adapter() -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"heard {pydantic_prompts(messages)[-1]}")])

    model = FunctionModel(reply, model_name="obj")
    assert CHAT.run_sync(args={"message": "hi"}, model=model) == "heard hi"
    from kedi.agent_adapter import PydanticAdapter

    assert (
        CHAT.run_sync(args={"message": "yo"}, adapter=PydanticAdapter(), model=model) == "heard yo"
    )
    chat_model = Recording()
    assert CHAT.run_sync(args={"message": "hi"}, model=chat_model) == "reply 1"


def test_the_programs_model_directive_chooses_the_model_of_a_model_less_adapter() -> None:
    from kedi.agent_adapter import PydanticAdapter

    program = kedi.compile("> model: test\n[reply] << hello\n= <reply>")
    # Pydantic AI's `test` model name resolves to its TestModel.
    assert program.run_sync(adapter=PydanticAdapter()) == "success (no tool calls)"


def test_an_adapter_without_any_model_says_how_to_choose_one() -> None:
    from kedi.agent_adapter import LangChainAdapter, PydanticAdapter

    for adapter in (PydanticAdapter(), LangChainAdapter()):
        with pytest.raises(kedi.KediExecutionError, match="has no (chat )?model; name one"):
            CHAT.run_sync(args={"message": "hi"}, adapter=adapter)


def test_a_model_object_of_no_known_framework_is_a_clear_error() -> None:
    with pytest.raises(
        kedi.KediExecutionError,
        match="model must be a name, a Pydantic AI Model or a LangChain chat model, not object",
    ):
        CHAT.run_sync(args={"message": "hi"}, model=object())
