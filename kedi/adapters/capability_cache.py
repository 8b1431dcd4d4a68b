"""The structured mode each (base URL, model) accepted, kept for the process and on disk.

The `openai` adapter's `auto` mode steps down when a server rejects a
request's shape (`json_schema` → `json_object` → `tool` → `prompted`). The
mode it stepped down to is remembered here, in memory for the process and in
a small JSON file, so the next run starts in the mode that works instead of
paying for the rejected requests again.

The file is `capabilities.json` under the user cache directory
(`platformdirs.user_cache_dir("kedi")`, e.g. `~/.cache/kedi` on Linux), or
under `KEDI_CACHE_DIR` when that is set. Delete it to make kedi negotiate
afresh (after a server upgrade, say). It holds base URLs, model names and mode
names only, never keys. The cache is an optimisation: a file that cannot be
read or written is ignored.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

__all__ = ["cache_path", "forget_all", "remembered_mode", "remember_mode"]

_FILE = "capabilities.json"
_lock = threading.Lock()
_modes: dict[str, str] | None = None
"""key -> mode; None until the file is read (once per process)."""


def cache_path() -> Path:
    """Where the capability cache is written."""
    folder = os.environ.get("KEDI_CACHE_DIR", "").strip()
    if not folder:
        import platformdirs  # imported only when a server needed a step-down

        folder = platformdirs.user_cache_dir("kedi", appauthor=False)
    return Path(folder) / _FILE


def remembered_mode(base_url: str, model: str) -> str | None:
    """The structured mode `auto` should start in for this endpoint and model, if known."""
    with _lock:
        return _loaded().get(_key(base_url, model))


def remember_mode(base_url: str, model: str, mode: str) -> None:
    """Record the mode that worked after a step-down, for the process and the file."""
    key = _key(base_url, model)
    with _lock:
        modes = _loaded()
        if modes.get(key) == mode:
            return
        modes[key] = mode
        _write(modes)


def forget_all() -> None:
    """Drop what this process remembers (the file is re-read on next use); for tests."""
    global _modes
    with _lock:
        _modes = None


def _key(base_url: str, model: str) -> str:
    return f"{base_url.rstrip('/')} {model}"


def _loaded() -> dict[str, str]:
    global _modes
    if _modes is None:
        _modes = _read()
    return _modes


def _read() -> dict[str, str]:
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
        modes = data["structured_modes"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(modes, dict):
        return {}
    return {str(key): str(value) for key, value in modes.items() if isinstance(value, str)}


def _write(modes: dict[str, str]) -> None:
    path = cache_path()
    data = json.dumps({"version": 1, "structured_modes": modes}, indent=1, sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename, so a concurrent reader never sees half a file.
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".capabilities-")
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(data)
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only home or a full disk costs a re-negotiation, nothing more
