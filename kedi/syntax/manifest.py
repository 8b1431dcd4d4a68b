"""`package.kedi` manifests: field values, and the Python distribution they describe.

A manifest holds one `> package: name:` (spec §6.4). Its `version` must be a
PEP 440 version and each `python_dependencies` row a PEP 508 requirement,
both checked with `packaging` (the `kedi[packages]` extra, imported only
when a manifest is checked); `python` is `python@X.Y` or a closed range
`python@X.Y-X.Z`; `source` a relative directory.

`pyproject_toml` turns a manifest into the `pyproject.toml` of an ordinary
hatchling distribution that ships the package's `.kedi` files and registers
them in the `kedi.packages` entry point group, so `pip install ./pkg` makes
`> import: pkg` work (docs/language.md, "Packages").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from kedi.errors import Diagnostic
from kedi.syntax import ast

_PYTHON = re.compile(r"python@(\d+)\.(\d+)(?:-(\d+)\.(\d+))?")


@dataclass(frozen=True, slots=True)
class Manifest:
    """The literal fields of a `> package:` manifest."""

    name: str
    fields: dict[str, str]
    dependencies: tuple[str, ...]


_FIELD_EXAMPLES = {
    "version": "1.2.0",
    "source": "src/mypkg",
    "python": "python@3.11-3.13",
    "author": "Ada Lovelace",
    "contact": "ada@example.com",
    "license": "MIT",
}


def read_manifest(package: ast.Package) -> Manifest:
    """The manifest's fields as text.

    Only literal text is read: `manifest_problems` refuses any other value
    (backticks, `<...>`), so a checked manifest loses none of its fields.
    """
    fields: dict[str, str] = {}
    dependencies: tuple[str, ...] = ()
    for entry in package.config:
        if entry.key == "python_dependencies":
            dependencies = tuple(item.strip() for item in entry.items if item.strip())
        elif all(isinstance(s, ast.Text) for s in entry.value):
            fields[entry.key] = "".join(s.value for s in entry.value).strip()  # type: ignore[union-attr]  # manifest values are text segments (checked by the caller)
    return Manifest(package.name, fields, dependencies)


def _non_literal_fields(package: ast.Package) -> Iterator[Diagnostic]:
    """Spec §6.4: `package.kedi` holds nothing executable, so its values are literal text.

    A package is built and installed without running Kedi or Python, so a value
    in backticks or `<...>` has nothing to evaluate it: refused, never dropped.
    """
    for entry in package.config:
        if any(not isinstance(segment, ast.Text) for segment in entry.value):
            example = _FIELD_EXAMPLES.get(entry.key, "plain text")
            yield Diagnostic(
                entry.span,
                f"manifest field `{entry.key}` must be literal text: a package manifest"
                " is never run, so backticks and `<...>` are not evaluated",
                f"write the value itself, e.g. `{entry.key}: {example}`",
            )


def manifest_problems(package: ast.Package) -> Iterator[Diagnostic]:
    """Field values a manifest may not hold (keys themselves are checked by `checks.py`)."""
    yield from _non_literal_fields(package)
    try:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion, Version
    except ImportError:
        yield Diagnostic(
            package.span,
            "checking a package manifest needs the `packaging` library",
            'install it with `pip install "kedi[packages]"`',
        )
        return
    entries = {entry.key: entry for entry in package.config}
    manifest = read_manifest(package)
    version = manifest.fields.get("version")
    if version is not None:
        try:
            Version(version)
        except InvalidVersion:
            yield Diagnostic(
                entries["version"].span,
                f"`version` must be a PEP 440 version, not `{version}`",
                "for example `1.2.0` or `2.0.0rc1`",
            )
    source = manifest.fields.get("source")
    if source is not None and (
        source.startswith("/") or "\\" in source or ".." in source.split("/")
    ):
        yield Diagnostic(
            entries["source"].span,
            f"`source` must be a relative directory inside the package, not `{source}`",
        )
    python = manifest.fields.get("python")
    bounds = python_bounds(python) if python is not None else None
    if bounds is not None and bounds[0] > bounds[1]:
        yield Diagnostic(
            entries["python"].span,
            f"`python` range `{python}` is empty: its lower bound is above its upper bound",
        )
    deps = entries.get("python_dependencies")
    if deps is not None and deps.value:
        yield Diagnostic(
            deps.span, "`python_dependencies` takes an indented list, one requirement per line"
        )
    for item in manifest.dependencies:
        try:
            Requirement(item)
        except InvalidRequirement as exc:
            yield Diagnostic(
                deps.span if deps else package.span, f"`{item}` is not a PEP 508 requirement: {exc}"
            )


def python_bounds(text: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """(lowest, highest) Python version of `python@X.Y` / `python@X.Y-X.Z`, or None if malformed."""
    match = _PYTHON.fullmatch(text)
    if match is None:
        return None
    low = (int(match[1]), int(match[2]))
    high = (int(match[3]), int(match[4])) if match[3] else low
    return low, high


GENERATED_MARK = "# Generated by `kedi package pyproject` from package.kedi."
"""The first line of every pyproject.toml kedi writes (`--write` replaces only such files)."""


def pyproject_toml(manifest: Manifest) -> str:
    """A hatchling `pyproject.toml` shipping the package's `.kedi` files under the `kedi.packages` group."""
    name = manifest.name
    source = manifest.fields.get("source", ".")
    lines = [
        GENERATED_MARK,
        "[build-system]",
        'requires = ["hatchling>=1.21"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        f"name = {_toml_string(name)}",
        f"version = {_toml_string(manifest.fields.get('version', '0.0.0'))}",
        f"dependencies = {_toml_list(manifest.dependencies)}",
    ]
    python = manifest.fields.get("python")
    bounds = python_bounds(python) if python else None
    if bounds is not None:
        (low_major, low_minor), (high_major, high_minor) = bounds
        lines.append(
            f'requires-python = ">={low_major}.{low_minor},<{high_major}.{high_minor + 1}"'
        )
    if "license" in manifest.fields:
        lines.append(f"license = {{text = {_toml_string(manifest.fields['license'])}}}")
    lines += _people_and_urls(manifest.fields)
    lines += [
        "",
        '[project.entry-points."kedi.packages"]',
        f"{_toml_string(name)} = {_toml_string(name)}",
        "",
        "# The source directory ships as the import package `name`, .kedi files included.",
        "[tool.hatch.build.targets.wheel.force-include]",
        f"{_toml_string(source)} = {_toml_string(name)}",
        "",
    ]
    return "\n".join(lines)


