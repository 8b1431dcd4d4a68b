"""`> import:` / `> export:` (spec §6.4): resolution, located check errors, run-once semantics."""

from __future__ import annotations

from pathlib import Path

import pytest

import kedi
from kedi.errors import KediCheckError
from kedi.syntax import linking


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def run(path: Path) -> object:
    return kedi.compile(path.read_text(encoding="utf-8"), path=str(path)).run_sync(model="offline")


def check_error(path: Path) -> KediCheckError:
    with pytest.raises(KediCheckError) as caught:
        kedi.compile(path.read_text(encoding="utf-8"), path=str(path))
    return caught.value


DIAMOND = {
    "main.kedi": "> import: lib/left\n> import: lib/right\n= <left()> <right()> `COUNT[0]`\n",
    "lib/left.kedi": "> import: base:\n  base\n@left() -> str:\n  = L<base()>\n> export:\n  left\n",
    "lib/right.kedi": "> import: base\n@right() -> str:\n  = R<base()>\n> export: *\n",
    "lib/base.kedi": (
        "```\nimport builtins\nbuiltins.COUNT = getattr(builtins, 'COUNT', [0])\nCOUNT[0] += 1\n```\n"
        "@base() -> str:\n  = B\n@_hidden() -> str:\n  = h\n> export: *\n"
    ),
}


def test_diamond_import_runs_the_shared_module_once_per_run(tmp_path: Path) -> None:
    import builtins

    write(tmp_path, DIAMOND)
    builtins.COUNT = [0]  # type: ignore[attr-defined]
    try:
        assert run(tmp_path / "main.kedi") == "LB RB 1"
        assert run(tmp_path / "main.kedi") == "LB RB 2"  # a new run initialises it again
    finally:
        del builtins.COUNT  # type: ignore[attr-defined]


def test_star_export_leaves_out_private_and_imported_names(tmp_path: Path) -> None:
    write(tmp_path, {**DIAMOND, "main.kedi": "> import: lib/right:\n  base\n"})
    error = check_error(tmp_path / "main.kedi")
    (diagnostic,) = error.diagnostics
    assert (diagnostic.line, diagnostic.column) == (2, 3)
    assert diagnostic.message == "`base` is not exported by `lib/right`"
    write(tmp_path, {"main.kedi": "> import: lib/base:\n  _hidden\n"})
    assert "`_hidden` is not exported" in check_error(tmp_path / "main.kedi").diagnostics[0].message


def test_missing_module_lists_every_candidate_searched(tmp_path: Path) -> None:
    write(tmp_path, {"main.kedi": "= a\n> import: tools/text\n"})
    (diagnostic,) = check_error(tmp_path / "main.kedi").diagnostics
    assert diagnostic.line == 2 and diagnostic.message == "cannot find module `tools/text`"
    assert str(tmp_path / "tools" / "text.kedi") in (diagnostic.hint or "")
    assert "bundled: " in (diagnostic.hint or "") and "entry point group `kedi.packages`" in (
        diagnostic.hint or ""
    )


def test_unknown_export_and_duplicate_selective_name_are_located(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "main.kedi": "> import: m:\n  f\n  f\n",
            "m.kedi": "@f() -> str:\n  = f\n> export:\n  f\n",
        },
    )
    (duplicate,) = check_error(tmp_path / "main.kedi").diagnostics
    assert (duplicate.line, duplicate.message) == (3, "`f` is listed twice in `> import: m:`")
    write(
        tmp_path,
        {
            "main.kedi": "> import: m\n",
            "m.kedi": "> import: helpers\n@f() -> str:\n  = f\n> export:\n  f\n  g\n",
        },
    )
    (unknown,) = check_error(tmp_path / "main.kedi").diagnostics
    assert unknown.path == str(tmp_path / "m.kedi") and unknown.line == 6
    assert unknown.message == "unknown name `g` in `> export:`"


def test_reexported_profile_and_custom_type_import_like_values(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "inner.kedi": "~Point(x: int)\n> profile: terse:\n    > system: Be terse.\n> export:\n  Point\n  terse\n",
            "outer.kedi": "> import: inner\n> export:\n  Point\n  terse\n",
            "main.kedi": "> import: outer\n> use: terse\n>> Pick [p: Point].\n= `type(p).__name__ + str(p.x)`\n",
        },
    )
    assert run(tmp_path / "main.kedi") == "Point0"


