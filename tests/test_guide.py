"""Every Kedi example of docs/guide.md is checked as a reader would run it.

The convention, read from each fence's info string (fences of three or four
backticks; four when the example holds a Python fence):

- `kedi`: the block compiles (`kedi.compile`: parse and static checks).
- `kedi run FILE [ARGS...]`: the block, saved as FILE, runs with
  `kedi run FILE ARGS` on the offline model (no `--model`) and exits 0.
- `kedi error FILE [ARGS...]`: the same command exits 1.

When a `text` fence follows a run or error block (only blank lines between),
it is the exact stdout of a run, or the exact stderr of an error, minus the
one-line "no model configured" notice the guide's tutorial shows once, and
with each run id (a fresh UUID every run) written `RUN_ID`.
A `sh` fence holding one `kedi run` command and followed by a `text` fence
is run the same way (the shipped `examples/` beside it) and prints exactly
that text; tests/test_docs_commands.py runs every other `sh` command.
Examples run in a fresh directory where `examples/` is the shipped folder.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import kedi
from kedi.cli import main

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "guide.md"
_FENCE = re.compile(r"^(?P<ticks>`{3,4})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=ticks)$", re.M | re.S)
_RUN_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_OFFLINE_NOTICE = "kedi: no model configured; using the offline model"


@dataclass(frozen=True)
class Example:
    """One ```kedi block of the guide and what the guide says it does."""

    line: int
    mode: str
    """`parse`, `run` or `error`."""
    file: str
    args: tuple[str, ...]
    source: str
    output: str | None
    """The following ```text block, if any."""


def guide_examples(text: str) -> list[Example]:
    """The `kedi` blocks of a guide text, each with the `text` block right after it."""
    fences = list(_FENCE.finditer(text))
    examples = []
    for index, fence in enumerate(fences):
        words = shlex.split(fence["info"])
        if not words or words[0] != "kedi":
            continue
        mode = words[1] if len(words) > 1 else "parse"
        assert mode in ("parse", "run", "error"), f"unknown kedi block mode {mode!r}"
        file = words[2] if len(words) > 2 else "example.kedi"
        output = None
        following = fences[index + 1] if index + 1 < len(fences) else None
        if (
            following is not None
            and following["info"].strip() == "text"
            and not text[fence.end() : following.start()].strip()
        ):
            output = following["body"]
        line = text.count("\n", 0, fence.start()) + 1
        examples.append(Example(line, mode, file, tuple(words[3:]), fence["body"], output))
    return examples


def shell_examples(text: str) -> list[Example]:
    """The `sh` blocks of one `kedi run` command that a `text` block follows, as run examples."""
    found = []
    fences = list(_FENCE.finditer(text))
    for fence, following in zip(fences, fences[1:], strict=False):
        words = shlex.split(fence["body"])
        if (
            fence["info"].strip() == "sh"
            and words[:2] == ["kedi", "run"]
            and following["info"].strip() == "text"
            and not text[fence.end() : following.start()].strip()
        ):
            line = text.count("\n", 0, fence.start()) + 1
            found.append(Example(line, "run", words[2], tuple(words[3:]), "", following["body"]))
    return found


EXAMPLES = guide_examples(GUIDE.read_text(encoding="utf-8"))
COMMANDS = shell_examples(GUIDE.read_text(encoding="utf-8"))


def _without_notice(stream: str) -> str:
    return "".join(
        line for line in stream.splitlines(keepends=True) if not line.startswith(_OFFLINE_NOTICE)
    )


def _run(example: Example, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Result:
    """`kedi run FILE ARGS` in `folder`, the example saved there (a shell command's file ships)."""
    (folder / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(folder)
    if example.source:
        Path(example.file).write_text(example.source, encoding="utf-8")
    return CliRunner().invoke(main, ["run", example.file, *example.args])


def test_the_guide_has_examples_of_every_kind() -> None:
    modes = [example.mode for example in EXAMPLES]
    assert modes.count("run") >= 10 and modes.count("error") >= 3
    assert sum(example.output is not None for example in EXAMPLES) >= 12


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.file}:{e.line}" for e in EXAMPLES])
def test_a_guide_example_does_what_the_guide_says(
    example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("KEDI_MODEL", "KEDI_ADAPTER", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    if example.mode == "parse":
        kedi.compile(example.source, path=example.file)
        return
    result = _run(example, tmp_path, monkeypatch)
    where = f"docs/guide.md:{example.line}"
    if example.mode == "run":
        assert result.exit_code == 0, f"{where}\n{result.output}"
        shown = result.stdout
    else:
        assert result.exit_code == 1, f"{where}\n{result.output}"
        shown = _RUN_ID.sub("RUN_ID", _without_notice(result.stderr))
    if example.output is not None:
        assert shown.rstrip("\n") == example.output.rstrip("\n"), where


_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (?P<title>.+)$", re.M)


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_the_guide_links_only_to_pages_and_sections_that_exist() -> None:
    """A fresh clone is enough: no link leaves the repository or misses a heading."""
    text = GUIDE.read_text(encoding="utf-8")
    links = [match["target"] for match in _LINK.finditer(text)]
    assert len(links) >= 15
    for target in links:
        page, _, anchor = target.partition("#")
        assert not page.startswith(("http", "..", "/")), target
        path = GUIDE.parent / page if page else GUIDE
        assert path.is_file(), target
        if anchor:
            headings = _HEADING.findall(path.read_text(encoding="utf-8"))
            assert anchor in {_anchor(title) for title in headings}, target


def test_readme_and_the_language_page_point_new_users_to_the_guide() -> None:
    docs = GUIDE.parent
    assert "](docs/guide.md)" in (docs.parent / "README.md").read_text(encoding="utf-8")
    language_top = (docs / "language.md").read_text(encoding="utf-8")[:400]
    assert "](guide.md)" in language_top
    for page in (docs.parent / "README.md", *docs.glob("*.md")):
        assert "shared/spec" not in page.read_text(encoding="utf-8"), page.name


@pytest.mark.parametrize("example", COMMANDS, ids=[f"{e.file}:{e.line}" for e in COMMANDS])
def test_a_guide_command_prints_what_the_guide_shows(
    example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("KEDI_MODEL", "KEDI_ADAPTER", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = _run(example, tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip("\n") == (example.output or "").rstrip("\n")


def test_the_tutorial_program_is_the_shipped_example() -> None:
    first = EXAMPLES[0]
    assert first.file == "summary.kedi"
    shipped = REPO / "examples" / "guide" / "summary.kedi"
    assert shipped.read_text(encoding="utf-8") == first.source
    assert len(COMMANDS) >= 2
