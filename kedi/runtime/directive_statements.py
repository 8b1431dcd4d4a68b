"""Directives at run time: how `> adapter:`, `> model:`, `> effort:`, `> settings:`,
`> history:`, `> system:`, `> use:` and profiles replace the agent state.

Each handler replaces the agent state of the running body (`Frame.agent`)
for the rest of its scope; a profile collects the state its members build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kedi.errors import KediExecutionError, KediNameError, KediTypeExecutionError
from kedi.runtime import trace
from kedi.runtime.scopes import AgentState, Frame, HistoryPolicy, Profile, SystemText
from kedi.syntax import ast
from kedi.syntax.directives import EFFORT_LEVELS, NOT_YET_SUPPORTED, SPECS, parse_plain_value

if TYPE_CHECKING:
    from kedi.runtime.interpreter import Interpreter

EFFORTS = frozenset(EFFORT_LEVELS)
_PROFILE_MEMBERS = frozenset(
    {"adapter", "model", "effort", "system", "settings", "history", "tools"}
)


def history_policy_from(values: Mapping[str, Any]) -> HistoryPolicy:
    """Validate the expanded `> history:` form."""
    unknown = set(values) - set(SPECS["history"].keys)
    if unknown:
        raise ValueError(f"unknown `> history:` key(s): {', '.join(sorted(unknown))}")
    if "enabled" not in values:
        raise ValueError("`> history:` needs `enabled: true` or `enabled: false`")
    enabled = values["enabled"]
    if not isinstance(enabled, bool):
        raise ValueError("`> history:` `enabled` must be true or false")
    mode = values.get("compaction_mode")
    if mode not in (None, "native", "disabled"):
        raise ValueError("`compaction_mode` must be `native` or `disabled`")
    threshold = values.get("compaction_threshold")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold <= 0:
            raise ValueError("`compaction_threshold` must be a positive integer")
        if mode == "disabled":
            raise ValueError(
                "`compaction_threshold` cannot be used with `compaction_mode: disabled`"
            )
    bounds = {}
    for key in ("max_messages", "max_tokens"):
        bound = values.get(key)
        if bound is not None and (
            isinstance(bound, bool) or not isinstance(bound, int) or bound < 1
        ):
            raise ValueError(f"`{key}` must be a positive integer")
        bounds[key] = bound
    return HistoryPolicy(enabled, mode, threshold, **bounds)


async def directive_statement(interp: Interpreter, node: ast.Directive, frame: Frame) -> None:
    """`> name: value` and configuration directives: the body's agent state from here on."""
    with trace.frame(
        "directive", node.span, label=f"directive {node.name}", snippet=interp.snippet(node.span)
    ):
        frame.agent = await apply_directive(interp, node, frame.agent, frame)


async def system_statement(interp: Interpreter, node: ast.SystemDirective, frame: Frame) -> None:
    """`> system:`: instructions rendered at each call that follows."""
    frame.agent = replace(frame.agent, system=SystemText(node.rows))


async def use_statement(interp: Interpreter, node: ast.Use, frame: Frame) -> None:
    """`> use:`: tools added, or a profile applied."""
    with trace.frame(
        "directive", node.span, label="directive use", snippet=interp.snippet(node.span)
    ):
        frame.agent = apply_use(interp, node, frame.agent, frame)


async def profile_statement(interp: Interpreter, node: ast.ProfileDef, frame: Frame) -> None:
    """`> profile: name:`: binds a `Profile` holding the state its members build and which members it sets."""
    state = AgentState()
    members: set[str] = set()
    member_frame = Frame(frame.scope, state, frame.procedure)
    for member in node.members:
        if isinstance(member, ast.Use):
            member_frame.agent = apply_use(interp, member, member_frame.agent, member_frame)
            for use in member.names:
                value = interp.lookup(use.name, frame.scope)
                members.update(value.members if isinstance(value, Profile) else ("tools",))
        elif isinstance(member, ast.SystemDirective):
            member_frame.agent = replace(member_frame.agent, system=SystemText(member.rows))
            members.add("system")
        else:
            member_frame.agent = await apply_directive(
                interp, member, member_frame.agent, member_frame
            )
            members.add(member.name)
    doc = node.docstring.text if node.docstring else None
    frame.scope.vars[node.name] = Profile(
        node.name, member_frame.agent, frozenset(members) & _PROFILE_MEMBERS, doc
    )


