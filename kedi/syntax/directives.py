"""The directive vocabulary: every `> name:` kedi knows, and what each accepts.

The parser uses `DIRECTIVE_NAMES` to reject unknown directives (with a
closest-name suggestion). The static checker (`kedi.syntax.checks`) reads
`SPECS`: for each directive, the body shape, where it may appear, which
configuration keys it takes, and how a literal value is validated. Backtick
values (`` `expr` ``) are Python and are validated at run time instead.

The literal-value parsers here (`parse_plain_value`, `parse_byte_size`,
`parse_duration`) are the one definition of how plain directive text becomes a
value, so the checker and the runtime cannot drift apart.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from kedi.settings import MAPPING_SETTINGS, SETTING_NAMES

AGENT_DIRECTIVES = frozenset(
    {
        "adapter",
        "agent",
        "model",
        "effort",
        "system",
        "settings",
        "approval",
        "mcp",
        "use",
        "history",
        "artifacts",
        "skills",
        "codemode",
    }
)
"""Valid at top level, in procedure bodies and in profile bodies."""

PROFILE_ONLY_DIRECTIVES = frozenset({"subagent", "max_agents", "workflow"})
MODULE_DIRECTIVES = frozenset({"profile", "import", "export", "package"})
PROCEDURE_ONLY_DIRECTIVES = frozenset({"optimize", "auto"})
SUITE_DIRECTIVES = frozenset({"case", "data", "test_data", "metric"})

DIRECTIVE_NAMES = (
    AGENT_DIRECTIVES
    | PROFILE_ONLY_DIRECTIVES
    | MODULE_DIRECTIVES
    | PROCEDURE_ONLY_DIRECTIVES
    | SUITE_DIRECTIVES
)
"""Every directive name in the language."""

NOT_YET_SUPPORTED = frozenset(
    {
        "mcp",
        "approval",
        "artifacts",
        "subagent",
        "max_agents",
        "workflow",
        "optimize",
        "auto",
        "codemode",
        "skills",
        "agent",
    }
)
"""Directives that parse and check but that kedi does not execute yet.

The runtime reports these as "not supported yet" in one consistent way.
"""

FRAMEWORK_ADAPTERS = frozenset({"pydantic", "dspy", "langchain", "openai", "offline", "script"})
"""Names valid in `> adapter:` (framework adapters)."""

NOT_YET_SUPPORTED_ADAPTERS = frozenset({"dspy"})
"""Framework adapters of the language that kedi does not ship yet."""

AGENT_HARNESSES = frozenset({"claude", "codex", "acp"})
"""Names valid in `> agent:` (agent harnesses; `acp` only in the block form)."""

EFFORT_LEVELS = ("minimal", "low", "medium", "high", "xhigh", "max")
"""Valid `> effort:` values, lowest first."""

MCP_TRANSPORTS = ("stdio", "sse", "http", "streamable-http")
"""Valid `transport:` values of `> mcp:` (`streamable-http` is an alias of `http`)."""

Placement = Literal["top", "procedure", "profile", "test", "eval"]
"""Where a directive stands: top level, a procedure body, a profile body, under
`@test:`, under `@eval:`. A query docstring is a procedure body."""

BodyShape = Literal["line", "config", "line_or_config", "rows", "names", "named_block", "text"]
"""How a directive is written.

- `line`: `> name: value` only;
- `config`: `> name:` + indented `key: value` rows only;
- `line_or_config`: either of the two;
- `rows`: one line or indented text rows (`> system:`);
- `names`: a name or an indented name list (`> use:`, `> import:`, `> export:`);
- `named_block`: `> name: label:` + a body (`> profile:`, `> case:`, ...);
- `text`: an indented natural-language body (`> auto:`).

