"""Every syntax diagnostic: full message, hint, line and column, in the user's words."""

from __future__ import annotations

import pickle
import re

import pytest

from kedi.errors import KediSyntaxError, KediUsageError
from kedi.source import Span
from kedi.syntax import parse
from kedi.syntax._grammar import lark_parser
from kedi.syntax.diagnostics import PHRASES

# (source, line, column, message, hint). Every syntactic negative case of the
# language spec (section 11, rows marked P that concern the parser) is here;
# the value checks of rows 10, 12, 13, 16 and 23 belong to `kedi check`.
CASES = [
    pytest.param(
        "> sytem: Be brief.\n",
        1,
        1,
        "Unknown directive `> sytem:`",
        "did you mean `system`?",
        id="unknown-directive",
    ),
    pytest.param(
        "> frobnicate: x\n",
        1,
        1,
        "Unknown directive `> frobnicate:`",
        None,
        id="unknown-directive-no-hint",
    ),
    pytest.param(
        "= Price \\q10\n",
        1,
        9,
        "Unsupported escape `\\q`",
        "write `\\\\` for a literal backslash",
        id="unsupported-escape",
    ),
    pytest.param(
        "= Hello <name\n",
        1,
        9,
        "Unbalanced `<`: expected `>` to close it, found end of line",
        "write `\\<` for a literal `<`",
        id="unbalanced-lt",
    ),
    pytest.param(
        ">> Compare a < b [x]\n",
        1,
        14,
        "Unbalanced `<`: expected `>` to close it, found `[`",
        "write `\\<` for a literal `<`",
        id="unbalanced-lt-in-template",
    ),
    pytest.param(
        ">> Result [answer: str\n",
        1,
        11,
        "Unbalanced `[`: expected `]` to close it, found end of line",
        "write `\\[` for a literal `[`",
        id="unbalanced-sq",
    ),
    pytest.param(
        "= <greet(Ada\n",
        1,
        9,
        "Unbalanced `(`: the call to `greet` needs a closing `)`, found end of line",
        "write `\\,` `\\(` `\\)` for a literal comma or parenthesis",
        id="unbalanced-paren",
    ),
    pytest.param(
        "= <greet(Ada (admin))>\n",
        1,
        14,
        "Unescaped `(` in an argument of the call to `greet`",
        "write `\\(` for a literal `(`",
        id="unescaped-paren",
    ),
    pytest.param(
        "= `len(items)\n",
        1,
        3,
        "Unbalanced backtick: this `` ` `` is never closed",
        "close the Python expression with a backtick",
        id="unbalanced-backtick",
    ),
    pytest.param(
        "@f() -> int:\n  = ```\n  return 1\n",
        2,
        5,
        "Unclosed fence: no line holds the closing ```",
        "end the block with ``` alone on its own line",
        id="unclosed-fence",
    ),
    pytest.param(
        "```python\nx = 1\n```\n",
        1,
        1,
        "A ``` fence must be alone on its line; remove `python`",
        "write the Python code on the lines after ```",
        id="fence-label",
    ),
    pytest.param(
        "[a] = x\n  [b] = y\n",
        2,
        3,
        "Unexpected indentation",
        "only a header ending in `:` (procedure, directive block, suite) opens an indented block",
        id="unexpected-indent",
    ),
    pytest.param(
        ">> First row\n  indented row\n",
        2,
        3,
        "Unexpected indentation",
        "continuation rows of a template use the same indentation as its first row",
        id="template-cont-indent",
    ),
    pytest.param(
        "@f():\n    [a] = x\n  = <a>\n",
        3,
        1,
        "Unexpected dedent: an indentation of 2 columns matches no enclosing block",
        "indent this line like one of the enclosing blocks (0 columns, 4 columns)",
        id="inconsistent-dedent",
    ),
    pytest.param(
        "Summarize the report.\n",
        1,
        1,
        "Template text must start with `>>`",
        "start the row with `>> `; prompt text is only allowed in a `>>` template",
        id="prose",
    ),
    pytest.param(
        ">> First [a].\n\nmore text\n",
        3,
        1,
        "Template text must start with `>>`",
        "start the row with `>> `; prompt text is only allowed in a `>>` template",
        id="prose-after-template-blank",
    ),
    pytest.param(
        "[reply] << Answer with [answer: str]\n",
        1,
        24,
        "Output fields are not allowed in a raw `<<` prompt",
        "a raw invoke binds the whole reply; use `>>` for output fields",
        id="raw-invoke-capture",
    ),
    pytest.param(
        "[reply: int] << Count the items\n",
        1,
        9,
        "A raw invoke always binds `str`; it cannot have another type",
        "write `[reply] << ...`, or use `>>` with `[reply: ...]` for a typed answer",
        id="raw-invoke-type",
    ),
    pytest.param(
        ">> Value [1x]\n",
        1,
        11,
        "Invalid identifier `1x`",
        "names start with a letter or `_` and hold only letters, digits and `_`",
        id="invalid-identifier-capture",
    ),
    pytest.param(
        "[1x] = 3\n",
        1,
        2,
        "Invalid identifier `1x`",
        "names start with a letter or `_` and hold only letters, digits and `_`",
        id="invalid-identifier-assign",
    ),
    pytest.param(
        "@9f() -> str:\n  = x\n",
        1,
        2,
        "Invalid procedure name `9f`",
        "names start with a letter or `_` and hold only letters, digits and `_`",
        id="invalid-proc-name",
    ),
    pytest.param(
        "= <1x>\n",
        1,
        4,
        "Invalid identifier `1x`",
        "names start with a letter or `_` and hold only letters, digits and `_`",
        id="invalid-subst-name",
    ),
    pytest.param(
        "= <``> and ``\n",
        1,
        12,
        "Inline Python expression cannot be empty",
        None,
        id="empty-inline",
    ),
    pytest.param(
        "[x] = ``\n", 1, 7, "Inline Python expression cannot be empty", None, id="empty-inline-2"
    ),
    pytest.param(
        "@f(a: str, a: int) -> str:\n  = x\n",
        1,
        12,
        "Duplicate parameter `a`",
        None,
        id="duplicate-param",
    ),
    pytest.param(
        "@f(a: int = `1`, b: str) -> str:\n  = x\n",
        1,
        18,
        "Required parameter `b` follows defaulted parameter `a`",
        "move `b` before `a`",
        id="required-after-default",
    ),
    pytest.param(
        "@f(a: int = ```\n1\n```) -> str:\n  = x\n",
        1,
        13,
        "A default cannot be a fenced block",
        "defaults are one-line backtick expressions: name: Type = `value`",
        id="fenced-default",
    ),
    pytest.param(
        "@f(a b) -> str:\n  = x\n",
        1,
        6,
        "Malformed signature `@f(...)`: expected `,`, `:`, `=` or closing `)`, found `b`",
        "parameters look like `name: Type = `default``",
        id="malformed-signature",
    ),
    pytest.param(
        "@f(a: str) -> str\n  = x\n",
        1,
        18,
        "Expected `:` in the header of `@f`, found end of line",
        None,
        id="missing-header-colon",
    ),
    pytest.param(
        "@f(a: str\n  = x\n",
        2,
        3,
        "Malformed signature `@f(...)`: expected closing `)`, found `=`",
        "parameters look like `name: Type = `default``",
        id="unclosed-signature",
    ),
    pytest.param(
        "~Job(name: str, name: int)\n",
        1,
        17,
        "Duplicate field `name`",
        None,
        id="type-duplicate-field",
    ),
    pytest.param(
        "~Job(retries: int = `3`, name: str)\n",
        1,
        26,
        "Required field `name` follows defaulted field `retries`",
        "move `name` before `retries`",
        id="type-required-after-default",
    ),
    pytest.param(
        "~Job(retries = `3`)\n",
        1,
        6,
        "Field `retries` has a default but no type",
        "annotate it: `retries: Type = `default``",
        id="type-untyped-default",
    ),
    pytest.param(
        "> profile: reviewer:\n    > model: gpt-5\n    temperature: 0.1\n",
        3,
        5,
        "A directive body cannot mix `key: value` settings and `>` directives",
        "a body holds either settings (`key: value`) or directives (`> name:`)",
        id="mixing",
    ),
    pytest.param(
        "> settings:\n    temperature: 0.1\n    > model: gpt-5\n",
        3,
        5,
        "A directive body cannot mix `key: value` settings and `>` directives",
        "a body holds either settings (`key: value`) or directives (`> name:`)",
        id="mixing2",
    ),
    pytest.param(
        "> settings:\n    > model: gpt-5\n",
        2,
        5,
        "`> settings:` holds `key: value` settings, not `>` directives",
        None,
        id="directives-in-settings",
    ),
    pytest.param(
        "> profile: reviewer:\n    temperature: 0.1\n",
        2,
        5,
        "`> profile:` holds `>` directives, not `key: value` settings",
        None,
        id="config-in-profile",
    ),
    pytest.param(
        "> model:\n    name: gpt-5\n",
        1,
        1,
        "`> model:` takes a one-line value, not an indented body",
        "write `> model: value`",
        id="block-where-one-line",
    ),
    pytest.param(
        "> settings: temperature=0\n",
        1,
        1,
        "`> settings:` needs an indented body of `key: value` settings",
        None,
        id="line-where-block",
    ),
    pytest.param(
        "@eval: f:\n  > data: rows:\n    = `[]`\n  > metric: a(rows):\n    = `1`\n  > metric: b(rows):\n    = `0`\n",
        6,
        3,
        "An `@eval:` block has exactly one `> metric:`",
        "score everything in one metric, or write a second `@eval:` block",
        id="second-metric",
    ),
    pytest.param(
        "> system: Answer in [language]\n",
        1,
        21,
        "Output fields are not allowed in `> system:` text",
        "system text is a read-only template: use `<name>` or <`expr`>",
        id="system-capture",
    ),
    pytest.param(
        "> system:\n    Today is <today()>.\n",
        2,
        14,
        "Procedure calls are not allowed in `> system:` text",
        "compute the text first: [text] = <proc()>, then use <text>",
        id="system-call",
    ),
    pytest.param(
        "###\nnotes\n",
        1,
        1,
        "Unclosed block comment: no `###` line closes it",
        "a block comment ends with a line holding only `###`",
        id="block-comment",
    ),
    pytest.param(
        ">> Say hi \\\n  there\n",
        1,
        11,
        "A line-ending `\\` continues only a rendered `=` value",
        "template rows continue on the next row without `\\`; write `\\\\` for a literal backslash",
        id="line-cont-in-template",
    ),
    pytest.param(
        "> import: ../shared/tools\n",
        1,
        11,
        "Invalid module path `../shared/tools`: `.` and `..` segments are not allowed",
        None,
        id="module-path",
    ),
    pytest.param(
        "> import: tools.kedi\n",
        1,
        11,
        "Invalid module path `tools.kedi`: leave out the `.kedi` suffix",
        None,
        id="module-path-kedi",
    ),
    pytest.param(
        "> case: x:\n    `assert True`\n",
        1,
        1,
        "`> case:` belongs inside a `@test:` block",
        None,
        id="case-outside",
    ),
    pytest.param(
        "@test: f:\n  > model: x\n",
        2,
        3,
        "A `@test:` block holds only `> case:` entries",
        None,
        id="test-body",
    ),
    pytest.param(
        "@eval: f:\n  > case: x:\n    `assert 1`\n",
        2,
        3,
        "Unknown directive in @eval body",
        "an `@eval:` block holds `> data:`, `> test_data:` and one `> metric:`",
        id="eval-unknown",
    ),
    pytest.param(
        "[x] = The [answer]\n",
        1,
        11,
        "Output fields (`[name]`) are only allowed in `>>` templates",
        "write `\\[` for a literal bracket",
        id="capture-in-rendered",
    ),
    pytest.param(
        "> Note this\n",
        1,
        1,
        "Malformed directive: expected `> name:`",
        "a directive is `> name: value`; a template row starts with `>>`",
        id="malformed-directive",
    ),
    pytest.param(
        "<< Answer me\n",
        1,
        1,
        "A raw invoke needs a target: `[name] << prompt`",
        None,
        id="raw-invoke-no-target",
    ),
    pytest.param(">>\n", 1, 1, "Empty template: `>>` needs prompt text", None, id="empty-template"),
    pytest.param(
        "@f() -> str:\n= x\n",
        1,
        1,
        "Procedure `f` needs an indented body",
        "indent the body under the `@name(...):` line",
        id="no-body",
    ),
    pytest.param(
        "> settings:\n    Note this\n",
        2,
        5,
        "Expected a `key: value` setting or a `> name:` directive",
        "a configuration row is `key: value`, and a profile member is `> name: value`",
        id="config-row-text",
    ),
    pytest.param(
        "[x: list[int] = `[]`\n",
        1,
        1,
        "Unbalanced `[` in an assignment target: expected `]` before `=` or `<<`",
        "an assignment is `[name] = value` or `[name: Type] = value`",
        id="unclosed-type-bracket",
    ),
    pytest.param(
        "[x: ...] = `1`\n",
        1,
        5,
        "`...` is only valid as a type argument",
        "for example `tuple[int, ...]`",
        id="ellipsis-as-a-type",
    ),
    pytest.param(
        "@f() -> int | ...:\n  = x\n",
        1,
        15,
        "`...` is only valid as a type argument",
        "for example `tuple[int, ...]`",
        id="ellipsis-in-a-union",
    ),
    pytest.param(
        "= <f(a, )>\n",
        1,
        3,
        "Empty argument in the call to `f`",
        "write `\\,` for a literal comma",
        id="empty-arg",
    ),
]


