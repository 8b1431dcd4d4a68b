"""AST shape of every Kedi construct (spans take no part in node equality)."""

from __future__ import annotations

import dataclasses
import logging
import pickle
import re

import pytest
from lark import Lark, logger

import kedi
from kedi.errors import KediUsageError
from kedi.source import SourceFile, Span
from kedi.syntax import parse
from kedi.syntax._builder import Builder
from kedi.syntax._grammar import (
    APPEND,
    TAKE,
    grammar_path,
    lark_options,
    lark_parser,
    parse_tables,
)
from kedi.syntax.ast import (
    Argument,
    Assign,
    Auto,
    BareBacktick,
    Call,
    Capture,
    ConfigEntry,
    CustomType,
    Directive,
    Docstring,
    EvalData,
    EvalMetric,
    EvalSuite,
    Export,
    Fence,
    FieldDef,
    Import,
    InlinePython,
    Module,
    Optimize,
    Package,
    Param,
    Procedure,
    ProfileDef,
    PythonBlock,
    PythonCode,
    PythonStatement,
    RawInvoke,
    Rendered,
    Return,
    Row,
    Subst,
    SystemDirective,
    Template,
    TestCase,
    TestSuite,
    Text,
    TypeLiteral,
    TypeName,
    TypePython,
    TypeSubscript,
    TypeUnion,
    Use,
    UseName,
)
from kedi.syntax.docstrings import query_body_source


def body(source: str) -> tuple[object, ...]:
    return parse(source).body


def one(source: str) -> object:
    (statement,) = body(source)
    return statement


def code(text: str, line: int = 1) -> PythonCode:
    return PythonCode(code=text, first_line=line)


def rendered(*segments: object) -> Rendered:
    return Rendered(segments=segments)  # type: ignore[arg-type]


def row(*segments: object) -> Row:
    return Row(segments=segments)  # type: ignore[arg-type]


STR = TypeName(name="str")
INT = TypeName(name="int")


# --------------------------------------------------------------------------- grammar


def test_grammar_is_lalr1_without_conflicts(caplog: pytest.LogCaptureFixture) -> None:
    """Lark resolves shift/reduce conflicts silently; in debug mode it logs them."""
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger="lark"):
            Lark(grammar_path().read_text(encoding="utf-8"), debug=True, **lark_options())  # type: ignore[arg-type]
    finally:
        logger.setLevel(previous)
    conflicts = [
        record.getMessage()
        for record in caplog.records
        if "conflict" in record.getMessage().lower()
    ]
    assert conflicts == []


def test_parser_is_a_process_singleton() -> None:
    assert lark_parser() is lark_parser()
    assert parse_tables() is parse_tables()


def test_no_terminal_needs_lark_keyword_retyping() -> None:
    """kedi's parse loop lexes like Lark's contextual lexer except for one feature.

    Lark retypes a regex match that spells a same-priority string terminal (a
    keyword). No kedi terminal needs that; a grammar change that does must give
    the loop that step too.
    """
    root = lark_parser().parse_interactive("").lexer_thread.lexer.root_lexer  # type: ignore[attr-defined]
    assert root.scanner is not None  # builds the retyping callbacks
    assert root.callback == {}


# --------------------------------------------------------------------------- templates


def test_template_segments() -> None:
    assert one(">> Summary of <doc> by <`author.name`>: [summary: str] `n` items.\n") == Template(
        rows=(
            row(
                Text(value="Summary of "),
                Subst(name="doc"),
                Text(value=" by "),
                InlinePython(code=code("author.name")),
                Text(value=": "),
                Capture(name="summary", type=STR),
                Text(value=" "),
                BareBacktick(code=code("n")),
                Text(value=" items."),
            ),
        )
    )


def test_template_continuation_rows_join_until_a_statement() -> None:
    source = ">> Incident: <incident>.\nAffected service: [service: str].\n[answer: Report].\n= <service>\n"
    template, ret = body(source)
    assert template == Template(
        rows=(
            row(Text(value="Incident: "), Subst(name="incident"), Text(value=".")),
            row(
                Text(value="Affected service: "), Capture(name="service", type=STR), Text(value=".")
            ),
            row(Capture(name="answer", type=TypeName(name="Report")), Text(value=".")),
        )
    )
    assert ret == Return(value=rendered(Subst(name="service")))


def test_continuation_row_may_start_with_a_substitution() -> None:
    (template,) = body(">> Incident report:\n<report>\nNormalized: [incident: Incident].\n")
    assert isinstance(template, Template)
    assert template.rows[1] == row(Subst(name="report"))


def test_blank_line_always_ends_a_template() -> None:
    first, second = body(">> First [a].\n\n>> Second [b].\n")
    assert first == Template(
        rows=(row(Text(value="First "), Capture(name="a", type=None), Text(value=".")),)
    )
    assert isinstance(second, Template)
    with pytest.raises(Exception, match="Template text must start with `>>`"):
        parse(">> First [a].\n\nmore text\n")


