"""Values of Kedi custom types (`~Ticket(...)`) pickle, so they cross process boundaries.

Their class lives in a module named after the `.kedi` path, which no process
can import; they pickle by value instead (docs/language.md, "Custom types").
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kedi
from kedi.errors import KediExecutionError

ROOT = Path(__file__).resolve().parents[2]

TYPES = """\
~Ticket(title: str, tags: list[str] = `[]`)
~Team(lead: Ticket, backlog: list[Ticket])
"""


def run(source: str, path: Path) -> Any:
    return kedi.compile(source, path=str(path)).run_sync(model="offline")


def in_a_new_process(data: bytes, code: str) -> str:
    """Unpickle `data` as `value` in a fresh interpreter, run `code`, return what it prints."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import pickle, sys\nvalue = pickle.loads(sys.stdin.buffer.read())\n{code}",
        ],
        input=data,
        capture_output=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode()


def test_a_custom_type_value_round_trips_in_the_same_process(tmp_path: Path) -> None:
    team = run(TYPES + '= `Team(Ticket("a", ["x"]), [Ticket("b")])`', tmp_path / "t.kedi")
    copy = pickle.loads(pickle.dumps(team))
    assert copy == team and type(copy) is type(team)  # the live class, so isinstance holds
    assert type(copy.lead) is type(team.lead)


def test_a_custom_type_value_unpickles_in_another_process(tmp_path: Path) -> None:
    team = run(TYPES + '= `Team(Ticket("a", ["x"]), [Ticket("b")])`', tmp_path / "t.kedi")
    printed = in_a_new_process(
        pickle.dumps(team),
        "print(repr(value))\n"
        "print(type(value.lead) is type(value.backlog[0]), value.lead.tags + ['y'])\n"
        "print(pickle.loads(pickle.dumps(value)) == value)\n"
        "try:\n"
        "    type(value)(lead={'title': 'c'}, backlog=[])\n"
        "except Exception as error:\n"
        "    print(type(error).__name__)\n",
    )
    assert printed.splitlines() == [
        "Team(lead=Ticket(title='a', tags=['x']), backlog=[Ticket(title='b', tags=[])])",
        "True ['x', 'y']",
        "True",
        "ValidationError",  # the rebuilt class is as strict as the original: no dict for a Ticket
    ]


def test_a_kedi_error_holding_a_custom_value_keeps_it_across_pickling(tmp_path: Path) -> None:
    source = TYPES + '= `(_ for _ in ()).throw(ValueError(Ticket("lost")))`'
    with pytest.raises(KediExecutionError) as caught:
        run(source, tmp_path / "err.kedi")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(copy.original, ValueError)  # not degraded to a RuntimeError of its text
    assert copy.original.args[0] == caught.value.original.args[0]  # type: ignore[union-attr]


def test_a_field_typed_by_a_class_of_the_inline_python_does_not_pickle(tmp_path: Path) -> None:
    """The documented limit: a prelude class has no importable module either."""
    source = (
        "```\nimport dataclasses\n@dataclasses.dataclass\nclass Point:\n    x: int\n```\n"
        "~Spot(at: Point)\n= `Spot(Point(1))`"
    )
    spot = run(source, tmp_path / "spot.kedi")
    with pytest.raises(
        pickle.PicklingError, match=r"Can't pickle <class '__kedi_prelude_\d+__.Point'>"
    ):
        pickle.dumps(spot)
