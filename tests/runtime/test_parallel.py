"""Parallel dataflow: identical results to sequential runs, promises, draining, ordering."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import kedi
from kedi.adapters.base import Adapter, AdapterProfile, CallRequest, CallResult
from kedi.errors import KediConfigError, KediError, KediPromiseLeak
from kedi.history import Message
from kedi.runtime.config import parse_parallel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Each program: (source, {output name or prompt marker: reply}); a reply of
# Exception(...) makes that call fail. Output names are unique per program so
# scripted replies can match calls whatever their order.
PROGRAMS: dict[str, tuple[str, dict[str, Any]]] = {
    "independent": (">> A [a].\n>> B [b].\n>> C [c].\n= <a><b><c>", {"a": "1", "b": "2", "c": "3"}),
    "chain": (
        ">> A [a].\n>> B after <a> [b].\n>> C after <b> [c].\n= <c>",
        {"a": "1", "b": "2", "c": "3"},
    ),
    "fan_out_in": (
        ">> Root [root].\n>> L <root> [left].\n>> R <root> [right].\n>> Join <left> <right> [joined].\n= <joined>",
        {"root": "r", "left": "l", "right": "x", "joined": "j"},
    ),
    "two_chains": (
        ">> A1 [a1].\n>> A2 <a1> [a2].\n>> B1 [b1].\n>> B2 <b1> [b2].\n= <a2>/<b2>",
        {"a1": "1", "a2": "2", "b1": "3", "b2": "4"},
    ),
    "typed": (
        ">> Count [n: int].\n>> Items [items: list[str]].\n= `n + len(items)`",
        {"n": 3, "items": ["x", "y"]},
    ),
    "multi_capture": (">> Both [p] and [q: int].\n= <p>-<q>", {("p", "q"): {"p": "P", "q": 7}}),
    "unconsumed": (">> Used [u].\n>> Ignored [ignored].\n= <u>", {"u": "1", "ignored": "2"}),
    "discard": (">> Fire and forget.\n>> Kept [k].\n= <k>", {"Fire and forget": "ok", "k": "K"}),
    "raw": ("[t] << Say something.\n>> Echo <t> [e].\n= <e>", {"Say something": "hello", "e": "E"}),
    "procedure": (
        "@f(x: str) -> str:\n  >> F <x> [fx].\n  = <fx>\n\n>> A [a].\n[y] = <f(<a>)>\n>> B <y> [b].\n= <b>",
        {"a": "1", "fx": "2", "b": "3"},
    ),
    "nested_procedures": (
        "@outer() -> str:\n  @inner() -> str:\n    >> I [i].\n    = <i>\n  >> O [o].\n  = <o><inner()>\n\n= <outer()>",
        {"i": "1", "o": "2"},
    ),
    "procedure_in_python": (
        "@g(v: str) -> str:\n  >> G <v> [gv].\n  = <gv>\n\n>> A [a].\n= `g(a) + '!'`",
        {"a": "1", "gv": "2"},
    ),
    "python_reads_force": (">> A [a].\n[n: int] = `len(a)`\n= `n`", {"a": "four"}),
    "history_shared_lane": (
        "> history: enabled\n>> H1 [h1].\n>> H2 [h2].\n>> H3 [h3].\n= <h3>",
        {"h1": "1", "h2": "2", "h3": "3"},
    ),
    "history_mixed": (
        "> history: enabled\n>> H1 [h1].\n@side() -> str:\n  > history: disabled\n  >> S [s].\n  = <s>\n"
        "[z] = <side()>\n>> H2 [h2].\n= <h2><z>",
        {"h1": "1", "s": "2", "h2": "3"},
    ),
    "history_two_lanes": (
        "> history: enabled\n>> A [a].\n@hot() -> str:\n  > settings:\n      temperature: 1.0\n"
        "  >> B [b].\n  >> C [c].\n  = <c>\n[x] = <hot()>\n>> D [d].\n= <d><x>",
        {"a": "1", "b": "2", "c": "3", "d": "4"},
    ),
    "failure_first": (
        ">> A [a].\n>> B [b].\n= <a><b>",
        {"a": Exception("first failed"), "b": Exception("second failed")},
    ),
    "failure_unconsumed": (">> A [a].\n>> B [b].\n= <a>", {"a": "1", "b": Exception("b failed")}),
    "failure_in_procedure": (
        "@f() -> str:\n  >> F [f1].\n  = <f1>\n\n>> A [a].\n[x] = <f()>\n= <a><x>",
        {"a": "1", "f1": Exception("f failed")},
    ),
    "failure_history": (
        "> history: enabled\n>> A [a].\n>> B [b].\n>> C [c].\n= <c>",
        {"a": "1", "b": Exception("b failed"), "c": "3"},
    ),
    "system_and_settings": (
        "> system: Be brief.\n> settings:\n    temperature: 0.2\n>> A [a].\n> system: Be long.\n>> B [b].\n= <a><b>",
        {"a": "1", "b": "2"},
    ),
    "loop_in_python": (
        "@label(x: str) -> str:\n  >> Label <x> [lab].\n  = <lab>\n\n"
        "[xs: list[str]] = `['p', 'q', 'r']`\n= `[label(x) for x in xs]`",
        {"lab": "L"},
    ),
}


def script_for(replies: dict[Any, Any], rng: random.Random, path: Path) -> str:
    entries = []
    for key, reply in replies.items():
        delay = rng.randint(0, 40)
        if isinstance(key, tuple):
            entry: dict[str, Any] = {"when": {"outputs": list(key)}, "outputs": reply}
        elif key[:1].isupper():
            entry = {"when": {"prompt_contains": key}, "text": reply}
        elif isinstance(reply, Exception):
            entry = {"when": {"outputs": [key]}, "error": str(reply)}
        else:
            entry = {"when": {"outputs": [key]}, "outputs": {key: reply}}
        entry["delay_ms"] = delay
        # A reply may be used more than once (a procedure called in a loop).
        entries.extend([entry] * 3)
    path.write_text(json.dumps(entries), encoding="utf-8")
    return f"script:{path}"


def outcome(source: str, model: str, parallel: int, path: Path) -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    try:
        result: Any = kedi.compile(source, path="p.kedi").run_sync(
            model=model, parallel=parallel, transcript=records.append
        )
        error = None
    except KediError as exc:
        result, error = None, (type(exc).__name__, getattr(exc, "message", str(exc)))
    lanes: dict[str, list[Any]] = {}
    for record in records:
        if record["history"]:
            messages = [
                {k: v for k, v in m.items() if k not in ("runId", "conversationId")}
                for m in record["messages"]
            ]
            lanes.setdefault(record["lane"], []).append(messages)
    return {"result": result, "error": error, "lanes": lanes}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_parallel_matches_sequential(name: str, tmp_path: Path) -> None:
    source, replies = PROGRAMS[name]
    rng = random.Random(name)
    script = tmp_path / "script.json"  # one path, so error messages naming it compare equal
    sequential = outcome(source, script_for(replies, rng, script), 0, tmp_path)
    for _ in range(2):
        assert outcome(source, script_for(replies, rng, script), 8, tmp_path) == sequential


EXAMPLE_FILES = sorted(EXAMPLES.glob("*.kedi"))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_examples_parallel_match_sequential(path: Path, tmp_path: Path) -> None:
    replies = json.loads(path.with_suffix(".replies.json").read_text(encoding="utf-8"))
    rng = random.Random(path.stem)
    for entry in replies:
        if isinstance(entry, dict):
            entry["delay_ms"] = rng.randint(0, 30)
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies), encoding="utf-8")
    source = path.read_text(encoding="utf-8")
    sequential = outcome(source, f"script:{script}", 0, tmp_path)
    assert sequential["error"] is None
    assert outcome(source, f"script:{script}", 8, tmp_path) == sequential
    assert outcome(source, "offline", 8, tmp_path) == outcome(source, "offline", 0, tmp_path)


def test_count_of_determinism_programs() -> None:
    assert len(PROGRAMS) >= 20


# ----------------------------------------------------------------------------- behaviour


class CountingModel(Adapter):
    """A fake model that sleeps and records how many requests overlap."""

    shortname = "counting"
    profile = AdapterProfile(structured_output=True)

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.model_name = "counting"
        self.active = 0
        self.peak = 0
        self.prompts: list[str] = []

    async def request(self, request: CallRequest) -> CallResult:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.prompts.append(request.prompt)
        try:
            await anyio.sleep(self.delay)
        finally:
            self.active -= 1
        value = {name: name for name in request.output.fields} if request.output else "text"
        turn = (
            Message(role="user", content=request.prompt),
            Message(role="assistant", content=json.dumps(value)),
        )
        return CallResult(value=value, new_messages=turn)


def test_independent_calls_overlap_up_to_the_worker_limit() -> None:
    source = "\n".join(f">> Call {i} [c{i}]." for i in range(12)) + "\n= done"
    model = CountingModel(0.05)
    started = time.perf_counter()
    assert kedi.compile(source).run_sync(adapter=model, parallel=4) == "done"
    elapsed = time.perf_counter() - started
    assert model.peak == 4
    assert elapsed < 12 * 0.05  # far less than sequential


def test_sequential_by_default() -> None:
    model = CountingModel(0.01)
    kedi.compile(">> A [a].\n>> B [b].\n= ok").run_sync(adapter=model)
    assert model.peak == 1


def test_inputs_are_snapshotted_when_scheduled() -> None:
    model = CountingModel(0.02)
    source = "[topic] = first\n>> About <topic> [x].\n[topic] = second\n= <topic>"
    assert kedi.compile(source).run_sync(adapter=model, parallel=8) == "second"
    assert model.prompts == ["About first [x]."]


def test_unresolved_promise_leaks_loudly_from_python() -> None:
    model = CountingModel(0.05)
    source = ">> A [a].\n[r] = ```\nvalue = globals().get('a')\nreturn str(value)\n```\n= <r>"
    with pytest.raises(KediError) as info:
        kedi.compile(source).run_sync(adapter=model, parallel=8)
    assert isinstance(getattr(info.value, "original", None), KediPromiseLeak)


def test_promise_repr_is_safe_and_map_derives() -> None:
    async def main() -> None:
        from kedi.runtime.scheduler import KediPromise, ScheduledCall

        call = ScheduledCall(1, "p.kedi:1")
        promise = KediPromise(call, "x")
        assert "pending" in repr(promise)
        doubled = promise.map(lambda v: v * 2)
        for use in (str, hash, bool, len, lambda p: p + 1, lambda p: p.attr, lambda p: p == 1):
            with pytest.raises(KediPromiseLeak):
                use(promise)
        call.settle({"x": 21})
        assert await doubled.force() == 42

    anyio.run(main)


def test_kedi_parallel_context_manager_switches_parallel_on() -> None:
    model = CountingModel(0.03)
    with kedi.parallel(max_workers=3):
        kedi.compile("\n".join(f">> C{i} [c{i}]." for i in range(6))).run_sync(adapter=model)
    assert model.peak == 3


@pytest.mark.parametrize(
    ("value", "workers"),
    [
        ("1", 8),
        ("true", 8),
        ("on", 8),
        ("yes", 8),
        ("0", 0),
        ("off", 0),
        ("", 0),
        ("4", 4),
        ("-3", 0),
        (None, 0),
    ],
)
def test_parallel_switch_values(value: str | None, workers: int) -> None:
    assert parse_parallel(value) == workers


def test_parallel_switch_rejects_nonsense() -> None:
    with pytest.raises(KediConfigError):
        parse_parallel("maybe")