def test_comment_lines_do_not_end_a_template() -> None:
    (template,) = body(">> First line\n# a note for readers\nsecond line [x]\n")
    assert isinstance(template, Template)
    assert len(template.rows) == 2


def test_new_template_row_starts_a_new_call() -> None:
    assert [type(node) for node in body(">> a [x].\n>> b <x> [y].\n")] == [Template, Template]


def test_backtick_only_line_is_a_python_statement_not_a_row() -> None:
    template, statement = body(">> Count [n: int].\n`print(n)`\n")
    assert template == Template(
        rows=(row(Text(value="Count "), Capture(name="n", type=INT), Text(value=".")),)
    )
    assert statement == PythonStatement(code=code("print(n)", 2))


def test_row_starting_with_bracket_is_assignment_only_before_equals() -> None:
    template, assign = body(">> Say [a].\n[b: list[dict[str, int]]] = `[]`\n")
    assert isinstance(template, Template)
    assert assign == Assign(
        target="b",
        type=TypeSubscript(
            base=TypeName(name="list"),
            args=(TypeSubscript(base=TypeName(name="dict"), args=(STR, INT)),),
        ),
        value=rendered(BareBacktick(code=code("[]", 2))),
    )


def test_unescaped_equals_and_at_in_text_are_literal() -> None:
    assert one(">> contact a@b.c if x = 1 [ok]\n") == Template(
        rows=(row(Text(value="contact a@b.c if x = 1 "), Capture(name="ok", type=None)),)
    )


def test_empty_template_head_with_continuation_rows() -> None:
    assert one(">>\nDescribe [x].\n") == Template(
        rows=(row(Text(value="Describe "), Capture(name="x", type=None), Text(value=".")),)
    )


# --------------------------------------------------------------------------- raw invoke, assignment, return


def test_raw_invoke_takes_continuation_rows() -> None:
    assert one("[answer] << Explain <concept>\nin one paragraph.\n") == RawInvoke(
        target="answer",
        type=None,
        rows=(
            row(Text(value="Explain "), Subst(name="concept")),
            row(Text(value="in one paragraph.")),
        ),
    )


def test_raw_invoke_may_say_str() -> None:
    assert one("[a: str] << hi\n") == RawInvoke(target="a", type=STR, rows=(row(Text(value="hi")),))


def test_assignment_forms() -> None:
    assert body("[title] = Release <version>\n[n: int] = `2 + 1`\n[copy] = <make(<x>, `1`)>\n") == (
        Assign(
            target="title", type=None, value=rendered(Text(value="Release "), Subst(name="version"))
        ),
        Assign(target="n", type=INT, value=rendered(BareBacktick(code=code("2 + 1", 2)))),
        Assign(
            target="copy",
            type=None,
            value=rendered(
                Call(
                    name="make",
                    args=(
                        Argument(segments=(Subst(name="x"),)),
                        Argument(segments=(BareBacktick(code=code("1", 3)),)),
                    ),
                )
            ),
        ),
    )


def test_assignment_block_is_dedented_to_the_statement() -> None:
    source = "@f() -> int:\n  [p: int] = ```\n  x = 1\n  if x:\n      return x\n  ```\n  = `p`\n"
    (proc,) = body(source)
    assert isinstance(proc, Procedure)
    assert proc.body[0] == Assign(
        target="p", type=INT, value=Fence(code=code("x = 1\nif x:\n    return x", 3))
    )


def test_return_forms() -> None:
    assert body("= Hello <name>\n= `x + 1`\n= ```\nreturn 1\n```\n") == (
        Return(value=rendered(Text(value="Hello "), Subst(name="name"))),
        Return(value=rendered(BareBacktick(code=code("x + 1", 2)))),
        Return(value=Fence(code=code("return 1", 4))),
    )


def test_rendered_return_line_continuation_joins_with_one_space() -> None:
    (proc,) = body("@notice(name: str) -> str:\n  = Hello <name>, \\\n    your report is ready.\n")
    assert isinstance(proc, Procedure)
    assert proc.body == (
        Return(
            value=rendered(
                Text(value="Hello "), Subst(name="name"), Text(value=", your report is ready.")
            )
        ),
    )


def test_empty_rendered_value() -> None:
    assert one("[x] =\n") == Assign(target="x", type=None, value=rendered())


def test_top_level_return_with_comment() -> None:
    assert one("= `value()`  # 1\n") == Return(value=rendered(BareBacktick(code=code("value()"))))


# --------------------------------------------------------------------------- escapes and whitespace


def test_every_escape_resolves() -> None:
    source = "= \\<\\>\\[\\]\\(\\)\\,\\=\\@\\#\\~~~\\`\\\\\\t\\n\\s\n"
    assert one(source) == Return(value=rendered(Text(value="<>[](),=@#~~`\\\t\n ")))


