"""Embedded Python: the prelude, inline expressions, standalone statements and fences.

Each snippet compiles once, under a synthetic file name such as
`<kedi:flow.kedi:12>`, and is registered with `linecache`, so Python's own
tracebacks show its source. A Python line N of a snippet is `.kedi` line
`code.first_line + N - 1`; `PythonFailure.trace` carries that mapping.

Module-level semantics, as the Kedi documentation describes them:

* the interpreter passes a namespace holding the prelude names, the visible Kedi
  values and `__builtins__`; it is the code's globals *and* locals, so a bare
  name and `globals()["x"]` both read a Kedi value, and `count += 1` rebinds it
  without `global`;
* after a statement or fence runs, `ExecResult.writes` lists the names that
  existed before and now hold a different object; the interpreter syncs those
  back. Names the code created are not reported: they stay local and vanish;
* a `return` at the top level of a fence ends it with a value. It is compiled to
  `raise <_KediReturn>(value)`; `_KediReturn` derives from `BaseException`, so an
  `except Exception:` in the fence cannot swallow it (a bare `except:` can).

Caches are plain dicts written with single atomic operations: two threads that
compile the same snippet at once both get a correct code object, and one wins.
"""

from __future__ import annotations

import ast
import dis
import itertools
import linecache
import sys
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import CodeType, ModuleType
from typing import Any, TypeVar, cast

from kedi.errors import KediExecutionError, KediPythonTrace
from kedi.runtime import interrupts
from kedi.syntax.ast import PythonCode
from kedi.syntax.python_snippets import (
    PythonMode,
    parse_leniently,
    snippet_source,
    top_level_returns,
)

CALL_NAME = "__kedi_call__"
"""The global name through which awaited procedure calls go (present only while such code runs)."""

RETURN_NAME = "__kedi_return__"
"""The global name a rewritten top-level `return` raises through (present only while a fence runs)."""

DYNAMIC_ACCESS = frozenset({"globals", "locals", "vars", "dir", "eval", "exec"})
"""Builtins through which code can read or write any global by a computed name."""

_EMPTY_EXPRESSION = "Inline Python expression cannot be empty"
# CPython's messages for a `nonlocal` that can only mean a Kedi binding (a global).
_NONLOCAL_ERRORS = ("nonlocal declaration not allowed at module level", "no binding for nonlocal")
_ABSENT = object()
_PRELUDE_NUMBERS = itertools.count(1)


class PythonFailure(Exception):
    """Embedded Python failed: it raised, or it does not compile.

    `original` is the exception Python raised (a `SyntaxError` when the snippet
    does not compile), `trace` the innermost line of the failing snippet, and
    `traces` every line of any snippet of this program on the Python stack,
    outermost first (so a failure inside a prelude function shows both lines).
    """

    def __init__(
        self,
        message: str,
        original: BaseException,
        trace: KediPythonTrace | None = None,
        traces: tuple[KediPythonTrace, ...] = (),
    ) -> None:
        """Record the message, the exception Python raised and the mapped lines."""
        super().__init__(message)
        self.message = message
        self.original = original
        self.trace = trace
        self.traces = traces

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by constructor arguments."""
        return (type(self), (self.message, self.original, self.trace, self.traces))


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What running a statement or fence did."""

    returned: bool
    """Whether a top-level `return` ended it."""
    value: Any
    """The returned value (`None` without a `return`)."""
    writes: dict[str, Any]
    """Names that existed in the namespace before and now hold a different object."""


