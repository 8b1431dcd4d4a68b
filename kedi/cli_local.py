"""`kedi serve-local`: the local model behind an OpenAI-compatible server, for any adapter.

It runs llama-cpp-python's own server (`python -m llama_cpp.server`) on the
GGUF model `--model local` uses, and prints the base URL to give the other
adapters (`--base-url http://127.0.0.1:PORT/v1`). The server serves the
model under the name `local`.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import click

from kedi.adapters.local import N_CTX, default_model_path
from kedi.errors import ExtraNotInstalledError

__all__ = ["serve_local", "server_command"]


def server_command(host: str, port: int, model_path: str) -> list[str]:
    """The command line that starts llama.cpp's OpenAI-compatible server."""
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", model_path,
        "--model_alias", "local",
        "--host", host,
        "--port", str(port),
        "--n_ctx", str(N_CTX),
    ]  # fmt: skip


def serve_local(*, host: str, port: int, model_path: str | None) -> None:
    """Serve the local model until interrupted; raises `ExtraNotInstalledError` without the extra."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ExtraNotInstalledError("llama-cpp-python", "local")
    path = model_path or default_model_path()
    click.echo(
        f"serving {path} at http://{host}:{port}/v1 (model name: local); use it with\n"
        f"  kedi run FILE --adapter openai --model local --base-url http://{host}:{port}/v1",
        err=True,
    )
    try:
        completed = subprocess.run(server_command(host, port, path), check=False)
    except KeyboardInterrupt:
        return
    if completed.returncode not in (0, -2):
        sys.exit(completed.returncode)
