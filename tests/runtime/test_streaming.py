"""`program.run(on_delta=...)`: text calls stream their reply, and calls with `str` captures the
text of those captures, on every streaming adapter; other captures arrive validated at the end."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableParallel
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import kedi
from kedi.adapters.openai import OpenAIAdapter
from kedi.adapters.pydantic_ai import PydanticAdapter
from kedi.cli import main
from tests.adapters.openai_server import MODEL, OpenAIServer, Reply, chunk, completion, sse

PIECES = ["Hel", "lo, ", "world."]
TEXT = kedi.compile("> history: enabled\n[reply] << Say hello.\n= <reply>")
STRUCTURED = kedi.compile(">> Count the letters [count: int].\n= <count>")
SUMMARY = kedi.compile("> history: enabled\n>> Summarise the day: [summary: str]\n= <summary>")
TWO = kedi.compile(
    ">> Title and summarise the day: [title: str], [stars: int] and [summary: str]\n= <title>"
)
# The reply `{"summary": "Line one\nsaid \"hi\" 😀"}`, its escapes cut across chunks.
SUMMARY_PIECES = ['{"sum', 'mary": "Line', " one\\", 'nsaid \\"hi', '\\" \\ud83d', "\\ude00", '"}']
SUMMARY_TEXT = 'Line one\nsaid "hi" 😀'
SUMMARY_DELTAS = ["Line", " one", '\nsaid "hi', '" ', "😀"]  # one per chunk that adds text


def streamed(*pieces: str) -> Reply:
    return Reply(
        events=sse(
            *[chunk({"content": piece}) for piece in pieces],
            chunk(finish_reason="stop"),
            chunk(usage=(5, 3)),
        )
    )


def test_openai_streams_text_calls_and_commits_the_whole_reply_once(server: OpenAIServer) -> None:
    server.add(streamed(*PIECES))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key="sk-test")
    pieces: list[str] = []
    conversation = kedi.Conversation()
    assert (
        TEXT.run_sync(adapter=adapter, on_delta=pieces.append, conversation=conversation)
        == "Hello, world."
    )
    assert pieces == PIECES and server.bodies[0]["stream"] is True
    assert [m.content for m in conversation.messages(adapter=adapter)] == [
        "Say hello.",
        "Hello, world.",
    ]
    # A call without str captures is not streamed: its validated value comes at the end.
    server.add(Reply(body=completion(json.dumps({"count": 7}))))
    assert STRUCTURED.run_sync(adapter=adapter, on_delta=pieces.append) == "7"
    assert "stream" not in server.bodies[1] and pieces == PIECES


def test_pydantic_ai_streams_through_its_event_stream() -> None:
    def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("".join(PIECES))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for piece in PIECES:
            yield piece

    pieces: list[str] = []
    model = FunctionModel(whole, stream_function=stream)
    assert TEXT.run_sync(model=model, on_delta=pieces.append) == "Hello, world."
    assert pieces == PIECES
    # A model that cannot stream gives its text in one piece.
    pieces.clear()
    assert TEXT.run_sync(model=FunctionModel(whole), on_delta=pieces.append) == "Hello, world."
    assert pieces == ["Hello, world."]


class Streaming(BaseChatModel):
    """Streams PIECES (and answers them whole when not streamed)."""

    @property
    def _llm_type(self) -> str:
        return "streaming"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("".join(PIECES)))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        for piece in PIECES:
            yield ChatGenerationChunk(message=AIMessageChunk(piece))


def test_langchain_streams_through_astream() -> None:
    pieces: list[str] = []
    conversation = kedi.Conversation()
    model = Streaming()
    assert (
        TEXT.run_sync(model=model, on_delta=pieces.append, conversation=conversation)
        == "Hello, world."
    )
    assert pieces == PIECES
    (lane,) = conversation.lanes.values()
    assert [type(m).__name__ for m in lane.messages] == ["HumanMessage", "AIMessage"]
    assert lane.messages[1].content == "Hello, world."


def test_kedi_run_stream_shows_the_text_on_stderr_and_keeps_stdout_the_result(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server.add(streamed(*PIECES), Reply(body=completion("Hello, world.")))
    flow = tmp_path / "flow.kedi"
    flow.write_text("[reply] << Say hello.\n= <reply>\n")
    options = ["run", str(flow), "--adapter", "openai", "--model", MODEL]
    result = CliRunner().invoke(main, [*options, "--stream"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "Hello, world.\n" and result.stdout == "Hello, world.\n"
    plain = CliRunner().invoke(main, options)
    assert plain.stdout == result.stdout and plain.stderr == ""
    assert server.bodies[0]["stream"] is True and "stream" not in server.bodies[1]


def test_kedi_run_stream_shows_a_str_captures_text_on_stderr(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server.add(streamed(*SUMMARY_PIECES))
    flow = tmp_path / "flow.kedi"
    flow.write_text(">> Summarise the day: [summary: str]\n= Summary: <summary>\n")
    result = CliRunner().invoke(
        main, ["run", str(flow), "--adapter", "openai", "--model", MODEL, "--stream"]
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == SUMMARY_TEXT + "\n"  # the capture's text, not its JSON
    assert result.stdout == f"Summary: {SUMMARY_TEXT}\n"


# --------------------------------------------------------------------------- str captures


class Watch:
    """An `on_delta` callback keeping the pieces and how many messages were stored as each came."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.conversation = kedi.Conversation()
        self.stored_while_streaming: set[int] = set()

    def __call__(self, text: str) -> None:
        self.pieces.append(text)
        self.stored_while_streaming.add(
            sum(len(lane.messages) for lane in self.conversation.lanes.values())
        )


