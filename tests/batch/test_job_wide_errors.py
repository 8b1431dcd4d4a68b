"""A row failing with an error every row would meet stops the job.

A wrong API key (401), an unknown model (404) or a configuration error fails
every row the same way: the batch ran all of them anyway (10,000 rows, 10,000
failed requests against the provider, each recorded as failed, so even the
fixed re-run needed --retry-errors to redo them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kedi.cli import main
from kedi.history.store import open_store
from tests.adapters.openai_server import MODEL, OpenAIServer, Reply, completion, error_body

ROWS = 6


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("KEDI_HISTORY", str(tmp_path / "history.db"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrongwrongwrongwrong")
    for name in ("KEDI_MODEL", "KEDI_ADAPTER", "KEDI_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    program = tmp_path / "label.kedi"
    program.write_text("[x] << Label `args.text`\n= <x>\n")
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text("".join(json.dumps({"text": f"row {n}"}) + "\n" for n in range(ROWS)))
    return {"program": program, "inputs": inputs, "out": tmp_path / "out.jsonl"}


def run(job: dict[str, Path], server: OpenAIServer, *options: str):
    command = [str(job["program"]), str(job["inputs"]), "--out", str(job["out"]), "--quiet"]
    command += ["--adapter", "openai", "--model", MODEL, "--base-url", server.base_url]
    return CliRunner().invoke(main, ["batch", *command, "--parallel", "1", *options])


def test_a_rejected_key_stops_the_job_at_the_first_row(
    job: dict[str, Path], server: OpenAIServer
) -> None:
    refused = Reply(401, error_body("Incorrect API key provided", code="invalid_api_key"))
    server.add(*[refused] * ROWS)
    result = run(job, server)
    assert result.exit_code == 1
    assert len(server.received) == 1  # was one refused request per row
    assert (
        "stopped: row 0 failed with AuthenticationError, which every row would meet; "
        "fix it and run the same command again with --retry-errors"
    ) in result.stderr
    lines = [json.loads(line) for line in job["out"].read_text().splitlines()]
    assert [line["key"] for line in lines] == ["0"]


def test_a_row_failing_on_its_own_does_not_stop_the_job(
    job: dict[str, Path], server: OpenAIServer
) -> None:
    server.add(Reply(400, error_body("the prompt is not allowed")))
    server.add(*[Reply(body=completion("ok")) for _ in range(ROWS - 1)])
    result = run(job, server)
    assert result.exit_code == 1
    assert "stopped" not in result.stderr
    assert f"{ROWS} rows run, 0 already finished, 1 failed" in result.stderr
    # Every row's session is labelled adapter:model, the failed one by its failed call
    # (it was the command line's bare model name).
    with open_store(str(job["inputs"].parent / "history.db")) as store:
        assert [session.model for session in store.sessions()] == [f"openai:{MODEL}"] * ROWS