def test_escaped_whitespace_survives_boundary_trimming() -> None:
    assert one("=   \\sa  b\\t   \n") == Return(value=rendered(Text(value=" a  b\t")))


def test_boundary_whitespace_is_trimmed_in_rows_and_arguments() -> None:
    assert one("= <slug(<trim(  Release Notes  )>)>\n") == Return(
        value=rendered(
            Call(
                name="slug",
                args=(
                    Argument(
                        segments=(
                            Call(
                                name="trim",
                                args=(Argument(segments=(Text(value="Release Notes"),)),),
                            ),
                        )
                    ),
                ),
            )
        )
    )


def test_escaped_comma_stays_in_one_argument() -> None:
    assert one("= <echo(alpha\\, beta, `2`)>\n") == Return(
        value=rendered(
            Call(
                name="echo",
                args=(
                    Argument(segments=(Text(value="alpha, beta"),)),
                    Argument(segments=(BareBacktick(code=code("2")),)),
                ),
            )
        )
    )


@pytest.mark.parametrize(
    "source",
    [
        "> settings:   \n    temperature: 0.2\n",
        "> settings:  # tuned for reviews\n    temperature: 0.2\n",
        "> system:\t# the instructions\n    Act as a reviewer.\n",
        "> use:  \n    f\n",
    ],
)
def test_spaces_after_a_directive_head_are_no_value(source: str) -> None:
    """Trailing spaces (or spaces before a comment) after `> name:` do not make a one-line
    value, so an indented body may follow, as it may without them."""
    assert parse(source) == parse(re.sub(r":[ \t]+", ":", source, count=1))


@pytest.mark.parametrize(
    ("spaced", "bare"),
    [
        (">>   \nSummarize <x>.\n", ">>\nSummarize <x>.\n"),
        ("[y] <<\t\nSummarize <x>.\n", "[y] <<\nSummarize <x>.\n"),
        (">> Summarize <x>.   \n", ">> Summarize <x>.\n"),
    ],
)
def test_spaces_after_a_template_marker_are_no_row(spaced: str, bare: str) -> None:
    """`>>` and `<<` take the spaces after them: no empty first row, as without the spaces."""
    assert parse(spaced) == parse(bare)
    assert parse(spaced.replace("\n", "\r\n")) == parse(bare)


def test_a_template_marker_with_only_spaces_after_it_is_empty() -> None:
    with pytest.raises(kedi.KediSyntaxError, match="Empty template"):
        parse(">>   \n")


def test_an_argument_starts_at_its_first_character() -> None:
    """The spaces after `,` (like those after `=`) belong to no node."""
    (ret,) = parse("= <f(a,   b)>\n").body
    assert isinstance(ret, Return) and isinstance(ret.value, Rendered)
    (call,) = ret.value.segments
    assert isinstance(call, Call)
    first, second = call.args
    assert first.span == Span("<string>", 1, 6, 1, 7)
    assert second.span == Span("<string>", 1, 11, 1, 12)


def test_call_without_arguments() -> None:
    assert one("= <now()>\n") == Return(value=rendered(Call(name="now", args=())))


def test_literal_fence_in_text() -> None:
    assert one("> system: Wrap code in <``>python\n") == SystemDirective(
        rows=(row(Text(value="Wrap code in ```python")),)
    )


def test_hash_starts_a_comment_outside_python() -> None:
    assert body("[mode] = strict  # used by the reviewer\n= Issue \\#42 `'#'`\n") == (
        Assign(target="mode", type=None, value=rendered(Text(value="strict"))),
        Return(value=rendered(Text(value="Issue #42 "), BareBacktick(code=code("'#'", 2)))),
    )


def test_quotes_are_ordinary_text() -> None:
    assert one('[value] = "  Ready "\n') == Assign(
        target="value", type=None, value=rendered(Text(value='"  Ready "'))
    )


def test_multiline_inline_python_inside_brackets() -> None:
    source = '[products: list[Product]] = `[\n  make("keyboard"),\n  make("mouse"),\n]`\n'
    assert one(source) == Assign(
        target="products",
        type=TypeSubscript(base=TypeName(name="list"), args=(TypeName(name="Product"),)),
        value=rendered(BareBacktick(code=code('[\n  make("keyboard"),\n  make("mouse"),\n]'))),
    )


# --------------------------------------------------------------------------- python


def test_prelude_is_the_first_top_level_fence_only() -> None:
    source = "# comment first\n```\nimport re\n```\n\n```\nx = 1\n```\n"
    assert body(source) == (
        PythonBlock(code=code("import re", 3), prelude=True),
        PythonBlock(code=code("x = 1", 7), prelude=False),
    )


def test_fence_body_keeps_relative_indentation_and_blank_lines() -> None:
    source = "@f():\n  ```\n  def g():\n      return 1\n\n  g()\n  ```\n  = x\n"
    (proc,) = body(source)
    assert isinstance(proc, Procedure)
    assert proc.body[0] == PythonBlock(code=code("def g():\n    return 1\n\ng()", 3))


