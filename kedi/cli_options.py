"""Program options on the command line: which ones a program reads, and the errors about them.

`kedi run flow.kedi --title x` turns `--title` into `args.title`. The options
a program reads are found in its source (`args.title`, `args["title"]`); a
program that uses `args` any other way (`vars(args)`, `"x" in args`, the word
in prompt text) reads options kedi cannot list, and nothing is refused.

- An option the program does not read is refused before the run, with the
  closest option it does read ("did you mean --title?").
- When the program's code fails on a None and it reads options that were not
  given, the error ends with a hint naming each one and the line that reads it
  (a missing option is None, so the failure shows up later: `'NoneType' object
  has no attribute 'upper'`). A failed model call, or a failure that shows no
  None (a `--replay` whose prompt was edited), gets no such hint.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import click

if TYPE_CHECKING:
    from kedi.errors import KediExecutionError

_READ = re.compile(r"""\bargs(?:\.([A-Za-z_]\w*)|\[\s*["']([A-Za-z_][\w-]*)["']\s*\])""")
_ANY_USE = re.compile(r"\bargs\b")
_METHODS = frozenset({"as_dict"})
"""`Args` methods: reading them reads every option."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The options a program's source reads, with the first line reading each."""

    lines: dict[str, int]
    """Option name (underscores) → first 1-based line that reads it."""
    complete: bool
    """False when the program also uses `args` in ways that read unknown options."""


def read_options(source: str) -> ReadOptions:
    """Scan `source` for the program options it reads."""
    lines: dict[str, int] = {}
    explained = 0
    for match in _READ.finditer(source):
        explained += 1
        name = (match[1] or match[2]).replace("-", "_")
        lines.setdefault(name, source.count("\n", 0, match.start()) + 1)
    complete = explained == len(_ANY_USE.findall(source)) and not _METHODS & lines.keys()
    return ReadOptions(lines, complete)


def unknown_option_error(given: Mapping[str, object], read: ReadOptions, path: str) -> str | None:
    """The message refusing an option `path` does not read, or None if all are read."""
    if not read.complete:
        return None
    unknown = [name for name in given if name not in read.lines]
    if not unknown:
        return None
    import difflib  # only on this error path: `kedi --help` imports this module

    name = unknown[0]
    close = difflib.get_close_matches(name, read.lines, n=1)
    guess = f"; did you mean {_flag(close[0])}?" if close else ""
    reads = ", ".join(_flag(option) for option in sorted(read.lines)) or "no options"
    return f"{path} does not read the option {_flag(name)}{guess} (it reads {reads})"


_KEDI_MODES = {
    "test": "run its `@test:` suites with `kedi test FILE`",
    "eval": "score its `@eval:` suites with `kedi eval FILE`",
    "parse": "check its syntax with `kedi parse FILE`",
    "optimize": "prompt optimization (`> optimize:`) is not supported yet",
}
"""The language's own run modes (`kedi FILE --test`), each kedi's separate command."""


def kedi_mode_error(given: Mapping[str, object]) -> str | None:
    """The message refusing `--test`, `--eval`, `--parse` or `--optimize` as a program option.

    They are kedi's options in the language's CLI, never the program's `args`
    (spec §8.3); kedi runs those modes as commands of their own. With both
    `--test` and `--eval` (spec B27) the tests come first, then the evals.
    """
    modes = [name for name in _KEDI_MODES if name in given]
    if not modes:
        return None
    if {"test", "eval"} <= set(modes):
        return (
            "--test and --eval are kedi's modes, not program options: run `kedi test FILE`, "
            "then `kedi eval FILE`"
        )
    return f"--{modes[0]} is kedi's mode, not a program option: {_KEDI_MODES[modes[0]]}"


def missing_option_hints(
    given: Mapping[str, object], read: ReadOptions, path: str, error: BaseException
) -> list[str]:
    """One hint per option the program reads that was not given, with the line reading it.

    Only a failure of the program's own code that shows a None can come from
    an option that is None; a model call that failed (a provider, a script,
    validation), a program that never ran (syntax, configuration) or a failure
    with no None in it (a replayed request that differs because its prompt was
    edited) gets no hints, which would send the user after the wrong cause.
    """
    from kedi.errors import AdapterError, KediConfigError, KediExecutionError

    if (
        not isinstance(error, KediExecutionError)
        or isinstance(error.original, AdapterError | KediConfigError)
        or not _shows_none(error)
    ):
        return []
    return [
        f"  hint: option {_flag(name)} was not given, so args.{name} is None "
        f"(read at {path}:{line}); pass {_flag(name)} VALUE"
        for name, line in sorted(read.lines.items(), key=lambda item: item[1])
        if name not in given
    ]


_NONE = re.compile(r"\bNone(?:Type)?\b")


def _shows_none(error: KediExecutionError) -> bool:
    """True when the failure's own message shows a None that could be an option's value.

    A replay mismatch shows the recorded and the current request side by side:
    there a None counts only when the current side has more of them (a value
    that became None), not when an unchanged None sits next to an edit.
    """
    from kedi.runtime.sessions import ReplayMismatch

    original = error.original
    text = str(original) if original is not None else error.message
    if not isinstance(original, ReplayMismatch):
        return _NONE.search(text) is not None
    changed = [line for line in text.splitlines() if not line.startswith(("+++", "---"))]
    current = sum(len(_NONE.findall(line)) for line in changed if line.startswith("+"))
    recorded = sum(len(_NONE.findall(line)) for line in changed if line.startswith("-"))
    return current > recorded


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_default_model(adapter: str | None, model: str | None) -> None:
    """Build the adapter `--adapter`/`--model` name now, so a bad model fails at start-up.

    Without `--model` only the `--adapter` name is checked (the program may set
    its model with `> model:`). A model name Pydantic AI (the default adapter)
    cannot use, or a core install without that extra, gets a hint toward
    `--adapter openai`, which needs no extra; kedi's own models (`offline`,
    `script:PATH`, `local`) never go to Pydantic AI, so their errors get none.
    """
    from kedi.adapters import DEFAULT_ADAPTER, adapter_class, create_adapter
    from kedi.errors import ExtraNotInstalledError, KediConfigError

    if model is None:
        if adapter is not None:
            adapter_class(adapter)  # an unknown name fails now, not at the first call
        return
    try:
        create_adapter(adapter, model)
    except (KediConfigError, ExtraNotInstalledError) as error:
        if (adapter or DEFAULT_ADAPTER) != DEFAULT_ADAPTER or _KEDI_MODEL.match(model):
            raise
        raise KediConfigError(f"{error}\n  hint: {_openai_adapter_hint(model)}") from None


_KEDI_MODEL = re.compile(r"offline$|script:|local(?::|$)")
"""Model names kedi's own adapters serve whatever `--adapter` says."""


def _openai_adapter_hint(model: str) -> str:
    """Point at `--adapter openai`; spell the Pydantic AI `provider:model` form when missing."""
    hint = (
        f"for an OpenAI-compatible endpoint use `--adapter openai --model "
        f"{model.removeprefix('openai:')}` (no extra needed; reads OPENAI_API_KEY and "
        f"OPENAI_BASE_URL)"
    )
    if ":" in model:  # already provider:model
        return hint
    return f"{hint}; Pydantic AI names models provider:model, e.g. `--model openai:{model}`"


_Command = TypeVar("_Command", bound=Callable[..., object])

_ENDPOINT_OPTIONS = (
    click.option(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible endpoint, with its /v1 (else KEDI_BASE_URL, OPENAI_BASE_URL).",
    ),
    click.option(
        "--api-key-env",
        metavar="NAME",
        help="Read the API key from environment variable NAME (default OPENAI_API_KEY).",
    ),
    click.option(
        "--structured-mode",
        type=click.Choice(["auto", "json_schema", "json_object", "tool", "prompted"]),
        help="How the openai adapter asks for typed captures (else KEDI_STRUCTURED_MODE, "
        "the structured_mode setting, auto).",
    ),
)


def endpoint_options(command: _Command) -> _Command:
    """`--base-url`, `--api-key-env` and `--structured-mode`, for every command that calls a model.

    The command passes them to `kedi.adapters.endpoint.command_line_options`.
    """
    for option in reversed(_ENDPOINT_OPTIONS):
        command = option(command)
    return command
