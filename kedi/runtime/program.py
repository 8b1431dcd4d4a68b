"""Compiled programs and how to run them (the embedding API's core).

    program = kedi.compile(source, path="flow.kedi")
    result = await program.run(args={"title": "x"}, model="script:replies.json")
    result = program.run_sync()

`compile` parses and runs the static checks (no execution). Each `run` is an
independent execution: a fresh module scope, prelude, and conversation (unless
a `conversation=` is passed, which lets several runs share history).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, Unpack, overload

from kedi.adapters.base import Adapter, Usage
from kedi.adapters.resources import run_scope
from kedi.errors import KediUsageError
from kedi.history.lanes import Conversation
from kedi.runtime import config as config_module
from kedi.runtime.calls import CallLayer, Transcript
from kedi.runtime.config import parse_parallel
from kedi.runtime.interpreter import Interpreter
from kedi.runtime.interrupts import run_interruptibly
from kedi.runtime.loops import run_on_thread_loop
from kedi.runtime.procedures import KediProcedure, refuse_in_event_loop
from kedi.runtime.python_bridge import CompiledSnippets
from kedi.runtime.scopes import AgentState, SystemText
from kedi.source import SourceFile
from kedi.syntax import ast
from kedi.syntax.linking import LinkedModule, check_and_link


@dataclass(frozen=True, slots=True)
class RunResult:
    """What `program.run(..., result=True)` returns: the value and the run's identity."""

    value: Any
    """The program's result (what `run` returns without `result=True`)."""
    run_id: str
    """The run's id (UUIDv7, fresh per run unless `run_id=` was given); on every message it added."""
    conversation_id: str
    """The id of the conversation the run added to."""
    messages: tuple[Any, ...]
    """Every message the run's calls added (history on or off), in the order the calls finished."""
    usage: Usage
    """Token and request counts of all the run's calls."""
    conversation: Conversation
    """The conversation the run used: the one passed, a fork of it, or a new one."""


if TYPE_CHECKING:
    from kedi.runtime.sessions import SessionRecorder

SyncRun = TypeVar("SyncRun", bound=Callable[..., Any])


def _takes_the_options_of(run: Callable[..., Awaitable[Any]]) -> Callable[[SyncRun], SyncRun]:
    """Show `run`'s options in `help()` / `inspect.signature` of its sync twin.

    Type checkers see them through the twin's `RunOptions` overloads.
    """

    def decorate(sync: SyncRun) -> SyncRun:
        sync.__signature__ = inspect.signature(run).replace(  # type: ignore[attr-defined]  # read by inspect.signature
            return_annotation="Any"
        )
        return sync

    return decorate


class RunOptions(TypedDict, total=False):
    """The options of `Program.run` and `run_sync` other than `result` (documented on `run`).

    They type the overloads that make `run(..., result=True)` a `RunResult`
    for type checkers; `run`'s own signature lists the same names (a test
    keeps the two equal), so a misspelt option is a type error and a
    `TypeError` at run time.
    """

    args: Mapping[str, Any] | None
    adapter: Any
    model: Any
    conversation: Conversation | None
    parallel: Any
    transcript: str | Path | IO[str] | Callable[[dict[str, Any]], None] | Transcript | None
    hooks: Sequence[Callable[..., Any]] | None
    history_processor: Callable[..., Any] | None
    env: Mapping[str, Any] | None
    system: str | None
    effort: str | None
    settings: Mapping[str, Any] | None
    quiet: bool
    body_arguments: Mapping[str, Any] | None
    run_id: str | None
    conversation_id: str | None
    on_delta: Callable[[str], None] | None
    recorder: SessionRecorder | None
    adapter_factory: Callable[[Any, Any], Adapter] | None


