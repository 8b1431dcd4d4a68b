"""Shared pieces of the batch tests: a program, scripted replies per row, running `kedi batch`."""

from __future__ import annotations

import json
import os
import random
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """[text] = `args.text`
>> Label this ticket: <text> [label].
= <label>
"""


def label(key: int) -> str:
    """The scripted label of row `key`."""
    return f"label-{key * 7 % 13}"


def write_job(
    tmp_path: Path,
    rows: int,
    *,
    max_delay_ms: int = 0,
    seed: int = 0,
    errors: set[int] = frozenset(),
) -> dict[str, Path]:
    """A program, `rows` JSONL rows (`{"id": "t<n>", "text": "<row-n>"}`) and a script answering each row by its text."""
    rng = random.Random(seed)
    program = tmp_path / "label.kedi"
    program.write_text(PROGRAM, encoding="utf-8")
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text(
        "".join(json.dumps({"id": f"t{n}", "text": f"<row-{n}>"}) + "\n" for n in range(rows))
    )
    entries: list[dict[str, Any]] = []
    for n in range(rows):
        reply: dict[str, Any] = (
            {"error": f"boom {n}"} if n in errors else {"outputs": {"label": label(n)}}
        )
        if max_delay_ms:
            reply["delay_ms"] = rng.randint(0, max_delay_ms)
        entries.append({**reply, "when": {"prompt_contains": f"<row-{n}>"}})
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(entries))
    return {
        "program": program,
        "inputs": inputs,
        "script": script,
        "out": tmp_path / "results.jsonl",
        "store": tmp_path / "history.db",
    }


def environment(store: Path) -> dict[str, str]:
    """The environment of a `kedi batch` subprocess: this worktree's kedi, a private store."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KEDI_HISTORY": str(store),
        **private_ray(store.parent),
    }
    env.pop("KEDI_MODEL", None)
    env.pop("KEDI_ADAPTER", None)
    return env


def private_ray(folder: Path) -> dict[str, str]:
    """Ray settings for a test cluster: no usage stats, token auth on a token of its own (not ~/.ray)."""
    token = folder / "ray-token"
    if not token.exists():
        token.write_text(secrets.token_hex(32))
    return {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
    }


def batch_command(paths: dict[str, Path], *options: str, model: str | None = None) -> list[str]:
    """`kedi batch PROGRAM INPUTS --out RESULTS --model MODEL` as a subprocess argv.

    The model is the job's script (`script:...`) unless `model` names another.
    """
    return [
        sys.executable,
        "-m",
        "kedi",
        "batch",
        str(paths["program"]),
        str(paths["inputs"]),
        "--out",
        str(paths["out"]),
        "--model",
        model or f"script:{paths['script']}",
        "--quiet",
        *options,
    ]


def openai_batch(
    paths: dict[str, Path], base_url: str, *options: str, api_key: str = "sk-test"
) -> tuple[list[str], dict[str, str]]:
    """`kedi batch` on the openai adapter at `base_url` (model `test-model`): argv and environment."""
    command = batch_command(
        paths, "--adapter", "openai", "--base-url", base_url, *options, model="test-model"
    )
    return command, {**environment(paths["store"]), "OPENAI_API_KEY": api_key}


def run_batch(
    paths: dict[str, Path], *options: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `kedi batch` to the end in a subprocess."""
    return subprocess.run(
        batch_command(paths, *options),
        env=environment(paths["store"]),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class CountingServer:
    """`counting_server` in a subprocess; a context manager giving its base URL and stats."""

    def __init__(self, *options: str) -> None:
        self._options = options
        self._process: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> CountingServer:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.batch.counting_server", *self._options],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.startswith("PORT "):
            self._process.kill()
            raise RuntimeError(f"the counting server did not start: {line!r}")
        self.base_url = f"http://127.0.0.1:{int(line.split()[1])}/v1"
        return self

    @property
    def pid(self) -> int:
        """The server's process id (benchmarks leave its CPU out of the client's)."""
        assert self._process is not None
        return self._process.pid

    def stats(self) -> dict[str, list[float]]:
        import httpx

        return httpx.get(self.base_url + "/stats", timeout=10).json()

    def __exit__(self, *exc: object) -> None:
        assert self._process is not None
        self._process.terminate()
        self._process.wait(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()


def max_in_window(times: list[float], window: float) -> int:
    """The most arrivals inside any `window` seconds."""
    times = sorted(times)
    best, start = 0, 0
    for end, moment in enumerate(times):
        while moment - times[start] > window:
            start += 1
        best = max(best, end - start + 1)
    return best