# --------------------------------------------------------------------------- procedures and types


def test_procedure_header_parameters_and_docstring() -> None:
    source = (
        "@quote(dest: str, weight: float, express: bool = `False`, tags: list[str] = `[]`) -> float:\n"
        "  # a comment before the docstring\n"
        "  ###\n"
        "  Quote one shipment.\n"
        "\n"
        "  Args:\n"
        "      dest: Where it goes.\n"
        "  ###\n"
        "  = `0.0`\n"
    )
    assert one(source) == Procedure(
        name="quote",
        params=(
            Param(name="dest", type=STR, default=None),
            Param(name="weight", type=TypeName(name="float"), default=None),
            Param(name="express", type=TypeName(name="bool"), default=code("False")),
            Param(
                name="tags",
                type=TypeSubscript(base=TypeName(name="list"), args=(STR,)),
                default=code("[]"),
            ),
        ),
        returns=TypeName(name="float"),
        docstring=Docstring(text="Quote one shipment.\n\nArgs:\n    dest: Where it goes."),
        body=(Return(value=rendered(BareBacktick(code=code("0.0", 9)))),),
    )


@pytest.mark.parametrize(
    "source",
    [
        "@f() -> str:  # a comment\n  ###\n  Doc.\n  ###\n  = x\n",
        "\ufeff@f() -> str:\r\n\r\n    ###  \r\n    One\r\n      two\r\n    ###\r\n    = x\r\n",
        "~T(a: int)\n@g():\n\t###\n\tHi\n\t###  \n\t= y\n",
    ],
)
def test_a_docstring_spans_its_block_comment(source: str) -> None:
    """The span runs from the opening `###` to the end of the closing one (spaces after it and
    a CRLF's CR left out), as offsets give it."""
    proc = parse(source).body[-1]
    assert isinstance(proc, Procedure) and proc.docstring is not None
    opening = source.index("###")
    closing = source.index("###", opening + 3) + 3
    assert proc.docstring.span == SourceFile(source).span(opening, closing)


def test_later_block_comments_are_not_docstrings() -> None:
    (proc,) = body("@f():\n  = a\n  ###\n  not a docstring\n  ###\n")
    assert isinstance(proc, Procedure)
    assert proc.docstring is None


def test_multiline_signature_and_backtick_types() -> None:
    source = (
        '@format_issue(\n  issue_id: int,\n  title: `Title` = `"Untitled"`,\n) -> `str`:\n  = x\n'
    )
    assert one(source) == Procedure(
        name="format_issue",
        params=(
            Param(name="issue_id", type=INT, default=None),
            Param(
                name="title", type=TypePython(code=code("Title", 3)), default=code('"Untitled"', 3)
            ),
        ),
        returns=TypePython(code=code("str", 4)),
        docstring=None,
        body=(Return(value=rendered(Text(value="x"))),),
    )


def test_nested_procedures_and_untyped_parameters() -> None:
    source = "@outer(x):\n  @inner() -> str:\n    = <x>\n  = <inner()>\n"
    assert one(source) == Procedure(
        name="outer",
        params=(Param(name="x", type=None, default=None),),
        returns=None,
        docstring=None,
        body=(
            Procedure(
                name="inner",
                params=(),
                returns=STR,
                docstring=None,
                body=(Return(value=rendered(Subst(name="x"))),),
            ),
            Return(value=rendered(Call(name="inner", args=()))),
        ),
    )


def test_custom_types() -> None:
    source = '~Owner(\n  name: Annotated[str, "Display name"],\n  email: Email | None,\n  tags: list[str] = `[]`\n)\n'
    assert one(source) == CustomType(
        name="Owner",
        fields=(
            FieldDef(
                name="name",
                type=TypeSubscript(
                    base=TypeName(name="Annotated"), args=(STR, TypeLiteral(value="Display name"))
                ),
                default=None,
            ),
            FieldDef(
                name="email",
                type=TypeUnion(options=(TypeName(name="Email"), TypeName(name="None"))),
                default=None,
            ),
            FieldDef(
                name="tags",
                type=TypeSubscript(base=TypeName(name="list"), args=(STR,)),
                default=code("[]", 4),
            ),
        ),
    )


def test_literal_types() -> None:
    source = ">> [a: Literal[\"x\", 'y', 1, -2.5, True, None]] [b: typing.Any]\n"
    assert one(source) == Template(
        rows=(
            row(
                Capture(
                    name="a",
                    type=TypeSubscript(
                        base=TypeName(name="Literal"),
                        args=(
                            TypeLiteral(value="x"),
                            TypeLiteral(value="y"),
                            TypeLiteral(value=1),
                            TypeLiteral(value=-2.5),
                            TypeLiteral(value=True),
                            TypeLiteral(value=None),
                        ),
                    ),
                ),
                Text(value=" "),
                Capture(name="b", type=TypeName(name="typing.Any")),
            ),
        )
    )


