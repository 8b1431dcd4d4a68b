"""The public API is a short, explicit, tested list (style rule G10).

A name is public when no part of its dotted path starts with `_`; everything
public is a promise. These tests pin what `kedi` and `kedi.history` export,
and that the names the history spec promises (Part D) exist with their exact
spelling and shape.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
import types
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

import kedi
import kedi.history
from tests.test_errors import ERRORS


def _public_names(package: types.ModuleType) -> set[str]:
    """The names a package really offers: not underscored, not a submodule.

    Submodules land in a package's namespace as a side effect of importing
    them (`kedi.errors`, `kedi.history.lanes`), so they say nothing about the
    package's API; the `__future__` feature object is no API either. Names a
    package imports on first use (PEP 562) are looked up first, so they are
    in its namespace too.
    """
    for name in dir(package):
        hasattr(package, name)
    return {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and not (name == "annotations" and type(value).__name__ == "_Feature")
    }


def _sort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 ("isort-style") order: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return (0, name)
    return (1, name) if name[0].isupper() else (2, name)


PACKAGES = [kedi, kedi.history]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_is_sorted(package: types.ModuleType) -> None:
    expected = sorted(package.__all__, key=_sort_key)
    assert package.__all__ == expected, f"{package.__name__}.__all__ should read {expected}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_lists_exactly_the_public_names(package: types.ModuleType) -> None:
    listed = set(package.__all__)
    assert len(listed) == len(package.__all__), f"{package.__name__}.__all__ repeats a name"
    public = _public_names(package)
    assert not public - listed, (
        f"public but not in {package.__name__}.__all__: {sorted(public - listed)}"
    )
    assert not listed - public, (
        f"in {package.__name__}.__all__ but not defined: {sorted(listed - public)}"
    )


def _modules_with_all() -> list[types.ModuleType]:
    names = [
        m.name for m in pkgutil.walk_packages(kedi.__path__, "kedi.") if m.name != "kedi.__main__"
    ]
    modules = [kedi, *(importlib.import_module(name) for name in names)]
    return [m for m in modules if hasattr(m, "__all__")]


def test_every_name_in_every_all_is_importable() -> None:
    """`from kedi.x import *` works everywhere: each `__all__` names real attributes."""
    modules = _modules_with_all()
    assert len(modules) >= 5
    missing = [
        f"{m.__name__}.{name}" for m in modules for name in m.__all__ if not hasattr(m, name)
    ]
    assert not missing, f"listed in __all__ but absent: {missing}"


def test_star_import_gives_the_public_api() -> None:
    namespace: dict[str, Any] = {}
    exec("from kedi import *", namespace)
    namespace.pop("__builtins__")
    assert set(namespace) == set(kedi.__all__)


# --------------------------------------------------------------------------- history, Part D

PART_D = [
    "Message",
    "ToolCall",
    "Part",
    "ThinkingBlock",
    "normalize_history",
    "HistoryRepair",
    "sanitize_history",
    "SanitizeReport",
    "UnsafePart",
    "trim_history",
    "budget_history",
    "wire_tool_arguments",
    "new_id",
    "INTERRUPTED_RESULT",
    "HistoryError",
    "HistoryProcessingError",
    "HistoryProcessingValidationError",
    "HistoryProcessorContext",
]
"""The table of spec/history.md Part D, "Public names (Python)", in its order."""

PROCESSOR_TOOLKIT = [
    "HistoryProcessorContext",
    "Group",
    "MessageInfo",
    "Classifier",
    "PORTABLE",
    "ProcessorOutcome",
    "run_history_processor",
    "max_messages",
    "max_tokens",
    "compose_bounds",
]
"""What a history processor (and an adapter that runs processors) is written against."""


@pytest.mark.parametrize("name", PART_D + PROCESSOR_TOOLKIT)
def test_history_names_are_importable_from_kedi_history(name: str) -> None:
    assert name in kedi.history.__all__
    assert getattr(kedi.history, name) is not None


@pytest.mark.parametrize("name", PART_D)
def test_kedi_reexports_the_part_d_names(name: str) -> None:
    """Part D's names are common enough to live at the top level too, as the same objects."""
    assert name in kedi.__all__, f"add `{name}` to kedi/__init__.py (import and __all__)"
    assert getattr(kedi, name) is getattr(kedi.history, name)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("HistoryRepair", ["synthesized", "dropped", "truncated"]),
        ("SanitizeReport", ["system_prompts", "unsafe_parts", "repair"]),
        ("UnsafePart", ["message_index", "kind", "scheme"]),
    ],
)
def test_part_d_report_fields_are_spelled_as_specified(name: str, expected: list[str]) -> None:
    assert [f.name for f in fields(getattr(kedi.history, name))] == expected


