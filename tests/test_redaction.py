"""No secret reaches any output kedi writes (kedi/redaction.py).

The end-to-end tests plant secrets where users put them (the API key with a
CRLF from a `.env` file, a bearer token in `extra_headers`, `apiKey` and
`x-api-key` fields in `extra_body`, credentials in the base URL), have a real HTTP server
echo them back raw and URL-encoded, and grep every output: the transcript,
the saved conversation, exception `str`/`repr`, the adapter's `repr`, log
records at DEBUG and the CLI's stderr. `test_the_grep_sees_leaks_when_redaction_is_off`
runs the same scenario with redaction disabled and checks that every output
then leaks, so the grep can never pass vacuously.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner

import kedi
from kedi import redaction
from kedi.adapters.openai import OpenAIAdapter
from kedi.cli import main
from kedi.redaction import MASK, is_secret_key, redact, redact_text, secret_values
from tests.adapters.openai_server import MODEL, OpenAIServer, Reply, completion, error_body

API_KEY = "sk-planted-api-0001"
HEADER_TOKEN = "tok-planted-hdr-0002"
SETTING_KEY = "ak-planted-set-0003"
X_KEY = "xk-planted-set-0004"
URL_PASSWORD = "pw-planted-url-0005"
SECRETS = (API_KEY, HEADER_TOKEN, SETTING_KEY, X_KEY, URL_PASSWORD)

SETTINGS = {
    "extra_headers": {"Authorization": f"Bearer {HEADER_TOKEN}"},
    # Sent in the request body: an adapter refuses settings it does not take.
    "extra_body": {"apiKey": SETTING_KEY, "x-api-key": X_KEY},
}
ECHO = (
    f"bad credentials: key {API_KEY}, encoded {quote(API_KEY + '/')}, "
    f"header Bearer {HEADER_TOKEN}, from http://user:{URL_PASSWORD}@example.test"
)
PROGRAM = "> history: enabled\n[first] << hello\n[second] << again\n= `first`\n"


def leaks(text: str) -> list[str]:
    """The planted secrets found in `text`, in any spelling a server or Python may use."""
    return [
        s for s in SECRETS if s in text or quote(s, safe="") in text or s.encode().hex() in text
    ]


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def secret_url(server: OpenAIServer) -> str:
    return server.base_url.replace("http://", f"http://user:{URL_PASSWORD}@")


def every_output(
    server: OpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> dict[str, str]:
    """Run the planted scenario; return each output kedi wrote, as text."""
    caplog.set_level(logging.DEBUG)
    server.add(
        Reply(500, error_body(ECHO), headers={"retry-after": "0"}),
        Reply(body=completion(f"echo {API_KEY}")),
        Reply(401, error_body(ECHO)),
    )
    adapter = OpenAIAdapter(MODEL, base_url=secret_url(server), api_key=API_KEY + "\r\n")
    conversation = kedi.Conversation()
    transcript = tmp_path / "calls.jsonl"
    program = kedi.compile(PROGRAM, path="flow.kedi")
    with pytest.raises(kedi.KediError) as raised:
        program.run_sync(
            adapter=adapter, settings=SETTINGS, conversation=conversation, transcript=transcript
        )
    error = raised.value
    cause = getattr(error, "original", None) or error.__cause__
    return {
        "transcript": transcript.read_text(encoding="utf-8"),
        "store": conversation.dumps(),
        "exception": f"{error}\n{error!r}\n{cause}\n{cause!r}",
        "adapter repr": repr(adapter),
        "logs": caplog.text,
        "stderr": cli_stderr(server),
    }


def cli_stderr(server: OpenAIServer) -> str:
    server.add(
        Reply(500, error_body(ECHO), headers={"retry-after": "0"}), Reply(401, error_body(ECHO))
    )
    env = {"OPENAI_API_KEY": API_KEY + "\r\n", "OPENAI_BASE_URL": secret_url(server)}
    result = CliRunner().invoke(
        main, ["run", "-vv", "-c", PROGRAM, "--adapter", "openai", "--model", MODEL], env=env
    )
    assert result.exit_code == 1, result.output
    return result.stderr


def test_no_output_holds_a_planted_secret(
    server: OpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outputs = every_output(server, tmp_path, caplog)
    assert {name: leaks(text) for name, text in outputs.items()} == dict.fromkeys(outputs, [])
    # The outputs are real: the scenario reached each of them.
    assert (
        "AuthenticationError" in outputs["exception"] and "AuthenticationError" in outputs["stderr"]
    )
    assert "retrying" in outputs["logs"] and "retrying" in outputs["stderr"]
    assert "surrounding whitespace" in outputs["stderr"]
    assert f"echo {MASK}" in outputs["store"] and f'"apiKey": "{MASK}"' in outputs["transcript"]
    assert "http://***@" in outputs["adapter repr"]


def test_the_grep_sees_leaks_when_redaction_is_off(
    server: OpenAIServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    never = re.compile(r"(?!)")
    monkeypatch.setattr(redaction, "_spellings", lambda secrets: ())
    monkeypatch.setattr(redaction, "_BEARER", never)
    monkeypatch.setattr(redaction, "_URL_CREDENTIALS", never)
    monkeypatch.setattr(redaction, "_TOKEN_SHAPED", never)
    monkeypatch.setattr(redaction, "is_secret_key", lambda key: False)
    outputs = every_output(server, tmp_path, caplog)
    assert [name for name, text in outputs.items() if not leaks(text)] == []


def test_a_key_with_surrounding_whitespace_is_stripped_with_a_warning(
    server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.add(Reply(body=completion("hi")))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key=f" {API_KEY}\r\n")
    assert kedi.compile("[x] << hi\n= `x`\n").run_sync(adapter=adapter) == "hi"
    assert server.received[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert "surrounding whitespace" in caplog.text and API_KEY not in caplog.text


# --------------------------------------------------------------------------- the rules


@pytest.mark.parametrize(
    "key",
    [
        "Authorization",
        "proxy-authorization",
        "api-key",
        "x-api-key",
        "apiKey",
        "openai_api_key",
        "access_token",
        "client_secret",
        "db_password",
        "Cookie",
        "credentials",
        "X-Custom-Auth",  # an `extra_headers` auth header reached the history store in clear
        "x_auth",
    ],
)
def test_secret_named_keys_are_masked_at_any_depth(key: str) -> None:
    value = {"outer": [{"inner": {key: "s3cr3t-value"}}], "temperature": 0.2}
    assert redact(value) == {"outer": [{"inner": {key: MASK}}], "temperature": 0.2}


@pytest.mark.parametrize("key", ["max_tokens", "tokens", "keyboard", "model", "monkey_business"])
def test_ordinary_keys_are_kept(key: str) -> None:
    assert not is_secret_key(key)
    assert redact({key: "visible"}) == {key: "visible"}


def test_a_container_under_a_secret_key_is_walked_not_blanked() -> None:
    schema = {"properties": {"token": {"type": "string", "description": "Bearer abc.def"}}}
    assert redact(schema) == {
        "properties": {"token": {"type": "string", "description": f"Bearer {MASK}"}}
    }


def test_text_rules_mask_bearer_and_url_credentials() -> None:
    text = "GET https://me:hunter2@api.example/v1 with Authorization: Bearer abc.def-123"
    assert (
        redact_text(text) == f"GET https://{MASK}@api.example/v1 with Authorization: Bearer {MASK}"
    )


def test_a_known_secret_is_masked_in_every_spelling() -> None:
    secret = "sk-0ne/two+three\r"
    spellings = [
        secret,
        secret.strip(),
        repr(secret.encode())[2:-1],  # Illegal header value b'Bearer sk-...\r'
        quote(secret, safe=""),
        quote(secret),
    ]
    for spelling in spellings:
        assert redact_text(f"<{spelling}>", secrets=[secret]) == f"<{MASK}>", spelling


def test_header_secrets_are_found_for_error_scrubbing() -> None:
    headers = {"Authorization": "Bearer tok-1", "X-Api-Key": "xk-2", "Accept": "application/json"}
    assert sorted(secret_values(headers)) == ["Bearer tok-1", "tok-1", "xk-2"]


def test_kedi_errors_are_redacted_in_str_and_repr() -> None:
    redaction.remember_secret("sk-remembered-9999")
    error = kedi.KediConfigError("bad key sk-remembered-9999 at http://u:p@host")
    assert "sk-remembered-9999" not in str(error) + repr(error)
    assert ":p@" not in str(error) + repr(error)


def test_library_code_never_prints(capsys: pytest.CaptureFixture[str], caplog: Any) -> None:
    """The offline notice is a log record (the CLI shows it), not a print to stderr."""
    caplog.set_level(logging.WARNING, logger="kedi")
    kedi.compile("[x] << hi\n= `x`\n").run_sync(quiet=False)
    assert capsys.readouterr().err == ""
    assert "no model configured" in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: BEARER abc.def",
        "basic dXNlcjpwYXNz",
        "baſic dXNlcjpwYXNz",  # ſ matches s case-insensitively: non-ASCII text always runs the rules
        "Bearer\ttab-separated",
        "see ghp_0123456789abcdefghijABCD",
        "xoxb-0123456789-abc",
        "key sk-abcdefghijklmnop",
        "postgresql://user:pw@db.example/x",
        "known sk-kn0wn-secret-42 in text",
        "known %2Fkn0wn-secret%2F in text",
    ],
)
def test_the_quick_check_skips_no_text_a_rule_would_change(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Text is scanned by the rules only when a cheap check says one may match; it never misses one."""
    secrets = ["sk-kn0wn-secret-42", "/kn0wn-secret/"]
    checked = redact_text(text, secrets=secrets)
    monkeypatch.setattr(redaction, "_may_need_masking", lambda text, spellings: True)
    assert checked == redact_text(text, secrets=secrets) != text


