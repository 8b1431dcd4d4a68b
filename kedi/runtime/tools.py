"""Tools: Kedi procedures and Python callables exposed to the model with `> use:`.

A tool's argument schema comes from its signature (types) and docstring
(`Args:` entries, or reST `:param name:`), its description from the docstring
summary. A hint that does not resolve is a `KediConfigError` naming the
parameter when the program exposes the tool, before any model call (a guessed
schema would mislead the model silently). Arguments the model sends are
validated before the tool runs; a tool that raises produces a failed tool
result for the model, never a crash, and is logged (logger `kedi`, INFO:
`kedi run -v` shows it), as is each retry.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints

import anyio.to_thread
from pydantic import ConfigDict, Field, ValidationError, create_model

from kedi.adapters.base import ToolArgumentsError, ToolSpec
from kedi.errors import KediConfigError, KediUsageError, StopRun
from kedi.history.lanes import canonical_digest
from kedi.redaction import logger
from kedi.runtime.procedures import KediProcedure

RISKS = ("read_only", "mutating", "sensitive")


@dataclass(frozen=True, slots=True)
class ToolOptions:
    """What `@kedi.tool(...)` attaches to a function."""

    name: str | None = None
    description: str | None = None
    retries: int = 0
    risk: str = "mutating"


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    retries: int = 0,
    risk: str = "mutating",
) -> Any:
    """Mark a Python callable as a tool (usable bare or with options).

    Decorating does not register the function globally: a program still opts in
    with `> use: name`.
    """
    if retries < 0:
        raise KediUsageError("@kedi.tool: retries must be >= 0")
    if risk not in RISKS:
        raise KediUsageError(f"@kedi.tool: risk must be one of {', '.join(RISKS)}")

    def decorate(target: Callable[..., Any]) -> Callable[..., Any]:
        target.__kedi_tool__ = ToolOptions(name, description, retries, risk)  # type: ignore[attr-defined]  # a marker attribute set on the user's function
        return target

    return decorate(function) if function is not None else decorate


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ENTRY = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r":param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Return (summary, {parameter: description}) from a Google or reST docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary_lines: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line) or line.strip().startswith(":"):
            break
        summary_lines.append(line.strip())
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    entry_indent: int | None = None
    for line in lines:
        rest = _REST_PARAM.search(line)
        if rest:
            params[rest.group(1)] = rest.group(2).strip()
            continue
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if in_args:
            if _SECTION.match(line) and not line.startswith((" ", "\t")):
                in_args = False
                continue
            indent = len(line) - len(line.lstrip())
            entry = _ENTRY.match(line)
            # Entries share the first entry's indentation; deeper lines continue it.
            if entry and (entry_indent is None or indent <= entry_indent):
                entry_indent = indent
                current = entry.group(1)
                params[current] = entry.group(2).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}".strip()
    return " ".join(summary_lines), params


class ToolBuilder:
    """Builds `ToolSpec`s for visible procedures and callables (cached per object)."""

    def __init__(self, resolve_type: Callable[[KediProcedure, Any], Any]) -> None:
        self._resolve = resolve_type
        self._cache: dict[int, tuple[Any, ToolSpec, str]] = {}

    def spec(self, name: str, target: Any) -> tuple[ToolSpec, str]:
        """The tool spec for `target` exposed as `name`, and its contract digest."""
        cached = self._cache.get(id(target))
        if cached is not None and cached[0] is target:
            return cached[1], cached[2]
        options: ToolOptions = getattr(target, "__kedi_tool__", ToolOptions())
        tool_name = options.name or name
        summary, arg_docs = parse_docstring(getattr(target, "__doc__", None))
        signature = inspect.signature(target)
        hints = self._hints(target, tool_name, signature)
        fields: dict[str, Any] = {}
        for parameter in signature.parameters.values():
            if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            annotation = hints.get(parameter.name, Any)
            default = ... if parameter.default is inspect.Parameter.empty else parameter.default
            fields[parameter.name] = (
                annotation,
                Field(default, description=arg_docs.get(parameter.name)),
            )
        model = create_model(tool_name, __config__=ConfigDict(extra="forbid"), **fields)
        schema = model.model_json_schema()
        schema.setdefault("additionalProperties", False)
        return_annotation = hints.get("return", Any)
        description = options.description or summary or f"Call {tool_name}."
        handler = _handler(target, tool_name, model, options.retries)
        spec = ToolSpec(tool_name, description, schema, handler)
        digest = canonical_digest([tool_name, description, schema, repr(return_annotation)])
        self._cache[id(target)] = (target, spec, digest)
        return spec, digest

    def _hints(self, target: Any, tool_name: str, signature: inspect.Signature) -> dict[str, Any]:
        if isinstance(target, KediProcedure):
            hints = {p.name: self._resolve(target, p.type) for p in target.node.params}
            hints["return"] = self._resolve(target, target.node.returns)
            return hints
        try:
            return get_type_hints(target)
        except Exception as error:
            unresolved = _unresolved_hint(target, signature)
            if unresolved is not None:
                name, annotation = unresolved
                what = "the return type" if name == "return" else f"parameter {name!r}"
                raise KediConfigError(
                    f"tool {tool_name!r}: the type hint of {what} ({annotation!r}) does not "
                    f"resolve ({type(error).__name__}: {error}); import that type in the "
                    "module that defines the tool"
                ) from None
            if any(isinstance(p.annotation, str) for p in signature.parameters.values()):
                raise KediConfigError(
                    f"tool {tool_name!r}: its type hints do not resolve ({type(error).__name__}: {error})"
                ) from None
        # A callable get_type_hints cannot read (a partial, an instance): its hints are objects.
        return {
            name: (p.annotation if p.annotation is not inspect.Parameter.empty else Any)
            for name, p in signature.parameters.items()
        }


def _unresolved_hint(target: Any, signature: inspect.Signature) -> tuple[str, str] | None:
    """The first (parameter or "return", hint text) whose string hint does not evaluate."""
    namespace = getattr(inspect.unwrap(target), "__globals__", {})
    annotated = [(name, p.annotation) for name, p in signature.parameters.items()]
    annotated.append(("return", signature.return_annotation))
    for name, annotation in annotated:
        if isinstance(annotation, str):
            try:
                eval(annotation, dict(namespace))  # what get_type_hints does, one hint at a time
            except Exception:
                return name, annotation
    return None


def _handler(
    target: Any, tool_name: str, model: Any, retries: int
) -> Callable[[Mapping[str, Any]], Any]:
    async def handle(arguments: Mapping[str, Any]) -> Any:
        try:
            validated = model.model_validate(dict(arguments))
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in error.errors()
            )
            logger.info("kedi: tool %s was called with invalid arguments: %s", tool_name, problems)
            raise ToolArgumentsError(f"invalid arguments: {problems}") from None
        kwargs = {name: getattr(validated, name) for name in model.model_fields}
        attempts = retries + 1
        for attempt in range(attempts):
            try:
                if isinstance(target, KediProcedure):
                    return await target.acall(**kwargs)
                result = await anyio.to_thread.run_sync(lambda: target(**kwargs))
                if inspect.isawaitable(result):
                    result = await result
                return result
            except StopRun:
                raise  # a deliberate stop is never retried
            except Exception as error:
                last = attempt + 1 >= attempts
                logger.info(
                    "kedi: tool %s failed (attempt %d of %d%s): %s: %s",
                    tool_name,
                    attempt + 1,
                    attempts,
                    "; the model gets the error" if last else "; retrying",
                    type(error).__name__,
                    error,
                )
                if last:
                    raise
        raise AssertionError("unreachable")

    return handle