def test_ellipsis_is_a_type_argument() -> None:
    source = "[x: tuple[int, ...]] = `(1, 2)`\n@f(g: Callable[..., str]) -> str:\n  = x\n"
    assign, procedure = body(source)
    ellipsis = TypeName(name="...")
    assert assign.type == TypeSubscript(base=TypeName(name="tuple"), args=(INT, ellipsis))  # type: ignore[union-attr]
    (param,) = procedure.params  # type: ignore[union-attr]
    assert param.type == TypeSubscript(base=TypeName(name="Callable"), args=(ellipsis, STR))


def test_ellipsis_type_argument_runs_end_to_end() -> None:
    """The type resolver reads `TypeName("...")` as Python's `...`."""
    program = kedi.compile("[x: tuple[int, ...]] = `(1, 2)`\n= `x`")
    assert program.run_sync(model="offline") == (1, 2)


# --------------------------------------------------------------------------- directives


def test_one_line_and_block_directives() -> None:
    source = (
        "> model: openai:gpt-4o-mini\n"
        '> effort: `"high" if deep else "low"`\n'
        "> settings:\n"
        "    temperature: 0.2\n"
        '    env: `{"MODE": "review"}`\n'
        "> agent:\n"
        "    acp: npx @zed-industries/codex-acp\n"
    )
    assert body(source) == (
        Directive(name="model", value=(Text(value="openai:gpt-4o-mini"),)),
        Directive(name="effort", value=(BareBacktick(code=code('"high" if deep else "low"', 2)),)),
        Directive(
            name="settings",
            value=None,
            config=(
                ConfigEntry(key="temperature", value=(Text(value="0.2"),)),
                ConfigEntry(key="env", value=(BareBacktick(code=code('{"MODE": "review"}', 5)),)),
            ),
        ),
        Directive(
            name="agent",
            value=None,
            config=(ConfigEntry(key="acp", value=(Text(value="npx @zed-industries/codex-acp"),)),),
        ),
    )


def test_system_directive_forms() -> None:
    assert body(
        "> system: Be brief.\n> system:\n    Act for <team>.\n    Mode: <`args.mode`>.\n"
    ) == (
        SystemDirective(rows=(row(Text(value="Be brief.")),)),
        SystemDirective(
            rows=(
                row(Text(value="Act for "), Subst(name="team"), Text(value=".")),
                row(Text(value="Mode: "), InlinePython(code=code("args.mode", 4)), Text(value=".")),
            )
        ),
    )


def test_use_forms() -> None:
    assert body("> use: reviewer\n> use: `lookup`\n> use:\n    lookup\n    search\n") == (
        Use(names=(UseName(name="reviewer"),), block=False),
        Use(names=(UseName(name="lookup", python=True),), block=False),
        Use(names=(UseName(name="lookup"), UseName(name="search")), block=True),
    )


def test_profile_with_docstring_and_members() -> None:
    source = (
        "> profile: reviewer:\n"
        "    ###\n"
        "    Reviews one change.\n"
        "    ###\n"
        "    > adapter: pydantic\n"
        "    > system: Cite evidence.\n"
        "    > use: lookup\n"
        "    > settings:\n"
        "        temperature: 0.1\n"
    )
    assert one(source) == ProfileDef(
        name="reviewer",
        docstring=Docstring(text="Reviews one change."),
        members=(
            Directive(name="adapter", value=(Text(value="pydantic"),)),
            SystemDirective(rows=(row(Text(value="Cite evidence.")),)),
            Use(names=(UseName(name="lookup"),), block=False),
            Directive(
                name="settings",
                value=None,
                config=(ConfigEntry(key="temperature", value=(Text(value="0.1"),)),),
            ),
        ),
    )


def test_imports_and_exports() -> None:
    source = "> import: services/users\n> import: catalog:\n  Product\n  make\n> export: *\n> export:\n  make\n"
    assert body(source) == (
        Import(module="services/users", names=None),
        Import(module="catalog", names=(UseName(name="Product"), UseName(name="make"))),
        Export(names=(), star=True),
        Export(names=(UseName(name="make"),), star=False),
    )


def test_package_manifest_with_dependency_list() -> None:
    source = (
        "> package: reports:\n"
        "  version: 2.0.0rc1\n"
        "  python_dependencies:\n"
        "    pydantic>=2\n"
        '    httpx[http2]>=0.27; python_version >= "3.11"\n'
    )
    assert one(source) == Package(
        name="reports",
        config=(
            ConfigEntry(key="version", value=(Text(value="2.0.0rc1"),)),
            ConfigEntry(
                key="python_dependencies",
                value=(),
                items=("pydantic>=2", 'httpx[http2]>=0.27; python_version >= "3.11"'),
            ),
        ),
    )


