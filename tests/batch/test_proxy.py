"""`kedi batch` on the openai adapter goes through the environment's proxy, honouring NO_PROXY."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.batch.helpers import CountingServer, openai_batch, results, write_job

NOWHERE = "http://kedi-proxy-test.invalid/v1"
"""A base URL no resolver knows: a request reaches a server only through the proxy."""

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def run_through(tmp_path: Path, proxy: str, no_proxy: str) -> tuple[int, list[dict]]:
    paths = write_job(tmp_path, 3)
    command, env = openai_batch(paths, NOWHERE, "--parallel", "2")
    for name in PROXY_VARIABLES:
        env.pop(name, None)
        env.pop(name.lower(), None)
    env.update(HTTP_PROXY=proxy, NO_PROXY=no_proxy)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, results(paths["out"])


def test_requests_go_through_the_environment_proxy(tmp_path: Path) -> None:
    # The counting server answers any request line, so it serves as the proxy
    # (a proxied request names the absolute URL) and counts what reached it.
    with CountingServer() as proxy:
        code, rows = run_through(tmp_path, proxy.base_url.removesuffix("/v1"), "")
        assert len(proxy.stats()["arrivals"]) == 3
    assert code == 0
    assert [row["error"] for row in rows] == [None] * 3


def test_no_proxy_hosts_go_direct(tmp_path: Path) -> None:
    with CountingServer() as proxy:
        code, rows = run_through(
            tmp_path, proxy.base_url.removesuffix("/v1"), "localhost,kedi-proxy-test.invalid"
        )
        assert proxy.stats()["arrivals"] == []
    assert code == 1  # straight to a host that does not exist
    assert all(row["error"] is not None for row in rows)