_TOML_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_TOML_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')


def _toml_string(text: str) -> str:
    """`text` as a TOML basic string that `tomllib` reads back exactly.

    Quotes, backslashes and control characters are escaped (TOML forbids them
    raw); everything else, emoji included, is written as itself, since a TOML
    file is UTF-8. (`json.dumps` is not TOML: it writes characters outside the
    BMP as surrogate pairs, `\\ud83d\\ude00`, which TOML rejects.) Hand-written:
    the standard library reads TOML but does not write it, and these few
    lines are all a generated pyproject.toml needs, not worth a dependency.
    """
    return '"' + _TOML_NEEDS_ESCAPE.sub(_toml_escape, text) + '"'


def _toml_escape(match: re.Match[str]) -> str:
    char = match[0]
    return _TOML_ESCAPES.get(char) or f"\\u{ord(char):04X}"


def _toml_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(_toml_string(item) for item in items) + "]"


def _people_and_urls(fields: dict[str, str]) -> list[str]:
    """`authors` from `author` and an e-mail `contact`; any other `contact` (a URL) as a project URL.

    Spec B25: `author`, `contact` and `license` are manifest fields, so none of
    them is dropped on the way to the distribution's metadata.
    """
    author = fields.get("author")
    contact = fields.get("contact")
    email = contact if contact and "@" in contact and "://" not in contact else None
    person = [f"name = {_toml_string(author)}"] if author else []
    if email:
        person.append(f"email = {_toml_string(email)}")
    lines = [f"authors = [{{{', '.join(person)}}}]"] if person else []
    if contact and not email:
        lines += ["", "[project.urls]", f"Contact = {_toml_string(contact)}"]
    return lines
