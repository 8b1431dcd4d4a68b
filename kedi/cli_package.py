"""`kedi package check DIR` and `kedi package pyproject DIR`: Kedi packages on disk.

A package directory holds `package.kedi` (one `> package: name:` manifest)
and the `source` directory it names, which holds `main.kedi`. `check`
validates the manifest and checks and links every `.kedi` file of the
source; `pyproject` writes the `pyproject.toml` that makes the directory an
ordinary pip-installable distribution (`kedi.syntax.manifest.pyproject_toml`).
"""

from __future__ import annotations

from pathlib import Path

from kedi.errors import Diagnostic, KediCheckError
from kedi.source import SourceFile, read_source
from kedi.syntax import ast
from kedi.syntax.manifest import Manifest, read_manifest


def load_manifest(directory: str) -> tuple[Manifest, Path]:
    """Check `DIR/package.kedi`; return its manifest and the package's source directory."""
    from kedi.syntax.checks import check_source

    root = Path(directory)
    path = root / "package.kedi"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no package.kedi")
    text = read_source(path)
    module = check_source(text, str(path))
    file = SourceFile(text, str(path))
    package = next((s for s in module.body if isinstance(s, ast.Package)), None)
    if package is None:
        span = file.whole_span()
        raise KediCheckError(
            [Diagnostic(span, "`package.kedi` holds no `> package: name:` manifest")]
        )
    manifest = read_manifest(package)
    source = root / manifest.fields.get("source", ".")
    if not (source / "main.kedi").is_file():
        # Point at the `source:` field when there is one, else at `> package:` (source defaults to `.`).
        span = next((entry.span for entry in package.config if entry.key == "source"), package.span)
        raise KediCheckError(
            [
                Diagnostic(
                    span,
                    f"the package source `{source}` has no main.kedi",
                    "set `source:` to the directory holding the package's main.kedi",
                    source_line=file.line_text(span.line),
                )
            ]
        )
    return manifest, source


def check_package(directory: str) -> list[str]:
    """Check the manifest and every `.kedi` file of the source; return the files checked."""
    from kedi.syntax.linking import check_and_link

    _, source = load_manifest(directory)
    checked = []
    for file in sorted(source.rglob("*.kedi")):
        check_and_link(read_source(file), str(file))
        checked.append(str(file))
    return checked