class _KediReturn(BaseException):
    """Carries a fence's top-level `return` value out of `exec`."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


class _Running:
    """One run of statements: a top-level `return` ends it, an exception becomes a `PythonFailure`.

    `helpers` are set in the namespace for the run only, with dict's own
    methods (the interpreter's namespace may track item writes). After the
    run, `returned` and `value` say whether a `return` ended it and with what.
    (A class, not `contextlib.contextmanager`: this runs for every statement,
    and a generator made a short one up to twice as slow.)
    """

    __slots__ = ("_code", "_failure", "_helpers", "_namespace", "returned", "value")

    def __init__(
        self,
        failure: Callable[[Exception, PythonCode], PythonFailure],
        code: PythonCode,
        namespace: dict[str, Any],
        helpers: dict[str, Any],
    ) -> None:
        self._failure, self._code = failure, code
        self._namespace, self._helpers = namespace, helpers
        self.returned, self.value = False, None

    def __enter__(self) -> _Running:
        for name, helper in self._helpers.items():
            dict.__setitem__(self._namespace, name, helper)
        interrupts.python.running += 1
        return self

    def __exit__(self, kind: object, exc: BaseException | None, traceback: object) -> bool:
        try:
            if isinstance(exc, _KediReturn):
                self.returned, self.value = True, exc.value
                return True
            if isinstance(exc, Exception):
                raise self._failure(exc, self._code) from exc
            return False
        finally:
            interrupts.python.running -= 1
            for name in self._helpers:
                dict.pop(self._namespace, name, None)


ProcedureCall = Callable[..., Awaitable[Any]]
"""Awaits a call of a procedure from embedded Python: `call(procedure, *args, **kwargs)`."""


@dataclass(frozen=True, slots=True)
class _Callers:
    """How a snippet uses names: as direct calls that can be awaited, or otherwise."""

    awaitable: frozenset[str]
    other: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Block:
    """A compiled statement or fence and what its bytecode shows about names."""

    code: CodeType
    reads: frozenset[str]
    stores: frozenset[str] | None
    """Global names it can rebind; `None` when it reaches globals dynamically."""
    returns: bool


class CompiledSnippets:
    """A program's compiled snippets, kept by its `Program` so its runs compile each snippet once.

    Compiled code does not depend on the globals it later runs in, so every
    run's bridge (each with its own prelude) may share it; the file names the
    code was compiled under are shared with it, so traces still find their source.
    """

    def __init__(self) -> None:
        self.expressions: dict[PythonCode, CodeType] = {}
        self.blocks: dict[PythonCode, _Block] = {}
        self.sources: dict[str, PythonCode] = {}
        self.callers: dict[PythonCode, _Callers] = {}
        self.awaiting: dict[tuple[PythonCode, str, frozenset[str]], CodeType] = {}


class PythonBridge:
    """Compiles and runs a program's embedded Python; one per `.kedi` file."""

    def __init__(self, path: str, compiled: CompiledSnippets | None = None) -> None:
        """Create the bridge of the program at `path` (the name shown in traces).

        `compiled` is the program's compile cache, shared by its runs (a fresh one otherwise).
        """
        self.path = path
        # The prelude is a real module in `sys.modules` (removed with the bridge):
        # dataclasses, typing.get_type_hints and pickle look classes' modules up there.
        self._module = ModuleType(f"__kedi_prelude_{next(_PRELUDE_NUMBERS)}__")
        self._module.__file__ = path
        sys.modules[self._module.__name__] = self._module
        weakref.finalize(self, sys.modules.pop, self._module.__name__, None)
        self.prelude: dict[str, Any] = self._module.__dict__
        """The prelude's globals; they persist for the whole program."""
        compiled = compiled if compiled is not None else CompiledSnippets()
        self._expressions = compiled.expressions
        self._blocks = compiled.blocks
        self._sources = compiled.sources
        self._callers = compiled.callers
        self._awaiting = compiled.awaiting

    # ------------------------------------------------------------------- running

    def run_prelude(self, code: PythonCode) -> None:
        """Run the prelude fence in `self.prelude` (a `return` in it is ignored).

        Raises:
            PythonFailure: the prelude raised or does not compile.
        """
        self.execute(code, self.prelude)

    def evaluate(self, code: PythonCode, namespace: dict[str, Any]) -> Any:
        """Evaluate one expression with `namespace` as its globals and return its value.

        Raises:
            PythonFailure: the expression raised, is empty, or does not compile.
        """
        compiled = self._expressions.get(code)
        if compiled is None:
            compiled = self._compile_expression(code)
        interrupts.python.running += 1
        try:
            return eval(compiled, namespace)
        except Exception as exc:
            raise self._failure(exc, code) from exc
        finally:
            interrupts.python.running -= 1

    async def evaluate_awaiting(
        self,
        code: PythonCode,
        namespace: dict[str, Any],
        procedures: frozenset[str],
        call: ProcedureCall,
    ) -> Any:
        """Evaluate an expression whose direct calls of `procedures` are awaited on the event loop.

        `f(n + 1)` runs as `await call(f, n + 1)`: a procedure called from
        Python runs in the caller's task, so nesting takes no worker thread.
        Only valid when `calls_only(code, procedures)` holds.

        Raises:
            PythonFailure: the expression raised, is empty, or does not compile.
        """
        if not snippet_source(code.code):
            self._compile_expression(code)  # raises the empty-expression failure
        compiled = self._awaiting_code(code, "eval", procedures)
        dict.__setitem__(namespace, CALL_NAME, _released(call))
        interrupts.python.running += 1
        try:
            return await eval(compiled, namespace)
        except Exception as exc:
            raise self._failure(exc, code) from exc
        finally:
            interrupts.python.running -= 1
            dict.pop(namespace, CALL_NAME, None)

    def execute(self, code: PythonCode, namespace: dict[str, Any]) -> ExecResult:
        """Run statements (a backtick statement or a fence) with `namespace` as globals.

        Raises:
            PythonFailure: the code raised, does not compile, or uses `nonlocal`
                on a Kedi binding.
        """
        block = self._block(code)
        before = _snapshot(namespace, block.stores)
        helpers = {RETURN_NAME: _KediReturn} if block.returns else {}
        with _Running(self._failure, code, namespace, helpers) as ended:
            exec(block.code, namespace)
        return ExecResult(ended.returned, ended.value, _writes(namespace, before))

    async def execute_awaiting(
        self,
        code: PythonCode,
        namespace: dict[str, Any],
        procedures: frozenset[str],
        call: ProcedureCall,
    ) -> ExecResult:
        """`execute`, with direct calls of `procedures` awaited as in `evaluate_awaiting`.

        Raises:
            PythonFailure: the code raised or does not compile.
        """
        block = self._block(code)
        compiled = self._awaiting_code(code, "exec", procedures)
        before = _snapshot(namespace, block.stores)
        helpers = {RETURN_NAME: _KediReturn, CALL_NAME: _released(call)}
        with _Running(self._failure, code, namespace, helpers) as ended:
            await eval(compiled, namespace)
        return ExecResult(ended.returned, ended.value, _writes(namespace, before))

    # ------------------------------------------------------------------- analysis

    def references(self, code: PythonCode) -> frozenset[str]:
        """Return every global name the code can read, nested functions included.

        Names read through `globals()`, `vars()` and the like cannot be listed;
        `reads_dynamically` tells when that can happen.

        Raises:
            PythonFailure: the code does not compile.
        """
        return self._block(code).reads

    def reads_dynamically(self, code: PythonCode) -> bool:
        """Whether the code can reach globals by computed names (`globals()["x"]`)."""
        return self._block(code).stores is None

    def calls_only(self, code: PythonCode, names: frozenset[str]) -> bool:
        """Whether every use of `names` in the code is a direct call that can be awaited.

        A direct call `f(...)` outside any `def`, `lambda`, class body or
        generator expression can become `await f(...)`; any other use (`map(f,
        xs)`, a call inside a lambda, `globals()`) calls `f` synchronously.
        """
        callers = self._callers.get(code)
        if callers is None:
            tree = parse_leniently(snippet_source(code.code), self._filename(code), "exec")
            callers = self._callers[code] = _find_calls(tree)
        return (
            names <= callers.awaitable
            and callers.other.isdisjoint(names)
            and not self.reads_dynamically(code)
        )

    # ------------------------------------------------------------------- compiling

    def _compile_expression(self, code: PythonCode) -> CodeType:
        filename = self._filename(code)
        source = snippet_source(code.code)
        if not source:
            error = SyntaxError(_EMPTY_EXPRESSION)
            raise PythonFailure(_EMPTY_EXPRESSION, error, self._trace(code, filename, 1))
        try:
            compiled = compile(
                parse_leniently(source, filename, "eval"), filename, "eval", dont_inherit=True
            )
        except SyntaxError as exc:
            raise self._syntax_failure(exc, code, filename) from None
        self._expressions[code] = compiled
        return compiled

    def _block(self, code: PythonCode) -> _Block:
        block = self._blocks.get(code)
        if block is None:
            block = self._compile_block(code)
            self._blocks[code] = block
        return block

    def _compile_block(self, code: PythonCode) -> _Block:
        filename = self._filename(code)
        try:
            tree = cast(ast.Module, parse_leniently(snippet_source(code.code), filename, "exec"))
        except SyntaxError as exc:
            raise self._syntax_failure(exc, code, filename) from None
        returns = _rewrite_returns(tree)
        try:
            compiled = compile(tree, filename, "exec", dont_inherit=True)
        except SyntaxError as exc:
            if (exc.msg or "").startswith(_NONLOCAL_ERRORS):
                raise self._nonlocal_failure(exc, tree, code, filename) from None
            raise self._syntax_failure(exc, code, filename) from None
        reads, stores = _global_names(compiled)
        reads.discard(RETURN_NAME)
        dynamic = not DYNAMIC_ACCESS.isdisjoint(reads)
        return _Block(compiled, frozenset(reads), None if dynamic else frozenset(stores), returns)

    def _awaiting_code(
        self, code: PythonCode, mode: PythonMode, procedures: frozenset[str]
    ) -> CodeType:
        key = (code, mode, procedures)
        compiled = self._awaiting.get(key)
        if compiled is None:
            filename = self._filename(code)
            tree = parse_leniently(snippet_source(code.code), filename, mode)
            _await_procedure_calls(tree, procedures)
            if mode == "exec":
                _rewrite_returns(tree)
            flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            compiled = self._awaiting[key] = compile(
                tree, filename, mode, flags=flags, dont_inherit=True
            )
        return compiled

    def _filename(self, code: PythonCode) -> str:
        """Return the snippet's synthetic file name, registering it on first use."""
        base = f"<kedi:{self.path}:{code.first_line}"
        filename, number = f"{base}>", 1
        # Two different snippets can start on the same line (`<`a`> and <`b`>`).
        while (known := self._sources.setdefault(filename, code)) != code:
            number += 1
            filename = f"{base}#{number}>"
        if known is code:
            lines = code.code.splitlines(keepends=True)
            linecache.cache[filename] = (len(code.code), None, lines, filename)
        return filename

    # ------------------------------------------------------------------- failures

    def _trace(self, code: PythonCode, filename: str, line: int) -> KediPythonTrace:
        lines = code.code.splitlines()
        snippet = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        return KediPythonTrace(
            code=code.code,
            filename=filename,
            python_line=line,
            kedi_line=code.first_line + line - 1,
            path=self.path,
            snippet=snippet,
        )

    def _failure(self, exc: Exception, code: PythonCode) -> PythonFailure:
        if isinstance(exc, KediExecutionError):
            # A procedure called from this code failed and already says where: pass it on
            # as it is (walking its traceback at every level of a deep recursion is quadratic).
            return PythonFailure(exc.message, exc)
        filename = self._filename(code)
        traces: list[KediPythonTrace] = []
        tb = exc.__traceback__
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            source = self._sources.get(name)
            if source is not None:
                traces.append(self._trace(source, name, tb.tb_lineno))
            tb = tb.tb_next
        inner = next((t for t in reversed(traces) if t.filename == filename), None)
        message = str(exc) or type(exc).__name__
        return PythonFailure(message, exc, inner, tuple(traces))

    def _syntax_failure(self, exc: SyntaxError, code: PythonCode, filename: str) -> PythonFailure:
        trace = self._trace(code, filename, exc.lineno or 1)
        return PythonFailure(exc.msg or "invalid syntax", exc, trace, (trace,))

    def _nonlocal_failure(
        self, exc: SyntaxError, tree: ast.Module, code: PythonCode, filename: str
    ) -> PythonFailure:
        names = [
            name
            for node in ast.walk(tree)
            if isinstance(node, ast.Nonlocal) and node.lineno == exc.lineno
            for name in node.names
        ]
        name = names[0] if names else "name"
        message = f"`nonlocal {name}` cannot rebind a Kedi binding; use `global {name}`"
        trace = self._trace(code, filename, exc.lineno or 1)
        return PythonFailure(message, exc, trace, (trace,))


def _rewrite_returns(tree: ast.AST) -> bool:
    """Rewrite top-level `return x` into `raise __kedi_return__(x)`; tell whether there was one."""
    found = False
    for statements, index in top_level_returns(tree):
        found = True
        child = statements[index]
        result = child.value if child.value is not None else _at(ast.Constant(None), child)
        call = _at(ast.Call(_at(ast.Name(RETURN_NAME, ast.Load()), child), [result], []), child)
        statements[index] = _at(ast.Raise(exc=call, cause=None), child)
    return found


_SYNC_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.GeneratorExp)
"""Where `await` cannot stand: calls of procedures there stay synchronous."""