def test_optimize_body_is_one_template_with_optional_marker() -> None:
    source = (
        "@extract(doc: str) -> str:\n"
        "  > optimize: fields:\n"
        "    Read <doc>.\n"
        "    Return [title].\n"
        "  > optimize: again:\n"
        "    >> Once more [x]\n"
        "  = `title`\n"
    )
    (proc,) = body(source)
    assert isinstance(proc, Procedure)
    assert proc.body[:2] == (
        Optimize(
            name="fields",
            template=Template(
                rows=(
                    row(Text(value="Read "), Subst(name="doc"), Text(value=".")),
                    row(Text(value="Return "), Capture(name="title", type=None), Text(value=".")),
                )
            ),
        ),
        Optimize(
            name="again",
            template=Template(rows=(row(Text(value="Once more "), Capture(name="x", type=None)),)),
        ),
    )


def test_auto_specification_keeps_raw_lines() -> None:
    (proc,) = body(
        "@slug(value: str) -> str:\n  > auto:\n    Implement slugs for <value>.\n    Keep \\#tags.\n"
    )
    assert isinstance(proc, Procedure)
    assert proc.body == (Auto(spec="Implement slugs for <value>.\nKeep #tags."),)


# --------------------------------------------------------------------------- suites


def test_test_suite() -> None:
    source = '@test: slugify:\n  > case: lower:\n    `assert slugify("A") == "a"`\n\n  > case: strip:\n    ```\n    r = slugify(" a ")\n    assert r == "a"\n    ```\n'
    assert one(source) == TestSuite(
        procedure="slugify",
        cases=(
            TestCase(name="lower", body=code('assert slugify("A") == "a"', 3)),
            TestCase(name="strip", body=code('r = slugify(" a ")\nassert r == "a"', 7)),
        ),
    )


def test_suite_nodes_are_not_pytest_test_classes() -> None:
    """This module imports `TestCase` and `TestSuite` by name; pytest must not collect them."""
    assert TestCase.__test__ is False and TestSuite.__test__ is False
    assert "__test__" not in {field.name for field in dataclasses.fields(TestCase)}


def test_eval_suite() -> None:
    source = (
        "@eval: word_count:\n"
        "  > data: samples:\n"
        '    = `[("a b", 2)]`\n'
        "  > test_data: samples:\n"
        "    = ```\n"
        "    return []\n"
        "    ```\n"
        "\n"
        "  > metric: exact(samples):\n"
        "    = `word_count(samples) == expected`\n"
    )
    assert one(source) == EvalSuite(
        procedure="word_count",
        datasets=(
            EvalData(
                kind="data",
                name="samples",
                value=rendered(BareBacktick(code=code('[("a b", 2)]', 3))),
            ),
            EvalData(kind="test_data", name="samples", value=Fence(code=code("return []", 6))),
        ),
        metric=EvalMetric(
            name="exact",
            dataset="samples",
            value=rendered(BareBacktick(code=code("word_count(samples) == expected", 10))),
        ),
    )


def test_legacy_metric_without_dataset() -> None:
    suite = one("@eval: f:\n  > metric: score:\n    = `1.0`\n")
    assert isinstance(suite, EvalSuite)
    assert suite.metric == EvalMetric(
        name="score", dataset=None, value=rendered(BareBacktick(code=code("1.0", 3)))
    )


# --------------------------------------------------------------------------- layout


def test_indentation_anomaly_column_zero_template_row_stays_in_the_body() -> None:
    source = (
        "@patient_call() -> str:\n"
        "  > settings:\n"
        "      timeout: 120\n"
        ">> Complete the task and return [answer: str].\n"
        "  = <answer>\n"
        "= <patient_call()>\n"
    )
    proc, ret = body(source)
    assert isinstance(proc, Procedure)
    assert [type(node) for node in proc.body] == [Directive, Template, Return]
    assert ret == Return(value=rendered(Call(name="patient_call", args=())))


def test_column_zero_template_row_that_ends_the_body_is_top_level() -> None:
    proc, template = body("@f() -> str:\n  = a\n>> top level [x]\n")
    assert isinstance(proc, Procedure) and isinstance(template, Template)


def test_tabs_count_as_four_columns() -> None:
    (proc,) = body("@f():\n\t[a] = x\n    = <a>\n")
    assert isinstance(proc, Procedure)
    assert len(proc.body) == 2


def test_crlf_line_endings() -> None:
    assert body("[a] = x\r\n= <a>\r\n") == (
        Assign(target="a", type=None, value=rendered(Text(value="x"))),
        Return(value=rendered(Subst(name="a"))),
    )


def test_blank_lines_do_not_close_blocks() -> None:
    (proc,) = body("@f():\n  [a] = x\n\n\n  = <a>\n")
    assert isinstance(proc, Procedure)
    assert len(proc.body) == 2


def test_empty_and_comment_only_sources() -> None:
    assert parse("") == Module(body=())
    assert parse("# nothing\n###\nblock\n###\n\n") == Module(body=())


