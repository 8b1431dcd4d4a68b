"""`kedi run --stream` as a user sees it, in a process of its own, against a local server.

The in-process CLI tests cannot see what a fresh process prints at exit
(asyncio's "Task was destroyed but it is pending!" for a stream reader left
open), nor how the streamed text of several calls reads on stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.adapters.openai_server import (
    MODEL,
    OpenAIServer,
    Reply,
    chunk,
    completion,
    error_body,
    sse,
    tool_call,
)

ROOT = Path(__file__).resolve().parents[2]


def streamed(*pieces: str) -> Reply:
    chunks = [chunk({"content": piece}) for piece in pieces]
    return Reply(events=sse(*chunks, chunk(finish_reason="stop"), chunk(usage=(5, 3))))


def kedi_run(
    tmp_path: Path, server: OpenAIServer, source: str, *options: str
) -> subprocess.CompletedProcess[str]:
    flow = tmp_path / "flow.kedi"
    flow.write_text(source)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPENAI_BASE_URL": server.base_url,
        "KEDI_HISTORY": "off",
    }
    return subprocess.run(
        [sys.executable, "-m", "kedi", "run", str(flow), "--adapter", "openai", "--model", MODEL]
        + list(options),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_streamed_run_ends_without_asyncio_complaints(
    server: OpenAIServer, tmp_path: Path
) -> None:
    # The stream ends with `data: [DONE]`, as llama.cpp's and OpenAI's do.
    server.add(streamed("Hel", "lo."))
    result = kedi_run(tmp_path, server, "[reply] << Say hello.\n= <reply>\n", "--stream")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello.\n"
    assert result.stderr == "Hello.\n"  # the streamed text, and nothing else


def test_each_calls_streamed_text_starts_on_a_line_of_its_own(
    server: OpenAIServer, tmp_path: Path
) -> None:
    server.add(streamed("Hi ", "there."), streamed("Bye."))
    source = "[a] << Say hello.\n[b] << Say goodbye.\n= <b>\n"
    result = kedi_run(tmp_path, server, source, "--stream")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "Hi there.\nBye.\n"  # was "Hi there.Bye.": two replies read as one


def test_an_error_after_streamed_text_starts_on_a_line_of_its_own(
    server: OpenAIServer, tmp_path: Path
) -> None:
    refused = Reply(status=400, body=error_body("the prompt is not allowed"))
    server.add(streamed("Hel", "lo."), refused)
    source = "[a] << Say hello.\n[b] << Say goodbye.\n= <b>\n"
    result = kedi_run(tmp_path, server, source, "--stream")
    assert result.returncode == 1
    assert result.stderr.startswith("Hello.\nKedi stack trace:\n"), result.stderr
    assert result.stderr.endswith("the prompt is not allowed\n"), result.stderr  # no blank line


def test_a_recorded_pydantic_call_failing_after_a_streamed_turn_reports_the_providers_error(
    server: OpenAIServer, tmp_path: Path
) -> None:
    refused = Reply(status=400, body=error_body("the prompt is not allowed"))
    server.add(streamed("Hi."), *[refused] * 4)
    flow = tmp_path / "flow.kedi"
    flow.write_text("> history: enabled\n[a] << Say hello.\n[b] << Again.\n= <b>\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KEDI_BASE_URL": server.base_url,
        "KEDI_HISTORY": str(tmp_path / "history.db"),
    }
    command = [sys.executable, "-m", "kedi", "run", str(flow), "--stream"]
    result = subprocess.run(
        [*command, "--adapter", "pydantic", "--model", f"openai:{MODEL}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    # Was "Kedi error: AttributeError 'ModelRequest' object has no attribute 'to_json_dict'".
    assert "the prompt is not allowed" in result.stderr, result.stderr
    # The partial was stored in the lane's own (Pydantic AI) form: the resume reads it back.
    session = re.search(r"--resume (\S+)", result.stderr)
    assert session is not None, result.stderr
    server.replies.clear()  # the refusals a retry did not take
    server.add(streamed("Hello again."))
    resumed = subprocess.run(
        [*command, "--adapter", "pydantic", "--model", f"openai:{MODEL}", "--resume", session[1]],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (resumed.returncode, resumed.stdout) == (0, "Hello again.\n"), resumed.stderr
    sent = [message["content"] for message in server.bodies[-1]["messages"]]
    assert sent == ["Say hello.", "Hi.", "Again."]


TOOLED = """\
> history: enabled
@lookup(version: str) -> str:
  ###
  Release notes of one version.

  Args:
    version: The version.
  ###
  = Notes for <version>.

> use: lookup
[a] << Find 1.4.0.
= <a>
"""


def test_a_pydantic_partial_after_a_tool_exchange_is_stored_and_resumed(
    server: OpenAIServer, tmp_path: Path
) -> None:
    # The partial holds Pydantic AI's own messages: stored as its lane stores them.
    # It was "Kedi error: AttributeError 'ModelRequest' object has no attribute 'to_json_dict'".
    called = completion(tool_calls=[tool_call("c1", "lookup", '{"version": "1.4.0"}')])
    server.add(Reply(body=called), Reply(status=400, body=error_body("the prompt is not allowed")))
    flow = tmp_path / "flow.kedi"
    flow.write_text(TOOLED)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KEDI_BASE_URL": server.base_url,
        "KEDI_HISTORY": str(tmp_path / "history.db"),
    }
    command = [sys.executable, "-m", "kedi", "run", str(flow), "--adapter", "pydantic"]
    command += ["--model", f"openai:{MODEL}"]
    failed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert failed.returncode == 1
    assert "the prompt is not allowed" in failed.stderr, failed.stderr
    session = re.search(r"--resume (\S+)", failed.stderr)
    assert session is not None and "its partial is stored" in failed.stderr, failed.stderr
    server.add(Reply(body=completion("1.4.0 is faster.")))
    resumed = subprocess.run(
        [*command, "--resume", session[1]], capture_output=True, text=True, env=env, timeout=60
    )
    assert (resumed.returncode, resumed.stdout) == (0, "1.4.0 is faster.\n"), resumed.stderr
    sent = server.bodies[-1]["messages"]
    # The partial's tool exchange, then the call's prompt, as on the openai adapter.
    assert [message["role"] for message in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2]["content"] == "Notes for 1.4.0."