class Program:
    """A parsed and checked Kedi program, ready to run any number of times."""

    def __init__(
        self, module: ast.Module, source: SourceFile, linked: LinkedModule | None = None
    ) -> None:
        self.module = module
        self.source = source
        self.linked = linked
        """The resolved imports (`kedi.syntax.linking.link`); each run instantiates them afresh."""
        self._procedures: dict[str, KediProcedure] | None = None
        self._compiled = CompiledSnippets()
        """The embedded Python snippets, compiled once for all runs."""

    @property
    def path(self) -> str:
        """The program's file name as errors show it (`<string>` for source without one)."""
        return self.source.path

    def __repr__(self) -> str:
        return f"Program({self.path!r})"

    @overload
    async def run(self, *, result: Literal[True], **options: Unpack[RunOptions]) -> RunResult: ...

    @overload
    async def run(self, *, result: bool = False, **options: Unpack[RunOptions]) -> Any: ...

    async def run(
        self,
        *,
        args: Mapping[str, Any] | None = None,
        adapter: Any = None,
        model: Any = None,
        conversation: Conversation | None = None,
        parallel: Any = None,
        transcript: str
        | Path
        | IO[str]
        | Callable[[dict[str, Any]], None]
        | Transcript
        | None = None,
        hooks: Sequence[Callable[..., Any]] | None = None,
        history_processor: Callable[..., Any] | None = None,
        env: Mapping[str, Any] | None = None,
        system: str | None = None,
        effort: str | None = None,
        settings: Mapping[str, Any] | None = None,
        quiet: bool = True,
        body_arguments: Mapping[str, Any] | None = None,
        result: bool = False,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_delta: Callable[[str], None] | None = None,
        recorder: SessionRecorder | None = None,
        adapter_factory: Callable[[Any, Any], Adapter] | None = None,
    ) -> Any:
        """Run the program and return its top-level result (None without a return).

        Arguments left out fall back to `kedi.configure` / `kedi.context` defaults.
        `system`, `effort` and `settings` seed the agent state that the program's
        own directives then override. `body_arguments` runs the program as the
        body of a procedure with those parameters (how `@kedi.query` works).
        `model` is a name or a model object (a Pydantic AI `Model`, a LangChain
        `BaseChatModel`). With `result=True` the return value is a `RunResult`.
        `run_id` names the run (fresh UUIDv7 otherwise); `conversation_id`
        names the conversation: a new one with that id, or, when it differs
        from the id of the `conversation` passed, a fork of it (docs/history.md,
        "Run results and identity"). `on_delta(text)` receives the reply text
        of text calls (raw invokes, templates without captures) piece by piece
        as it arrives, on adapters that stream; structured calls deliver
        their validated value at the end, as usual.
        `recorder` links the run to a session of the history store (recording,
        replay, resume; see `kedi.runtime.sessions`).
        `adapter_factory(adapter, model)` builds the run's adapters in place of
        `kedi.adapters.create_adapter` (given the names from the arguments and
        the program's directives), e.g. to share instances across runs.
        """
        _check_run_options(
            args=args, env=env, settings=settings, conversation=conversation, transcript=transcript
        )
        conversation = _run_conversation(conversation, conversation_id)
        interpreter, layer = self._start(
            run_id=_checked_id("run_id", run_id),
            on_delta=on_delta,
            args=args,
            adapter=adapter,
            model=model,
            conversation=conversation,
            parallel=parallel,
            transcript=transcript,
            hooks=hooks,
            history_processor=history_processor,
            env=env,
            quiet=quiet,
        )
        layer.recorder = recorder
        if adapter_factory is not None:
            layer.adapter_factory = adapter_factory
        defaults = config_module.current()
        agent = initial_agent(
            system if system is not None else defaults.system,
            effort,
            {**defaults.settings, **(settings or {})},
        )
        try:
            async with run_scope():
                value = await interpreter.run_module(agent=agent, body_arguments=body_arguments)
        finally:
            if layer.transcript is not None:
                layer.transcript.close()
        if not result:
            return value
        return RunResult(
            value=value,
            run_id=layer.run_id,
            conversation_id=layer.conversation.conversation_id,
            messages=tuple(layer.added),
            usage=layer.usage,
            conversation=layer.conversation,
        )

    @overload
    def run_sync(self, *, result: Literal[True], **options: Unpack[RunOptions]) -> RunResult: ...

    @overload
    def run_sync(self, *, result: bool = False, **options: Unpack[RunOptions]) -> Any: ...

    @_takes_the_options_of(run)
    def run_sync(self, **options: Any) -> Any:
        """`run` from synchronous code (not from async code: it runs an event loop).

        It takes `run`'s options (type checkers and `help()` see them) and
        runs on the thread's kedi event loop (`kedi.runtime.loops`).
        """
        refuse_in_event_loop("inside async code, use `await program.run(...)`, not `run_sync`")
        return run_interruptibly(lambda: self.run(**options))

    def _start(self, **options: Any) -> tuple[Interpreter, CallLayer]:
        defaults = config_module.current()
        transcript = options["transcript"]
        workers = parse_parallel(
            options["parallel"] if options["parallel"] is not None else defaults.parallel
        )
        layer = CallLayer(
            adapter=options["adapter"] if options["adapter"] is not None else defaults.adapter,
            model=options["model"] if options["model"] is not None else defaults.model,
            conversation=options["conversation"],
            transcript=transcript
            if isinstance(transcript, Transcript | None)
            else Transcript(transcript),
            hooks=tuple(defaults.user_prompt_submit) + tuple(options["hooks"] or ()),
            history_processor=options["history_processor"] or defaults.history_processor,
            quiet=options["quiet"],
            run_id=options.get("run_id"),
            on_delta=options.get("on_delta"),
        )
        env = {**defaults.env, **(options["env"] or {})}
        interpreter = Interpreter(
            self.module,
            self.source,
            args=options["args"],
            env=env,
            calls=layer,
            parallel=workers,
            linked=self.linked,
            compiled=self._compiled,
        )
        layer.limiter = interpreter.limiter
        return interpreter, layer

    async def load_procedures(self) -> dict[str, KediProcedure]:
        """The top-level procedures as Python callables (async form of `procedures`)."""
        if self._procedures is None:
            interpreter, _ = self._start(
                args=None,
                adapter=None,
                model=None,
                conversation=None,
                parallel=None,
                transcript=None,
                hooks=None,
                history_processor=None,
                env=None,
                quiet=True,
            )
            await interpreter.run_module(declarations_only=True)
            self._procedures = {
                name: value
                for name, value in interpreter.module_scope.vars.items()
                if isinstance(value, KediProcedure)
            }
        return dict(self._procedures)

    @property
    def procedures(self) -> dict[str, KediProcedure]:
        """The top-level procedures as Python callables (sync and `acall` async).

        Built by running the program's declarations only (prelude, custom types,
        procedures, profiles, directives), never its model calls or returns.
        """
        if self._procedures is None:
            refuse_in_event_loop("inside async code, use `await program.load_procedures()`")
            run_on_thread_loop(self.load_procedures)
        return dict(self._procedures or {})