Only the first three are plain `Directive` nodes, whose shape the parser
checks against `DirectiveSpec.accepts_line` / `accepts_config`; the parser
builds dedicated nodes for the others.
"""


# --------------------------------------------------------------------------- literal values


def parse_plain_value(text: str) -> object:
    """Parse a plain (non-backtick) directive value as the docs describe.

    The order is: `true`/`false` (any case) as bool, `null`/`none` as None,
    int, float, a Python literal, and finally the text itself as a string.
    """
    text = text.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none"):
        return None
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return literal_or_text(text)


def literal_or_text(text: str) -> object:
    """`text` as a Python literal when it is one, else `text` itself; never raises."""
    # literal_eval warns about odd escapes in string literals; the text is the
    # user's, so such a warning must not escape as an error.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return text


_BYTE_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3}
_BYTE_UNITS |= {"kib": 1024, "mib": 1024**2, "gib": 1024**3}
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_QUANTITY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def _quantity(text: str, units: Mapping[str, float], what: str) -> float:
    match = _QUANTITY.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or (unit and unit not in units):
        raise ValueError(f"not a {what}: {text!r}")
    return float(match.group(1)) * (units[unit] if unit else 1.0)


def parse_byte_size(text: str) -> int:
    """Parse a size such as `100kb`, `1b`, `256mib` or `4096` into bytes.

    Decimal units are powers of 1000, binary units powers of 1024; a bare
    number is bytes. Raises `ValueError` on anything else.
    """
    return int(_quantity(text, _BYTE_UNITS, "byte size"))


def parse_duration(text: str) -> float:
    """Parse a duration such as `1h`, `30s`, `250ms` or `60` into seconds.

    Units are `ms s m h d`; a bare number is seconds. Raises `ValueError` on
    anything else.
    """
    return _quantity(text, _DURATION_UNITS, "duration")


# --------------------------------------------------------------------------- validators


@dataclass(frozen=True, slots=True)
class Validator:
    """Checks one literal directive value (backtick values are checked at run time)."""

    expected: str
    """What a valid value looks like, in the user's words ("a positive integer")."""
    accepts: Callable[[str], bool]
    """True when the literal text is valid."""
    choices: tuple[str, ...] = ()
    """The valid words when the value comes from a fixed set (for did-you-mean hints)."""


def one_of(*choices: str) -> Validator:
    """Return a validator accepting exactly one of the given words."""
    words = ", ".join(f"`{choice}`" for choice in choices[:-1])
    expected = f"{words} or `{choices[-1]}`"
    if len(choices) > 2:
        expected = f"one of {expected}"
    return Validator(expected, frozenset(choices).__contains__, choices)


def int_between(low: int, high: int | None = None) -> Validator:
    """Return a validator for an integer `>= low` (and `<= high` when given)."""

    def accepts(text: str) -> bool:
        value = parse_plain_value(text)
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        return low <= value and (high is None or value <= high)

    if high is not None:
        expected = f"an integer from {low} to {high}"
    elif low == 1:
        expected = "a positive integer"
    else:
        expected = f"an integer of at least {low}"
    return Validator(expected, accepts)


def _parses(parse: Callable[[str], float], minimum: float) -> Callable[[str], bool]:
    def accepts(text: str) -> bool:
        try:
            return parse(text) >= minimum
        except ValueError:
            return False

    return accepts


