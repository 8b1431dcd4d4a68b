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
    assert repr(program) == "Program('double.kedi')"  # was <...Program object at 0x7f...>
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
    program.run_sync(
        args={"message": "second"},
        conversation=conversation,
        model="offline",
        transcript=records.append,
    )
    assert [m["content"] for m in records[0]["messages"]][0] == "first"
    assert records[0]["conversation_id"] == conversation.conversation_id


def test_prompt_hook_edits_what_is_sent_stored_and_transcribed() -> None:
    conversation = kedi.Conversation()

    def redact(event: kedi.PromptEvent) -> str:
        return event.prompt.replace("secret-42", "[redacted]")

    records: list[dict] = []
    program = kedi.compile("> history: enabled\n[a] << My code is secret-42.\n[b] << Again.\n= <b>")
    program.run_sync(
        hooks=[redact], conversation=conversation, model="offline", transcript=records.append
    )
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


def test_prompt_hook_edit_reaches_the_adapter() -> None:
    seen: list[str] = []

    class Recorder(kedi.Adapter):
        shortname = "recorder"
        model_name = "recorder"

        async def request(self, request):  # type: ignore[no-untyped-def]
            from kedi.adapters.base import CallResult

            seen.append(request.prompt)
            return CallResult(value="ok", new_messages=())

    program = kedi.compile("[a] << Tell me the password hunter2.\n= <a>")
    program.run_sync(adapter=Recorder(), hooks=[lambda e: e.prompt.replace("hunter2", "***")])
    assert seen == ["Tell me the password ***."]


def test_a_run_has_one_uuid7_run_id_and_each_call_its_own_call_id() -> None:
    import re

    uuid7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
    conversation = kedi.Conversation()
    records: list[dict] = []
    kedi.compile("> history: enabled\n>> One [a].\n>> Two [b].").run_sync(
        model="offline", conversation=conversation, transcript=records.append
    )
    run_ids = {r["run_id"] for r in records}
    call_ids = [r["call_id"] for r in records]
    assert len(run_ids) == 1 and all(uuid7.match(r) for r in [*run_ids, *call_ids])
    assert len(set(call_ids)) == 2 and not run_ids & set(call_ids)
    assert uuid7.match(conversation.conversation_id)
    (lane,) = conversation.lanes.values()
    assert [m.run_id for m in lane.messages] == [*run_ids] * 4
    assert {m.conversation_id for m in lane.messages} == {conversation.conversation_id}


def test_history_bounds_from_the_directive_trim_whole_groups() -> None:
    records: list[dict] = []
    source = (
        "> history:\n    enabled: true\n    max_messages: 3\n"
        ">> One [a].\n>> Two [b].\n>> Three [c].\n>> Four [d]."
    )
    kedi.compile(source).run_sync(model="offline", transcript=records.append)
    sent = [[m["content"] for m in r["messages"]] for r in records]
    assert sent[0] == ["One [a]."]
    # At most 3 messages: the oldest whole user/assistant pairs are dropped first.
    assert sent[3] == ["Three [c].", '{"c":"c"}', "Four [d]."]


def test_parallel_context_manager_works_with_async_with() -> None:
    async def main() -> object:
        async with kedi.parallel(max_workers=2):
            return await kedi.compile(">> A [a].\n>> B [b].\n= <a><b>").run(model="offline")

    assert anyio.run(main) == "ab"


def test_prompt_hook_edit_is_what_history_processing_and_budgets_see() -> None:
    seen: list[tuple[str, int]] = []

    def processor(context):  # type: ignore[no-untyped-def]
        seen.append((context.messages[-1].content, context.estimated_tokens))
        return context.messages

    long_prompt = "word " * 400
    program = kedi.compile(f"[a] << {long_prompt}\n= <a>")
    program.run_sync(model="offline", history_processor=processor)
    program.run_sync(model="offline", history_processor=processor, hooks=[lambda e: "short"])
    (original, original_tokens), (edited, edited_tokens) = seen
    assert original.startswith("word word") and edited == "short"
    assert edited_tokens < original_tokens / 10  # token estimates follow the edit