def test_import_cycle_is_an_error_naming_the_cycle(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"main.kedi": "> import: a\n", "a.kedi": "> import: b\n", "b.kedi": "> import: main\n"},
    )
    messages = [d.message for d in check_error(tmp_path / "main.kedi").diagnostics]
    assert messages == [
        f"import cycle: {tmp_path / 'main.kedi'} -> {tmp_path / 'a.kedi'} -> {tmp_path / 'b.kedi'} -> {tmp_path / 'main.kedi'}"
    ]


def test_bundled_modules_and_in_memory_source() -> None:
    program = kedi.compile(
        "> import: helpers:\n  truncate\n> import: errors\n= <truncate(`'abcdefgh'`, `6`)> `ModuleNotInstalledError('x').name`\n"
    )
    assert program.run_sync() == "abc... x"
    with pytest.raises(KediCheckError) as caught:
        kedi.compile("> import: local_file\n")
    assert "source held only in memory (<string>) cannot import file modules" in str(caught.value)
    with pytest.raises(KediCheckError) as caught:
        kedi.compile("> import: filesystem\n")
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.message == "bundled module `filesystem` is not shipped by kedi"
    assert diagnostic.hint == "kedi ships: " + ", ".join(linking.shipped_bundled())
    assert {"errors", "helpers"} <= set(linking.shipped_bundled())


def test_an_already_compiled_module_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kedi.syntax import checks

    write(tmp_path, DIAMOND | {"main.kedi": "> import: lib/left\n= <left()>\n"})
    kedi.compile((tmp_path / "main.kedi").read_text(), path=str(tmp_path / "main.kedi"))
    parsed: list[str | None] = []
    real = checks.check_source

    def counting(text: str, path: str | None = None, **options: object) -> object:
        parsed.append(path)
        return real(text, path, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(checks, "check_source", counting)
    kedi.compile("> import: lib/left\n= again\n", path=str(tmp_path / "other.kedi"))
    assert parsed == [
        str(tmp_path / "other.kedi")
    ]  # the root only: lib/left and lib/base are cached
    (tmp_path / "lib" / "base.kedi").write_text("@base() -> str:\n  = changed!\n> export: *\n")
    kedi.compile("> import: lib/left\n", path=str(tmp_path / "other.kedi"))
    assert str(tmp_path / "lib" / "base.kedi") in parsed  # an edited file is parsed again


def test_suites_and_imports_never_run_a_suite_during_kedi_run(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "main.kedi": "@f() -> str:\n  = ok\n@test: f:\n  > case: fails:\n    `assert False`\n= <f()>\n"
        },
    )
    assert run(tmp_path / "main.kedi") == "ok"


def test_a_module_created_where_an_earlier_candidate_missed_wins_in_the_same_process(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "main.kedi": "> import: lib/a\n= `a()`\n",
            "lib/a.kedi": "> import: helpers\n@a() -> str:\n  = `first_line('x')`\n> export: *\n",
        },
    )
    assert run(tmp_path / "main.kedi") == "x"  # the bundled helpers module
    write(tmp_path, {"lib/helpers.kedi": "@first_line(t: str) -> str:\n  = local\n> export: *\n"})
    assert run(tmp_path / "main.kedi") == "local"  # the file next to lib/a.kedi now comes first


def test_a_whole_module_import_keeps_the_name_checks_on(tmp_path: Path) -> None:
    # `> import: m` brings exactly m's exports, which linking knows: a typo, an
    # unexported name or an unknown type is a check error, as without the import.
    write(
        tmp_path,
        {
            "lib.kedi": "~Note(text: str)\n@shout(s: str) -> str:\n  = `s.upper()`\n"
            "@hidden() -> str:\n  = h\n> export:\n  shout\n  Note\n",
            "main.kedi": "> import: lib\n[n: Nte] = `Note(text='a')`\n= <shuot(x)> <hidden()>\n"
            "= <shout(a, b)>\n",
        },
    )
    diagnostics = check_error(tmp_path / "main.kedi").diagnostics
    assert [(d.line, d.column, d.message, d.hint) for d in diagnostics] == [
        (2, 5, "unknown type `Nte`", "did you mean `Note`?"),
        (3, 3, "unknown name `shuot`", "did you mean `shout`?"),
        (3, 14, "unknown name `hidden`", None),
        (
            4,
            3,
            "`shout` takes 1 argument but 2 were given",
            f"`@shout(s)` is defined on line 2 of {tmp_path / 'lib.kedi'}",
        ),
    ]
    write(tmp_path, {"main.kedi": "> import: lib\n[n: Note] = `Note(text='a')`\n= <shout(x)>\n"})
    assert run(tmp_path / "main.kedi") == "X"
