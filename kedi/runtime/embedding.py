"""Python decorators that turn Kedi source into Python functions.

`@kedi.query` compiles a function's docstring (which must start with a
standalone `kedi` line) as the *body* of a procedure whose parameters are the
function's; `@kedi.bind(file=...)` runs a whole `.kedi` file with the call's
arguments as globals. Sync functions get sync wrappers, `async def` functions
async ones; the stub body never runs.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
import tokenize
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, overload

from kedi.errors import KediUsageError
from kedi.history.lanes import Conversation
from kedi.runtime.loops import run_on_thread_loop
from kedi.runtime.procedures import refuse_in_event_loop
from kedi.runtime.program import Program, compile_program
from kedi.syntax.docstrings import lines_before_body, query_body_source

F = TypeVar("F", bound=Callable[..., Any])


def _runner(
    func: Callable[..., Any], run: Callable[[Mapping[str, Any]], Any]
) -> Callable[..., Any]:
    """Wrap `func` so calling it binds its arguments and awaits `run(arguments)`."""
    signature = inspect.signature(func)

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            return await run(bind(args, kwargs))

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        refuse_in_event_loop(
            f"{func.__name__!r} is a sync Kedi function and starts its own event loop; "
            "inside async code, declare it with `async def` and await it"
        )
        arguments = bind(args, kwargs)
        return run_on_thread_loop(lambda: run(arguments))

    return wrapper


@overload
def query(func: F, /) -> F: ...


@overload
def query(
    func: None = None,
    *,
    model: str | None = None,
    adapter: Any = None,
    system: str | None = None,
    effort: str | None = None,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, Any] | None = None,
    tools: Sequence[Callable[..., Any]] = (),
    conversation: Conversation | None = None,
    transcript: Any = None,
    cache: bool = False,
) -> Callable[[F], F]: ...


def query(
    func: F | None = None,
    *,
    model: str | None = None,
    adapter: Any = None,
    system: str | None = None,
    effort: str | None = None,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, Any] | None = None,
    tools: Sequence[Callable[..., Any]] = (),
    conversation: Conversation | None = None,
    transcript: Any = None,
    cache: bool = False,
) -> Any:
    """Decorate a function whose docstring holds a Kedi procedure body.

    Usable bare (`@kedi.query`) or with options (`@kedi.query(model=...)`).
    `tools` are Python callables the body may expose with `> use: name`.
    `cache=True` (the language's response cache) is refused: see `_refuse_cache`.
    The decorated function keeps its signature for type checkers; its stub
    body never runs (`raise NotImplementedError` after the docstring keeps
    `mypy --strict` from reporting an empty body).
    """
    _refuse_cache("@kedi.query", cache)

    def decorate(function: F) -> F:
        doc = function.__doc__
        if doc is None:
            raise KediUsageError(f"@kedi.query: {function.__qualname__} has no docstring")
        body = query_body_source(doc)
        path = f"<query {function.__qualname__}>"
        located = _docstring_location(function, doc)
        if located is not None:  # errors point at the docstring's lines in the Python file
            path, first_line = located
            body = "\n" * (first_line - 1 + lines_before_body(doc)) + body
        names = tuple(inspect.signature(function).parameters)
        globals_ = _runtime_globals(names, env, tools)
        program = compile_program(body, path=path, fragment=True, known_globals=(*names, *globals_))

        async def run(arguments: Mapping[str, Any]) -> Any:
            return await program.run(
                body_arguments=arguments,
                adapter=adapter,
                model=model,
                system=system,
                effort=effort,
                settings=settings,
                env=globals_,
                conversation=conversation,
                transcript=transcript,
            )

        return _runner(function, run)  # type: ignore[return-value]  # the runner keeps the decorated function's signature

    if func is not None:
        return decorate(func)
    return decorate


def bind(
    file: str | Path,
    *,
    reload: bool = False,
    model: str | None = None,
    adapter: Any = None,
    system: str | None = None,
    effort: str | None = None,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, Any] | None = None,
    conversation: Conversation | None = None,
    transcript: Any = None,
    cache: bool = False,
) -> Callable[[F], F]:
    """Bind a function to a `.kedi` file; calling it runs the file with the arguments as globals.

    A relative `file` resolves from the Python file that defines the function.
    Without `reload` the file is read and checked at decoration time.
    `cache=True` is refused, as for `query`.
    """
    _refuse_cache("@kedi.bind", cache)
    if not isinstance(file, str | os.PathLike):
        raise KediUsageError(
            '@kedi.bind needs the .kedi file to run: write @kedi.bind("flow.kedi"), '
            f"not a bare @kedi.bind (it was given {type(file).__name__} {getattr(file, '__name__', file)!r})"
        )

    def decorate(function: F) -> F:
        path = Path(file)
        if not path.is_absolute():
            defining = inspect.getsourcefile(function)
            base = Path(defining).parent if defining else Path.cwd()
            path = base / path
        names = tuple(inspect.signature(function).parameters)
        known = (*names, *(env or {}))
        loaded = None if reload else _load(path, known)

        async def run(arguments: Mapping[str, Any]) -> Any:
            program = loaded or _load(path, known)
            return await program.run(
                adapter=adapter,
                model=model,
                env={**arguments, **(env or {})},  # env wins over call arguments
                conversation=conversation,
                transcript=transcript,
                system=system,
                effort=effort,
                settings=settings,
            )

        return _runner(function, run)  # type: ignore[return-value]  # the runner keeps the decorated function's signature

    return decorate


def _refuse_cache(decorator: str, cache: bool) -> None:
    """Refuse the response cache (`cache=True`), which this build does not have.

    Accepting the flag and calling the model anyway would hide the missing
    feature; answering from a cache would have to decide whether a cached
    answer is committed to history (spec B22). Neither happens: every call
    is a real model call, committed to its lane when history is on.
    """
    if cache:
        raise KediUsageError(
            f"{decorator}(cache=True): the response cache is not supported yet; "
            "memoize the decorated function yourself (functools.lru_cache) if its "
            "answers may be reused"
        )


def _docstring_location(function: Callable[..., Any], doc: str) -> tuple[str, int] | None:
    """The Python file defining `function` and the line its docstring `doc` starts on.

    None when the source cannot be read (a function made by `exec`, a REPL),
    or its docstring is not a plain string literal spanning its own lines.
    """
    try:
        path = inspect.getsourcefile(function)
        lines, start = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):
        return None  # no source, or not Python source (code compiled under another file's name)
    definition = tree.body[0] if tree.body else None
    if path is None or not isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    first = definition.body[0]
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        return None
    literal = first.value
    if not isinstance(literal.value, str) or inspect.cleandoc(literal.value) != inspect.cleandoc(
        doc
    ):
        return None  # the file no longer holds this function as it was compiled
    if literal.end_lineno is None or literal.end_lineno - literal.lineno != doc.count("\n"):
        return None  # escapes (`\n`) in the literal: its lines are not the docstring's
    return path, start + literal.lineno - 1


def _load(path: Path, known_globals: tuple[str, ...]) -> Program:
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KediUsageError(f"@kedi.bind: cannot read {path}: {exc}") from None
    return compile_program(source, path=str(path), known_globals=known_globals)


def _runtime_globals(
    names: tuple[str, ...], env: Mapping[str, Any] | None, tools: Sequence[Callable[..., Any]]
) -> dict[str, Any]:
    """The globals a query adds: its tools by name, then `env` (which wins).

    A parameter may not share a name with a tool or with the reserved `args`.
    """
    if "args" in names:
        raise KediUsageError("@kedi.query: a parameter may not be named `args` (reserved)")
    by_name: dict[str, Any] = {}
    for tool in tools:
        options = getattr(tool, "__kedi_tool__", None)
        name = getattr(options, "name", None) or getattr(tool, "__name__", None)
        if not name or not callable(tool):
            raise KediUsageError(f"@kedi.query: tools must be named callables, got {tool!r}")
        by_name[name] = tool
    clashes = sorted(set(names) & set(by_name))
    if clashes:
        raise KediUsageError(
            f"@kedi.query: parameter(s) {', '.join(clashes)} share a name with a tool; rename one"
        )
    return {**by_name, **(env or {})}


__all__ = ["bind", "query"]
