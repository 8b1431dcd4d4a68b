"""Running imported modules: each initialises once per run of its root program.

The check phase (`kedi.syntax.linking.link`) has already resolved every
`> import:` to a `LinkedModule` and proved each imported name exported. At
run time `> import:` runs the module's top level in its own interpreter (its
own scope, prelude and agent state, the root's call layer) the first time
the run imports it; every later import in the same run, from any module (a
diamond), reuses those values. A new run starts from fresh instances.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kedi.errors import KediNameError
from kedi.runtime import trace
from kedi.runtime.scopes import UNBOUND, AgentState
from kedi.syntax import ast
from kedi.syntax.linking import LinkedModule

if TYPE_CHECKING:
    from kedi.runtime.interpreter import Interpreter


class ModuleInstances:
    """The imported modules of one run, by linked module, with their exported values."""

    def __init__(self) -> None:
        self._exports: dict[int, dict[str, Any]] = {}

    async def exports_of(self, linked: LinkedModule, importer: Interpreter) -> dict[str, Any]:
        """The exported values of `linked`, running its top level on first use in this run."""
        key = id(linked)
        found = self._exports.get(key)
        if found is not None:
            return found
        from kedi.runtime.interpreter import Interpreter

        child = Interpreter(
            linked.module,
            linked.source,
            env={k: v for k, v in importer.env.items() if k != "args"},
            calls=importer.calls,
            linked=linked,
            modules=self,
        )
        child.limiter = importer.limiter
        await child.run_module(agent=AgentState())
        values: dict[str, Any] = {}
        for name in linked.exports:
            value = child.find(name, child.module_scope)
            if value is UNBOUND:
                ended = next((n for n in linked.module.body if isinstance(n, ast.Return)), None)
                why = (
                    f": its top-level `=` at line {ended.span.line} ended it first" if ended else ""
                )
                raise KediNameError(
                    f"module `{linked.source.path}` exports `{name}`, but its top level never bound it{why}",
                    frames=trace.current_frames(),
                )
            values[name] = value
        self._exports[key] = values
        return values


async def run_import(node: ast.Import, importer: Interpreter) -> dict[str, Any]:
    """The bindings one `> import:` adds to the importing scope."""
    linked = importer.linked.imports[node.module] if importer.linked is not None else None
    if linked is None:  # pragma: no cover - compile_program always links
        raise KediNameError(f"module `{node.module}` was not linked", frames=trace.current_frames())
    exports = await importer.modules.exports_of(linked, importer)
    if node.names is None:
        return dict(exports)
    return {name.name: exports[name.name] for name in node.names}
