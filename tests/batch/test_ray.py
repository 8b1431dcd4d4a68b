"""The Ray engine: same results as local, an actor killed mid-row, rpm across actors, a separate head.

Every scenario runs in a subprocess with a timeout, on private clusters bound
to 127.0.0.1 with usage stats off. Ray starts slowly on a 2-core machine, so
the scenarios are few and small.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.batch.helpers import (
    ROOT,
    CountingServer,
    batch_command,
    environment,
    max_in_window,
    private_ray,
    results,
    run_batch,
    write_job,
)

ray = pytest.importorskip("ray", reason="needs Ray: pip install 'kedi[ray]'")
pytestmark = [pytest.mark.ray, pytest.mark.slow]
TIMEOUT = 300


def comparable(lines: list[dict]) -> list[tuple]:
    """Everything but the session id, which is fresh in every run."""
    return [
        (
            line["key"],
            line["value"],
            json.dumps(line["error"]),
            json.dumps(line["usage"], sort_keys=True),
        )
        for line in lines
    ]


def test_local_and_ray_engines_give_identical_results(tmp_path: Path) -> None:
    paths = write_job(tmp_path, 24, max_delay_ms=80, seed=5, errors={7})
    outs = []
    for engine in ("local", "ray"):
        paths["out"] = tmp_path / f"{engine}.jsonl"
        done = run_batch(
            paths,
            "--parallel",
            "8",
            "--engine",
            engine,
            "--actors",
            "2",
            "--job",
            engine,
            timeout=TIMEOUT,
        )
        assert "24 rows run" in done.stderr, done.stderr[-3000:]
        outs.append(results(paths["out"]))
    assert [line["key"] for line in outs[1]] == [str(n) for n in range(24)]
    assert comparable(outs[0]) == comparable(outs[1])
    assert outs[1][7]["error"]["type"] == "ProviderError"


def test_an_actor_killed_mid_row_loses_and_duplicates_nothing_and_rpm_holds(tmp_path: Path) -> None:
    paths = write_job(tmp_path, 40)
    with CountingServer("--latency-ms", "150") as server:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.batch.ray_scenarios",
                "kill-actor",
                str(tmp_path),
                server.base_url,
            ],
            cwd=ROOT,
            env={**environment(paths["store"]), "OPENAI_API_KEY": "sk-test"},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        stats = server.stats()
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["killed"] and summary["failed"] == 0
    assert summary["ledger"] == sorted(str(n) for n in range(40))
    lines = results(paths["out"])
    assert [line["key"] for line in lines] == [str(n) for n in range(40)]
    assert [line["value"] for line in lines] == [f"<row-{n}>" for n in range(40)]
    # Rows in flight on the dead actor were sent again; no other row was.
    resent = len(stats["prompts"]) - 40
    assert 0 <= resent <= 4, f"{resent} rows sent twice (an actor holds at most 4)"
    # 600 rpm = 10 a second, for both actors together. Sends are booked 0.1 s
    # apart; arrivals jitter by the actors' scheduling (under 0.1 s here), so a
    # 1 s window may see one more than its 10 + 1. Over the run the rate holds.
    arrivals = sorted(stats["arrivals"])
    assert max_in_window(arrivals, 1.0) <= 12
    assert (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) <= 10.5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"the Ray head did not listen on 127.0.0.1:{port} within {timeout:g} s")


def test_a_separate_ray_head_on_the_loopback(tmp_path: Path) -> None:
    port = free_port()
    # A single-machine cluster: Ray keeps 127.0.0.1 instead of the machine's address.
    loopback = {**private_ray(tmp_path), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    # Ray's own `ray` command, run by this interpreter: in a venv made with
    # --system-site-packages the script is beside the base Python, not this one.
    ray_cli = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]
    # Ray's unix sockets live under --temp-dir, and a socket path must stay under 108 bytes.
    short_dir = tempfile.mkdtemp(prefix="kedi-ray-", dir="/tmp")
    head = subprocess.Popen(
        [
            *ray_cli,
            "start",
            "--head",
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            "--port",
            str(port),
            "--num-cpus",
            "2",
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
            "--temp-dir",
            short_dir,
        ],
        env={**os.environ, **loopback},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_port(port, head, 120)
        paths = write_job(tmp_path, 6)
        done = subprocess.run(
            batch_command(paths, "--engine", "ray", "--address", f"127.0.0.1:{port}"),
            env={**environment(paths["store"]), **loopback},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert [line["value"] for line in results(paths["out"])] == [
            f"label-{n * 7 % 13}" for n in range(6)
        ]
    finally:
        os.killpg(
            head.pid, signal.SIGTERM
        )  # the head's own process group: its raylet, GCS and workers
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        shutil.rmtree(short_dir, ignore_errors=True)