def tool_stream(name: str, *pieces: str) -> Reply:
    first = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    rest = [{"index": 0, "function": {"arguments": piece}} for piece in pieces]
    chunks = [chunk({"tool_calls": [first]}), *[chunk({"tool_calls": [piece]}) for piece in rest]]
    return Reply(events=sse(*chunks, chunk(finish_reason="tool_calls"), chunk(usage=(5, 3))))


def test_openai_streams_a_str_capture_from_the_json_content_and_commits_once(
    server: OpenAIServer,
) -> None:
    server.add(streamed(*SUMMARY_PIECES))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key="sk-test")
    watch = Watch()
    assert (
        SUMMARY.run_sync(adapter=adapter, on_delta=watch, conversation=watch.conversation)
        == SUMMARY_TEXT
    )
    assert watch.pieces == SUMMARY_DELTAS  # only the capture's text, decoded, as each chunk arrives
    body = server.bodies[0]
    assert body["stream"] is True and body["response_format"]["type"] == "json_schema"
    assert watch.stored_while_streaming == {0}  # history commits once, at the end
    stored = [m.content for m in watch.conversation.messages(adapter=adapter)]
    assert len(stored) == 2 and json.loads(stored[1]) == {"summary": SUMMARY_TEXT}


def test_openai_streams_a_str_capture_from_the_output_tools_arguments(server: OpenAIServer) -> None:
    server.add(tool_stream("final_result", *SUMMARY_PIECES))
    adapter = OpenAIAdapter(
        MODEL, base_url=server.base_url, api_key="sk-test", structured_mode="tool"
    )
    pieces: list[str] = []
    assert SUMMARY.run_sync(adapter=adapter, on_delta=pieces.append) == SUMMARY_TEXT
    assert "".join(pieces) == SUMMARY_TEXT and len(pieces) == len(SUMMARY_DELTAS)


def test_openai_streams_several_str_captures_in_order_and_a_correction_again(
    server: OpenAIServer,
) -> None:
    # The first reply misses `summary`: kedi sends a correction and the second reply streams again.
    server.add(
        streamed('{"title": "Rain', '", "stars": 2}'),
        streamed('{"title": "Rain", "st', 'ars": 2, "summary": "Wet', ' all day."}'),
    )
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key="sk-test")
    pieces: list[str] = []
    assert TWO.run_sync(adapter=adapter, on_delta=pieces.append) == "Rain"
    assert pieces == ["Rain", "\nRain", "\nWet", " all day."]
    assert len(server.bodies) == 2 and all(body["stream"] is True for body in server.bodies)


