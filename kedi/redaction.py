"""Redaction: the one place that decides what a secret looks like and masks it.

Everything kedi writes for people or files (transcripts, stores, error
messages, reprs, logs) passes through `redact` (JSON-like values) or
`redact_text` (strings); the history store's JSON columns through
`redacted_json`, which masks the same. They mask:

- at any depth, the scalar value under a key that names a secret:
  `authorization`, `proxy-authorization`, `api-key`, `x-api-key`, `cookie`,
  and any key ending in `key`, `token`, `secret`, `password`, `credential(s)` or `auth`
  (case and `-`/`_` ignored: `apiKey`, `x-api-key`, `openai_api_key`, `X-Custom-Auth`). A container under
  such a key is walked, not blanked, so a JSON schema with a `token` property
  stays readable;
- bearer and basic credentials in text (`Bearer sk-...`), and token-shaped
  text (`sk-...`, `ghp_...`, `xoxb-...`) wherever it stands;
- credentials in URLs (`http://user:pass@host` → `http://***@host`);
- every known secret (an adapter's configured key, registered with
  `remember_secret`, the value of every environment variable whose name ends
  in `KEY`, `TOKEN`, `SECRET` or `PASSWORD`, and any passed as `secrets=`)
  in every spelling that
  reaches text: raw, stripped, escaped as a Python `str` or `bytes` literal
  or JSON string (a key ending in `\\r` shows as `...\\\\r` in `Illegal header
  value b'...'`), and URL-encoded.

`logger` is kedi's one logger (`kedi`): its records are redacted too, so
library code logs through it (tool failures, retries) and never prints.
The records of `httpx` and `httpcore`, which log request URLs, are redacted
as well.
This module imports nothing from kedi, so every layer may use it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"

_SECRET_KEY_WORDS = ("key", "token", "secret", "password", "credential", "credentials", "auth")
"""A key ending in one of these names a secret (`-`/`_` and case ignored)."""
_SECRET_KEY = re.compile(
    r"^(?:authorization|proxyauthorization|apikey|xapikey|cookie|setcookie)$"
    rf"|(?:{'|'.join(_SECRET_KEY_WORDS)})$"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=:-]+")
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"<>]+@")
_TOKEN_SHAPED = re.compile(
    r"\b(sk-[A-Za-z0-9_\-]{12,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abp]-[A-Za-z0-9-]{10,})"
)
_GITHUB_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
"""The prefixes `_TOKEN_SHAPED` finds GitHub tokens by."""
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)$")
_MIN_ENV_SECRET = 8
"""Environment values shorter than this are not treated as secrets (flags, small numbers)."""
_MIN_SECRET = 4
"""Known secrets shorter than this are not masked in text (they would blank ordinary words)."""

_known: set[str] = set()
_known_lock = threading.Lock()


@functools.lru_cache(maxsize=1024)
def is_secret_key(key: object) -> bool:
    """Whether a mapping key names a secret (`Authorization`, `apiKey`, `db_password`, ...).

    Cached: the values kedi writes repeat a few dozen keys (`role`, `content`, ...).
    """
    if not isinstance(key, str):
        return False
    return _SECRET_KEY.search(key.lower().replace("-", "").replace("_", "")) is not None


def remember_secret(secret: str) -> None:
    """Mask `secret` in every later `redact`/`redact_text` of this process (a configured key)."""
    if len(secret.strip()) >= _MIN_SECRET:
        with _known_lock:
            _known.add(secret)


def secret_values(value: Any) -> list[str]:
    """The strings found under secret-named keys of a JSON-like value (e.g. auth headers)."""
    found: list[str] = []
    _collect(value, found, under_secret=False)
    return found


def _collect(value: Any, found: list[str], *, under_secret: bool) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _collect(item, found, under_secret=is_secret_key(key))
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found, under_secret=under_secret)
    elif under_secret and isinstance(value, str):
        found.append(value)
        # `Bearer tok` in a header: the token alone may be echoed too.
        found.extend(part for part in value.split()[1:])


@functools.lru_cache(maxsize=64)
def _spellings(secrets: frozenset[str]) -> tuple[str, ...]:
    """Every way the secrets may appear in text, longest first."""
    spellings: set[str] = set()
    for secret in secrets:
        for form in {secret, secret.strip()}:
            if len(form.strip()) < _MIN_SECRET:
                continue
            spellings.update(
                {
                    form,
                    repr(form)[1:-1],
                    repr(form.encode("utf-8", "backslashreplace"))[2:-1],
                    json.dumps(form)[1:-1],
                    quote(form, safe=""),
                    quote(form),
                    quote_plus(form),
                }
            )
    return tuple(sorted(spellings, key=len, reverse=True))


class _EnvironmentSecrets:
    """The values of the environment's secret-named variables, read again only when it changed.

    Reading `os.environ` decodes every name and value (tens of microseconds,
    paid for every stored turn); comparing the raw mapping behind it with a
    copy is a C-level dict comparison. Where that mapping is not there (not
    CPython), the environment is read each time.
    """

    def __init__(self) -> None:
        self._raw: dict[Any, Any] | None = None
        self._values: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def values(self) -> tuple[str, ...]:
        raw = getattr(os.environ, "_data", None)
        if not isinstance(raw, dict):
            return self._read()
        with self._lock:
            if raw != self._raw:
                self._raw, self._values = dict(raw), self._read()
            return self._values

    @staticmethod
    def _read() -> tuple[str, ...]:
        return tuple(
            value
            for name, value in os.environ.items()
            if len(value) >= _MIN_ENV_SECRET and _SECRET_ENV.search(name.upper())
        )


_environment = _EnvironmentSecrets()


def _known_spellings(secrets: Iterable[str]) -> tuple[str, ...]:
    """The spellings of every secret known now: remembered, in the environment, and `secrets`."""
    environment = _environment.values()
    with _known_lock:
        known = frozenset((*_known, *environment, *secrets))
    return _spellings(known)


def _may_need_masking(text: str, spellings: tuple[str, ...]) -> bool:
    """Whether `_redact_text` could change `text`: False only when no rule can match.

    Each text rule needs a literal that is cheap to look for (`://` and `@`,
    `sk-`, `Bearer`, ...); most text has none, and the rules' regular
    expressions then need not run. Text that is not ASCII always runs them:
    case-insensitive matching also finds `ſ` for `s` and `ı` for `i`.
    """
    if not text.isascii():
        return True
    if any(spelling in text for spelling in spellings):
        return True
    if ("://" in text and "@" in text) or "sk-" in text or "xox" in text:
        return True
    if "gh" in text and any(prefix in text for prefix in _GITHUB_PREFIXES):
        return True
    lowered = text.lower()
    return "bearer" in lowered or "basic" in lowered


def redact_text(text: str, *, secrets: Iterable[str] = ()) -> str:
    """`text` with known secrets, bearer and token-shaped credentials and URL credentials masked."""
    return _redact_text(text, _known_spellings(secrets))


def _redact_text(text: str, spellings: tuple[str, ...]) -> str:
    if not _may_need_masking(text, spellings):
        return text
    for spelling in spellings:
        text = text.replace(spelling, MASK)
    text = _BEARER.sub(lambda match: f"{match[1]}{match[2]}{MASK}", text)
    text = _TOKEN_SHAPED.sub(MASK, text)
    return _URL_CREDENTIALS.sub(lambda match: f"{match[1]}{MASK}@", text)


def redact(value: Any, *, secrets: Iterable[str] = ()) -> Any:
    """A copy of JSON-like `value` with every secret masked (see the module docs)."""
    return _redact(value, _known_spellings(secrets), under_secret=False)


def redacted_json(values: Sequence[Any], *, secrets: Iterable[str] = ()) -> list[str]:
    """`json.dumps(redact(value))` of each of `values` (compact, non-ASCII kept).

    What the history store writes: a turn's six columns. Most values hold
    nothing to mask, and walking them in Python costs twice what encoding
    them does, so the values are encoded first and their texts checked
    together (`_json_may_need_masking`, one scan); only when that check
    cannot rule a secret out is each text checked alone, and a value whose
    text may hold one is masked and encoded again. A value `json` cannot
    encode without help (bytes, objects) is always masked first.
    """
    spellings = _known_spellings(secrets)
    escaped = _json_spellings(spellings)
    plain = [_plain_json(value) for value in values]
    texts = [text for text in plain if text is not None]
    if len(texts) == len(plain) and not _json_may_need_masking("\n".join(texts), escaped):
        return texts
    return [
        text
        if text is not None and not _json_may_need_masking(text, escaped)
        else _ANY_JSON.encode(_redact(value, spellings, under_secret=False))
        for value, text in zip(values, plain, strict=True)
    ]


def _not_plain(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not plain JSON")


_PLAIN_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_not_plain)
_ANY_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
"""Shared encoders (`encode` keeps no state between calls): `json.dumps` with options builds one per call."""


def _plain_json(value: Any) -> str | None:
    """`value` as compact JSON text, or None when `json` cannot encode it without help."""
    try:
        return _PLAIN_JSON.encode(value)
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=64)
def _json_spellings(spellings: tuple[str, ...]) -> tuple[str, ...]:
    """Each spelling as it reads inside a JSON string (backslashes, quotes, control characters escaped).

    JSON escapes character by character, so a string holding a spelling
    encodes to text holding its escaped form.
    """
    return tuple(json.dumps(spelling, ensure_ascii=False)[1:-1] for spelling in spellings)


_SECRET_KEY_ENDS = tuple(f'{word}":' for word in (*_SECRET_KEY_WORDS, "authorization", "cookie"))
"""How a key that may name a secret ends in compact JSON text, lowercased, `-` and `_` left out:
the endings `_SECRET_KEY` requires (its exact names end in `authorization`, `key` or `cookie`)."""


def _json_may_need_masking(text: str, escaped_spellings: tuple[str, ...]) -> bool:
    """Whether masking could change the value compact JSON `text` encodes: False only when no rule can match.

    The checks of `_may_need_masking`, on the encoded text as a whole (no
    regular expression: each is a substring test). Every literal a rule
    needs survives encoding (ASCII letters and `-_:/@` are never escaped); a
    known secret reads as its escaped spelling; a key is followed by `":`.
    Non-ASCII text always takes the masking path, as in `_may_need_masking`.
    """
    if _may_need_masking(text, escaped_spellings):
        return True
    keys = text.lower().replace("-", "").replace("_", "")
    return any(ending in keys for ending in _SECRET_KEY_ENDS)


def _redact(value: Any, spellings: tuple[str, ...], *, under_secret: bool) -> Any:
    if type(value) is str and not under_secret:  # most values: checked before the ABCs below
        return _redact_text(value, spellings)
    if isinstance(value, Mapping):
        return {
            key: _redact(item, spellings, under_secret=is_secret_key(key))
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        items = [_redact(item, spellings, under_secret=under_secret) for item in value]
        return items if isinstance(value, list) else tuple(items)
    if value is None or isinstance(value, bool):
        return value
    if under_secret and isinstance(value, str | bytes | int | float):
        return MASK
    if isinstance(value, str):
        return _redact_text(value, spellings)
    return value


class _RedactRecords(logging.Filter):
    """Redacts each record of kedi's logger before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_text(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


logger = logging.getLogger("kedi")
# httpx logs each request's URL, credentials included, at INFO.
for _name in ("kedi", "httpx", "httpcore"):
    logging.getLogger(_name).addFilter(_RedactRecords())
