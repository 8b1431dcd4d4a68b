"""Loading saved conversations: `python bench/load.py [MESSAGES]`.

Builds a document of one portable lane with MESSAGES messages (default 1
million, about 40 MB: short text, as in issue 18's probe) in a process of its
own and saves it to a temporary file; then, each in a fresh process that reads
the file, times `Conversation.loads` and reads its peak resident memory,
and times side by side the two ways of validating the lane: message by
message (`as_messages`) and in one pydantic-core call (what `loads` does).
Prints the figures and whether they meet the targets (8 s, 400 MB); exits 1
when one is missed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 8.0
TARGET_MB = 400.0

_BUILD = """
import json, sys
count, path = {count}, {path!r}
messages = [{{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{{i}}"}} for i in range(count)]
key = {{"adapter": "script", "model": "m", "settings": "d"}}
lane = {{"key": key, "epoch": 0, "format": "portable", "messages": messages}}
with open(path, "w", encoding="utf-8") as file:
    json.dump({{"version": 1, "conversation_id": "c1", "lanes": [lane]}}, file)
"""
"""Builds the document in a process of its own, so its memory is not charged to loading."""

_LOAD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from kedi.history.persistence import loads

with open({path!r}, encoding="utf-8") as file:
    text = file.read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
started = time.process_time()
loads(text)
seconds = time.process_time() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"mb": len(text) / 1e6, "seconds": seconds, "peak": peak, "before": before}}))
"""
"""Times `loads` of the saved text in a fresh process: its peak is the interpreter, kedi, the text and the load."""

_VALIDATE = """
import json, sys, time
sys.path.insert(0, {root!r})
from kedi.history.messages import as_messages
from kedi.history.persistence import _portable_messages

with open({path!r}, encoding="utf-8") as file:
    sample = json.load(file)["lanes"][0]["messages"][:100_000]
times = {{}}
for _ in range(3):  # interleaved, the best counts
    for name, validate in (("each", as_messages), ("one call", _portable_messages)):
        started = time.process_time()
        validate(sample)
        spent = time.process_time() - started
        times[name] = min(times.get(name, spent), spent)
print(json.dumps(times))
"""


def child(template: str, **values: object) -> dict[str, float]:
    """Run `template` filled with `values` in a fresh interpreter; its last stdout line as JSON."""
    code = template.format(root=str(ROOT), **values)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    return json.loads(done.stdout or "{}")  # type: ignore[no-any-return]


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "conversation.json")
        child(_BUILD, count=count, path=path)
        load = child(_LOAD, path=path)
        both = child(_VALIDATE, path=path)
    print(f"document: {count:,} messages, {load['mb']:.0f} MB (built and saved in another process)")
    print(f"Conversation.loads: {load['seconds']:.1f} s CPU (target {TARGET_SECONDS:g} s)")
    print(
        f"peak RSS: {load['peak']:.0f} MB, {load['before']:.0f} MB of it before loading "
        f"(interpreter, kedi and the text read from the file; target {TARGET_MB:g} MB)"
    )
    print(
        f"validating 100k messages: message by message {both['each']:.2f} s, "
        f"one call {both['one call']:.2f} s ({both['each'] / both['one call']:.2f}x)"
    )
    met = load["seconds"] <= TARGET_SECONDS and load["peak"] <= TARGET_MB
    print("targets met" if met else "targets NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