def test_pydantic_ai_streams_a_str_capture_from_the_output_tool_and_a_retry_again() -> None:
    attempts: list[int] = []

    def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("streamed, never asked whole")

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[DeltaToolCalls]:
        attempts.append(len(messages))
        (tool,) = info.output_tools
        # The first answer's JSON is cut off (Pydantic AI sends a retry); the second is right.
        pieces = ['{"summ', 'ary": "Dr', "aft"] if len(attempts) == 1 else SUMMARY_PIECES
        yield {0: DeltaToolCall(name=tool.name, tool_call_id="c1")}
        for piece in pieces:
            yield {0: DeltaToolCall(json_args=piece)}

    watch = Watch()

    adapter = PydanticAdapter(FunctionModel(whole, stream_function=stream), output_mode="tool")
    assert (
        SUMMARY.run_sync(adapter=adapter, on_delta=watch, conversation=watch.conversation)
        == SUMMARY_TEXT
    )
    assert len(attempts) == 2 and watch.pieces == ["Dr", "aft", "\nLine", *SUMMARY_DELTAS[1:]]
    # History commits once, at the end: nothing is stored while the text streams.
    (lane,) = watch.conversation.lanes.values()
    assert watch.stored_while_streaming == {0} and len(lane.messages) == 5


def test_pydantic_ai_streams_str_captures_from_prompted_json_text_and_whole_when_it_cannot() -> (
    None
):
    def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("".join(SUMMARY_PIECES))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "```json\n"
        for piece in SUMMARY_PIECES:
            yield piece
        yield "\n```"

    pieces: list[str] = []
    adapter = PydanticAdapter(FunctionModel(whole, stream_function=stream), output_mode="prompted")
    assert SUMMARY.run_sync(adapter=adapter, on_delta=pieces.append) == SUMMARY_TEXT
    assert pieces == SUMMARY_DELTAS
    pieces.clear()
    adapter = PydanticAdapter(FunctionModel(whole), output_mode="prompted")
    assert SUMMARY.run_sync(adapter=adapter, on_delta=pieces.append) == SUMMARY_TEXT
    assert pieces == [SUMMARY_TEXT]


class WholeTool(BaseChatModel):
    """Answers by calling the tool it was bound to, with the JSON arguments of `answers` (whole)."""

    answers: list[list[str]]

    @property
    def _llm_type(self) -> str:
        return "whole-tool"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        arguments = json.loads("".join(self.answers.pop(0)))
        call = {"name": kw["tools"][-1]["function"]["name"], "args": arguments, "id": "c1"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kw: Any) -> Any:
        return self.bind(
            tools=[convert_to_openai_tool(tool) for tool in tools], tool_choice=tool_choice, **kw
        )


class StreamingTool(WholeTool):
    """`WholeTool` that streams: some chatter, then the tool call's arguments in the `answers` pieces."""

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        name = kw["tools"][-1]["function"]["name"]
        yield ChatGenerationChunk(message=AIMessageChunk('Calling it: {"summary": "not this"} '))
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                "", tool_call_chunks=[{"name": name, "args": "", "id": "c1", "index": 0}]
            )
        )
        for piece in self.answers.pop(0):
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    "", tool_call_chunks=[{"name": None, "args": piece, "id": None, "index": 0}]
                )
            )