def _matches(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda text: compiled.fullmatch(text) is not None


def _positive_number(text: str) -> bool:
    value = parse_plain_value(text)
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _number(text: str) -> bool:
    value = parse_plain_value(text)
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(text: str) -> bool:
    value = parse_plain_value(text)
    return isinstance(value, int) and not isinstance(value, bool)


BOOL = Validator("`true` or `false`", lambda text: isinstance(parse_plain_value(text), bool))
POSITIVE_INT = int_between(1)
NON_NEGATIVE_INT = int_between(0)
POSITIVE_NUMBER = Validator("a positive number", _positive_number)
BYTE_SIZE = Validator(
    "a size such as `100kb` (units b, kb, mb, gb, kib, mib, gib)", _parses(parse_byte_size, 0)
)
_positive_duration = _parses(parse_duration, 1e-9)
DURATION = Validator("a positive duration such as `30s` (units ms, s, m, h, d)", _positive_duration)
DURATION_OR_NONE = Validator(
    "`none` or a positive duration such as `30m`",
    lambda text: text.strip().lower() == "none" or _positive_duration(text),
)
ENABLED_OR_DISABLED = one_of("enabled", "disabled")
PACKAGE_NAME = Validator("a name matching `[a-z][a-z0-9_]*`", _matches(r"[a-z][a-z0-9_]*"))
"""Checks the name in `> package: name:`."""
PYTHON_REQUIREMENT = Validator(
    "`python@X.Y` or a range `python@X.Y-X.Z`", _matches(r"python@\d+\.\d+(-\d+\.\d+)?")
)


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One key of a configuration body."""

    validator: Validator | None = None
    """Checks a literal value; None accepts any text."""
    required: bool = False


@dataclass(frozen=True, slots=True)
class DirectiveSpec:
    """What one directive accepts and where it may stand."""

    name: str
    body: BodyShape
    placements: frozenset[Placement]
    value: Validator | None = None
    """Checks a literal one-line value; None accepts any text."""
    keys: Mapping[str, KeySpec] = field(default_factory=lambda: MappingProxyType({}))
    """The configuration keys the block form accepts."""
    singleton: bool = False
    """At most once per profile (a scalar member such as `> model:`)."""

    @property
    def accepts_line(self) -> bool:
        """True when `> name: value` is a valid form."""
        return self.body in ("line", "line_or_config")

    @property
    def accepts_config(self) -> bool:
        """True when `> name:` + `key: value` rows is a valid form."""
        return self.body in ("config", "line_or_config")

    @property
    def required_keys(self) -> tuple[str, ...]:
        """The keys a configuration body must contain, in spec order."""
        return tuple(key for key, spec in self.keys.items() if spec.required)


_AGENT: frozenset[Placement] = frozenset({"top", "procedure", "profile"})


def _spec(
    name: str,
    body: BodyShape,
    placements: frozenset[Placement],
    *,
    value: Validator | None = None,
    keys: Mapping[str, KeySpec] | None = None,
    singleton: bool = False,
) -> DirectiveSpec:
    frozen_keys = MappingProxyType(dict(keys or {}))
    return DirectiveSpec(name, body, placements, value, frozen_keys, singleton)


_TEXT = KeySpec()

_SETTING_VALUES: Mapping[str, Validator] = {
    **dict.fromkeys(
        ("temperature", "top_p", "presence_penalty", "frequency_penalty"),
        Validator("a number", _number),
    ),
    "seed": Validator("an integer", _integer),
    **dict.fromkeys(("max_tokens", "request_limit", "max_reply_bytes"), POSITIVE_INT),
    **dict.fromkeys(("output_retries", "tool_retries", "max_retries"), NON_NEGATIVE_INT),
    "timeout": Validator("a positive number of seconds", _positive_number),
    **dict.fromkeys(
        sorted(MAPPING_SETTINGS),
        Validator(
            'a mapping, e.g. `{"key": "value"}`',
            lambda text: isinstance(parse_plain_value(text), Mapping),
        ),
    ),
}
"""What a literal value of a numeric setting must be: what the adapters accept at the call
(`count`, `seconds`) and the providers' types, so `kedi check` reports it at its line."""


def _setting_keys() -> dict[str, KeySpec]:
    return {name: KeySpec(_SETTING_VALUES.get(name)) for name in sorted(SETTING_NAMES)}


SPECS: Mapping[str, DirectiveSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            _spec(
                "adapter", "line", _AGENT, value=one_of(*sorted(FRAMEWORK_ADAPTERS)), singleton=True
            ),
            _spec(
                "agent",
                "line_or_config",
                _AGENT,
                value=one_of("claude", "codex"),
                keys={"acp": KeySpec(required=True)},
                singleton=True,
            ),
            _spec("model", "line", _AGENT, singleton=True),
            _spec("effort", "line", _AGENT, value=one_of(*EFFORT_LEVELS), singleton=True),
            _spec("system", "rows", _AGENT, singleton=True),
            _spec("settings", "config", _AGENT, keys=_setting_keys()),
            _spec("approval", "line", _AGENT, value=one_of("allow", "deny"), singleton=True),
            _spec(
                "mcp",
                "config",
                _AGENT,
                keys={
                    "name": _TEXT,
                    "transport": KeySpec(one_of(*MCP_TRANSPORTS)),
                    "command": _TEXT,
                    "args": _TEXT,
                    "env": _TEXT,
                    "cwd": _TEXT,
                    "url": _TEXT,
                    "headers": _TEXT,
                },
            ),
            _spec("use", "names", _AGENT),
            _spec(
                "history",
                "line_or_config",
                _AGENT,
                value=ENABLED_OR_DISABLED,
                keys={
                    "enabled": KeySpec(BOOL, required=True),
                    "compaction_mode": KeySpec(one_of("native", "disabled")),
                    "compaction_threshold": KeySpec(POSITIVE_INT),
                    # kedi's own group-safe bounds (see docs/history.md)
                    "max_messages": KeySpec(POSITIVE_INT),
                    "max_tokens": KeySpec(POSITIVE_INT),
                },
                singleton=True,
            ),
            _spec(
                "artifacts",
                "config",
                _AGENT,
                keys={
                    "enabled": KeySpec(BOOL),
                    "store": KeySpec(one_of("memory", "file")),
                    "path": _TEXT,
                    "threshold": KeySpec(BYTE_SIZE),
                    "ttl": KeySpec(DURATION),
                    "idle_ttl": KeySpec(DURATION_OR_NONE),
                    "preview_chars": KeySpec(NON_NEGATIVE_INT),
                    "read_max_chars": KeySpec(POSITIVE_INT),
                    "session_quota": KeySpec(BYTE_SIZE),
                    "max_artifacts": KeySpec(POSITIVE_INT),
                    "cleanup_interval": KeySpec(DURATION),
                },
                singleton=True,
            ),
            _spec(
                "skills",
                "line_or_config",
                _AGENT,
                value=ENABLED_OR_DISABLED,
                keys={
                    "enabled": KeySpec(BOOL, required=True),
                    "cwd": _TEXT,
                    "max_skills": KeySpec(int_between(1, 100)),
                    "include_registry": KeySpec(BOOL),
                    "include_all": KeySpec(BOOL),
                    "exclude_paths": _TEXT,
                },
                singleton=True,
            ),
            _spec(
                "codemode",
                "line_or_config",
                _AGENT,
                value=ENABLED_OR_DISABLED,
                keys={
                    "enabled": KeySpec(BOOL),
                    **dict.fromkeys(
                        (
                            "default_search_limit",
                            "max_search_limit",
                            "max_hydrated_tools",
                            "max_discovery_result_bytes",
                            "max_code_chars",
                            "max_nested_calls",
                            "max_concurrent_calls",
                            "max_tool_result_bytes",
                            "max_total_tool_result_bytes",
                            "max_print_bytes",
                        ),
                        KeySpec(POSITIVE_INT),
                    ),
                    "request_timeout": KeySpec(POSITIVE_NUMBER),
                },
                singleton=True,
            ),
            _spec("subagent", "line", frozenset({"profile"})),
            _spec("max_agents", "line", frozenset({"profile"}), value=POSITIVE_INT, singleton=True),
            _spec(
                "workflow",
                "line",
                frozenset({"profile"}),
                value=one_of("delegate", "dynamic"),
                singleton=True,
            ),
            _spec("profile", "named_block", frozenset({"top"})),
            _spec("import", "names", frozenset({"top"})),
            _spec("export", "names", frozenset({"top"})),
            # Valid only at the top of a file named `package.kedi`; the checker
            # enforces the file name separately.
            _spec(
                "package",
                "named_block",
                frozenset({"top"}),
                keys={
                    "version": _TEXT,
                    "source": _TEXT,
                    "python": KeySpec(PYTHON_REQUIREMENT),
                    "python_dependencies": _TEXT,
                    "author": _TEXT,
                    "contact": _TEXT,
                    "license": _TEXT,
                },
            ),
            _spec("optimize", "named_block", frozenset({"procedure"})),
            _spec("auto", "text", frozenset({"procedure"})),
            _spec("case", "named_block", frozenset({"test"})),
            _spec("data", "named_block", frozenset({"eval"})),
            _spec("test_data", "named_block", frozenset({"eval"})),
            _spec("metric", "named_block", frozenset({"eval"})),
        )
    }
)
"""Every directive's spec, by name (keys equal `DIRECTIVE_NAMES`)."""
