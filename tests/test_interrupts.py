"""Ctrl-C: `kedi run` stops within a second wherever it is, says where, exits 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kedi
from kedi import Conversation
from kedi.runtime.interrupts import KediInterrupted

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="needs POSIX signals (SIGINT to a subprocess)"
)

PROGRAMS = {
    # Embedded Python sleeping on the event loop's thread.
    "python": (
        """\
[x: int] = `1`
= ```
import time
print("ready", flush=True)
time.sleep(30)
return x
```
""",
        (2,),
    ),
    # Kedi code between backtick evaluations: a procedure called ten million times.
    "kedi": (
        """\
@step(i: int) -> int:
  [y: int] = `i * 2`
  = `y + 1`
= ```
print("ready", flush=True)
total = 0
for i in range(10**7):
    total += step(i)
return total
```
""",
        # Whichever statement was running: one of `step`'s, or (under load the
        # signal may land there) the fence's loop between two calls.
        (2, 3, 4),
    ),
    # Waiting for a model that takes 30 s to answer.
    "model": (
        """\
```
import anyio
from kedi.adapters.base import Adapter

class Slow(Adapter):
    shortname = "slow"

    async def request(self, request):
        print("ready", flush=True)
        await anyio.sleep(30)
```
> adapter: `Slow()`
>> Say something [reply]
= `reply`
""",
        (13,),
    ),
}


def _start(
    tmp_path: Path, source: str, sigint: signal.Handlers = signal.SIG_DFL
) -> subprocess.Popen[str]:
    program = tmp_path / "flow.kedi"
    program.write_text(source, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "kedi", "run", "flow.kedi"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT's disposition at a terminal: a test run from a background job
        # would otherwise hand the child SIGINT ignored, which `kedi run` keeps.
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    time.sleep(0.2)  # let it get into the long part
    return process


def _finish(process: subprocess.Popen[str]) -> tuple[float, str]:
    """Wait for the process after a signal; return (seconds it took, stderr)."""
    started = time.monotonic()
    try:
        _, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return time.monotonic() - started, err


@pytest.mark.parametrize("where", sorted(PROGRAMS))
def test_ctrl_c_stops_the_run_within_a_second(tmp_path: Path, where: str) -> None:
    source, lines = PROGRAMS[where]
    process = _start(tmp_path, source)
    process.send_signal(signal.SIGINT)
    elapsed, err = _finish(process)
    # One line: where it stopped, and (the run was recorded) how to resume it.
    assert err.count("\n") == 1 and err.endswith("\n")
    assert any(err.startswith(f"kedi: interrupted at flow.kedi:{line}") for line in lines), err
    assert "Resume with: kedi run flow.kedi --resume " in err
    assert process.returncode == 130
    assert elapsed < 1.0 * (
        3 if os.environ.get("CI") else 5
    )  # under 1 s idle; the machine is shared


def test_second_ctrl_c_exits_at_once(tmp_path: Path) -> None:
    """Code that swallows the first interrupt cannot hold the process: the second one ends it."""
    source = """\
= ```
import time
print("ready", flush=True)
try:
    time.sleep(30)
except KeyboardInterrupt:
    time.sleep(30)
return 1
```
"""
    process = _start(tmp_path, source)
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert process.poll() is None  # still in the second sleep
    process.send_signal(signal.SIGINT)
    elapsed, err = _finish(process)
    assert err == "kedi: interrupted\n"
    assert process.returncode == 130
    assert elapsed < 5


def test_a_run_started_with_sigint_ignored_keeps_ignoring_it(tmp_path: Path) -> None:
    """As `kedi batch` does (docs/batch.md): under nohup or in a background job, Ctrl-C is not ours."""
    source = """\
= ```
import time
print("ready", flush=True)
time.sleep(1.5)
return "finished"
```
"""
    process = _start(tmp_path, source, sigint=signal.SIG_IGN)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert out == "finished\n" and "interrupted" not in err


def test_interrupt_leaves_history_with_whole_turns_only() -> None:
    """Ctrl-C while the second call waits: the first turn stays, nothing of the second."""
    source = """\
```
import os, signal, anyio
from kedi.adapters.offline import OfflineAdapter

class InterruptedOnSecondCall(OfflineAdapter):
    calls = 0

    async def request(self, request):
        type(self).calls += 1
        if self.calls == 2:
            os.kill(os.getpid(), signal.SIGINT)
            await anyio.sleep(30)
        return await super().request(request)
```
> adapter: `InterruptedOnSecondCall()`
> history: enabled
>> one [a]
>> two [b]
= `b`
"""
    conversation = Conversation()
    program = kedi.compile(source, path="flow.kedi")
    started = time.monotonic()
    with pytest.raises(KediInterrupted) as caught:
        program.run_sync(conversation=conversation)
    assert time.monotonic() - started < 10
    assert caught.value.describe() == "kedi: interrupted at flow.kedi:18"  # `>> two`
    messages = [message for lane in conversation.lanes.values() for message in lane.messages]
    assert [(m.role, m.content) for m in messages][:1] == [("user", "one [a]")]
    assert [m.role for m in messages] == ["user", "assistant"]
