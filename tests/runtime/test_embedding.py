"""The Python embedding API: compile/run, query, bind, configure/context, conversations."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

import kedi
from kedi.errors import KediUsageError


def test_compile_and_run_sync_and_async() -> None:
    program = kedi.compile("[n: int] = `args.n * 2`\n= `n`", path="double.kedi")
    assert program.run_sync(args={"n": 21}) == 42

    async def main() -> int:
        return await program.run(args={"n": 5})

    assert anyio.run(main) == 10


def test_query_compiles_the_docstring_as_a_procedure_body() -> None:
    @kedi.query(model="offline")
    def classify(text: str) -> str:
        """kedi
        >> <text> is a [label: Literal["bug", "feature", "question"]].
        = `label`
        """

    assert classify("The app crashes") == "bug"  # the offline model picks the first literal


def test_query_with_native_arguments_and_no_model_call() -> None:
    @kedi.query
    def count_items(items: list[str]) -> int:
        """kedi
        = `len(items)`
        """

    assert count_items(["a", "b", "c"]) == 3


def test_query_tolerates_column_zero_template_rows() -> None:
    @kedi.query(model="offline")
    def title_for(topic: str) -> str:
        """kedi
>> Short documentation title for <topic>: [title: str].
        = `title`
        """

    assert title_for("parsers") == "title"


def test_async_query() -> None:
    @kedi.query
    async def shout(word: str) -> str:
        """kedi
        = `word.upper()`
        """

    assert anyio.run(shout, "hey") == "HEY"


def test_query_needs_a_kedi_docstring() -> None:
    with pytest.raises(KediUsageError):

        @kedi.query
        def nothing(x: str) -> str:
            """Just prose."""


def test_bind_runs_a_file_with_arguments_as_globals(tmp_path: Path) -> None:
    (tmp_path / "greet.kedi").write_text("= Hello <name>!\n", encoding="utf-8")

    @kedi.bind(file=tmp_path / "greet.kedi")
    def greet(name: str) -> str: ...

    assert greet("Ada") == "Hello Ada!"


def test_bind_reload_rereads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "v.kedi"
    path.write_text("= one\n", encoding="utf-8")

    @kedi.bind(file=path, reload=True)
    def version() -> str: ...

    assert version() == "one"
    path.write_text("= two\n", encoding="utf-8")
    assert version() == "two"


def test_context_overrides_and_restores_defaults(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"outputs": {"x": "from script"}}]), encoding="utf-8")
    program = kedi.compile(">> Give [x].\n= <x>")
    with kedi.context(model=f"script:{script}"):
        assert program.run_sync() == "from script"
    assert program.run_sync(model="offline") == "x"


def test_configure_replaces_defaults() -> None:
    try:
        kedi.configure(system="Configured.", model="offline")
        records: list[dict] = []
        kedi.compile(">> Hi [x].").run_sync(transcript=records.append)
        assert records[0]["messages"][0] == {"role": "system", "content": "Configured."}
        kedi.configure(model="offline")
        records.clear()
        kedi.compile(">> Hi [x].").run_sync(transcript=records.append)
        assert records[0]["messages"][0]["role"] == "user"
    finally:
        kedi.reset_config()


def test_a_conversation_object_carries_history_across_runs() -> None:
    conversation = kedi.Conversation()
    program = kedi.compile("> history: enabled\n[reply] << <`args.message`>\n= <reply>")
    records: list[dict] = []
    program.run_sync(args={"message": "first"}, conversation=conversation, model="offline")
    program.run_sync(args={"message": "second"}, conversation=conversation, model="offline", transcript=records.append)
    assert [m["content"] for m in records[0]["messages"]][0] == "first"
    assert records[0]["conversation_id"] == conversation.conversation_id


def test_prompt_hook_edits_what_is_sent_stored_and_transcribed() -> None:
    conversation = kedi.Conversation()

    def redact(event: kedi.PromptEvent) -> str:
        return event.prompt.replace("secret-42", "[redacted]")

    records: list[dict] = []
    program = kedi.compile("> history: enabled\n[a] << My code is secret-42.\n[b] << Again.\n= <b>")
    program.run_sync(hooks=[redact], conversation=conversation, model="offline", transcript=records.append)
    assert records[0]["messages"][0]["content"] == "My code is [redacted]."
    stored = [m.content for lane in conversation.lanes.values() for m in lane.messages]
    assert "My code is [redacted]." in stored and not any("secret-42" in m for m in stored)


def test_prompt_hook_refusal_commits_nothing() -> None:
    conversation = kedi.Conversation()

    def refuse(event: kedi.PromptEvent) -> None:
        if "forbidden" in event.prompt:
            raise PermissionError("not allowed")

    program = kedi.compile("> history: enabled\n[a] << fine\n[b] << forbidden\n= <b>")
    with pytest.raises(kedi.KediExecutionError, match="not allowed"):
        program.run_sync(hooks=[refuse], conversation=conversation, model="offline")
    (lane,) = conversation.lanes.values()
    assert [m.content for m in lane.messages][0] == "fine" and len(lane) == 2