async def apply_directive(
    interp: Interpreter, node: ast.Directive, agent: AgentState, frame: Frame
) -> AgentState:
    """Return the agent state after `node` (a one-line or configuration directive)."""
    name = node.name
    if name in NOT_YET_SUPPORTED:
        raise KediExecutionError(f"`> {name}:` is not supported yet", frames=trace.current_frames())
    if name == "settings":
        settings = {}
        for entry in node.config:
            settings[entry.key] = await config_value(interp, entry.value, frame)
        return agent.with_settings(settings, {entry.key: entry.span for entry in node.config})
    if name == "history":
        return replace(agent, history=await _history_policy(interp, node, frame))
    text = await directive_value(interp, node, frame)
    if name == "adapter":
        return replace(agent, adapter=text)
    if name == "model":
        if not isinstance(text, str):
            raise TypeError(f"`> model:` must be a string, got {type(text).__name__}")
        return replace(agent, model=text)
    if name == "effort":
        if text not in EFFORTS:
            raise ValueError(f"invalid effort {text!r}; use one of {', '.join(sorted(EFFORTS))}")
        return replace(agent, effort=text)
    raise KediExecutionError(f"`> {name}:` is not supported here", frames=trace.current_frames())


async def directive_value(interp: Interpreter, node: ast.Directive, frame: Frame) -> Any:
    """The value of a one-line directive: native for a sole backtick, else text."""
    if node.value is None:
        raise ValueError(f"`> {node.name}:` needs a value")
    return await evaluate_segments(interp, node.value, frame)


async def config_value(interp: Interpreter, segments: Sequence[ast.Segment], frame: Frame) -> Any:
    """A configuration value: backtick → Python; plain text → bool/null/number/literal/str."""
    value = await evaluate_segments(interp, segments, frame)
    if len(segments) == 1 and isinstance(segments[0], ast.BareBacktick):
        return value
    return parse_plain_value(value)


async def evaluate_segments(
    interp: Interpreter, segments: Sequence[ast.Segment], frame: Frame
) -> Any:
    """A directive's value: native for a sole backtick, else the rendered text."""
    if len(segments) == 1 and isinstance(segments[0], ast.BareBacktick):
        return await interp.evaluate_python(segments[0].code, frame)
    return await interp.render_segments(segments, frame)


async def _history_policy(interp: Interpreter, node: ast.Directive, frame: Frame) -> HistoryPolicy:
    if node.value is not None:
        text = await directive_value(interp, node, frame)
        if text not in ("enabled", "disabled"):
            raise ValueError(f"`> history:` must be `enabled` or `disabled`, got {text!r}")
        return HistoryPolicy(enabled=text == "enabled")
    values = {e.key: await config_value(interp, e.value, frame) for e in node.config}
    return history_policy_from(values)


def apply_use(interp: Interpreter, node: ast.Use, agent: AgentState, frame: Frame) -> AgentState:
    """Apply `> use:` names: a procedure or callable becomes a tool, a profile is applied.

    The indented list form only ever names tools.
    """
    for use in node.names:
        try:
            value = interp.lookup(use.name, frame.scope)
        except KeyError:
            raise KediNameError(
                f"unknown name `{use.name}` in `> use:`", frames=trace.current_frames()
            ) from None
        if callable(value) and not isinstance(value, (type, Profile)):
            agent = agent.with_tools({use.name: value})
        elif isinstance(value, Profile) and not node.block:
            agent = agent.apply_profile(value.state, value.members)
        else:
            raise KediTypeExecutionError(
                f"`> use: {use.name}` names a {type(value).__name__}, not a profile or tool",
                frames=trace.current_frames(),
            )
    return agent
