"""Kedi packages: `package.kedi` checks, `kedi package check`, and a real `pip install`."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import kedi.syntax
from kedi.cli import main
from kedi.syntax import ast
from kedi.syntax.manifest import Manifest, pyproject_toml, read_manifest

REPO = Path(__file__).resolve().parents[1]

MANIFEST = (
    "> package: greetpkg:\n  version: 1.0.0\n  source: src/greetpkg\n  python: python@3.11-3.14\n"
)


def make_package(root: Path, manifest: str = MANIFEST) -> Path:
    package = root / "greetpkg"
    (package / "src" / "greetpkg").mkdir(parents=True)
    (package / "package.kedi").write_text(manifest)
    (package / "src" / "greetpkg" / "main.kedi").write_text(
        "@hello(name: str) -> str:\n  = Hello, <name>!\n> export:\n  hello\n"
    )
    (package / "src" / "greetpkg" / "loud.kedi").write_text(
        "@shout(text: str) -> str:\n  = `text.upper()`\n> export: *\n"
    )
    return package


def test_package_check_accepts_a_valid_package_and_locates_manifest_errors(tmp_path: Path) -> None:
    package = make_package(tmp_path)
    result = CliRunner().invoke(main, ["package", "check", str(package)])
    assert result.exit_code == 0 and "Package checked: 2 module(s)." in result.output
    (package / "package.kedi").write_text(
        "> package: greetpkg:\n  version: one\n  source: src/greetpkg\n  python_dependencies:\n    httpx>>=1\n"
    )
    result = CliRunner().invoke(main, ["package", "check", str(package)])
    assert result.exit_code == 1
    assert (
        'package.kedi", line 2' in result.output and "PEP 440 version, not `one`" in result.output
    )
    assert (
        'package.kedi", line 4' in result.output
        and "`httpx>>=1` is not a PEP 508 requirement" in result.output
    )


@pytest.mark.parametrize("command", ["check", "pyproject"])
def test_a_manifest_value_in_backticks_is_refused_not_dropped(tmp_path: Path, command: str) -> None:
    """Spec §6.4: a manifest is never run, so a computed value would vanish from the distribution."""
    package = make_package(tmp_path, MANIFEST + '  license: `"MI" + "T"`\n')
    result = CliRunner().invoke(main, ["package", command, str(package)])
    assert result.exit_code == 1
    assert 'package.kedi", line 5' in result.output
    assert "manifest field `license` must be literal text" in result.output
    assert "write the value itself, e.g. `license: MIT`" in result.output
    assert "[project]" not in result.output


def test_package_check_needs_main_kedi_in_the_source(tmp_path: Path) -> None:
    package = make_package(tmp_path)
    (package / "src" / "greetpkg" / "main.kedi").unlink()
    result = CliRunner().invoke(main, ["package", "check", str(package)])
    assert result.exit_code == 1 and "has no main.kedi" in result.output


def pyproject_of(manifest: str) -> dict[str, Any]:
    package = kedi.syntax.parse(manifest, path="package.kedi").body[0]
    assert isinstance(package, ast.Package)
    return tomllib.loads(pyproject_toml(read_manifest(package)))


@pytest.mark.parametrize(
    ("rows", "authors", "urls"),
    [
        (
            "  author: Ada\n  contact: ada@example.com\n",
            [{"name": "Ada", "email": "ada@example.com"}],
            None,
        ),
        ("  contact: ada@example.com\n", [{"email": "ada@example.com"}], None),
        (
            "  author: Ada\n  contact: https://example.com/help\n",
            [{"name": "Ada"}],
            {"Contact": "https://example.com/help"},
        ),
    ],
)
def test_author_contact_and_license_reach_the_distribution_metadata(
    rows: str, authors: list[dict[str, str]], urls: dict[str, str] | None
) -> None:
    """Spec B25: every manifest field kedi accepts ends up somewhere, none is dropped."""
    project = pyproject_of(MANIFEST + "  license: MIT\n" + rows)["project"]
    assert project["license"] == {"text": "MIT"}
    assert project["authors"] == authors
    assert project.get("urls") == urls


TRICKY_TEXT = 'Ada 😀 "quoted" back\\slash\nnew line\ttab \x00\x1b\x7f é 中'


@given(text=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1))
def test_pyproject_toml_reads_back_any_text_exactly(text: str) -> None:
    """A manifest value with emoji, quotes, backslashes or control characters stays valid TOML."""
    manifest = Manifest(
        "greetpkg",
        {"license": text, "author": text, "contact": text, "source": text},
        (text,),
    )
    project_toml = tomllib.loads(pyproject_toml(manifest))
    project = project_toml["project"]
    assert project["license"] == {"text": text}
    assert project["dependencies"] == [text]
    assert project["authors"][0]["name"] == text
    assert project_toml["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"] == {
        text: "greetpkg"
    }


def test_pyproject_toml_writes_emoji_as_itself() -> None:
    project = tomllib.loads(pyproject_toml(Manifest("greetpkg", {"license": TRICKY_TEXT}, ())))
    assert project["project"]["license"] == {"text": TRICKY_TEXT}
    assert pyproject_of(MANIFEST + "  author: Ada 😀\n")["project"]["authors"] == [
        {"name": "Ada 😀"}
    ]


@pytest.mark.slow
def test_pip_install_of_a_built_package_makes_import_work(tmp_path: Path) -> None:
    pytest.importorskip(
        "hatchling", reason="needs hatchling to build the package: pip install -e '.[dev]'"
    )
    package = make_package(tmp_path)
    result = CliRunner().invoke(main, ["package", "pyproject", str(package), "--write"])
    assert result.exit_code == 0, result.output
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(package),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    program = tmp_path / "use.kedi"
    program.write_text(
        "> import: greetpkg\n> import: greetpkg/loud:\n  shout\n= <shout(`hello('Ada')`)>\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)])}
    ran = subprocess.run(
        [sys.executable, "-m", "kedi", "run", str(program)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.stdout.strip() == "HELLO, ADA!", ran.stderr
    without = {**os.environ, "PYTHONPATH": str(REPO)}
    ran = subprocess.run(
        [sys.executable, "-m", "kedi", "run", str(program)],
        env=without,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        ran.returncode == 1 and "no `greetpkg` in entry point group `kedi.packages`" in ran.stderr
    )


@pytest.mark.slow
def test_the_wheel_ships_the_bundled_modules(tmp_path: Path) -> None:
    import zipfile

    pytest.importorskip(
        "hatchling", reason="needs hatchling to build the wheel: pip install -e '.[dev]'"
    )
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path / "dist")],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("kedi-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert {"kedi/bundled/helpers.kedi", "kedi/bundled/errors.kedi"} <= set(archive.namelist())
        archive.extractall(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    ran = subprocess.run(
        [sys.executable, "-m", "kedi", "-c", "> import: helpers\n= <first_line(`'\\n  hi\\n'`)>"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert ran.stdout.strip() == "hi", ran.stderr
