"""Kedi stack traces through model calls.

A `>>` / `<<` statement does not push its trace frame (it is the hottest
statement); an error escaping it gets the frame on the way out. These tests pin
the frames a user sees, in order, whatever the error passed through.
"""

from __future__ import annotations

import pytest

import kedi
from kedi.adapters.base import CallRequest, CallResult
from kedi.adapters.offline import OfflineAdapter


class FailingAdapter(OfflineAdapter):
    """An in-process model whose every call fails with a foreign exception."""

    async def request(self, request: CallRequest) -> CallResult:
        raise RuntimeError("the model went away")


def frames(error: kedi.KediExecutionError) -> list[tuple[str, int | None]]:
    """The trace as (kind, line) pairs, outermost first."""
    return [(frame.kind, frame.span.line if frame.span else None) for frame in error.frames]


def failure(source: str, **options: object) -> kedi.KediExecutionError:
    options.setdefault("model", "offline")
    with pytest.raises(kedi.KediExecutionError) as caught:
        kedi.compile(source, path="trace.kedi").run_sync(**options)
    return caught.value


NESTED = """\
@inner(x) -> str:
  = <`1/0`>

@outer(y) -> str:
  >> Use <inner(`y`)> now [z]
  = <z>

>> Top <outer(`"a"`)> [w]
= <w>
"""


def test_an_error_in_a_procedure_a_prompt_calls_sits_under_each_template() -> None:
    error = failure(NESTED)
    assert frames(error) == [
        ("top-level program", None),
        ("template", 8),
        ("procedure", 4),
        ("template", 5),
        ("procedure", 1),
        ("return", 2),
        ("inline python", 2),
    ]


def test_a_failing_model_call_ends_the_trace_at_its_template() -> None:
    source = "@ask() -> str:\n  >> Pick one [n: int].\n  = `str(n)`\n\n= <ask()>\n"
    error = failure(source, adapter=FailingAdapter())
    assert frames(error) == [
        ("top-level program", None),
        ("return", 5),
        ("procedure", 1),
        ("template", 2),
    ]
    assert isinstance(error.original, RuntimeError)
    assert "the model went away" in error.render()


def test_an_unknown_capture_type_is_reported_at_its_template() -> None:
    # A Python block that may bind the name passes `kedi check`; the run finds it unbound.
    source = "```\nif False:\n    NoSuchType = int\n```\n[ok] = fine\n>> Rate it [n: NoSuchType].\n= <n>\n"
    error = failure(source)
    assert frames(error)[-1] == ("template", 6)


@pytest.mark.parametrize("raw", [False, True])
def test_a_scheduled_call_failure_keeps_its_template_frame(raw: bool) -> None:
    call = "[reply] << Say hi" if raw else ">> Say hi [reply]"
    error = failure(f"[ok] = fine\n{call}\n= <reply>\n", adapter=FailingAdapter(), parallel=2)
    assert ("template", 2) in frames(error)
    assert frames(error)[0] == ("top-level program", None)


def test_a_frame_is_added_once_when_a_procedure_recurses_through_templates() -> None:
    source = """\
@count(n: int) -> str:
  >> Step <`n`> <`1/0 if n == 0 else ''`> [s]
  >> Next <count(`n - 1`)> [t]
  = <t>

= <count(`1`)>
"""
    error = failure(source)
    assert [kind for kind, _ in frames(error)].count("template") == 2
    assert frames(error)[:4] == [
        ("top-level program", None),
        ("return", 6),
        ("procedure", 1),
        ("template", 3),
    ]


def test_a_long_source_line_is_cut_to_a_screen_line_in_the_trace() -> None:
    # A generated 5,000-character line printed whole (twice: Kedi line and embedded
    # Python line) buries the error; as in check errors, 100 characters around it show.
    error = failure("= `len('" + "long text " * 500 + "') / 0`\n")
    rendered = error.render()
    assert "ZeroDivisionError" in rendered
    shown = [line for line in rendered.splitlines() if "long text" in line]
    assert len(shown) == 3  # two Kedi frames and the embedded Python line, each cut
    assert all(len(line) < 120 and line.endswith("...") for line in shown)


WRONG_RETURN = """\
@f(n: int) -> str:
  [x: int] = `n`
  ```
  if n > 5:
      n = 0
  ```
  = `x`

= `f(1)`
"""


@pytest.mark.parametrize("parallel", [None, 2])
def test_a_wrong_return_type_points_at_the_line_returning_it(parallel: int | None) -> None:
    error = failure(WRONG_RETURN, parallel=parallel)
    assert "return value of `f`: expected str, got int" in str(error)
    assert frames(error)[-2:] == [("procedure", 1), ("return", 7)]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (("many",), "argument `n` of `double`: expected int, got str 'many'"),
        ((), "procedure `double`: missing a required argument: 'n'"),
    ],
)
def test_a_procedure_called_from_python_with_a_wrong_argument_points_at_its_header(
    arguments: tuple[object, ...], problem: str
) -> None:
    """There is no calling `.kedi` line; the trace was empty ("Kedi stack trace:" and nothing)."""
    program = kedi.compile("\n@double(n: int) -> int:\n  = `n * 2`\n", path="math.kedi")
    double = program.procedures["double"]
    with pytest.raises(kedi.KediExecutionError) as caught:
        double(*arguments)
    assert str(caught.value).startswith(
        'Kedi stack trace:\n\n  File "math.kedi", line 2, in procedure double\n'
        "  \u2771 2 @double(n: int) -> int:\n"
    )
    assert str(caught.value).endswith(problem)
    called_from_kedi = kedi.compile(
        "@double(n: int) -> int:\n  = `n * 2`\n= `double('x')`", path="m.kedi"
    )
    with pytest.raises(kedi.KediExecutionError) as caught:
        called_from_kedi.run_sync()
    assert "line 1" not in str(caught.value)  # from Kedi: the calling line (3), not the header


def test_a_prelude_function_that_raises_is_shown_at_its_own_kedi_line() -> None:
    # Before, its line was listed under the calling block as "embedded Python
    # line 5" of a two-line block, with nothing saying it was the prelude's.
    source = (
        "```\nimport json\n\ndef helper(x):\n    y = x * 2\n    return y.nope\n```\n"
        "@p(n: int) -> int:\n  = ```\n  v = helper(n)\n  return v\n  ```\n= <p(`1`)>\n"
    )
    rendered = failure(source).render()
    assert rendered.endswith(
        "    embedded Python line 1\n"
        "    \u2771 1 v = helper(n)\n"
        '    embedded Python line 5, File "trace.kedi", line 6\n'
        "    \u2771 5 return y.nope\n"
        "\n"
        "Inline Python error: AttributeError\n"
        "  'int' object has no attribute 'nope'"
    )
