"""A setting the adapter in force does not take fails the call before it is sent.

docs/adapters.md, "Settings an adapter does not take": the error names the
setting, where it was set (`> settings:` line, `> effort:` or `settings=`),
the adapter and the closest name it takes; the offline and script stand-ins
take every name kedi knows. One test per adapter (offline, script, openai,
pydantic, langchain, local), each with no model request made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import kedi
from kedi.adapters.base import Adapter
from kedi.cli import main
from kedi.errors import KediConfigError

TOP_K = "> settings:\n    temperature: 0.2\n    top_k: 5\n>> Name a city [city].\n= <city>\n"
"""A program with llama.cpp's `top_k` at line 3: only the local adapter (and the stand-ins) take it."""
PLAIN = ">> Name a city [city].\n= <city>\n"


def refused(source: str, adapter: Any, **options: Any) -> str:
    """The message of the error the run fails with (it must be a `KediConfigError`)."""
    with pytest.raises(KediConfigError) as caught:
        kedi.compile(source).run_sync(adapter=adapter, **options)
    return str(caught.value)


# --------------------------------------------------------------------------- stand-ins


def test_offline_takes_every_known_setting_and_refuses_a_misspelt_one_from_python() -> None:
    assert kedi.compile(TOP_K).run_sync() == "city"  # another adapter's setting: ignored
    message = refused(PLAIN, "offline", settings={"temprature": 0.2})
    assert "unknown setting `temprature` (set by `settings=` in Python)" in message
    assert "did you mean `temperature`?" in message


def test_script_takes_every_known_setting_and_refuses_a_misspelt_one(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([{"outputs": {"city": "Lyon"}}]))
    assert kedi.compile(TOP_K).run_sync(model=f"script:{replies}") == "Lyon"
    with pytest.raises(KediConfigError, match="unknown setting `stop_sequence`.*`stop_sequences`"):
        kedi.compile(PLAIN).run_sync(model=f"script:{replies}", settings={"stop_sequence": "x"})


def test_kedi_check_refuses_a_settings_key_no_adapter_takes_at_its_line(tmp_path: Path) -> None:
    program = tmp_path / "flow.kedi"
    program.write_text("> settings:\n    temprature: 0.2\n" + PLAIN)
    result = CliRunner().invoke(main, ["check", str(program)])
    assert result.exit_code == 1
    assert 'flow.kedi", line 2' in result.stderr and "unknown setting `temprature`" in result.stderr
    assert "did you mean `temperature`?" in result.stderr


# --------------------------------------------------------------------------- real adapters


def test_openai_refuses_top_k_at_the_directive_line_before_any_request(tmp_path: Path) -> None:
    requests: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(500)

    from kedi.adapters.openai import OpenAIAdapter

    adapter = OpenAIAdapter(
        "m", base_url="http://model.invalid/v1", api_key="k", transport=httpx.MockTransport(server)
    )
    message = refused(TOP_K, adapter)
    assert "adapter 'openai' does not take the setting `top_k`" in message
    assert "(set by `> settings:` at <string>:3)" in message
    assert "did you mean `top_p`?" in message and "go in `extra_body`" in message
    message = refused(PLAIN, adapter, settings={"temprature": 0.2})
    assert "`temprature` (set by `settings=` in Python); did you mean `temperature`?" in message
    assert "`thinking`" in refused(PLAIN, adapter, settings={"thinking": True})  # not forwarded
    assert requests == []

    # From the command line: the error, located, and no traceback.
    program = tmp_path / "flow.kedi"
    program.write_text(TOP_K)
    result = CliRunner().invoke(
        main,
        ["run", str(program), "--adapter", "openai", "--model", "m"],
        env={"KEDI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"},
    )
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "does not take the setting `top_k` (set by `> settings:` at" in result.stderr
    assert "flow.kedi:3" in result.stderr


def test_a_setting_from_a_profile_or_effort_is_located_too() -> None:
    from kedi.adapters.openai import OpenAIAdapter

    class NoEffort(OpenAIAdapter):
        profile = OpenAIAdapter.profile.__class__(settings=frozenset({"temperature"}))

    adapter = NoEffort("m", base_url="http://model.invalid/v1", api_key="k")
    profile = (
        "> profile: sampling:\n    > settings:\n        top_k: 5\n"
        "> use: sampling\n>> Name a city [city].\n= <city>\n"
    )
    assert "(set by `> settings:` at <string>:3)" in refused(profile, adapter)
    assert "`effort` (set by `> effort:`)" in refused("> effort: high\n" + PLAIN, adapter)


def test_pydantic_refuses_another_adapters_setting_before_any_request() -> None:
    pytest.importorskip("pydantic_ai", reason='needs pydantic-ai: pip install "kedi[pydantic-ai]"')
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from kedi.adapters.pydantic_ai import PydanticAdapter

    calls: list[Any] = []

    def model(messages: Any, info: Any) -> ModelResponse:
        calls.append(messages)
        return ModelResponse(parts=[TextPart("x")])

    adapter = PydanticAdapter(FunctionModel(model))
    message = refused(TOP_K, adapter)
    assert "adapter 'pydantic' does not take the setting `top_k`" in message
    assert "<string>:3" in message and "did you mean `top_p`?" in message
    message = refused(PLAIN, adapter, settings={"structured_mode": "tool"})
    assert "`structured_mode`" in message and "output_mode" in message  # its own name is listed
    assert calls == []


def test_langchain_refuses_the_openai_adapters_structured_mode_naming_its_own() -> None:
    pytest.importorskip(
        "langchain_core", reason='needs langchain-core: pip install "kedi[langchain]"'
    )
    from kedi.adapters.langchain import LangChainAdapter
    from tests.adapters.test_langchain import Scripted

    chat = Scripted()
    adapter = LangChainAdapter(chat)
    source = "> settings:\n    structured_mode: tool\n" + PLAIN
    message = refused(source, adapter)
    assert "adapter 'langchain' does not take the setting `structured_mode`" in message
    assert "<string>:2" in message and "did you mean `structured_method`?" in message
    assert chat.seen == []


