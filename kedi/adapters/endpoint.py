"""Where OpenAI-compatible adapters send requests, with which key, in which structured mode.

One place resolves these for the `openai`, `pydantic` and `langchain`
adapters, in the order a user expects: command line > environment > program
(`> settings:`) > defaults (docs/adapters.md, "Configuration", has the table).

- Base URL: `--base-url`, then `KEDI_BASE_URL`, then `OPENAI_BASE_URL`, then
  the legacy `OPENAI_API_BASE` (honoured with a `FutureWarning`, since older
  tools and many `.env` files still set it), else the adapter's default.
- API key: the variable `--api-key-env NAME` (or `KEDI_API_KEY_ENV`) names,
  else `OPENAI_API_KEY`. Trailing whitespace is dropped: keys read from CRLF
  `.env` files end in `\\r`, which no server accepts.
- Structured mode: `--structured-mode`, then `KEDI_STRUCTURED_MODE`; a
  program's `structured_mode` setting comes next, read per call by the adapter.

The command line's values live in a context variable that `kedi run` sets
around the run (`command_line_options`), so they never leak into other runs
of the same process.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from kedi.errors import KediConfigError
from kedi.redaction import logger, remember_secret

__all__ = [
    "STRUCTURED_MODES",
    "api_key",
    "command_line_options",
    "configured_base_url",
    "forced_structured_mode",
]

STRUCTURED_MODES = ("auto", "json_schema", "json_object", "tool", "prompted")
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
LEGACY_BASE_URL_ENV = "OPENAI_API_BASE"


@dataclass(frozen=True, slots=True)
class _CommandLine:
    base_url: str | None = None
    api_key_env: str | None = None
    structured_mode: str | None = None


_NOTHING = _CommandLine()
_command_line: ContextVar[_CommandLine | None] = ContextVar("kedi_command_line", default=None)


def _given() -> _CommandLine:
    return _command_line.get() or _NOTHING


@contextmanager
def command_line_options(
    *,
    base_url: str | None = None,
    api_key_env: str | None = None,
    structured_mode: str | None = None,
) -> Iterator[None]:
    """Make the command line's endpoint options win over the environment inside the block."""
    if structured_mode is not None:
        check_structured_mode(structured_mode, "--structured-mode")
    token = _command_line.set(_CommandLine(base_url, api_key_env, structured_mode))
    try:
        yield
    finally:
        _command_line.reset(token)


def configured_base_url() -> str | None:
    """The base URL the command line or the environment sets, or None for the adapter's default."""
    chosen = _given().base_url
    if chosen:
        return chosen
    for name in ("KEDI_BASE_URL", "OPENAI_BASE_URL"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    legacy = os.environ.get(LEGACY_BASE_URL_ENV, "").strip()
    if legacy:
        warnings.warn(
            f"{LEGACY_BASE_URL_ENV} is deprecated; kedi uses it for now, "
            "but set OPENAI_BASE_URL (or KEDI_BASE_URL) instead",
            FutureWarning,
            stacklevel=2,
        )
        return legacy
    return None


def api_key() -> str:
    """The API key from the variable `--api-key-env` / `KEDI_API_KEY_ENV` names, else `OPENAI_API_KEY`.

    Raises:
        KediConfigError: a variable was named explicitly and is not set.
    """
    named = _given().api_key_env or os.environ.get("KEDI_API_KEY_ENV", "").strip()
    if named:
        if named not in os.environ:
            raise KediConfigError(
                f"--api-key-env names the environment variable {named}, which is not set"
            )
        return clean_key(os.environ[named])
    return clean_key(os.environ.get(DEFAULT_KEY_ENV, ""))


def clean_key(key: str) -> str:
    """`key` without surrounding whitespace (a CRLF `.env` file leaves a `\\r`), with a
    warning when there was any; remembered so that redaction masks it in every spelling."""
    if key != key.strip():
        logger.warning("the API key has surrounding whitespace; kedi strips it")
        remember_secret(key)
        key = key.strip()
    if key:
        remember_secret(key)
    return key


def forced_structured_mode() -> str | None:
    """The structured mode the command line or `KEDI_STRUCTURED_MODE` imposes on every call."""
    chosen = _given().structured_mode
    if chosen:
        return chosen
    value = os.environ.get("KEDI_STRUCTURED_MODE", "").strip()
    return check_structured_mode(value, "KEDI_STRUCTURED_MODE") if value else None


def check_structured_mode(value: object, source: str) -> str:
    """`value` if it names a structured mode, else a `KediConfigError` naming `source`."""
    if value not in STRUCTURED_MODES:
        raise KediConfigError(
            f"unknown structured_mode {value!r} ({source}); use one of {', '.join(STRUCTURED_MODES)}"
        )
    return str(value)
