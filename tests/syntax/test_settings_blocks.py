"""A `> settings:` key with an indented block under it is refused, with the form that works.

Written as YAML would nest it,

    > settings:
        extra_body:
          repeat_penalty: 1.3

the block was dropped and the setting became "": the `openai` adapter then
sent no `extra_body` at all (silently), and the `pydantic` and `langchain`
adapters failed mid-run with "TypeError: 'str' object is not a mapping".
"""

from __future__ import annotations

import textwrap

import pytest

import kedi
from kedi.errors import KediCheckError
from kedi.syntax import parse
from kedi.syntax.checks import check_module

NESTED = """\
> settings:
    temperature: 0
    extra_body:
      repeat_penalty: 1.3
      top_k: 40
[x] << Hi
= <x>
"""


def check(source: str) -> list[tuple[int, str, str | None]]:
    module = parse(textwrap.dedent(source))
    return [(d.line, d.message, d.hint) for d in check_module(module)]


def test_an_indented_block_under_a_setting_is_refused_with_the_backtick_form() -> None:
    assert check(NESTED) == [
        (
            3,
            "`extra_body` in `> settings:` has an indented block under it, which settings do not read",
            'write the value on the key\'s line, a mapping as Python: extra_body: `{"repeat_penalty": 1.3, "top_k": 40}`',
        )
    ]


def test_a_run_stops_before_its_first_call() -> None:
    with pytest.raises(KediCheckError, match="has an indented block under it"):
        kedi.compile(NESTED, path="flow.kedi")


def test_the_backtick_form_is_accepted_and_reaches_the_adapter() -> None:
    program = kedi.compile(
        '> settings:\n    extra_body: `{"repeat_penalty": 1.3}`\n[x] << Hi\n= <x>\n'
    )
    seen: list[object] = []
    program.run_sync(model="offline", transcript=lambda record: seen.append(record["settings"]))
    assert seen == [{"extra_body": {"repeat_penalty": 1.3}}]