def test_pydantic_refuses_a_setting_its_model_class_lists_as_unsupported() -> None:
    pytest.importorskip("pydantic_ai", reason='needs pydantic-ai: pip install "kedi[pydantic-ai]"')
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from kedi.adapters.pydantic_ai import PydanticAdapter

    class NoSeedNoStop(FunctionModel):
        unsupported_settings = frozenset({"seed", "stop_sequences"})

    calls: list[Any] = []

    def model(messages: Any, info: Any) -> ModelResponse:
        calls.append(info.model_settings)
        return ModelResponse(parts=[TextPart('{"city": "Oslo"}')])

    adapter = PydanticAdapter(NoSeedNoStop(model))
    message = refused("> settings:\n    seed: 7\n" + PLAIN, adapter)
    assert "adapter 'pydantic' with model" in message
    assert "does not take the setting `seed` (set by `> settings:` at <string>:2)" in message
    # `stop` travels as `stop_sequences`, which the model ignores: refused too, from Python
    assert "the setting `stop` (set by `settings=` in Python)" in refused(
        PLAIN, adapter, settings={"stop": "END"}
    )
    assert calls == []
    source = "> settings:\n    temperature: 0.2\n" + PLAIN
    kedi.compile(source).run_sync(adapter=adapter)
    assert calls[0]["temperature"] == 0.2


def test_langchain_refuses_a_setting_its_chat_model_has_no_field_for() -> None:
    pytest.importorskip(
        "langchain_core", reason='needs langchain-core: pip install "kedi[langchain]"'
    )
    from kedi.adapters.langchain import LangChainAdapter
    from tests.adapters.test_langchain import Scripted

    chat = Scripted()  # fields: temperature, reasoning_effort, stop; no seed, no top_p
    adapter = LangChainAdapter(chat)
    message = refused("> settings:\n    temperature: 0.2\n    seed: 7\n" + PLAIN, adapter)
    assert "adapter 'langchain' with model" in message
    assert "does not take the setting `seed` (set by `> settings:` at <string>:3)" in message
    assert "temperature" in message.split("It takes")[1] and "top_p" not in message
    assert chat.seen == []


class FakeLlama:
    """The one method of `llama_cpp.Llama` the local adapter calls; records what it is given."""

    def __init__(self) -> None:
        self.fields: list[dict[str, Any]] = []

    def create_chat_completion(
        self,
        messages: Any,
        response_format: Any = None,
        max_tokens: Any = None,
        temperature: Any = None,
        top_k: Any = None,
        min_p: Any = None,
        repeat_penalty: Any = None,
        stream: bool = False,
    ) -> dict[str, Any]:
        self.fields.append({"top_k": top_k, "repeat_penalty": repeat_penalty, "min_p": min_p})
        return {
            "id": "c",
            "object": "chat.completion",
            "model": "local",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": '{"city": "Oslo"}'},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }


def test_local_sends_llama_cpp_settings_and_refuses_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kedi.adapters import local

    llama = FakeLlama()
    monkeypatch.setattr(local, "load_llama", lambda path, n_ctx: llama)
    adapter = local.LocalAdapter(model_path="/models/fake.gguf")
    assert kedi.compile(TOP_K).run_sync(adapter=adapter) == "Oslo"
    # The settings of the local adapter's own reach llama.cpp (the defaults fill the rest).
    assert llama.fields == [{"top_k": 5, "repeat_penalty": 1.3, "min_p": None}]
    message = refused("> settings:\n    structured_method: tool\n" + PLAIN, adapter)
    assert "adapter 'local' does not take the setting `structured_method`" in message
    assert "did you mean `structured_mode`?" in message
    assert len(llama.fields) == 1


def test_an_adapter_that_declares_no_settings_gets_every_setting_unchecked() -> None:
    seen: list[dict[str, Any]] = []

    class Mine(Adapter):
        shortname = "mine"

        async def request(self, request: Any) -> Any:
            from kedi.adapters.base import CallResult

            seen.append(dict(request.settings))
            return CallResult(value={"city": "Rome"}, new_messages=())

    assert Mine.profile.settings is None
    assert kedi.compile(TOP_K).run_sync(adapter=Mine(), settings={"custom": 1}) == "Rome"
    assert seen == [{"custom": 1, "temperature": 0.2, "top_k": 5}]


def test_a_mapping_setting_given_another_value_is_refused_before_any_request() -> None:
    # Pydantic AI and LangChain failed mid-run with "TypeError: 'str' object is not a mapping".
    pytest.importorskip("pydantic_ai", reason='needs pydantic-ai: pip install "kedi[pydantic-ai]"')
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from kedi.adapters.pydantic_ai import PydanticAdapter

    calls: list[Any] = []

    def model(messages: Any, info: Any) -> ModelResponse:
        calls.append(messages)
        return ModelResponse(parts=[TextPart("x")])

    source = '> settings:\n  extra_headers: `"Bearer sk-secret-123"`\n' + PLAIN
    message = refused(source, PydanticAdapter(FunctionModel(model)))
    assert (
        "the setting `extra_headers` (set by `> settings:` at <string>:2) must be a mapping, not a str"
        in message
    )
    assert "sk-secret" not in message  # the value is not shown: it may be a key
    message = refused(PLAIN, "offline", settings={"extra_body": ["top_k", 20]})
    assert "`extra_body` (set by `settings=` in Python) must be a mapping, not a list" in message
    assert calls == []