def test_part_d_shapes() -> None:
    history = kedi.history
    assert issubclass(history.HistoryError, ValueError)
    assert {"messages", "groups"} <= {f.name for f in fields(history.HistoryProcessorContext)}
    message = history.Message(role="user", content="hi")
    assert history.normalize_history([message])[0] == [message]
    assert history.wire_tool_arguments('{"a":1}') == {"a": 1}
    identifier = history.new_id()
    assert identifier[14] == "7", f"new_id() is not a UUIDv7: {identifier}"
    assert isinstance(history.INTERRUPTED_RESULT, str) and history.INTERRUPTED_RESULT
    assert callable(history.trim_history(2)) and callable(history.budget_history(len, 10))


# --------------------------------------------------------------------------- the top level


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_kedi_exports_every_error(cls: type[BaseException]) -> None:
    """Users catch kedi's errors as `kedi.RateLimitError`, never from a submodule."""
    assert cls.__name__ in kedi.__all__, (
        f"add `{cls.__name__}` to kedi/__init__.py (import and __all__)"
    )
    assert getattr(kedi, cls.__name__) is cls


@pytest.mark.parametrize(
    "name",
    [
        "parse",
        "compile",
        "Program",
        "query",
        "bind",
        "configure",
        "context",
        "Adapter",
        "KediParseError",
    ],
)
def test_kedi_exports_the_entry_points(name: str) -> None:
    assert name in kedi.__all__, f"add `{name}` to kedi/__init__.py (import and __all__)"


def test_compile_is_the_program_compiler() -> None:
    program = kedi.compile(">> Hello [x].\n= <x>\n", path="hello.kedi")
    assert isinstance(program, kedi.Program)
    assert kedi.compile is kedi.compile_program


# --------------------------------------------------------------------------- lazy imports

ROOT = Path(__file__).resolve().parents[1]


