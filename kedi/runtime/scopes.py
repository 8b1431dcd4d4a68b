"""Lexical environments and agent state.

Values follow the lexical chain dynamically (a procedure reads the *latest*
value of an outer binding); agent state (adapter, model, system, settings,
history, ...) is an immutable snapshot that a procedure captures where it is
*defined* and that directives replace for the rest of their scope.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kedi.runtime.values import constant_text
from kedi.source import Span
from kedi.syntax import ast

if TYPE_CHECKING:
    from kedi.runtime.scheduler import Scheduler

_EMPTY: Mapping[str, Any] = MappingProxyType({})
UNBOUND: Any = object()
"""What a lookup returns for a name nothing binds (None is a valid bound value)."""


class Scope:
    """One lexical environment: the module, or one procedure invocation."""

    __slots__ = ("vars", "parent", "params", "is_module")

    def __init__(
        self, parent: Scope | None = None, *, params: frozenset[str] = frozenset()
    ) -> None:
        self.vars: dict[str, Any] = {}
        self.parent = parent
        self.params = params
        self.is_module = parent is None

    def find(self, name: str) -> Scope | None:
        """Return the nearest scope binding `name`, or None."""
        scope: Scope | None = self
        while scope is not None:
            if name in scope.vars:
                return scope
            scope = scope.parent
        return None

    def lookup(self, name: str) -> Any:
        """Return the value of `name`; raise KeyError if no scope binds it."""
        value = self.get(name, UNBOUND)
        if value is UNBOUND:
            raise KeyError(name)
        return value

    def get(self, name: str, default: Any = None) -> Any:
        """Return the value of `name`, or `default` if no scope binds it.

        Raises nothing: a miss is the common case for builtin names such as
        `str`, and a raised-and-caught KeyError per scope costs more than the
        dict probes themselves.
        """
        scope: Scope | None = self
        while scope is not None:
            value = scope.vars.get(name, UNBOUND)
            if value is not UNBOUND:
                return value
            scope = scope.parent
        return default

    def snapshot(self) -> Scope:
        """A copy of the chain with copied bindings (values shared, later writes unseen)."""
        parent = self.parent.snapshot() if self.parent is not None else None
        copy = Scope(parent, params=self.params)
        copy.vars = dict(self.vars)
        copy.is_module = self.is_module
        return copy

    def chain(self) -> Iterator[Scope]:
        """Scopes from the outermost (module) to this one."""
        scopes = []
        scope: Scope | None = self
        while scope is not None:
            scopes.append(scope)
            scope = scope.parent
        return reversed(scopes)

    def assignment_target(self, name: str) -> Scope:
        """Where a Kedi assignment to `name` binds.

        An enclosing *procedure* binding is updated (closures can write their
        captured bindings); a module binding is shadowed by a new local, so a
        procedure never changes the caller's top level.
        """
        if name in self.vars or self.is_module:
            return self
        scope = self.parent
        while scope is not None and not scope.is_module:
            if name in scope.vars:
                return scope
            scope = scope.parent
        return self


@dataclass(frozen=True, slots=True)
class HistoryPolicy:
    """The `> history:` state in force."""

    enabled: bool = False
    compaction_mode: str | None = None
    compaction_threshold: int | None = None
    max_messages: int | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SystemText:
    """`> system:` rows, rendered per call in the calling scope."""

    rows: tuple[ast.Row, ...]
    text: str | None = field(init=False, compare=False, repr=False)
    """The rendered text when the rows substitute nothing (then the same for every call), else None."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", constant_text(self.rows))


@dataclass(frozen=True, slots=True)
class AgentState:
    """The agent configuration in force at a point of the program."""

    adapter: Any = None
    """Adapter short name or instance; None means the run's default."""
    model: str | None = None
    effort: str | None = None
    system: SystemText | None = None
    settings: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    history: HistoryPolicy = HistoryPolicy()
    tools: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Tool name -> procedure or Python callable (merged by name, later wins)."""
    setting_spans: Mapping[str, Span] = field(
        default_factory=lambda: _EMPTY, compare=False, repr=False
    )
    """Where the program wrote each setting (`> settings:` rows); a caller's `settings=` have none.

    Read only to locate an error: a setting the adapter in force does not take.
    """

    def with_tools(self, updates: Mapping[str, Any]) -> AgentState:
        """Add tools by name (a later binding of a name wins)."""
        return replace(self, tools=MappingProxyType({**self.tools, **updates}))

    def with_settings(
        self, updates: Mapping[str, Any], spans: Mapping[str, Span] | None = None
    ) -> AgentState:
        """Merge settings by key (later keys win); `spans` says where the new ones were written."""
        settings = MappingProxyType({**self.settings, **updates})
        if not spans and not self.setting_spans:
            return replace(self, settings=settings)
        kept = {key: span for key, span in self.setting_spans.items() if key not in updates}
        return replace(
            self, settings=settings, setting_spans=MappingProxyType({**kept, **(spans or {})})
        )

    def apply_profile(self, profile: AgentState, members: frozenset[str]) -> AgentState:
        """Overlay the members a profile sets (scalars replace, settings merge)."""
        state = self
        for name in members:
            if name == "settings":
                state = state.with_settings(profile.settings, profile.setting_spans)
            elif name == "tools":
                state = state.with_tools(profile.tools)
            else:
                state = replace(state, **{name: getattr(profile, name)})
        return state


@dataclass(frozen=True, slots=True)
class Profile:
    """A `> profile:` definition: the agent members it sets."""

    name: str
    state: AgentState
    members: frozenset[str]
    docstring: str | None = None


class Args:
    """The reserved `args` binding: program options as attributes (missing ones are None)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_values", dict(values or {}))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._values.get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("`args` is read-only")

    def __getitem__(self, name: str) -> Any:
        return self._values.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def as_dict(self) -> dict[str, Any]:
        """The options as a plain dict."""
        return dict(self._values)

    def __repr__(self) -> str:
        return f"Args({self._values!r})"

    def __str__(self) -> str:
        return str(self._values)


# (returned?, value) of running a body
Outcome = tuple[bool, Any]


class Frame:
    """The running state of one body: its scope, agent state and procedure name."""

    __slots__ = ("scope", "agent", "procedure", "scheduler", "sequence", "check_result")

    def __init__(self, scope: Scope, agent: AgentState, procedure: str | None) -> None:
        self.scope = scope
        self.agent = agent
        self.procedure = procedure
        self.scheduler: Scheduler | None = None
        self.sequence = 0
        self.check_result: Callable[[Any], Any] | None = None
        """The procedure's return-type check, run by its `=` statements."""

    def snapshot(self) -> Frame:
        """A copy whose scope chain holds today's bindings (later writes do not show)."""
        copy = Frame(self.scope.snapshot(), self.agent, self.procedure)
        copy.check_result = self.check_result
        return copy
