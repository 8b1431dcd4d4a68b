"""What a production user meets running kedi against a real llama.cpp server.

Each test is one defect found by driving `kedi run` against the server the way
a user does (the command line, a session, `--stream`), kept so it stays fixed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[2]


def kedi_run(
    tmp_path: Path, url: str, source: str, *options: str, adapter: str = "openai"
) -> subprocess.CompletedProcess[str]:
    """`kedi run` in a fresh process (as a user runs it) through `adapter` to the server at `url`.

    No key is set: a local server needs none.
    """
    flow = tmp_path / "flow.kedi"
    flow.write_text(source)
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("OPENAI_API_KEY", "KEDI_API_KEY_ENV", "OPENAI_BASE_URL", "KEDI_BASE_URL")
    }
    env.update(PYTHONPATH=str(ROOT), KEDI_HISTORY=str(tmp_path / "history.db"))
    model = "local" if adapter == "openai" else "openai:local"
    command = [sys.executable, "-m", "kedi", "run", str(flow), "--adapter", adapter]
    return subprocess.run(
        [*command, "--model", model, "--base-url", url, *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_a_capture_cut_off_at_max_tokens_names_the_setting(llama_url: str, tmp_path: Path) -> None:
    source = (
        "> settings:\n    temperature: 0\n    max_tokens: 6\n    output_retries: 0\n"
        "~City(name: str, country: str)\n>> Name a big city in France: [city: City].\n"
        "= `city.name`\n"
    )
    result = kedi_run(tmp_path, llama_url, source, "--structured-mode", "json_object")
    assert result.returncode == 1, result.stderr
    assert 'cut off at the max_tokens limit (finish_reason "length")' in result.stderr
    assert "raise the max_tokens setting (6)" in result.stderr


def test_a_streamed_run_shows_one_line_per_call_and_nothing_else(
    llama_url: str, tmp_path: Path
) -> None:
    source = (
        "> settings:\n    temperature: 0\n    max_tokens: 8\n"
        "[a] << Say hi.\n[b] << Say bye.\n= <b>\n"
    )
    result = kedi_run(tmp_path, llama_url, source, "--stream", "--no-store")
    assert result.returncode == 0, result.stderr
    assert "Task was destroyed" not in result.stderr
    # The first call's reply, a line break, the second's (the result).
    first, _, second = result.stderr.partition("\n")
    assert first and second == result.stdout


@pytest.mark.parametrize("adapter", ["pydantic", "langchain"])
def test_base_url_on_the_command_line_reaches_the_server_with_no_key(
    adapter: str, llama_url: str, tmp_path: Path
) -> None:
    source = "> settings:\n    temperature: 0\n    max_tokens: 8\n[a] << Say hi.\n= <a>\n"
    result = kedi_run(tmp_path, llama_url, source, "--no-store", adapter=adapter)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_a_call_over_the_context_window_with_history_names_the_bounds(
    llama_url: str, tmp_path: Path
) -> None:
    long = "the cat sat on the mat and " * 400  # about 2,800 tokens, over n_ctx 2048
    source = (
        "> history: enabled\n> settings:\n    temperature: 0\n    max_tokens: 4\n"
        f"[a] << Say hi.\n[b] << Summarise: {long}\n= <b>\n"
    )
    result = kedi_run(tmp_path, llama_url, source, "--no-store")
    assert result.returncode == 1
    assert "ContextLengthError" in result.stderr and "maximum context length" in result.stderr
    assert "messages of history: bound them with `> history:`" in result.stderr


def test_a_batch_against_a_wrong_endpoint_stops_at_the_first_row(
    llama_url: str, tmp_path: Path
) -> None:
    program = tmp_path / "label.kedi"
    program.write_text("> settings:\n    max_tokens: 4\n[x] << Label `args.text`\n= <x>\n")
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text("".join(f'{{"text": "row {n}"}}\n' for n in range(5)))
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KEDI_HISTORY": str(tmp_path / "h.db")}
    command = [sys.executable, "-m", "kedi", "batch", str(program), str(inputs), "--out", str(out)]
    without_v1 = llama_url.removesuffix("/v1")  # llama.cpp answers 404 there
    options = ["--adapter", "openai", "--model", "local", "--base-url", without_v1]
    result = subprocess.run(
        [*command, *options, "--parallel", "1", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1
    assert "stopped: row 0 failed with ModelNotFoundError" in result.stderr
    assert len(out.read_text().splitlines()) == 1