def diagnostic_of(source: str):  # type: ignore[no-untyped-def]
    with pytest.raises(KediSyntaxError) as info:
        parse(source)
    (diagnostic,) = info.value.diagnostics
    return diagnostic


@pytest.mark.parametrize(("source", "line", "column", "message", "hint"), CASES)
def test_diagnostic(source: str, line: int, column: int, message: str, hint: str | None) -> None:
    diagnostic = diagnostic_of(source)
    assert (diagnostic.line, diagnostic.column, diagnostic.message, diagnostic.hint) == (
        line,
        column,
        message,
        hint,
    )
    assert diagnostic.source_line == source.split("\n")[line - 1]


_TERMINAL = re.compile(
    r"\b(?:" + "|".join(re.escape(name) for name in PHRASES if name.strip("_$").isupper()) + r")\b"
)


@pytest.mark.parametrize(("source", "line", "column", "message", "hint"), CASES)
def test_messages_use_the_users_words(
    source: str, line: int, column: int, message: str, hint: str | None
) -> None:
    for text in (message, hint or ""):
        outside_quotes = re.sub(r"`[^`]*`", "", text)
        assert not _TERMINAL.search(outside_quotes), text
        assert "Token(" not in text and "Expected one of" not in text


@pytest.mark.parametrize(
    "source",
    [
        "> metric: m:\n  = `1`\n  [a] = 1\n",
        "> metric: m:\n  = `1`\n  [ a : b.c ] << x\n",
    ],
)
def test_a_one_token_form_is_reported_at_its_opening_bracket(source: str) -> None:
    """`[name] =` is one token (TARGET); where it cannot stand, the error is the one `[` would get."""
    diagnostic = diagnostic_of(source)
    assert diagnostic.message == "Expected the end of the block in `> metric:`, found `[`"
    assert diagnostic.span == Span("<string>", 3, 3, 3, 4)


