"""`>>` and `<<`: the statements that call the model.

`model_statement` is the interpreter's handler for both: it takes the
statement's call site, resolves the capture types, renders the prompt and
instructions (now, or in parallel mode later from a snapshot) and hands the
call to the call layer (`kedi.runtime.calls`), binding the outputs, or
promises of them while the call is scheduled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from kedi.errors import KediExecutionError, KediTraceFrame
from kedi.runtime import trace
from kedi.runtime.procedures import KediProcedure
from kedi.runtime.scheduler import KediPromise
from kedi.runtime.scopes import Frame, SystemText
from kedi.runtime.sites import CallSite, call_site
from kedi.syntax import ast

if TYPE_CHECKING:
    from kedi.runtime.calls import Texts
    from kedi.runtime.interpreter import Interpreter


async def model_statement(
    interp: Interpreter, node: ast.Template | ast.RawInvoke, frame: Frame
) -> None:
    """`>> ...` and `[x] << ...`: one model call, its outputs bound (as promises while scheduled).

    This runs for every model call, so the common case (no scheduler,
    nothing to render) goes straight from the call site to the call layer:
    every function call and object saved here is measurable against a
    zero-latency model. For the same reason the statement's trace frame is
    not pushed: an error escaping the statement gets it on the way out
    (`trace.attach`), and a scheduled call pushes it only while it spawns.
    """
    site = call_site(node, node.rows)
    try:
        if site.target is not None:
            interp.check_assignable(site.target, frame)
        annotations = tuple([capture.resolve(interp, frame.scope) for capture in site.captures])
        if frame.scheduler is not None:
            await _schedule_call(interp, node, site, annotations, frame)
            return
        system = frame.agent.system
        prompt, instructions = site.prompt, "" if system is None else system.text
        if prompt is None or instructions is None:
            prompt, instructions = await _render_texts(interp, site, system, frame)
        plan = interp.calls.plan(interp, frame.agent)
        output = site.output_spec(annotations) if annotations else None
        if plan.history:
            result = await interp.calls.execute(
                interp.calls.prepare(plan, output, site.origin), (prompt, instructions)
            )
        else:
            result = (
                await interp.calls.send(plan, output, site.origin, (prompt, instructions))
            ).value
        if site.target is not None:
            interp.bind(frame, site.target, result, node.span)
        else:
            for capture in site.captures:
                interp.bind(frame, capture.name, result[capture.name], node.span)
    except KediExecutionError as error:
        trace.attach(error, _trace_entry(interp, site, frame.procedure))
        raise
    except Exception as exc:
        wrapped = trace.wrap(exc)
        trace.attach(wrapped, _trace_entry(interp, site, frame.procedure))
        raise wrapped from exc


def _trace_entry(interp: Interpreter, site: CallSite, procedure: str | None) -> KediTraceFrame:
    """The trace frame of a `>>` / `<<` statement, built once per node and procedure."""
    entry = site.trace
    if entry is None or entry.procedure_name != procedure:
        span = site.node.span
        entry = site.trace = trace.entry(
            "template", span, procedure=procedure, snippet=interp.snippet(span)
        )
    return entry


async def _schedule_call(
    interp: Interpreter,
    node: ast.Template | ast.RawInvoke,
    site: CallSite,
    annotations: tuple[Any, ...],
    frame: Frame,
) -> None:
    """Schedule a call (parallel mode) and bind its outputs as promises of its `ScheduledCall`.

    `annotations` are the resolved capture types (empty for a text call).
    A prompt that calls procedures (which may make model calls of their
    own) is rendered here, in source order, before the call takes its
    place in its lane; any other prompt renders inside the scheduled task
    from a snapshot of the values visible now.
    """
    scheduler = frame.scheduler
    assert scheduler is not None
    system = frame.agent.system
    instructions = "" if system is None else system.text
    texts: Texts
    if site.prompt is not None and instructions is not None:
        texts = (
            site.prompt,
            instructions,
        )  # both rendered ahead: nothing to render or snapshot
    elif _calls_procedures(interp, (*site.rows, *(system.rows if system else ())), frame):
        texts = await _render_texts(interp, site, system, frame)
    else:
        snapshot = frame.snapshot()

        def texts() -> Awaitable[tuple[str, str]]:
            return _render_texts(interp, site, system, snapshot)

    plan = interp.calls.plan(interp, frame.agent)
    output = site.output_spec(annotations) if annotations else None
    prepared = interp.calls.prepare(plan, output, site.origin)

    async def run_call() -> Any:
        try:
            return await interp.calls.execute(prepared, texts)
        except KediExecutionError:
            raise
        except Exception as exc:
            # Wrapped in the task, whose trace stack ends with this statement's
            # frame: the error points at the call that failed, wherever it is forced.
            raise trace.wrap(exc) from exc

    frame.sequence += 1
    token = trace.push(_trace_entry(interp, site, frame.procedure))  # the task copies the stack now
    try:
        call = await scheduler.spawn(frame.sequence, site.origin, run_call)
    finally:
        trace.pop(token)
    if site.target is not None:
        interp.bind(frame, site.target, KediPromise(call, None), node.span)
        return
    for capture in site.captures:
        interp.bind(frame, capture.name, KediPromise(call, capture.name), node.span)


async def _render_texts(
    interp: Interpreter, site: CallSite, system: SystemText | None, frame: Frame
) -> tuple[str, str]:
    """A call's prompt and `> system:` instructions ("" without one), in that order.

    Text that substitutes nothing was rendered once, at the call site or
    the system directive, and is not rendered again.
    """
    prompt = site.prompt
    if prompt is None:
        prompt = await interp.render_rows(site.rows, frame)
    instructions = "" if system is None else system.text
    if instructions is None:
        instructions = await interp.render_rows(system.rows, frame)  # type: ignore[union-attr]  # text is None only when system is set
    return prompt, instructions


def _calls_procedures(interp: Interpreter, rows: Sequence[ast.Row], frame: Frame) -> bool:
    for row in rows:
        for segment in row.segments:
            if isinstance(segment, ast.Call):
                return True
            if isinstance(segment, (ast.InlinePython, ast.BareBacktick)):
                for name in interp.bridge.references(segment.code):
                    try:
                        if isinstance(interp.lookup(name, frame.scope), KediProcedure):
                            return True
                    except KeyError:
                        pass
    return False
