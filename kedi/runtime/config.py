"""Process and context defaults: `configure`, `context`, `parallel`.

`configure(...)` replaces the process-wide defaults; `context(...)` overlays
them for a `with` / `async with` block (ContextVar-scoped, so concurrent tasks
keep their own); explicit `run(...)` arguments win over both, and directives in
the source win over all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from kedi.errors import KediConfigError

DEFAULT_WORKERS = 8
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


@dataclass(frozen=True, slots=True)
class Config:
    """Defaults for runs that do not say otherwise."""

    adapter: Any = None
    model: str | None = None
    system: str | None = None
    settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    parallel: int = 0
    """0 runs model calls sequentially; N > 0 allows N concurrent calls."""
    env: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Extra globals visible to programs."""
    user_prompt_submit: tuple[Callable[..., Any], ...] = ()
    """Prompt hooks (see `kedi.hooks`)."""
    history_processor: Callable[..., Any] | None = None


_BASE = Config()
_CURRENT: ContextVar[Config | None] = ContextVar("kedi_config", default=None)


def current() -> Config:
    """The configuration in force here."""
    return _CURRENT.get() or _BASE


def parse_parallel(value: Any) -> int:
    """Interpret a parallel switch: bools, `1/true/yes/on` (8 workers), N, or off."""
    if value is None or value is False:
        return 0
    if value is True:
        return DEFAULT_WORKERS
    if isinstance(value, int):
        return max(value, 0) if value != 1 else DEFAULT_WORKERS
    text = str(value).strip().lower()
    if text in _TRUE:
        return DEFAULT_WORKERS
    if text in _FALSE:
        return 0
    try:
        number = int(text)
    except ValueError:
        raise KediConfigError(
            f"invalid parallel setting {value!r}: use 1/true/yes/on, 0/false/no/off, or a worker count"
        ) from None
    return max(number, 0)


def _overlay(base: Config, changes: Mapping[str, Any]) -> Config:
    updates = dict(changes)
    if "settings" in updates:
        updates["settings"] = MappingProxyType({**base.settings, **(updates["settings"] or {})})
    if "env" in updates:
        updates["env"] = MappingProxyType({**base.env, **(updates["env"] or {})})
    if "parallel" in updates or "max_workers" in updates:
        workers = updates.pop("max_workers", None)
        flag = updates.pop("parallel", True if workers else None)
        updates["parallel"] = parse_parallel(workers if flag and workers else flag)
    if "user_prompt_submit" in updates:
        updates["user_prompt_submit"] = tuple(_as_sequence(updates["user_prompt_submit"]))
    unknown = set(updates) - set(Config.__dataclass_fields__)
    if unknown:
        raise KediConfigError(f"unknown configuration option(s): {', '.join(sorted(unknown))}")
    return replace(base, **updates)


def _as_sequence(value: Any) -> Sequence[Any]:
    if value is None:
        return ()
    if callable(value):
        return (value,)
    return tuple(value)


def configure(**options: Any) -> None:
    """Replace the process-wide defaults (no merge with an earlier `configure`)."""
    global _BASE
    _BASE = _overlay(Config(), options)


def reset_config() -> None:
    """Restore the built-in defaults."""
    global _BASE
    _BASE = Config()


class context:
    """Overlay defaults for a block: `with kedi.context(model=...):` (also `async with`)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._tokens: list[Token[Config | None]] = []

    def __enter__(self) -> Config:
        config = _overlay(current(), self._options)
        self._tokens.append(_CURRENT.set(config))
        return config

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._tokens.pop())

    async def __aenter__(self) -> Config:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


def parallel(max_workers: int = DEFAULT_WORKERS) -> context:
    """Run independent model calls concurrently inside the block."""
    return context(parallel=True, max_workers=max_workers)