def test_the_response_cache_is_refused_not_silently_ignored(tmp_path: Path) -> None:
    """Spec B22: no response cache, so no cached answer can bypass history."""
    flow = tmp_path / "flow.kedi"
    flow.write_text("= done\n")
    with pytest.raises(kedi.KediUsageError, match=r"@kedi.query\(cache=True\): the response cache"):
        kedi.query(cache=True)
    with pytest.raises(kedi.KediUsageError, match=r"@kedi.bind\(cache=True\): the response cache"):
        kedi.bind(flow, cache=True)

    @kedi.bind(flow, cache=False)
    def flow_result() -> str: ...

    assert flow_result() == "done"


def test_sync_entry_points_share_one_event_loop_per_thread_and_close_it_with_the_thread() -> None:
    """Decision (kedi/runtime/loops.py): clients bound to the loop of one call work in the next."""
    import asyncio
    import gc
    import threading

    seen: list[asyncio.AbstractEventLoop] = []

    def note_loop() -> int:
        seen.append(asyncio.get_running_loop())
        return len(seen)

    program = kedi.compile("= `note_loop()`", known_globals=("note_loop",))

    @kedi.query(env={"note_loop": note_loop})
    def noted() -> int:
        """kedi
        = `note_loop()`
        """
        raise NotImplementedError

    def in_thread() -> None:
        program.run_sync(env={"note_loop": note_loop})
        noted()
        program.run_sync(env={"note_loop": note_loop})

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join(timeout=30)
    assert len(seen) == 3 and seen[0] is seen[1] is seen[2]
    assert not seen[0].is_running()
    gc.collect()  # the thread's storage is gone: its loop closed, no ResourceWarning
    assert seen[0].is_closed()


def _line_of(text: str) -> int:
    """The line of this test file holding `text` (once)."""
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if line.strip() == text)


def test_errors_in_a_query_body_point_at_its_lines_in_the_python_file() -> None:
    """They pointed at `<query ratio>`, line 1: the body's own numbering, in no file."""

    @kedi.query
    def ratio(a: int, b: int) -> int:
        """kedi
        [r: int] = `a // b`
        = `r`
        """
        raise NotImplementedError

    with pytest.raises(kedi.KediExecutionError) as caught:
        ratio(1, 0)
    assert f'File "{__file__}", line {_line_of("[r: int] = `a // b`")}, in assignment' in str(
        caught.value
    )
    with pytest.raises(kedi.KediCheckError) as refused:

        @kedi.query
        def label(text: str) -> str:
            """
            kedi
            >> Label <text>: [label: Labell].
            = `label`
            """
            raise NotImplementedError

    assert str(refused.value).startswith(
        f"{__file__}:{_line_of('>> Label <text>: [label: Labell].')}:"
    )


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"args": ["--name", "Ada"]}, "args must be a mapping of names (str) to values"),
        ({"args": {1: "Ada"}}, "args must be a mapping of names (str) to values"),
        ({"env": ["x"]}, "env must be a mapping"),
        ({"settings": "temperature=0"}, "settings must be a mapping"),
        ({"conversation": "chat-1"}, "conversation must be a kedi.Conversation"),
        ({"transcript": 3}, "transcript must be a file path, an open text file or a callable"),
    ],
)
def test_run_options_of_the_wrong_kind_are_refused_by_name(
    options: dict[str, object], refusal: str
) -> None:
    """They raised Python's own errors from deep inside, or nothing (`transcript=3` wrote to fd 3)."""
    program = kedi.compile("> history: enabled\n[r] << Hi\n= <r>", path="hi.kedi")
    with pytest.raises(KediUsageError) as caught:
        program.run_sync(**options)
    assert str(caught.value).startswith(refusal)