def test_a_secret_put_in_the_environment_later_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert redact_text("value env-secret-value-77") == "value env-secret-value-77"
    monkeypatch.setenv("SERVICE_TOKEN", "env-secret-value-77")
    assert redact_text("value env-secret-value-77") == f"value {MASK}"
    monkeypatch.setenv("SERVICE_TOKEN", "other-secret-value-78")
    assert redact_text("value env-secret-value-77 other-secret-value-78") == (
        f"value env-secret-value-77 {MASK}"
    )


# --------------------------------------------------------------------------- stored JSON

KNOWN = 'kn0wn\\se"cret'
"""A known secret with a backslash and a quote: its JSON spelling differs from its raw one."""


@pytest.mark.parametrize(
    "value",
    [
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"api_key": 5, "nested": [{"x-Api-Key": "v"}]},
        {"my_Tok-en_": "v", "Set-Cookie": "c", "proxy-authorization": "p"},
        {"credentials": {"user": "u", "password": "p"}},
        {"content": "Bearer abc.def"},
        {"content": "line\nBEARER\tabc.def"},
        {"content": "after a newline\nsk-abcdefghijklmnop"},
        {"content": "ghp_0123456789abcdefghijABCD and xoxb-0123456789-abc"},
        {"url": "postgresql://user:pw@db.example/x"},
        {"content": "baſic dXNlcjpwYXNz"},
        {"content": f"raw {KNOWN}, Python {KNOWN!r}, JSON {json.dumps(KNOWN)}"},
        {"content": f"Python {KNOWN!r}"},
        {"token": b"raw bytes", "when": MappingProxyType({"secret": "s"})},
        ("a tuple", {"key": None, "flag": True}),
        {"label": "<row-0>", "usage": {"input_tokens": 10, "output_tokens": 5}},
    ],
)
def test_stored_json_masks_exactly_what_redact_masks(value: Any) -> None:
    """`redacted_json` (every stored turn's columns) writes what encoding `redact`'s copy writes."""
    expected = json.dumps(
        redact(value, secrets=[KNOWN]), ensure_ascii=False, separators=(",", ":"), default=str
    )
    assert redaction.redacted_json([value], secrets=[KNOWN]) == [expected]
    # checked together with plain values (a turn's columns), it is masked all the same
    plain = {"label": "<row-0>"}
    assert redaction.redacted_json([plain, value], secrets=[KNOWN]) == [
        '{"label":"<row-0>"}',
        expected,
    ]


def test_stored_json_of_a_value_without_secrets_is_not_walked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The point of `redacted_json`: plain values are encoded once, never walked value by value."""
    value = {
        "messages": [{"role": "user", "content": "Label this ticket: <row-0> [label]."}],
        "output_schema": {"properties": {"label": {"type": "string"}}, "required": ["label"]},
        "usage": {"input_tokens": 10, "max_tokens": 5},
    }
    monkeypatch.setattr(redaction, "_redact", None)  # calling it would fail
    assert redaction.redacted_json([value, None]) == [
        json.dumps(value, ensure_ascii=False, separators=(",", ":")),
        "null",
    ]