def _find_calls(tree: ast.AST) -> _Callers:
    """Sort name reads into direct calls that can be awaited and every other use (iteratively)."""
    awaitable: set[str] = set()
    other: set[str] = set()
    pending: list[tuple[ast.AST, bool]] = [(tree, False)]
    while pending:
        node, synchronous = pending.pop()
        if isinstance(node, ast.Name):
            other.add(node.id)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and not synchronous:
                awaitable.add(node.func.id)
            else:
                pending.append((node.func, synchronous))
            pending.extend((child, synchronous) for child in (*node.args, *node.keywords))
        else:
            inner = synchronous or isinstance(node, _SYNC_SCOPES)
            pending.extend((child, inner) for child in ast.iter_child_nodes(node))
    return _Callers(frozenset(awaitable), frozenset(other))


def _await_procedure_calls(tree: ast.AST, procedures: frozenset[str]) -> None:
    """Rewrite direct calls `f(args)` of `procedures` into `await __kedi_call__(f, args)`.

    Calls inside a `def`, `lambda`, class body or generator expression stay
    (`calls_only` sends code with procedure calls there to a worker thread).
    Iterative: the places of the calls are found top-down, then rewritten
    bottom-up, so an inner call is rewritten before the call holding it.
    """
    places: list[tuple[ast.AST, str, int | None]] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        for field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for index, child in enumerate(children):
                if not isinstance(child, ast.AST) or isinstance(child, _SYNC_SCOPES):
                    continue
                if (
                    isinstance(child, ast.Call)
                    and isinstance(child.func, ast.Name)
                    and child.func.id in procedures
                ):
                    places.append((node, field, index if isinstance(value, list) else None))
                pending.append(child)
    for parent, field, position in reversed(places):
        value = getattr(parent, field)
        node = value[position] if position is not None else value
        call = _at(
            ast.Call(
                _at(ast.Name(CALL_NAME, ast.Load()), node), [node.func, *node.args], node.keywords
            ),
            node,
        )
        awaited = _at(ast.Await(call), node)
        if position is not None:
            value[position] = awaited
        else:
            setattr(parent, field, awaited)