# --------------------------------------------------------------------------- spans


def test_spans_on_statements_and_segments() -> None:
    module = parse("[a] = x\n@f(p: int) -> str:\n  = Hi <p>  # greet\n", path="flow.kedi")
    assign, proc = module.body
    assert module.path == "flow.kedi"
    assert assign.span == Span("flow.kedi", 1, 1, 1, 8)
    assert isinstance(proc, Procedure)
    assert proc.span == Span("flow.kedi", 2, 1, 3, 11)
    assert proc.params[0].span == Span("flow.kedi", 2, 4, 2, 10)
    ret = proc.body[0]
    assert isinstance(ret, Return) and isinstance(ret.value, Rendered)
    assert ret.span == Span("flow.kedi", 3, 3, 3, 11)
    assert (ret.value.span.line, ret.value.span.column) == (3, 5)  # its first character
    text, subst = ret.value.segments
    assert text.span == Span("flow.kedi", 3, 5, 3, 8)
    assert subst.span == Span("flow.kedi", 3, 8, 3, 11)


def test_one_token_forms_have_the_spans_of_their_parts() -> None:
    """`<name>`, `[name: Dotted]`, `[name: Dotted] =` and `name: Dotted` in a signature are
    one token each (grammar/kedi.lark); spaces inside them are allowed, and the nodes and
    spans are those of the bracket-by-bracket spelling."""
    module = parse(
        ">> Hi < name >, rate [ x : a.b ] and [y]\n"
        "[ z : T ] = <\tw\t>\n"
        "@f(a : int, b: c.d = `1`) -> str:\n"
        "  = `a`\n"
    )
    template, assign, proc = module.body
    assert isinstance(template, Template) and isinstance(assign, Assign)
    assert isinstance(proc, Procedure)
    _, subst, _, typed, _, bare = template.rows[0].segments
    assert subst == Subst(name="name") and subst.span == Span("<string>", 1, 7, 1, 15)
    assert typed == Capture(name="x", type=TypeName(name="a.b"))
    assert typed.span == Span("<string>", 1, 22, 1, 33)
    assert typed.type is not None and typed.type.span == Span("<string>", 1, 28, 1, 31)
    assert bare == Capture(name="y", type=None) and bare.span == Span("<string>", 1, 38, 1, 41)
    assert (assign.target, assign.type) == ("z", TypeName(name="T"))
    assert assign.span == Span("<string>", 2, 1, 2, 18)
    assert assign.type is not None and assign.type.span == Span("<string>", 2, 7, 2, 8)
    assert assign.value == rendered(Subst(name="w"))
    first, second = proc.params
    assert first == Param(name="a", type=TypeName(name="int"), default=None)
    assert first.span == Span("<string>", 3, 4, 3, 11)
    assert first.type is not None and first.type.span == Span("<string>", 3, 8, 3, 11)
    assert second.name == "b" and second.type == TypeName(name="c.d")
    assert second.span == Span("<string>", 3, 13, 3, 25)
    assert second.type is not None and second.type.span == Span("<string>", 3, 16, 3, 19)


def test_parsed_nodes_are_ordinary_frozen_nodes() -> None:
    """The parser builds nodes and spans with fast constructors; they are the same objects."""
    module = parse(">> Hello <name> [reply: str]\n= `reply`\n")
    text = module.body[0].rows[0].segments[0]  # type: ignore[union-attr]
    assert type(text) is Text and type(text.span) is Span
    assert text == Text(value="Hello ") and hash(text) == hash(Text(value="Hello "))
    assert text.span == Span("<string>", 1, 4, 1, 10) and hash(text.span) == hash(text.span)
    with pytest.raises(dataclasses.FrozenInstanceError):
        text.value = "Bye"  # type: ignore[misc]
    with pytest.raises(AttributeError):  # a `Span` is a named tuple
        text.span.line = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(module)) == module


def test_a_fence_from_crlf_text_is_the_code_from_lf_text() -> None:
    """CRLF line breaks are fed as space + LF; the code keeps neither the space nor the CR."""
    source = "[x: int] = ```\ntotal = 1 + \\\n    2\nreturn total\n```\n= `[\n  x,\n]`\n"
    lf, crlf = parse(source), parse(source.replace("\n", "\r\n"))
    assert crlf == lf
    assign, ret = lf.body
    assert assign.value.code.code == "total = 1 + \\\n    2\nreturn total"  # type: ignore[union-attr]
    assert ret.value.segments[0].code.code == "[\n  x,\n]"  # type: ignore[union-attr]


