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
from kedi.source import SourceFile
from kedi.syntax import ast
from kedi.syntax.manifest import Manifest, read_manifest


def load_manifest(directory: str) -> tuple[Manifest, Path]:
    """Check `DIR/package.kedi`; return its manifest and the package's source directory."""
    from kedi.syntax.checks import check_source

    root = Path(directory)
    path = root / "package.kedi"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no package.kedi")
    text = path.read_text(encoding="utf-8")
    module = check_source(text, str(path))
    package = next((s for s in module.body if isinstance(s, ast.Package)), None)
    if package is None:
        span = SourceFile(text, str(path)).whole_span()
        raise KediCheckError([Diagnostic(span, "`package.kedi` holds no `> package: name:` manifest")])
    manifest = read_manifest(package)
    source = root / manifest.fields.get("source", ".")
    if not (source / "main.kedi").is_file():
        raise KediCheckError(
            [Diagnostic(package.span, f"the package source `{source}` has no main.kedi",
                        "set `source:` to the directory holding the package's main.kedi")]
        )
    return manifest, source


def check_package(directory: str) -> list[str]:
    """Check the manifest and every `.kedi` file of the source; return the files checked."""
    from kedi.syntax.linking import check_and_link

    _, source = load_manifest(directory)
    checked = []
    for file in sorted(source.rglob("*.kedi")):
        check_and_link(file.read_text(encoding="utf-8"), str(file))
        checked.append(str(file))
    return checked