_Located = TypeVar("_Located", bound=ast.AST)


def _at(new: _Located, old: ast.AST) -> _Located:
    """`new` placed at `old`'s location (instead of a recursive `ast.fix_missing_locations`)."""
    return ast.copy_location(new, old)


def _released(call: ProcedureCall) -> ProcedureCall:
    """`call`, counted as time out of embedded Python (an interrupt then waits for a safe point)."""

    async def released(procedure: Any, *args: Any, **kwargs: Any) -> Any:
        interrupts.python.running -= 1
        try:
            return await call(procedure, *args, **kwargs)
        finally:
            interrupts.python.running += 1

    return released


def _writes(namespace: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """Names bound `before` that now hold a different object, and their new values."""
    writes = {}
    for name, old in before.items():
        new = dict.get(namespace, name, _ABSENT)
        if new is not old and new is not _ABSENT:
            writes[name] = new
    return writes


_READ_OPS = frozenset({"LOAD_NAME", "LOAD_GLOBAL", "LOAD_FROM_DICT_OR_GLOBALS"})


def _global_names(module: CodeType) -> tuple[set[str], set[str]]:
    """Return (reads, stores) of namespace names, from the bytecode of all nested code.

    Bytecode is exact where a source walk would have to redo Python's scoping:
    `count += 1` at the top level is `LOAD_NAME`/`STORE_NAME`, a nested function's
    `global count` is `STORE_GLOBAL`, and a class body's `STORE_NAME` writes to the
    class, not the namespace (so only the module's own `STORE_NAME` counts).
    """
    reads: set[str] = set()
    stores: set[str] = set()
    pending = [module]
    while pending:
        code = pending.pop()
        for instruction in dis.get_instructions(code):
            op = instruction.opname
            if op in _READ_OPS:
                reads.add(instruction.argval)
            elif op == "STORE_GLOBAL" or (op == "STORE_NAME" and code is module):
                stores.add(instruction.argval)
        pending.extend(const for const in code.co_consts if isinstance(const, CodeType))
    return reads, stores


def _snapshot(namespace: dict[str, Any], names: frozenset[str] | None) -> dict[str, Any]:
    """Return the raw bindings of `names` (all of them for `None`).

    `dict`'s own methods read the stored objects without going through a
    subclass's `__getitem__`, which may force a pending parallel result.
    """
    if names is None:
        return dict.copy(namespace)
    before = {}
    for name in names:
        value = dict.get(namespace, name, _ABSENT)
        if value is _ABSENT and type(namespace) is not dict:
            value = namespace.get(name, _ABSENT)  # a lazy namespace loads the binding now
        if value is not _ABSENT:
            before[name] = value
    return before