def _type_checking_imports(path: Path) -> dict[str, tuple[str, str]]:
    """Name -> (module, attribute) of the imports under `if TYPE_CHECKING:` in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module
                for alias in statement.names:
                    imports[alias.asname or alias.name] = (statement.module, alias.name)
    return imports


def test_the_lazy_names_are_the_names_type_checkers_see() -> None:
    """`kedi._LAZY` and the `TYPE_CHECKING` imports of kedi/__init__.py say the same."""
    assert _type_checking_imports(ROOT / "kedi" / "__init__.py") == kedi._LAZY


def test_the_lazy_adapter_names_are_the_names_type_checkers_see() -> None:
    """`kedi.agent_adapter._LAZY` and its `TYPE_CHECKING` imports say the same."""
    import kedi.agent_adapter

    assert _type_checking_imports(ROOT / "kedi" / "agent_adapter.py") == kedi.agent_adapter._LAZY


def test_every_public_name_is_eager_or_lazy_but_not_both() -> None:
    eager = {name for name in vars(kedi) if name in kedi.__all__} - set(kedi._LAZY)
    assert set(kedi._LAZY) <= set(kedi.__all__)
    assert eager | set(kedi._LAZY) == set(kedi.__all__)
    assert all(getattr(kedi, name).__module__ == "kedi.errors" for name in eager)


def test_no_helper_module_is_an_attribute_of_the_package() -> None:
    """`kedi.typing` and friends were reachable (issue 17): only public names are."""
    for name in ("annotations", "importlib", "typing"):
        assert not hasattr(kedi, name), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        kedi.no_such_name  # noqa: B018 - the look-up is the test


def test_dir_lists_the_public_names_before_they_are_imported() -> None:
    assert set(kedi.__all__) <= set(dir(kedi))


IMPORT_PROBE = """
import sys
import kedi
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("kedi", "pydantic", "lark", "anyio"))))
kedi.Program
print(",".join(sorted(m for m in sys.modules if m == "kedi.runtime.program")))
"""


def test_import_kedi_loads_only_the_errors_until_a_name_is_used() -> None:
    """`import kedi` is cheap: the runtime, the parser and pydantic load on first use."""
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, cwd=ROOT, check=True
    )
    at_import, after_use = proc.stdout.splitlines()
    assert at_import.split(",") == ["kedi", "kedi._lazy", "kedi.errors", "kedi.source"]
    assert after_use == "kedi.runtime.program"


USER_SCRIPT = '''\
import asyncio

import kedi
from kedi import Conversation, Program, RunResult

program: Program = kedi.compile("[reply] << <`args.message`>\\n= <reply>", path="chat.kedi")
conversation = Conversation()
reply: str = program.run_sync(args={"message": "Hi"}, conversation=conversation)
result: RunResult = program.run_sync(args={"message": "Hi"}, result=True)
turns: int = program.run_sync(result=True).conversation_id  # error: a str
program.run_sync(args={"message": "Hi"}, modle="offline")  # error: misspelt option


@kedi.query
def title_for(topic: str) -> str:
    """kedi
    >> Short title for <topic>: [title: str].
    = `title`
    """
    raise NotImplementedError


@kedi.query(model="offline")
async def summary_of(text: str) -> str:
    """kedi
    >> Summarise <text>: [summary: str].
    = `summary`
    """
    raise NotImplementedError


@kedi.bind("flow.kedi")
def flow(topic: str) -> str:
    raise NotImplementedError


async def main() -> None:
    summary: str = await summary_of("a long text")
    ran_id: int = (await program.run(result=True, model="offline")).run_id  # error: a str
    count: int = title_for("parsers")  # error: a str
    print(summary, count, flow("x"))


asyncio.run(main())
'''


def test_the_typed_run_options_are_exactly_the_options_run_takes() -> None:
    """`RunOptions` types the `run`/`run_sync` overloads: an option missing there
    would be a type error for a valid call, an extra one a typo mypy lets through."""
    from kedi.runtime.program import RunOptions

    taken = set(inspect.signature(kedi.Program.run).parameters) - {"self", "result"}
    assert set(RunOptions.__annotations__) == taken


def test_a_user_script_on_the_public_api_passes_mypy_strict(tmp_path: Path) -> None:
    """`@kedi.query(...)` keeps the function's type (it was an untyped decorator);
    `run_sync` takes `run`'s options, so a misspelt one is a type error; and
    `run`/`run_sync(result=True)` return a `RunResult`, not `Any`."""
    script = tmp_path / "app.py"
    script.write_text(USER_SCRIPT, encoding="utf-8")
    proc = subprocess.run(
        # silent: kedi's own modules are checked by `mypy kedi`, as an installed package's would be
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", str(script)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    errors = [
        Path(line.split(" error: ")[0]).name
        for line in proc.stdout.splitlines()
        if " error: " in line
    ]
    marked = [
        f"app.py:{number}:"
        for number, line in enumerate(USER_SCRIPT.splitlines(), start=1)
        if "# error:" in line
    ]
    # one line may carry two errors (a misspelt option matches no overload)
    assert len(marked) == 4 and list(dict.fromkeys(errors)) == marked, proc.stdout + proc.stderr
