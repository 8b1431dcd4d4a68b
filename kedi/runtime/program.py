"""Compiled programs and how to run them (the embedding API's core).

    program = kedi.compile(source, path="flow.kedi")
    result = await program.run(args={"title": "x"}, model="script:replies.json")
    result = program.run_sync()

`compile` parses and runs the static checks (no execution). Each `run` is an
independent execution: a fresh module scope, prelude, and conversation (unless
a `conversation=` is passed, which lets several runs share history).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import anyio

from kedi.adapters.resources import run_scope
from kedi.history.lanes import Conversation
from kedi.runtime import config as config_module
from kedi.runtime.calls import CallLayer, Transcript
from kedi.runtime.config import parse_parallel
from kedi.runtime.interpreter import Interpreter
from kedi.runtime.interrupts import run_interruptibly
from kedi.runtime.procedures import KediProcedure, refuse_in_event_loop
from kedi.runtime.scopes import AgentState, SystemText
from kedi.source import SourceFile
from kedi.syntax import ast
from kedi.syntax.checks import check_source


class Program:
    """A parsed and checked Kedi program, ready to run any number of times."""

    def __init__(self, module: ast.Module, source: SourceFile) -> None:
        self.module = module
        self.source = source
        self._procedures: dict[str, KediProcedure] | None = None

    @property
    def path(self) -> str:
        return self.source.path

    async def run(
        self,
        *,
        args: Mapping[str, Any] | None = None,
        adapter: Any = None,
        model: str | None = None,
        conversation: Conversation | None = None,
        parallel: Any = None,
        transcript: str | Path | IO[str] | Callable[[dict[str, Any]], None] | None = None,
        hooks: Sequence[Callable[..., Any]] | None = None,
        history_processor: Callable[..., Any] | None = None,
        env: Mapping[str, Any] | None = None,
        system: str | None = None,
        effort: str | None = None,
        settings: Mapping[str, Any] | None = None,
        quiet: bool = True,
        body_arguments: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run the program and return its top-level result (None without a return).

        Arguments left out fall back to `kedi.configure` / `kedi.context` defaults.
        `system`, `effort` and `settings` seed the agent state that the program's
        own directives then override. `body_arguments` runs the program as the
        body of a procedure with those parameters (how `@kedi.query` works).
        """
        interpreter, layer = self._start(
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
        defaults = config_module.current()
        agent = initial_agent(
            system if system is not None else defaults.system,
            effort,
            {**defaults.settings, **(settings or {})},
        )
        try:
            async with run_scope():
                return await interpreter.run_module(agent=agent, body_arguments=body_arguments)
        finally:
            if layer.transcript is not None:
                layer.transcript.close()

    def run_sync(self, **options: Any) -> Any:
        """`run` from synchronous code (it starts an event loop: not from async code)."""
        refuse_in_event_loop("inside async code, use `await program.run(...)`, not `run_sync`")
        return run_interruptibly(lambda: self.run(**options))

    def _start(self, **options: Any) -> tuple[Interpreter, CallLayer]:
        defaults = config_module.current()
        transcript = options["transcript"]
        workers = parse_parallel(options["parallel"] if options["parallel"] is not None else defaults.parallel)
        layer = CallLayer(
            adapter=options["adapter"] if options["adapter"] is not None else defaults.adapter,
            model=options["model"] if options["model"] is not None else defaults.model,
            conversation=options["conversation"],
            transcript=Transcript(transcript) if transcript is not None else None,
            hooks=tuple(defaults.user_prompt_submit) + tuple(options["hooks"] or ()),
            history_processor=options["history_processor"] or defaults.history_processor,
            quiet=options["quiet"],
        )
        env = {**defaults.env, **(options["env"] or {})}
        interpreter = Interpreter(
            self.module, self.source, args=options["args"], env=env, calls=layer, parallel=workers
        )
        layer.limiter = interpreter.limiter
        return interpreter, layer

    async def load_procedures(self) -> dict[str, KediProcedure]:
        """The top-level procedures as Python callables (async form of `procedures`)."""
        if self._procedures is None:
            interpreter, _ = self._start(
                args=None, adapter=None, model=None, conversation=None, parallel=None,
                transcript=None, hooks=None, history_processor=None, env=None, quiet=True,
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
            anyio.run(self.load_procedures, backend="asyncio")
        return dict(self._procedures or {})


def initial_agent(system: str | None, effort: str | None, settings: Mapping[str, Any]) -> AgentState:
    """The agent state a run starts from (API defaults; directives override it)."""
    agent = AgentState(effort=effort).with_settings(settings)
    if system:
        row = ast.Row(segments=(ast.Text(value=system),))
        agent = replace(agent, system=SystemText((row,)))
    return agent


def compile_program(
    source: str, *, path: str | None = None, fragment: bool = False, known_globals: Sequence[str] = ()
) -> Program:
    """Parse and check `source`; return a runnable `Program`.

    `fragment` marks source that is not a whole program (a query body);
    `known_globals` names the values the embedder will provide at run time.
    """
    module = check_source(source, path, fragment=fragment, known_globals=known_globals)
    return Program(module, SourceFile(source, path))
