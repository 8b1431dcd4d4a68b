"""Module resolution and linking: `> import:` and `> export:` at check time.

`link(module, source)` resolves every top-level `> import:` of a checked
module (spec §6.4), loads and checks each imported file once, and returns a
`LinkedModule` graph the runtime runs from. Every problem is a located
`Diagnostic` raised as one `KediCheckError` before anything runs:

- a path is `/`-separated identifiers, never absolute, `.`/`..`, a
  backslash, an empty segment or a `.kedi` suffix;
- resolution tries, in order, the `.kedi` file relative to the importing
  file, a module bundled with kedi (`kedi/bundled/`), and an installed
  package found through the `kedi.packages` entry point group (`pkg` loads
  the package's `main.kedi`, `pkg/sub` its `sub.kedi`); a miss lists every
  candidate searched;
- source held only in memory (`kedi -c`, `kedi.compile(text)` without a
  path) has no directory, so it can import bundled modules and installed
  packages but not files next to it, and the error says so;
- a selectively imported name must be exported by the module; an exported
  name must be bound at the module's top level (or imported into it);
- a cycle of imports is an error naming the whole cycle;
- a module with a whole `> import: m` is checked again once its imports are
  linked, with m's exports bound (`check_module(imports=...)`), so an unknown
  name, type or arity is reported as in a module without the import.

Parsed and checked modules are kept per process, keyed by their resolved
file and its modification time and size, so a module imported again (by
another root, or a later `kedi.compile`) costs a few `stat` calls, no parse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

from kedi.errors import Diagnostic, KediCheckError
from kedi.source import SourceFile, read_source
from kedi.syntax import ast
from kedi.syntax.python_snippets import python_bindings

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "bundled"
"""Where the modules shipped inside the kedi wheel live."""

DOCUMENTED_BUNDLED = ("errors", "filesystem", "helpers", "require", "sandbox", "this", "wordle")
"""Bundled module names the Kedi documentation mentions (kedi ships some of them)."""

ENTRY_POINT_GROUP = "kedi.packages"
"""Installed Kedi packages register here: `name = "python_package"`, whose directory holds `main.kedi`."""

_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(eq=False, slots=True)
class LinkedModule:
    """A checked module with its resolved imports and the names it exports."""

    module: ast.Module
    source: SourceFile
    origin: str
    """`root`, `relative`, `bundled` or `package`."""
    imports: dict[str, LinkedModule] = field(default_factory=dict)
    """Imported modules by the path written in `> import:`."""
    exports: tuple[str, ...] = ()
    stamp: tuple[int, int] | None = None
    """(mtime_ns, size) of the file when it was parsed; None for the root."""
    missed: list[Path] = field(default_factory=list)
    """Candidates its imports searched before the file that won (a file created there now wins)."""

    def fresh(self) -> bool:
        """Whether neither this file nor any module it imports changed since it was linked."""
        if self.stamp is not None and _stamp(Path(self.source.path)) != self.stamp:
            return False
        if any(candidate.is_file() for candidate in self.missed):
            return False
        return all(child.fresh() for child in self.imports.values())


def shipped_bundled() -> tuple[str, ...]:
    """Names of the bundled modules this build ships, sorted."""
    return tuple(sorted(p.stem for p in BUNDLED_DIR.glob("*.kedi")))


def in_memory(path: str) -> bool:
    """Source with a synthetic label (`<command>`, `<string>`) has no directory to import from."""
    return path.startswith("<") and path.endswith(">")


def path_problem(text: str) -> str | None:
    """Why `text` is not a valid module path, or None when it is."""
    if not text:
        return "a module path cannot be empty"
    if "\\" in text:
        return f"module path `{text}` uses a backslash; separate segments with `/`"
    if text.startswith("/"):
        return f"module path `{text}` is absolute; import paths are relative to the importing file"
    if text.endswith(".kedi"):
        return f"module path `{text}` ends in `.kedi`; leave the suffix out"
    for segment in text.split("/"):
        if segment in (".", ".."):
            return f"module path `{text}` uses `{segment}`; only plain names are allowed"
        if not segment:
            return f"module path `{text}` has an empty segment"
        if not _SEGMENT.fullmatch(segment):
            return f"module path `{text}` has the segment `{segment}`, which is not an identifier"
    return None


def link(
    module: ast.Module,
    source: SourceFile,
    *,
    fragment: bool = False,
    known_globals: Iterable[str] = (),
) -> LinkedModule:
    """Resolve and check the imports of a checked root module; raise `KediCheckError` on any problem.

    `fragment` and `known_globals` are the root's, as it was checked.
    """
    linker = _Linker(fragment, tuple(known_globals))
    if not in_memory(source.path):
        linker.active.append(Path(source.path).resolve())
    return linker.link(module, source, "root", None)


def check_and_link(
    text: str, path: str | None = None, *, fragment: bool = False, known_globals: Iterable[str] = ()
) -> LinkedModule:
    """Parse, check and link a root program (what `kedi.compile` needs to run it)."""
    from kedi.syntax.checks import check_source

    module = check_source(
        text, path, fragment=fragment, known_globals=tuple(known_globals), link_imports=False
    )
    return link(module, SourceFile(text, path), fragment=fragment, known_globals=known_globals)


# --------------------------------------------------------------------------- process cache

_CACHE: dict[Path, LinkedModule] = {}
"""Linked imported modules by resolved file (validated with `LinkedModule.fresh`)."""


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


# --------------------------------------------------------------------------- resolution


@dataclass(frozen=True, slots=True)
class _Found:
    path: Path
    origin: str
    missed: tuple[Path, ...] = ()
    """Earlier candidates that did not exist (relative, then bundled)."""


class _Linker:
    """One root compilation: each imported file links once (a diamond shares it)."""

    def __init__(self, fragment: bool, known_globals: tuple[str, ...]) -> None:
        self.active: list[Path] = []
        self.linked: dict[Path, LinkedModule] = {}
        self.fragment = fragment
        self.known_globals = known_globals
        """How the root module was checked (imported modules are checked plainly)."""

    def link(
        self, module: ast.Module, source: SourceFile, origin: str, stamp: tuple[int, int] | None
    ) -> LinkedModule:
        linked = LinkedModule(module, source, origin, stamp=stamp)
        problems: list[Diagnostic] = []
        for node in module.body:
            if isinstance(node, ast.Import):
                problems.extend(self._import(node, source, linked))
        if not problems:
            problems.extend(self._recheck(module, source, linked.imports, origin))
        if not problems:
            exports, export_problems = _exports(module, linked.imports)
            linked.exports = exports
            problems.extend(export_problems)
        if problems:
            raise KediCheckError(_located(problems, source))
        return linked

    def _recheck(
        self,
        module: ast.Module,
        source: SourceFile,
        imports: dict[str, LinkedModule],
        origin: str,
    ) -> list[Diagnostic]:
        """The name checks' problems once the whole imports' exports are known."""
        from kedi.syntax.checks import check_module  # checks imports this module lazily too

        if not any(isinstance(n, ast.Import) and n.names is None for n in module.body):
            return []  # the first check already knew every name
        exports = {path: _exported_procedures(child) for path, child in imports.items()}
        root = origin == "root"
        return check_module(
            module,
            source=source,
            fragment=self.fragment and root,
            known_globals=self.known_globals if root else (),
            imports=exports,
        )

    def _import(
        self, node: ast.Import, source: SourceFile, linked: LinkedModule
    ) -> Iterator[Diagnostic]:
        problem = path_problem(node.module)
        if problem is not None:
            yield Diagnostic(node.span, f"invalid module path: {problem}")
            return
        found, searched = _resolve(node.module, source.path)
        if found is None:
            yield _missing(node, source.path, searched)
            return
        if found.path in self.active:
            cycle = self.active[self.active.index(found.path) :] + [found.path]
            yield Diagnostic(
                node.span,
                "import cycle: " + " -> ".join(str(p) for p in cycle),
                "kedi does not run cyclic imports; move the shared names into a module both import",
            )
            return
        try:
            child = self._load(found)
        except (
            OSError
        ) as exc:  # unreadable or not UTF-8: say so at the import, not with a traceback
            yield Diagnostic(node.span, f"module `{node.module}`: {exc}")
            return
        linked.imports[node.module] = child
        linked.missed.extend(found.missed)
        for name in node.names or ():
            if name.name not in child.exports:
                shown = ", ".join(f"`{n}`" for n in child.exports) or "nothing"
                yield Diagnostic(
                    name.span,
                    f"`{name.name}` is not exported by `{node.module}`",
                    f"`{node.module}` ({child.source.path}) exports {shown}",
                )

    def _load(self, found: _Found) -> LinkedModule:
        from kedi.syntax.checks import check_source  # checks imports this module lazily too

        done = self.linked.get(found.path)
        if done is not None:
            return done
        cached = _CACHE.get(found.path)
        if cached is not None and cached.fresh():
            self.linked[found.path] = cached
            return cached
        stamp = _stamp(found.path)
        text = read_source(found.path)
        source = SourceFile(text, str(found.path))
        module = check_source(text, str(found.path), link_imports=False)
        self.active.append(found.path)
        try:
            child = self.link(module, source, found.origin, stamp)
        finally:
            self.active.pop()
        self.linked[found.path] = _CACHE[found.path] = child
        return child


def _resolve(text: str, importer: str) -> tuple[_Found | None, list[str]]:
    """The first existing candidate for module path `text`, and every candidate searched."""
    searched: list[str] = []
    missed: list[Path] = []
    relative = f"{text}.kedi"
    if not in_memory(importer):
        candidate = Path(importer).resolve().parent / relative
        searched.append(str(candidate))
        if candidate.is_file():
            return _Found(candidate, "relative"), searched
        missed.append(candidate)
    bundled = BUNDLED_DIR / relative
    searched.append(f"bundled: {bundled}")
    if bundled.is_file():
        return _Found(bundled, "bundled", tuple(missed)), searched
    missed.append(bundled)
    package, _, rest = text.partition("/")
    directory = installed_package_dir(package)
    if directory is None:
        broken = [
            entry.value for entry in metadata.entry_points(group=ENTRY_POINT_GROUP, name=package)
        ]
        if broken:  # registered, but its directory is gone: a broken or partial install
            searched.append(
                f"installed: `{package}` is registered in `{ENTRY_POINT_GROUP}` as `{broken[0]}`, "
                "which is not an importable package directory (reinstall it)"
            )
        else:
            searched.append(f"installed: no `{package}` in entry point group `{ENTRY_POINT_GROUP}`")
        return None, searched
    candidate = directory / (f"{rest}.kedi" if rest else "main.kedi")
    searched.append(f"installed package `{package}`: {candidate}")
    if candidate.is_file():
        return _Found(candidate.resolve(), "package", tuple(missed)), searched
    return None, searched


def installed_package_dir(name: str) -> Path | None:
    """The source directory of installed Kedi package `name` (entry point group `kedi.packages`)."""
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            spec = find_spec(entry.value)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            return Path(next(iter(spec.submodule_search_locations)))
    return None


def _missing(node: ast.Import, importer: str, searched: list[str]) -> Diagnostic:
    first = node.module.partition("/")[0]
    shipped = shipped_bundled()
    ships = "kedi ships: " + ", ".join(shipped)
    if first in DOCUMENTED_BUNDLED and first not in shipped:
        return Diagnostic(node.span, f"bundled module `{first}` is not shipped by kedi", ships)
    listing = "; ".join(searched)
    if in_memory(importer):
        return Diagnostic(
            node.span,
            f"source held only in memory ({importer}) cannot import file modules: "
            f"`{node.module}` is not a bundled module or an installed package",
            f"save the program to a file to import modules next to it; searched {listing}",
        )
    return Diagnostic(node.span, f"cannot find module `{node.module}`", f"searched {listing}")


# --------------------------------------------------------------------------- exports


def top_level_names(
    module: ast.Module, imports: dict[str, LinkedModule]
) -> tuple[set[str], set[str]]:
    """(names the module's own top level binds, names its imports bring in)."""
    own: set[str] = set()
    imported: set[str] = set()
    for node in module.body:
        match node:
            case ast.Procedure(name=name) | ast.CustomType(name=name) | ast.ProfileDef(name=name):
                own.add(name)
            case ast.Assign(target=target) | ast.RawInvoke(target=target):
                own.add(target)
            case ast.Template(rows=rows):
                own.update(_captures(rows))
            case ast.PythonBlock(code=code) | ast.PythonStatement(code=code):
                local_names, global_names, _ = python_bindings(code.code)
                own.update(local_names | global_names)
            case ast.Import(names=None):
                child = imports.get(node.module)
                imported.update(child.exports if child else ())
            case ast.Import(names=names) if names is not None:
                imported.update(n.name for n in names)
    return own, imported


def _captures(rows: Iterable[ast.Row]) -> Iterator[str]:
    for row in rows:
        for segment in row.segments:
            if isinstance(segment, ast.Capture):
                yield segment.name


def _exports(
    module: ast.Module, imports: dict[str, LinkedModule]
) -> tuple[tuple[str, ...], list[Diagnostic]]:
    """The exported names in order, and unknown names in `> export:` lists.

    `> export: *` exports the module's own public top-level names (not
    starting with `_`); names it imported are exported only when listed.
    """
    own, imported = top_level_names(module, imports)
    exports: dict[str, None] = {}
    problems: list[Diagnostic] = []
    for node in module.body:
        if not isinstance(node, ast.Export):
            continue
        if node.star:
            exports.update(dict.fromkeys(sorted(n for n in own if not n.startswith("_"))))
        for name in node.names:
            if name.name in own or name.name in imported:
                exports[name.name] = None
            else:
                problems.append(
                    Diagnostic(
                        name.span,
                        f"unknown name `{name.name}` in `> export:`",
                        "export a procedure, type, profile or value bound at the top level",
                    )
                )
    return tuple(exports), problems


def _exported_procedures(linked: LinkedModule) -> dict[str, ast.Procedure | None]:
    """A module's exports, each with the Kedi procedure it names when the module defines one."""
    own = {n.name: n for n in linked.module.body if isinstance(n, ast.Procedure)}
    return {name: own.get(name) for name in linked.exports}


def _located(problems: list[Diagnostic], source: SourceFile) -> list[Diagnostic]:
    """Fill in each diagnostic's source line when it points into `source`."""
    located = [
        replace(d, source_line=source.line_text(d.span.line))
        if d.span.path == source.path and not d.source_line
        else d
        for d in problems
    ]
    return sorted(located, key=lambda d: (d.span.line, d.span.column))


__all__ = [
    "BUNDLED_DIR",
    "DOCUMENTED_BUNDLED",
    "ENTRY_POINT_GROUP",
    "LinkedModule",
    "in_memory",
    "installed_package_dir",
    "check_and_link",
    "link",
    "path_problem",
    "shipped_bundled",
    "top_level_names",
]