def test_langchain_streams_a_str_capture_from_the_output_tool_and_commits_once() -> None:
    watch = Watch()

    model = StreamingTool(answers=[SUMMARY_PIECES])
    assert (
        SUMMARY.run_sync(model=model, on_delta=watch, conversation=watch.conversation)
        == SUMMARY_TEXT
    )
    # The chatter before the tool call is not the capture's text; the arguments' text is, decoded.
    assert watch.pieces == SUMMARY_DELTAS and watch.stored_while_streaming == {0}
    (lane,) = watch.conversation.lanes.values()
    assert (
        type(lane.messages[1]).__name__ == "AIMessage"
        and lane.messages[1].tool_calls[0]["args"]["summary"] == SUMMARY_TEXT
    )


def test_langchain_streams_several_str_captures_and_a_correction_again() -> None:
    # The first answer's `summary` is a number (kedi sends a correction); the second is right.
    model = StreamingTool(
        answers=[
            ['{"title": "Dr', 'aft", "stars": 1, "summary": 3}'],
            ['{"title": "Ra', 'in", "stars": 2, "summary": "Wet"}'],
        ]
    )
    pieces: list[str] = []
    assert TWO.run_sync(model=model, on_delta=pieces.append) == "Rain"
    assert pieces == ["Dr", "aft", "\nRa", "in\nWet"]


def test_langchain_chat_model_that_cannot_stream_gives_the_text_at_the_end() -> None:
    pieces: list[str] = []
    model = WholeTool(answers=[SUMMARY_PIECES])
    assert SUMMARY.run_sync(model=model, on_delta=pieces.append) == SUMMARY_TEXT
    assert pieces == [SUMMARY_TEXT]


class JsonMode(Streaming):
    """Structured output as JSON text (a JSON-schema mode): streams SUMMARY_PIECES in a code fence."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        raise AssertionError("streamed, never asked whole")

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        for piece in ["```json\n", *SUMMARY_PIECES, "\n```"]:
            yield ChatGenerationChunk(message=AIMessageChunk(piece))

    def with_structured_output(
        self, schema: Any, *, include_raw: bool = False, **kw: Any
    ) -> Runnable[Any, Any]:
        return RunnableParallel(raw=self)


def test_langchain_streams_a_str_capture_from_json_text() -> None:
    pieces: list[str] = []
    assert SUMMARY.run_sync(model=JsonMode(), on_delta=pieces.append) == SUMMARY_TEXT
    assert pieces == SUMMARY_DELTAS


class FakeLlama:
    """`llama_cpp.Llama.create_chat_completion` answering the summary whole (it never streams)."""

    def __init__(self) -> None:
        self.streamed: list[Any] = []

    def create_chat_completion(
        self, messages: Any, response_format: Any = None, stream: bool = False
    ) -> Any:
        self.streamed.append(stream)
        return completion(json.dumps({"summary": SUMMARY_TEXT}))


def test_local_does_not_stream_and_sends_the_reply_in_one_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llama.cpp answers whole in-process: the `str` capture reaches `on_delta` once, complete."""
    from kedi.adapters import local

    llama = FakeLlama()
    monkeypatch.setattr(local, "load_llama", lambda path, n_ctx: llama)
    pieces: list[str] = []
    adapter = local.LocalAdapter(model_path="fake.gguf")
    assert SUMMARY.run_sync(adapter=adapter, on_delta=pieces.append) == SUMMARY_TEXT
    assert pieces == [SUMMARY_TEXT] and llama.streamed == [False]


def test_the_text_of_two_calls_is_separated_by_one_line_break() -> None:
    # The callback cannot tell calls apart: without the break, `kedi run --stream`
    # showed "Hi!short" for a reply "Hi!" and then a capture "short".
    program = kedi.compile(
        "[a] << First\n>> Then [count: int]\n[b] << Second\n>> Last [summary: str]\n= <a>"
    )
    pieces: list[str] = []
    replies = ["Hi!", {"outputs": {"count": 2}}, "", {"outputs": {"summary": "short"}}]
    with_script(program, replies, on_delta=pieces.append)
    assert "".join(pieces) == "Hi!\nshort"


def with_script(program: Any, replies: list[Any], **options: Any) -> Any:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "replies.json"
        script.write_text(json.dumps(replies))
        return program.run_sync(model=f"script:{script}", **options)
