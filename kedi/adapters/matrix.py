"""The capability matrix: what each registered adapter supports, as rows and as Markdown.

Every row is read from the adapter class itself (`profile` and
`capability_rows()`), so the table in `docs/adapters.md` cannot drift from the
code: a test compares the table there with `render_markdown()`. Print a fresh
table with::

    python -m kedi.adapters.matrix

Framework adapters are imported only when their extra is installed. Without
it the adapter still gets a row: its class cell names the extra to install and
its capability cells read `?`, since nothing about it can be read.
"""

from __future__ import annotations

from kedi.adapters import ADAPTERS, Adapter, adapter_class
from kedi.errors import ExtraNotInstalledError

__all__ = ["capability_matrix", "render_markdown"]

_UNKNOWN = "?"


def capability_matrix() -> list[dict[str, str]]:
    """Return one row per registered adapter, in registry order.

    Each row maps a column name to its cell: `adapter` (the registry name),
    `class`, `runs offline`, then the capability rows every adapter class
    shares with `Adapter.capability_rows()`.
    """
    return [_row(shortname, target) for shortname, target in ADAPTERS.items()]


def _row(shortname: str, target: str) -> dict[str, str]:
    class_name = target.partition(":")[2]
    try:
        cls = adapter_class(shortname)
    except ExtraNotInstalledError as missing:
        install = f'{class_name} (needs pip install "kedi[{missing.extra}]")'
        unknown = dict.fromkeys(("runs offline", *Adapter.capability_rows()), _UNKNOWN)
        return {"adapter": shortname, "class": install, **unknown}
    return {
        "adapter": shortname,
        "class": cls.__name__,
        "runs offline": "yes" if cls.profile.offline else "no",
        **cls.capability_rows(),
    }


def render_markdown() -> str:
    """Return the capability matrix as a Markdown table (no trailing newline)."""
    rows = capability_matrix()
    columns = list(rows[0])
    lines = [_line(columns), _line(["---"] * len(columns))]
    lines += [_line([row[column] for column in columns]) for row in rows]
    return "\n".join(lines)


def _line(cells: list[str]) -> str:
    # A literal `|` would end the cell early; Markdown tables escape it.
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


if __name__ == "__main__":
    print(render_markdown())