def _check_run_options(**options: Any) -> None:
    """Refuse, naming the option, a `run` option of the wrong kind (it failed deep inside, or not at all).

    `args={1: 2}` ran with no options, `transcript=3` wrote to file descriptor 3,
    `conversation="abc"` was ignored until history needed it.
    """
    for name in ("args", "env", "settings"):
        value = options[name]
        if value is None:
            continue
        if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
            raise KediUsageError(
                f"{name} must be a mapping of names (str) to values, such as a dict, "
                f"not {type(value).__name__} {value!r:.80}"
            )
    conversation = options["conversation"]
    if conversation is not None and not isinstance(conversation, Conversation):
        raise KediUsageError(
            "conversation must be a kedi.Conversation (kedi.Conversation() or "
            f"kedi.Conversation.load(path)), not {type(conversation).__name__} {conversation!r:.80}"
        )
    transcript = options["transcript"]
    if not (
        transcript is None
        or isinstance(transcript, str | os.PathLike | Transcript)
        or callable(transcript)
        or callable(getattr(transcript, "write", None))
    ):
        raise KediUsageError(
            "transcript must be a file path, an open text file or a callable taking each record, "
            f"not {type(transcript).__name__} {transcript!r:.80}"
        )


def _checked_id(name: str, value: str | None) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise KediUsageError(f"{name} must be a non-empty string, not {value!r}")
    return value


def _run_conversation(
    conversation: Conversation | None, conversation_id: str | None
) -> Conversation | None:
    """The conversation a run uses: see `Program.run` (`conversation_id` forks a passed one)."""
    conversation_id = _checked_id("conversation_id", conversation_id)
    if conversation_id is None:
        return conversation
    if conversation is None:
        return Conversation(conversation_id)
    if conversation.conversation_id == conversation_id:
        return conversation
    return conversation.fork(conversation_id)


def initial_agent(
    system: str | None, effort: str | None, settings: Mapping[str, Any]
) -> AgentState:
    """The agent state a run starts from (API defaults; directives override it)."""
    agent = AgentState(effort=effort)
    if settings:  # most runs have none: no copy of the empty mapping per run
        agent = agent.with_settings(settings)
    if system:
        row = ast.Row(segments=(ast.Text(value=system),))
        agent = replace(agent, system=SystemText((row,)))
    return agent


def compile_program(
    source: str,
    *,
    path: str | None = None,
    fragment: bool = False,
    known_globals: Sequence[str] = (),
) -> Program:
    """Parse and check `source`; return a runnable `Program`.

    `fragment` marks source that is not a whole program (a query body);
    `known_globals` names the values the embedder will provide at run time.
    """
    linked = check_and_link(source, path, fragment=fragment, known_globals=known_globals)
    return Program(linked.module, linked.source, linked)
