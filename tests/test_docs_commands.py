"""Every command in README.md and docs/ runs as written, on the offline model (issue 17).

The `sh` blocks are split into commands (`&&` chains and backslash
continuations included); `console` blocks show commands for a real cluster
or server and are not run. `kedi ...` commands run in-process in a directory that holds the shipped `examples/`,
and must succeed. Install and test commands (`pip`, `python -m pytest`) are
what CI itself runs, so they are only checked to be the documented ones.
Inline `kedi run|check|parse` spans that name a `.kedi` file run too when the
file ships. README's Python snippet runs as written.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from kedi.cli import main

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_SH_BLOCK = re.compile(r"```(?:sh|bash|shell)\n(.*?)```", re.S)
_INLINE = re.compile(r"`(kedi (?:run|check|parse) [^`]*?\.kedi[^`]*)`")
_INSTALL = ("pip install", "python -m pytest")


def documented_blocks() -> list[tuple[str, list[str]]]:
    """(doc, commands) per `sh` block, and one single-command entry per runnable inline span."""
    found: list[tuple[str, list[str]]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in _SH_BLOCK.findall(text):
            commands = []
            for line in block.replace("\\\n", " ").splitlines():
                for command in line.split("&&"):
                    words = shlex.split(command, comments=True)
                    if words:
                        commands.append(shlex.join(words))
            if commands:
                found.append((doc.name, commands))
        for command in _INLINE.findall(text):
            words = shlex.split(command)
            if any((REPO / word).is_file() for word in words if word.endswith(".kedi")):
                found.append((doc.name, [command]))
    return found


BLOCKS = documented_blocks()


def test_the_docs_hold_commands() -> None:
    assert sum(command.startswith("kedi ") for _, block in BLOCKS for command in block) >= 8


@pytest.mark.parametrize(
    ("doc", "block"), BLOCKS, ids=[f"{doc}:{block[0]}" for doc, block in BLOCKS]
)
def test_a_documented_block_runs_in_order(
    doc: str, block: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block's commands run one after another in one directory and one history store,
    as a reader typing them would (a later `kedi history show` sees the session made above)."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    for name in ("KEDI_MODEL", "KEDI_ADAPTER", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for command in block:
        if command.startswith(_INSTALL):
            assert command in ("pip install .", "pip install -e '.[dev]'", "python -m pytest"), (
                command
            )
            continue
        words = shlex.split(command)
        assert words[0] == "kedi", f"{doc}: a command kedi does not know how to check: {command}"
        result = CliRunner().invoke(main, words[1:])
        assert result.exit_code == 0, f"{doc}: {command}\n{result.output}"


def test_the_readme_python_snippet_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    snippets = re.findall(r"```python\n(.*?)```", text, re.S)
    assert snippets
    monkeypatch.chdir(REPO)
    for snippet in snippets:
        namespace: dict[str, object] = {}
        exec(compile(snippet, "README.md", "exec"), namespace)
    assert namespace["result"] == "greeting"