def test_python_code_first_line_maps_to_kedi_lines() -> None:
    module = parse("\n\n[x: int] = ```\nreturn 1\n```\n= `x`\n")
    assign, ret = module.body
    assert isinstance(assign, Assign) and isinstance(assign.value, Fence)
    assert assign.value.code.first_line == 4
    assert assign.value.span.line == 3
    assert isinstance(ret, Return) and isinstance(ret.value, Rendered)
    segment = ret.value.segments[0]
    assert isinstance(segment, BareBacktick)
    assert segment.code.first_line == 6
    assert segment.span == Span("<string>", 6, 3, 6, 6)


def test_byte_order_mark_is_ignored() -> None:
    assert body("\ufeff[a] = x\n") == (
        Assign(target="a", type=None, value=rendered(Text(value="x"))),
    )


def test_every_grammar_rule_has_a_builder_method_and_back() -> None:
    """No Lark tree can leak out: each rule or alias is built by a `Builder` method, and vice versa."""
    names = set()
    for rule in lark_parser().rules:
        name = rule.alias or rule.origin.name
        inlined = name.startswith("_") or (rule.options.expand1 and len(rule.expansion) == 1)
        if not inlined:
            names.add(name)
    methods = {name for name in vars(Builder) if not name.startswith("_")}
    assert names == methods


def test_take_actions_replace_every_shift_that_is_always_appended() -> None:
    """A `TAKE` stands for shift + `APPEND` only where that changes nothing but the work."""
    tables = parse_tables()
    actions, rules, lexers = tables.actions, tables.rules, tables.lexer_terminals
    takes = 0
    for state, row in enumerate(actions):
        for terminal, action in row.items():
            if action < 0 and rules[~action][2] == TAKE:
                takes += 1
                continue
            if action < 0 or action == state:
                continue
            # no shift is left whose target only appends, with the same lookaheads and lexer
            reductions = {rules[~target][2] for target in actions[action].values() if target < 0}
            assert not (
                len(set(actions[action].values())) == 1
                and reductions == {APPEND}
                and actions[action].keys() == row.keys()
                and lexers[action] == lexers[state]
            ), (state, terminal)
    assert takes > 0


def test_segments_taken_into_the_row_list_parse_and_fail_as_before() -> None:
    row = parse(">> a <b> c [d] e [f: G] g\n").body[0].rows[0]  # type: ignore[attr-defined]
    assert [type(segment).__name__ for segment in row.segments] == [
        "Text",
        "Subst",
        "Text",
        "Capture",
        "Text",
        "Capture",
        "Text",
    ]
    assert row.span == Span("<string>", 1, 4, 1, 26)  # from its first character
    # failures right after a taken segment: the state it was taken in decides, as before
    with pytest.raises(kedi.KediSyntaxError, match="1:6: Unsupported escape"):
        parse(">> a \\ b\n")
    with pytest.raises(kedi.KediSyntaxError, match="1:10: A line-ending `.` continues only"):
        parse(">> a <b> \\ \n")
    with pytest.raises(kedi.KediSyntaxError, match="1:12: Unbalanced `<`"):
        parse(">> a <b> c <\n")


def test_splice_positions_are_listed_last_first() -> None:
    """`parser._spliced` splices from the right, so each position still holds when it is used."""
    for _, _, _, splice, _ in parse_tables().rules:
        assert splice is None or list(splice) == sorted(set(splice), reverse=True)


# --------------------------------------------------------------------------- query docstrings


def test_query_docstring_body_keeps_column_zero_template_rows() -> None:
    docstring = "kedi\n    > use: search_docs\n>> Use the docs. Return [answer: str] for <question>.\n    = `answer`\n    "
    source = query_body_source(docstring)
    assert (
        source
        == "> use: search_docs\n>> Use the docs. Return [answer: str] for <question>.\n= `answer`\n"
    )
    assert [type(node) for node in parse(source).body] == [Use, Template, Return]


def test_query_docstring_is_dedented_and_may_start_after_blank_lines() -> None:
    assert (
        query_body_source("\n    kedi\n    >> Hi <x> [y]\n    = `y`\n") == ">> Hi <x> [y]\n= `y`\n"
    )
    assert (
        query_body_source("kedi\n  @f():\n    = x\n\n  = <f()>\n  ") == "@f():\n  = x\n\n= <f()>\n"
    )


@pytest.mark.parametrize(
    ("docstring", "message"),
    [
        (None, "@kedi.query needs a docstring whose first line is `kedi`"),
        ("   ", "@kedi.query needs a docstring whose first line is `kedi`"),
        (
            "kedi >> Hi [x]\n",
            "the @kedi.query docstring must start with a line holding only `kedi`, found 'kedi >> Hi [x]'",
        ),
        (
            "Summarize the text.\n",
            "the @kedi.query docstring must start with a line holding only `kedi`, found 'Summarize the text.'",
        ),
        ("kedi\n   \n", "the @kedi.query docstring has an empty Kedi body after its `kedi` line"),
    ],
)
def test_query_docstring_misuse(docstring: str | None, message: str) -> None:
    with pytest.raises(KediUsageError) as info:
        query_body_source(docstring)
    assert str(info.value) == message
