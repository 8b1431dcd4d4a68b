"""Loading saved conversations: `python bench/load.py [MESSAGES]`.

Builds a document of one portable lane with MESSAGES messages (default 1
million, about 40 MB: short text, as in issue 18's probe), then, each in a
fresh process, times `Conversation.loads` and reads its peak resident memory,
and times side by side the two ways of validating the lane: message by
message (`as_messages`) and in one pydantic-core call (what `loads` does).
Prints the figures and whether they meet the targets (8 s, 400 MB); exits 1
when one is missed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 8.0
TARGET_MB = 400.0

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from kedi.history.messages import as_messages
from kedi.history.persistence import _portable_messages, loads

count = {count}
messages = [{{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{{i}}"}} for i in range(count)]
key = {{"adapter": "script", "model": "m", "settings": "d"}}
lane = {{"key": key, "epoch": 0, "format": "portable", "messages": messages}}
text = json.dumps({{"version": 1, "conversation_id": "c1", "lanes": [lane]}})
if {mode!r} == "load":
    del messages, lane
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.process_time()
    loads(text)
    seconds = time.process_time() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({{"mb": len(text) / 1e6, "seconds": seconds, "peak": peak, "before": before}}))
else:
    sample = json.loads(json.dumps(messages[:100_000]))
    times = {{}}
    for _ in range(3):  # interleaved, the best counts
        for name, validate in (("each", as_messages), ("one call", _portable_messages)):
            started = time.process_time()
            validate(sample)
            spent = time.process_time() - started
            times[name] = min(times.get(name, spent), spent)
    print(json.dumps(times))
"""


def child(count: int, mode: str) -> dict[str, float]:
    code = _CHILD.format(root=str(ROOT), count=count, mode=mode)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    load = child(count, "load")
    print(f"document: {count:,} messages, {load['mb']:.0f} MB")
    print(f"Conversation.loads: {load['seconds']:.1f} s CPU (target {TARGET_SECONDS:g} s)")
    print(f"peak RSS: {load['peak']:.0f} MB, {load['before']:.0f} MB of it before loading (target {TARGET_MB:g} MB)")
    both = child(min(count, 100_000), "validate")
    print(
        f"validating 100k messages: message by message {both['each']:.2f} s, "
        f"one call {both['one call']:.2f} s ({both['each'] / both['one call']:.2f}x)"
    )
    met = load["seconds"] <= TARGET_SECONDS and load["peak"] <= TARGET_MB
    print("targets met" if met else "targets NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
