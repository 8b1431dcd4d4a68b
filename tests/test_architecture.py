"""Meta-tests: the conventions of notes/style.md that a machine can check.

Each test names the rule it enforces (G1, G2, ...) and fails with a message
saying which file breaks it and how. Imports are read with `ast` (imports inside
functions included), so a test never depends on what happens to be imported.
"""

from __future__ import annotations

import ast as python_ast
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import types
import zipfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest

from kedi.adapters import ADAPTERS, Adapter, adapter_class
from kedi.adapters.matrix import capability_matrix, render_markdown
from kedi.runtime.interpreter import Interpreter
from kedi.settings import SETTING_NAMES
from kedi.source import Span
from kedi.syntax import ast
from kedi.syntax.checks import check_module
from kedi.syntax.dump import to_json

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "kedi"


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


# --------------------------------------------------------------------------- the import graph


@dataclass(frozen=True)
class Edge:
    """One import statement: `importer` imports `target` at `line`."""

    importer: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{_relative(MODULES[self.importer])}:{self.line}: imports {self.target}"


def _resolve(importer: str, node: python_ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_of(module: str) -> Iterator[Edge]:
    """Every module `module` imports, anywhere in its body.

    `from kedi.adapters import offline` counts as importing `kedi.adapters.offline`
    when that is a module, so a submodule cannot hide behind its package.
    """
    tree = python_ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in python_ast.walk(tree):
        if isinstance(node, python_ast.Import):
            for alias in node.names:
                yield Edge(module, alias.name, node.lineno)
        elif isinstance(node, python_ast.ImportFrom):
            source = _resolve(module, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield Edge(module, submodule if submodule in MODULES else source, node.lineno)


EDGES = [edge for module in MODULES for edge in imports_of(module)]
KEDI_EDGES = [edge for edge in EDGES if edge.target == "kedi" or edge.target.startswith("kedi.")]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@dataclass(frozen=True)
class Layer:
    """Which kedi modules the modules of one layer may import (G1)."""

    name: str
    packages: tuple[str, ...]
    """Packages or modules the layer may import, with everything under them."""
    modules: tuple[str, ...] = ()
    """Modules the layer may import by exactly this name (not their siblings)."""

    def allows(self, target: str) -> bool:
        return target in self.modules or any(_within(target, p) for p in self.packages)


_ANYTHING = ("kedi",)
_BOTTOM = ("kedi.redaction", "kedi.settings", "kedi._lazy")
LAYERS = (
    # The lowest layer: each of these two may import only the other; `kedi._frozen`
    # (a constructor helper) imports no kedi module and anything may use it.
    Layer("kedi._frozen", ()),
    # Redaction, the setting names and the lazy-export helper import no kedi
    # module; every layer may use them.
    Layer("kedi.redaction", ()),
    Layer("kedi.settings", ()),
    Layer("kedi._lazy", ()),
    Layer("kedi.source", ("kedi.source", "kedi.errors")),
    Layer("kedi.errors", ("kedi.errors", "kedi.source", "kedi.redaction")),
    Layer("kedi.syntax", ("kedi._frozen", "kedi.source", "kedi.errors", "kedi.syntax", *_BOTTOM)),
    Layer("kedi.history", ("kedi.errors", "kedi.source", "kedi.history", *_BOTTOM)),
    Layer(
        "kedi.adapters",
        ("kedi._frozen", "kedi.history", "kedi.errors", "kedi.source", "kedi.adapters", *_BOTTOM),
    ),
    # Only the contract, the registry and the run scope: concrete adapters load
    # lazily by name (G11).
    Layer(
        "kedi.runtime",
        ("kedi.source", "kedi.errors", "kedi.syntax", "kedi.history", "kedi.runtime", *_BOTTOM),
        ("kedi.adapters", "kedi.adapters.base", "kedi.adapters.resources"),
    ),
    # The documented adapter names: the adapters package and the processor context.
    Layer("kedi.agent_adapter", ("kedi.adapters", "kedi.history", *_BOTTOM)),
    # `kedi batch` runs whole programs: it sits on the runtime and may build
    # concrete adapters (it hands the openai adapter its rate-limited transport).
    Layer(
        "kedi.batch",
        (
            "kedi.source",
            "kedi.errors",
            "kedi.syntax",
            "kedi.history",
            "kedi.adapters",
            "kedi.runtime",
            "kedi.batch",
        ),
    ),
    # The top: the public surface and the command line sit on everything.
    Layer("kedi.cli", _ANYTHING),
    Layer("kedi.cli_transcript", _ANYTHING),
    Layer("kedi.cli_chat", _ANYTHING),
    Layer("kedi.cli_history", _ANYTHING),
    Layer("kedi.cli_history_io", _ANYTHING),
    Layer("kedi.cli_output", _ANYTHING),
    Layer("kedi.cli_options", _ANYTHING),
    Layer("kedi.cli_local", _ANYTHING),
    Layer("kedi.cli_batch", _ANYTHING),
    Layer("kedi.__main__", _ANYTHING),
    Layer("kedi.cli_package", _ANYTHING),
    Layer("kedi.cli_suites", _ANYTHING),
    Layer("kedi.pytest_plugin", _ANYTHING),
)


def layer_of(module: str) -> Layer | None:
    """The layer `module` belongs to (the package `kedi` itself is the top)."""
    if module == "kedi":
        return Layer("kedi", _ANYTHING)
    return next((layer for layer in LAYERS if _within(module, layer.name)), None)


def test_the_import_walk_sees_known_edges() -> None:
    """Guard against a vacuous G1 pass: edges everyone knows about are found."""
    seen = {(e.importer, e.target) for e in KEDI_EDGES}
    assert ("kedi.errors", "kedi.source") in seen
    assert ("kedi.runtime.calls", "kedi.adapters") in seen
    # An import inside a function body (base.py imports processors lazily).
    assert ("kedi.adapters.base", "kedi.history.processors") in seen


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if layer_of(m) is None)
    assert not unplaced, f"G1: give these modules a layer in tests/test_architecture.py: {unplaced}"


def _upward(edge: Edge) -> str | None:
    """Why `edge` breaks G1, or None when it points down."""
    layer = layer_of(edge.importer)
    if layer is None or layer.allows(edge.target):
        return None
    return f"{edge} ({layer.name} may import only {layer.packages + layer.modules})"


def test_imports_point_down_the_layers() -> None:
    """G1: no module imports a layer above it."""
    violations = [why for edge in KEDI_EDGES if (why := _upward(edge))]
    assert not violations, "G1: imports that point up the layers:\n" + "\n".join(violations)


def test_runtime_imports_no_concrete_adapter() -> None:
    """G1/G11: the runtime reaches adapters through `kedi.adapters`' registry only."""
    concrete = {target.partition(":")[0] for target in ADAPTERS.values()}
    assert concrete == {
        "kedi.adapters.offline",
        "kedi.adapters.scripted",
        "kedi.adapters.openai",
        "kedi.adapters.pydantic_ai",
        "kedi.adapters.langchain",
        "kedi.adapters.local",
    }
    bad = [
        str(edge)
        for edge in KEDI_EDGES
        if _within(edge.importer, "kedi.runtime") and edge.target in concrete
    ]
    assert not bad, "G1: the runtime imports concrete adapter modules:\n" + "\n".join(bad)


# --------------------------------------------------------------------------- G2: lark


LARK_MODULES = {"kedi.syntax._grammar"}
"""The only module that may import lark: it has Lark analyse the grammar into tables."""


def test_lark_stays_inside_the_syntax_package() -> None:
    """G2: Lark is imported by the parser's own machinery only."""
    importers = {e.importer for e in EDGES if _within(e.target, "lark")}
    assert "kedi.syntax._grammar" in importers, "the import walk missed lark in _grammar.py"
    outside = sorted(
        str(e) for e in EDGES if _within(e.target, "lark") and e.importer not in LARK_MODULES
    )
    assert not outside, (
        "G2: lark imported outside " + f"{sorted(LARK_MODULES)}:\n" + "\n".join(outside)
    )


# --------------------------------------------------------------------------- G3: the AST

NODE_CLASSES = [
    value
    for value in vars(ast).values()
    if isinstance(value, type) and value.__module__ == ast.__name__
]
STATEMENT_CLASSES = get_args(ast.Statement)


def test_the_ast_defines_node_classes() -> None:
    assert len(NODE_CLASSES) >= 40, NODE_CLASSES
    assert len(STATEMENT_CLASSES) >= 19


@pytest.mark.parametrize("cls", NODE_CLASSES, ids=lambda cls: cls.__name__)
def test_nodes_are_frozen_slotted_keyword_dataclasses(cls: type) -> None:
    """G3: `@dataclass(frozen=True, slots=True, kw_only=True)` on every node."""
    assert is_dataclass(cls), f"G3: ast.{cls.__name__} is not a dataclass"
    assert cls.__dataclass_params__.frozen, f"G3: ast.{cls.__name__} is not frozen"  # type: ignore[attr-defined]
    assert "__slots__" in vars(cls), f"G3: ast.{cls.__name__} has no slots"
    positional = [f.name for f in fields(cls) if not f.kw_only]
    assert not positional, f"G3: ast.{cls.__name__} has positional fields {positional}"


@pytest.mark.parametrize("cls", NODE_CLASSES, ids=lambda cls: cls.__name__)
def test_nodes_have_a_span_left_out_of_equality(cls: type) -> None:
    """G3: positions take no part in equality, so layout never changes meaning."""
    span = {f.name: f for f in fields(cls)}.get("span")
    assert span is not None, f"G3: ast.{cls.__name__} has no span field"
    assert get_type_hints(cls)["span"] is Span
    assert not span.compare, f"G3: ast.{cls.__name__}.span takes part in equality"
    here, there = Span("a.kedi", 1, 1, 1, 2), Span("b.kedi", 7, 3, 9, 1)
    assert sample(cls, here) == sample(cls, there)


@pytest.mark.parametrize("cls", NODE_CLASSES, ids=lambda cls: cls.__name__)
def test_node_children_are_tuples(cls: type) -> None:
    """G3: children are tuples (nodes are immutable all the way down)."""
    mutable = [
        name
        for name, hint in get_type_hints(cls).items()
        if any(origin in (list, dict, set) for origin in _origins(hint))
    ]
    assert not mutable, f"G3: ast.{cls.__name__} has mutable children {mutable}"


def _origins(hint: Any) -> Iterator[Any]:
    yield get_origin(hint) or hint
    for arg in get_args(hint):
        yield from _origins(arg)


_SCALARS: dict[Any, Any] = {str: "x", int: 1, float: 1.5, bool: True, type(None): None}


def sample(hint: Any, span: Span, depth: int = 0) -> Any:
    """A well-typed value of `hint`, with one child per tuple down to a small depth."""
    origin = get_origin(hint)
    if hint in _SCALARS:
        return _SCALARS[hint]
    if isinstance(hint, type) and is_dataclass(hint):
        hints = get_type_hints(hint)
        return hint(
            **{
                f.name: span if f.name == "span" else sample(hints[f.name], span, depth + 1)
                for f in fields(hint)
            }
        )
    if origin is tuple:
        return (sample(get_args(hint)[0], span, depth + 1),) if depth < 4 else ()
    if origin in (Union, types.UnionType):
        return sample(get_args(hint)[0], span, depth)
    if origin is Literal:
        return get_args(hint)[0]
    raise AssertionError(f"sample() cannot build a {hint!r}; teach it this field type")


def test_the_interpreter_handles_every_statement_class() -> None:
    """G3: the interpreter's handler table has exactly the `Statement` union's classes."""
    handled = set(Interpreter._handlers)
    missing = sorted(c.__name__ for c in set(STATEMENT_CLASSES) - handled)
    extra = sorted(c.__name__ for c in handled - set(STATEMENT_CLASSES))
    assert not missing, f"G3: Interpreter._handlers lacks {missing}"
    assert not extra, f"G3: Interpreter._handlers has non-statement classes {extra}"


@pytest.mark.parametrize("cls", STATEMENT_CLASSES, ids=lambda cls: cls.__name__)
def test_the_checker_handles_every_statement_class(cls: type) -> None:
    """G3: `check_module` accepts every statement (its match ends in `assert_never`)."""
    span = Span("t.kedi", 1, 1, 1, 2)
    module = ast.Module(body=(sample(cls, span),), path="t.kedi", span=span)
    diagnostics = check_module(module)
    assert all(d.span.path == "t.kedi" for d in diagnostics)


@pytest.mark.parametrize("cls", NODE_CLASSES, ids=lambda cls: cls.__name__)
def test_the_json_dump_handles_every_node_class(cls: type) -> None:
    """G3: `kedi parse --json` writes every node class, every field, as JSON."""
    node = sample(cls, Span("t.kedi", 2, 3, 4, 5))
    data = json.loads(json.dumps(to_json(node)))
    assert data["type"] == cls.__name__
    expected = {"annotation" if f.name == "type" else f.name for f in fields(cls)}
    if cls is ast.PythonCode:
        # Embedded code's position is given by the node holding it (docs/ast-json.md).
        expected.discard("span")
    assert expected <= set(data), f"to_json(ast.{cls.__name__}) lacks {expected - set(data)}"


# --------------------------------------------------------------------------- G16: module sizes


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_a_thousand_lines() -> None:
    """G16: 600 lines is the aim (reported), 1,000 the hard stop (enforced)."""
    sizes = {_relative(path): _lines(path) for path in MODULES.values()}
    for name, size in sorted(sizes.items(), key=lambda item: -item[1]):
        if size > 600:
            print(f"G16 warning: {name} has {size} lines (aim: at most 600)")
    too_big = {name: size for name, size in sizes.items() if size > 1000}
    assert not too_big, f"G16: split these modules (hard stop 1,000 lines): {too_big}"


def test_module_basenames_are_unique() -> None:
    """G16: no two modules share a basename, apart from `__init__.py` and `base.py`."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in MODULES.values():
        if path.name not in ("__init__.py", "base.py"):
            by_name[path.name].append(_relative(path))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"G16: rename one of each: {shared}"


def test_every_module_is_in_the_ownership_map() -> None:
    """G16: docs/architecture.md says what each module owns, and names no stale module."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    mentioned = set(re.findall(r"kedi/[\w/]+\.py", text))
    modules = {_relative(path) for path in MODULES.values()}
    assert not modules - mentioned, f"add to docs/architecture.md: {sorted(modules - mentioned)}"
    assert not mentioned - modules, f"no such modules: {sorted(mentioned - modules)}"


# --------------------------------------------------------------------------- G11: lazy frameworks

FRAMEWORKS = ("pydantic_ai", "langchain_core")


def _python(script: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        # the clean environment keeps the test's own history store (kedi run records by default)
        env={"PATH": "/usr/bin:/bin", "KEDI_HISTORY": os.environ.get("KEDI_HISTORY", "off"), **env},
    )
    assert result.returncode == 0, result.stderr
    return result


_STAGES = f"""
import json, runpy, sys

def frameworks():
    return sorted(name for name in {FRAMEWORKS!r} if name in sys.modules)

def kedi_command(*argv):
    sys.argv = ["kedi", *argv]
    try:
        runpy.run_module("kedi", run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        assert exit.code in (None, 0), exit.code

import kedi
loaded = {{"import kedi": frameworks()}}
kedi_command("--help")
loaded["kedi --help"] = frameworks()
kedi_command("run", "-c", ">> Name a city [city].\\n= <city>\\n", "--model", "offline")
loaded["kedi run on the offline model"] = frameworks()
print(json.dumps(loaded))
"""


def test_no_framework_is_imported_by_kedi_or_offline_runs() -> None:
    """G11: neither framework loads for `import kedi`, `kedi --help` or an offline run."""
    out = _python(_STAGES).stdout.splitlines()
    assert "Usage:" in "\n".join(out), "kedi --help printed no help"
    assert "city" in out, "the offline program did not run"
    assert json.loads(out[-1]) == {
        "import kedi": [],
        "kedi --help": [],
        "kedi run on the offline model": [],
    }


_HIDDEN = f"""
import json, sys
for name in {FRAMEWORKS!r}:
    sys.modules[name] = None  # what Python does for a package that is not installed
from kedi.adapters import create_adapter
from kedi.adapters.matrix import capability_matrix
from kedi.errors import ExtraNotInstalledError

report = {{}}
for adapter in ("pydantic", "langchain"):
    try:
        create_adapter(adapter, "test")
    except ExtraNotInstalledError as error:
        report[adapter] = {{"error": str(error), "import_error": isinstance(error, ImportError)}}
rows = {{row["adapter"]: row for row in capability_matrix()}}
report["matrix"] = {{name: rows[name]["class"] for name in ("offline", "pydantic", "langchain")}}
print(json.dumps(report))
"""


def test_a_missing_framework_names_its_extra() -> None:
    """G11: without the framework, the adapter (and its matrix row) say what to install."""
    report = json.loads(_python(_HIDDEN).stdout)
    assert report["pydantic"]["import_error"] and report["langchain"]["import_error"]
    assert 'pip install "kedi[pydantic-ai]"' in report["pydantic"]["error"]
    assert 'pip install "kedi[langchain]"' in report["langchain"]["error"]
    assert report["matrix"] == {
        "offline": "OfflineAdapter",
        "pydantic": 'PydanticAdapter (needs pip install "kedi[pydantic-ai]")',
        "langchain": 'LangChainAdapter (needs pip install "kedi[langchain]")',
    }


# --------------------------------------------------------------------------- G12: adapters

CONCRETE_ADAPTERS = {target.partition(":")[2] for target in ADAPTERS.values()}


def _type_checks(module: str) -> Iterator[tuple[int, set[str]]]:
    """(line, class names) of every isinstance/issubclass call in `module`."""
    tree = python_ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in python_ast.walk(tree):
        if (
            isinstance(node, python_ast.Call)
            and isinstance(node.func, python_ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            classes = node.args[1]
            items = classes.elts if isinstance(classes, python_ast.Tuple) else [classes]
            names = {
                item.id if isinstance(item, python_ast.Name) else item.attr
                for item in items
                if isinstance(item, python_ast.Name | python_ast.Attribute)
            }
            yield node.lineno, names


def test_no_type_checks_on_concrete_adapters_outside_adapters() -> None:
    """G12: code outside `kedi/adapters/` reads `profile` flags, never the adapter's class."""
    assert len(CONCRETE_ADAPTERS) == len(ADAPTERS) == 6
    outside = [m for m in MODULES if not _within(m, "kedi.adapters")]
    checks = [(m, line, names) for m in outside for line, names in _type_checks(m)]
    assert any("Adapter" in names for _, _, names in checks), (
        "the walk missed isinstance(.., Adapter)"
    )
    bad = [
        f"{_relative(MODULES[m])}:{line}: isinstance/issubclass on {sorted(names & CONCRETE_ADAPTERS)}"
        for m, line, names in checks
        if names & CONCRETE_ADAPTERS
    ]
    assert not bad, "G12: use AdapterProfile flags instead:\n" + "\n".join(bad)


def test_every_adapter_reports_the_same_capability_rows() -> None:
    """G12: capabilities are data, one shared vocabulary of rows."""
    names = list(Adapter.capability_rows())
    assert names == [
        "structured output",
        "tools",
        "streaming",
        "history",
        "message format",
        "settings",
    ]
    for shortname in ADAPTERS:
        assert list(adapter_class(shortname).capability_rows()) == names, shortname


def test_adapters_that_say_they_check_requests_check_them_first() -> None:
    """kedi skips its own check before sending to these adapters, so theirs must come first."""
    for shortname in ADAPTERS:
        cls = adapter_class(shortname)
        assert cls.checks_requests, f"{shortname}: a built-in adapter checks its own requests"
        body = python_ast.parse(textwrap.dedent(inspect.getsource(cls.request))).body[0].body  # type: ignore[attr-defined]
        calls = [python_ast.unparse(statement) for statement in body[:3]]
        assert "self.check(request)" in calls, (
            f"{shortname}.request does not start by checking: {calls}"
        )


def test_capability_matrix_reads_each_adapters_profile() -> None:
    rows = {row["adapter"]: row for row in capability_matrix()}
    assert list(rows) == list(ADAPTERS)
    for shortname, row in rows.items():
        cls = adapter_class(shortname)
        assert row["class"] == cls.__name__
        assert row["runs offline"] == ("yes" if cls.profile.offline else "no")
        assert row["message format"] == cls.profile.message_format
        declared = cls.profile.settings
        assert declared is not None, f"{shortname}: a built-in adapter declares its settings"
        if shortname in ("offline", "script"):  # stand-ins: every name, too many for a cell
            assert declared >= SETTING_NAMES and row["settings"].startswith("every name kedi knows")
        else:
            assert row["settings"].startswith(", ".join(sorted(declared)))
    assert rows["openai"]["streaming"] == "yes" and rows["offline"]["streaming"] == "no"


def test_the_docs_show_the_current_capability_matrix() -> None:
    """The table in docs/adapters.md is exactly `python -m kedi.adapters.matrix`."""
    text = (REPO / "docs" / "adapters.md").read_text(encoding="utf-8")
    found = re.search(
        r"<!-- capability-matrix:start.*?-->\n(.*?)\n<!-- capability-matrix:end -->", text, re.S
    )
    assert found, "docs/adapters.md has lost its capability-matrix markers"
    assert found.group(1) == render_markdown(), (
        "docs/adapters.md is stale: paste `python -m kedi.adapters.matrix` between the markers"
    )


def test_the_matrix_escapes_pipes_in_cells() -> None:
    table = render_markdown().splitlines()
    header_cells = table[0].count(" | ") + 1
    assert all(line.replace("\\|", "").count(" | ") + 1 == header_cells for line in table)


# --------------------------------------------------------------------------- packaging


def test_the_wheel_ships_the_grammar(tmp_path: Path) -> None:
    """The wheel holds `kedi/grammar/kedi.lark`, and kedi parses from the unpacked wheel."""
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path / "dist")],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = (tmp_path / "dist").glob("kedi-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        grammar = archive.read("kedi/grammar/kedi.lark")
        archive.extractall(tmp_path / "site")
    assert grammar == (REPO / "grammar" / "kedi.lark").read_bytes()
    site = tmp_path / "site"
    out = _python(
        "import kedi, kedi.syntax._grammar as g\n"
        "print(kedi.__file__); print(g.grammar_path())\n"
        "print(type(kedi.parse('>> Hello [x].\\n')).__name__)",
        cwd=tmp_path,
        PYTHONPATH=str(site),
    ).stdout.split()
    assert out == [
        str(site / "kedi" / "__init__.py"),
        str(site / "kedi" / "grammar" / "kedi.lark"),
        "Module",
    ]
