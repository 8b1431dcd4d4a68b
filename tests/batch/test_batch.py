"""`kedi batch` on the local engine: formats, order, resume, job checks, export/status/rm."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from kedi.cli import main
from tests.batch.helpers import label, results, write_job


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "history.db"
    monkeypatch.setenv("KEDI_HISTORY", str(path))
    monkeypatch.delenv("KEDI_MODEL", raising=False)
    monkeypatch.delenv("KEDI_ADAPTER", raising=False)
    return path


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(main, ["batch", *args], input=input, catch_exceptions=False)


def batch(
    paths: dict[str, Path], *options: str, script: Path | None = None, input: str | None = None
):
    inputs = "-" if input is not None else str(paths["inputs"])
    return invoke(
        str(paths["program"]),
        inputs,
        "--out",
        str(paths["out"]),
        "--model",
        f"script:{script or paths['script']}",
        "--quiet",
        *options,
        input=input,
    )


def test_results_stay_in_input_order_under_parallel_16(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 48, max_delay_ms=60, seed=3)
    result = batch(paths, "--parallel", "16", "--id-field", "id")
    assert result.exit_code == 0, result.output
    lines = results(paths["out"])
    assert [line["key"] for line in lines] == [f"t{n}" for n in range(48)]
    assert [line["value"] for line in lines] == [label(n) for n in range(48)]
    assert all(
        line["error"] is None and line["usage"]["requests"] == 1 and line["session"]
        for line in lines
    )
    assert "48 rows run, 0 already finished, 0 failed" in result.stderr


def test_rows_run_concurrently_up_to_parallel(tmp_path: Path, store: Path) -> None:
    import time

    paths = write_job(tmp_path, 16)
    script = json.loads(paths["script"].read_text())
    for entry in script:
        entry["delay_ms"] = 300
    paths["script"].write_text(json.dumps(script))
    started = time.monotonic()
    assert batch(paths, "--parallel", "16").exit_code == 0
    assert time.monotonic() - started < 16 * 0.3 / 2  # sequential would take 4.8 s


def test_csv_rows_and_row_numbers_as_keys(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 3)
    paths["inputs"] = tmp_path / "rows.csv"
    paths["inputs"].write_text('text,other\n<row-0>,x\n"<row-1>",y\n<row-2>,"z, with comma"\n')
    result = batch(paths)
    assert result.exit_code == 0, result.output
    assert [(line["key"], line["value"]) for line in results(paths["out"])] == [
        (str(n), label(n)) for n in range(3)
    ]


def test_stdin_rows(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 2)
    result = batch(paths, input=paths["inputs"].read_text())
    assert result.exit_code == 0, result.output
    assert [line["value"] for line in results(paths["out"])] == [label(0), label(1)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"id": 1, "text": "a"}\n[1, 2]\n', "rows.jsonl:2: a row must be a JSON object"),
        ('{"id": 1, "text": "a"}\n{oops\n', "rows.jsonl:2: not a JSON line"),
        (
            '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n',
            "rows.jsonl:2: the key 'a' repeats",
        ),
        ('{"text": "x"}\n', "rows.jsonl:1: the row has no 'id' field"),
    ],
)
def test_bad_rows_are_clear_errors_before_anything_runs(
    tmp_path: Path, store: Path, text: str, message: str
) -> None:
    paths = write_job(tmp_path, 1)
    paths["inputs"].write_text(text)
    result = batch(paths, "--id-field", "id")
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not paths["out"].exists()


def test_fields_the_program_reads_that_no_row_has_are_refused_up_front(
    tmp_path: Path, store: Path
) -> None:
    paths = write_job(tmp_path, 1)  # the program reads args.text on its line 1
    paths["inputs"] = tmp_path / "rows.csv"
    paths["inputs"].write_text("a;b\n1;x\n2;y\n")  # ;-separated: one field named 'a;b'
    result = batch(paths)
    assert result.exit_code == 1
    assert "no row has the field(s) the program reads: args.text (" in result.stderr
    assert "label.kedi:1)" in result.stderr
    assert "'a;b'" in result.stderr and "separated by commas" in result.stderr
    assert "NoneType" not in result.output and "Traceback" not in result.output
    assert not paths["out"].exists() and not store.exists()


def test_a_field_some_rows_have_is_not_refused(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 2)
    paths["inputs"].write_text('{"text": "<row-0>"}\n{"other": 1}\n')
    result = batch(paths)
    rows = results(paths["out"])
    assert rows[0]["value"] == label(0) and rows[0]["error"] is None
    assert result.exit_code == 1  # the row without text fails on its own, saying why
    assert rows[1]["error"]["message"].endswith(
        f"(this row has no field for args.text ({paths['program']}:1))"
    )


def test_resume_skips_finished_rows_and_retry_errors_reruns_failed_ones(
    tmp_path: Path, store: Path
) -> None:
    paths = write_job(tmp_path, 6, errors={1, 4})
    first = batch(paths, "--job", "j")
    assert first.exit_code == 1  # some rows failed
    lines = results(paths["out"])
    assert [line["error"]["type"] if line["error"] else None for line in lines] == [
        None,
        "ProviderError",
        None,
        None,
        "ProviderError",
        None,
    ]
    assert "boom 4" in lines[4]["error"]["message"]
    # The same command again runs nothing: every row, failed ones too, is finished.
    again = batch(paths, "--job", "j")
    assert "0 rows run, 6 already finished" in again.stderr
    assert results(paths["out"]) == lines
    # --retry-errors runs exactly the failed rows, with a script that now answers them.
    fixed = write_job(tmp_path / "fixed", 6) if (tmp_path / "fixed").mkdir() is None else None
    assert fixed is not None
    retried = batch(paths, "--job", "j", "--retry-errors", script=fixed["script"])
    assert retried.exit_code == 0, retried.output
    assert "2 rows run, 4 already finished, 0 failed" in retried.stderr
    assert [line["value"] for line in results(paths["out"])] == [label(n) for n in range(6)]


def test_max_errors_stops_the_job(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 20, errors=set(range(20)))
    result = batch(paths, "--parallel", "1", "--max-errors", "3")
    assert result.exit_code == 1
    assert "stopped after 3 failed rows (--max-errors 3)" in result.stderr
    assert len(results(paths["out"])) == 3


def test_a_changed_program_or_input_is_refused_unless_force(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 2)
    assert batch(paths, "--job", "j").exit_code == 0
    paths["program"].write_text(paths["program"].read_text().replace("Label", "Tag"))
    refused = batch(paths, "--job", "j")
    assert refused.exit_code == 1
    assert (
        "job 'j' was started with a different program" in refused.stderr
        and "--force" in refused.stderr
    )
    with paths["inputs"].open("a") as rows:
        rows.write(json.dumps({"id": "t2", "text": "<row-2>"}) + "\n")
    refused = batch(paths, "--job", "j")
    assert "different program and inputs" in refused.stderr
    more = write_job(tmp_path / "more", 3) if (tmp_path / "more").mkdir() is None else None
    assert more is not None
    forced = batch(paths, "--job", "j", "--force", script=more["script"])
    assert forced.exit_code == 0, forced.output
    assert "1 rows run, 2 already finished" in forced.stderr


def test_the_default_job_follows_the_program_and_inputs(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 2)
    assert batch(paths).exit_code == 0
    assert "0 rows run, 2 already finished" in batch(paths).stderr
    paths["inputs"].write_text(paths["inputs"].read_text() + json.dumps({"text": "<row-0>"}) + "\n")
    fresh = write_job(tmp_path / "b", 2) if (tmp_path / "b").mkdir() is None else None
    assert fresh is not None
    assert "3 rows run, 0 already finished" in batch(paths, script=fresh["script"]).stderr


def test_status_export_and_rm(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 5, errors={2})
    batch(paths, "--job", "j")
    status = invoke("status", "j")
    assert status.exit_code == 0
    assert "5 rows finished (4 ok, 1 failed)" in status.stdout
    exported = invoke("export", "j")
    assert exported.stdout.splitlines() == paths["out"].read_text().splitlines()
    paths["out"].unlink()
    rebuilt = invoke("export", "j", "--out", str(paths["out"]))
    assert rebuilt.exit_code == 0 and len(results(paths["out"])) == 5
    assert "j\t4 ok\t1 failed" in invoke("ls").stdout
    assert invoke("rm", "j").exit_code == 0
    assert invoke("status", "j").exit_code == 1
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT count(*) FROM batch_rows").fetchone() == (0,)
        assert db.execute(
            "SELECT count(*) FROM sessions WHERE name LIKE 'batch/j/%'"
        ).fetchone() == (0,)
    assert invoke("rm", "j").exit_code == 1


def test_each_row_is_a_session_whose_turns_commit_with_its_outcome(
    tmp_path: Path, store: Path
) -> None:
    paths = write_job(tmp_path, 3)
    paths["program"].write_text("> history: enabled\n" + paths["program"].read_text())
    assert batch(paths, "--job", "h").exit_code == 0
    sessions = {line["key"]: line["session"] for line in results(paths["out"])}
    with sqlite3.connect(store) as db:
        stored = dict(db.execute("SELECT name, id FROM sessions"))
        turns = dict(db.execute("SELECT session_id, count(*) FROM turns GROUP BY session_id"))
    assert stored == {f"batch/h/{key}": session for key, session in sessions.items()}
    assert all(turns[session] == 1 for session in sessions.values())


def test_engine_ray_without_ray_says_which_extra(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    paths = write_job(tmp_path, 1)
    result = batch(paths, "--engine", "ray")
    assert result.exit_code == 1
    assert 'pip install "kedi[ray]"' in result.stderr


def test_the_shipped_example_runs(tmp_path: Path, store: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "batch"
    out = tmp_path / "triage.results.jsonl"
    result = invoke(
        str(example / "triage.kedi"),
        str(example / "tickets.jsonl"),
        "--out",
        str(out),
        "--id-field",
        "id",
        "--model",
        f"script:{example / 'triage.replies.json'}",
        "--quiet",
    )
    assert result.exit_code == 0, result.output
    lines = results(out)
    assert [line["key"] for line in lines] == [f"T-{n}" for n in range(1001, 1011)]
    assert lines[1]["value"] == {"category": "bug", "urgent": True}
    assert sum(line["value"]["urgent"] for line in lines) == 3


def test_the_programs_own_model_directive_is_honoured(tmp_path: Path, store: Path) -> None:
    paths = write_job(tmp_path, 3)
    paths["program"].write_text(
        f"> model: script:{paths['script']}\n" + paths["program"].read_text()
    )
    result = invoke(
        str(paths["program"]), str(paths["inputs"]), "--out", str(paths["out"]), "--quiet"
    )
    assert result.exit_code == 0, result.output
    assert [line["value"] for line in results(paths["out"])] == [label(n) for n in range(3)]
