"""kedi's per-user disk cache of the parse tables `_grammar.py` derives with Lark.

A warm start reads the tables back from one file and never imports Lark (see
docs/syntax.md, "The table cache"). The file is written with `marshal`: the
tables are plain dicts, lists, tuples, strings and numbers, which `marshal`
reads back fastest, and, unlike `pickle`, reading a file can never run code.

The cache is an optimisation only: a missing, unreadable, corrupt or stale
file reads as a miss, and a cache that cannot be written is skipped.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from pathlib import Path
from typing import Any

CACHE_DIR_VARIABLE = "KEDI_CACHE_DIR"
"""Environment variable naming the cache directory (default: the platform's user cache)."""
KEPT_FILES = 8
"""How many table files (one per grammar version) a write leaves: the most recently written."""
_PATTERN = "parse-tables-*.marshal"


def cache_dir() -> Path | None:
    """Return the directory kedi caches in, or None when there is no home to put it in.

    `KEDI_CACHE_DIR` wins; otherwise `%LOCALAPPDATA%\\kedi\\Cache` on Windows,
    `~/Library/Caches/kedi` on macOS and `$XDG_CACHE_HOME/kedi` (default
    `~/.cache/kedi`) elsewhere. A per-user directory, unlike the shared
    temporary directory Lark caches in, holds only files the user wrote.
    """
    configured = os.environ.get(CACHE_DIR_VARIABLE)
    if configured:
        return Path(configured)
    try:
        if sys.platform == "win32":
            local = os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local"
            return Path(local) / "kedi" / "Cache"
        if sys.platform == "darwin":
            return Path.home() / "Library" / "Caches" / "kedi"
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kedi"
    except RuntimeError:  # Path.home(): no HOME and no password entry
        return None


def cache_file(key: str) -> Path | None:
    """Return the file that holds the tables cached under `key` (None: no cache directory)."""
    directory = cache_dir()
    return None if directory is None else directory / f"parse-tables-{key}.marshal"


def read_tables(key: str) -> Any | None:
    """Return the plain data stored under `key`, or None when the cache does not hold it.

    The file stores its key and a SHA-256 of the data next to the data, so a
    file another kedi wrote under the same name, one cut short or one with a
    damaged byte reads as a miss, never as wrong tables.
    """
    path = cache_file(key)
    if path is None:
        return None
    try:
        stored_key, digest, payload = marshal.loads(path.read_bytes())
        if stored_key != key or digest != hashlib.sha256(payload).digest():
            return None
        return marshal.loads(payload)
    except (OSError, EOFError, ValueError, TypeError):
        return None


def write_tables(key: str, data: Any) -> None:
    """Store `data` under `key`, atomically; do nothing if the cache cannot be written.

    Writing to a private temporary file and renaming it over the cache file
    means a concurrent reader sees the old file or the new one, never half of one.
    Each grammar version has its own file, so a write also removes all but the
    `KEPT_FILES` most recently written: upgrades do not pile up files, and a few
    kedi versions used side by side keep theirs.
    """
    path = cache_file(key)
    if path is None:
        return
    import tempfile  # only a cold start writes: keep it off the warm path

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as file:
            payload = marshal.dumps(data)
            file.write(marshal.dumps((key, hashlib.sha256(payload).digest(), payload)))
        os.replace(temporary, path)
    except OSError:
        return  # a cache that cannot be written is skipped
    finally:
        Path(temporary).unlink(missing_ok=True)  # still there only if the rename did not happen
    _prune(path.parent)


def _prune(directory: Path) -> None:
    """Remove all but the `KEPT_FILES` most recently written table files in `directory`."""
    try:
        written = sorted(
            ((file.stat().st_mtime_ns, file) for file in directory.glob(_PATTERN)), reverse=True
        )
        for _, file in written[KEPT_FILES:]:
            file.unlink(missing_ok=True)
    except OSError:
        pass  # another process pruned first, or the directory is read-only now: no harm