@pytest.mark.parametrize(
    ("source", "symbol", "span"),
    [
        ("> metric: m:\n  = `1`\n  =   2\n", "=", (3, 3, 3, 4)),
        ("@f() -> str:   :\n  = x\n", ":", (1, 16, 1, 17)),
    ],
)
def test_unexpected_punctuation_is_underlined_alone(
    source: str, symbol: str, span: tuple[int, int, int, int]
) -> None:
    """`=`, `:`, `,` and `->` take the spaces around them as one token; the caret marks the symbol."""
    diagnostic = diagnostic_of(source)
    assert diagnostic.span == Span("<string>", *span)
    assert diagnostic.message.endswith(f"found `{symbol}`")


@pytest.mark.parametrize("head", ["> history:", "> adapter:", "> system:"])
def test_a_directive_without_a_value_is_marked_without_trailing_spaces(head: str) -> None:
    """The head takes the spaces after it as one token; the caret marks `> name:` only."""
    bare, spaced = diagnostic_of(f"{head}\n"), diagnostic_of(f"{head}    \n")
    assert spaced.message == bare.message
    assert spaced.span == bare.span == Span("<string>", 1, 1, 1, len(head) + 1)


def test_rendered_layout() -> None:
    with pytest.raises(KediSyntaxError) as info:
        parse("@greet(name: str) -> str:\n  = Hello <name\n", path="workflow.kedi")
    assert info.value.render() == (
        "Kedi parse error:\n"
        "\n"
        '  File "workflow.kedi", line 2, column 11\n'
        "    = Hello <name\n"
        "            ^\n"
        "\n"
        "Kedi error: ParseError\n"
        "  Unbalanced `<`: expected `>` to close it, found end of line\n"
        "  hint: write `\\<` for a literal `<`"
    )
    assert (
        str(info.value)
        == "workflow.kedi:2:11: Unbalanced `<`: expected `>` to close it, found end of line"
    )


