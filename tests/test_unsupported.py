"""Language features this build does not execute fail before the run, never silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import kedi
from kedi.cli import main
from kedi.errors import KediCheckError

CASES = [
    pytest.param("> adapter: dspy\n>> Hi [x].\n= <x>\n", 1, "`> adapter: dspy`", id="dspy-adapter"),
    pytest.param(
        "@greet() -> str:\n    > adapter: dspy\n    = hi\n= <greet()>\n",
        2,
        "`> adapter: dspy`",
        id="dspy-in-procedure",
    ),
    pytest.param("> approval: allow\n= done\n", 1, "`> approval:`", id="approval"),
    pytest.param("> codemode: enabled\n= done\n", 1, "`> codemode:`", id="codemode"),
    pytest.param(
        "@f() -> str:\n  > optimize: intro:\n    >> Say hi [x].\n  = <x>\n",
        2,
        "`> optimize:`",
        id="optimize",
    ),
    pytest.param("@f() -> str:\n  > auto:\n    Return hi.\n", 2, "`> auto:`", id="auto"),
]


@pytest.mark.parametrize(("source", "line", "feature"), CASES)
def test_unsupported_feature_fails_at_compile_with_its_line(
    source: str, line: int, feature: str
) -> None:
    with pytest.raises(KediCheckError) as caught:
        kedi.compile(source, path="flow.kedi")
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.line == line
    assert diagnostic.message == f"{feature} is not supported yet"
    assert f'File "flow.kedi", line {line}' in caught.value.render()


def test_supported_adapter_selected_by_text_still_compiles() -> None:
    program = kedi.compile("> adapter: offline\n>> Hi [x].\n= <x>\n")
    assert isinstance(program.run_sync(), str)


def test_use_skills_is_the_unsupported_skills_switch_unless_something_is_named_skills() -> None:
    """Spec B23: `> use: skills` means `> skills: enabled`; a tool named `skills` wins."""
    with pytest.raises(KediCheckError) as caught:
        kedi.compile("> use: skills\n= done\n", path="flow.kedi")
    (diagnostic,) = caught.value.diagnostics
    assert (diagnostic.line, diagnostic.column) == (1, 8)
    assert diagnostic.message == (
        "`> use: skills` (the same as `> skills: enabled`) is not supported yet"
    )
    tool = kedi.compile("@skills() -> str:\n  = listed\n> use: skills\n= done\n")
    assert tool.run_sync(model="offline") == "done"
    with pytest.raises(KediCheckError, match="unknown tool `skills`"):
        kedi.compile("> use:\n    skills\n= done\n")  # an indented list names tools only


def test_a_run_writes_no_artifacts_next_to_its_source(tmp_path: Path) -> None:
    """Spec B26: no `program.cache.kedi`, `program.kedi.optimized.json` or `.gepa/` here."""
    flow = tmp_path / "flow.kedi"
    flow.write_text("> history: enabled\n>> Name a colour [colour].\n= <colour>\n")
    result = CliRunner().invoke(main, ["run", str(flow), "--no-store"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flow.kedi"]