def test_syntax_errors_pickle() -> None:
    with pytest.raises(KediSyntaxError) as info:
        parse("> sytem: x\n")
    copy = pickle.loads(pickle.dumps(info.value))
    assert copy.diagnostics == info.value.diagnostics


def test_no_lark_exception_is_chained_into_the_users_view() -> None:
    with pytest.raises(KediSyntaxError) as info:
        parse("= <x\n")
    assert "lark" not in info.value.render().lower()


def test_columns_count_characters_after_crlf_and_tabs() -> None:
    diagnostic = diagnostic_of("[a] = x\r\n\t= <b\r\n")
    assert (diagnostic.line, diagnostic.column) == (2, 2)
    assert diagnostic.message == "Unexpected indentation"


def test_the_caret_lands_under_the_text_after_a_tab() -> None:
    # The column counts the tab as one character; a terminal shows it as up to 8 columns.
    with pytest.raises(KediSyntaxError) as info:
        parse(">> a\tb [x: int\n", path="tabs.kedi")
    shown, caret = info.value.render().splitlines()[3:5]
    assert "\t" not in shown
    assert shown[caret.index("^")] == "["


def test_non_string_source_is_a_usage_error() -> None:
    with pytest.raises(KediUsageError, match="expects source text"):
        parse(b"= x")  # type: ignore[arg-type]


def test_every_terminal_has_a_phrase() -> None:
    terminals = {terminal.name for terminal in lark_parser().terminals}
    assert terminals | {"_BNL", "INDENT", "_DEDENT", "$END"} == set(PHRASES)
