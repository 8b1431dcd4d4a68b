"""Reading a batch's input rows (JSONL or CSV, a file or stdin) and fingerprinting them.

Each row is a JSON object (JSONL) or a CSV record with a header line; it
becomes the program's `args`. A row's key is the value of `--id-field`, or
its 0-based position in the input when no field is named. The fingerprint
(program text plus input bytes) names the default job and detects a changed
program or input under a job name.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kedi.errors import KediUsageError


@dataclass(frozen=True, slots=True)
class Row:
    """One input row: its position in the input, its key and the program's `args`."""

    position: int
    key: str
    args: dict[str, Any]

    def fields(self) -> set[str]:
        """The row's field names as a program reads them (`text-id` is `args.text_id`)."""
        return {name.replace("-", "_") for name in self.args}


class Inputs:
    """A batch's input, held as bytes so it can be fingerprinted and read again."""

    def __init__(self, data: bytes, label: str, format: str) -> None:
        self.data = data
        self.label = label
        self.format = format

    @classmethod
    def open(cls, path: str, format: str | None = None) -> Inputs:
        """Read `path` (`-` for stdin); the format comes from the suffix unless given."""
        if path == "-":
            return cls(sys.stdin.buffer.read(), "<stdin>", format or "jsonl")
        try:
            data = Path(path).read_bytes()
        except OSError as error:
            raise KediUsageError(f"cannot read the inputs {path}: {error.strerror}") from None
        if format is None:
            format = "csv" if path.lower().endswith(".csv") else "jsonl"
        return cls(data, path, format)

    def digest(self) -> str:
        """The SHA-256 of the input bytes."""
        return hashlib.sha256(self.data).hexdigest()

    def rows(self, id_field: str | None = None) -> Iterator[Row]:
        """The rows in input order; a malformed row or a repeated key raises `KediUsageError`."""
        seen: set[str] = set()
        records = self._csv() if self.format == "csv" else self._jsonl()
        for position, (line, record) in enumerate(records):
            if id_field is None:
                key = str(position)
            elif id_field not in record or record[id_field] in (None, ""):
                raise KediUsageError(
                    f"{self.label}:{line}: the row has no {id_field!r} field (--id-field)"
                )
            else:
                key = str(record[id_field])
            if key in seen:
                raise KediUsageError(
                    f"{self.label}:{line}: the key {key!r} repeats an earlier row's (--id-field {id_field})"
                )
            seen.add(key)
            yield Row(position, key, record)

    def _jsonl(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for line, raw in enumerate(self.data.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as error:
                raise KediUsageError(f"{self.label}:{line}: not a JSON line ({error})") from None
            if not isinstance(record, dict):
                raise KediUsageError(
                    f"{self.label}:{line}: a row must be a JSON object (its fields become args), "
                    f"not {type(record).__name__}"
                )
            yield line, record

    def _csv(self) -> Iterator[tuple[int, dict[str, Any]]]:
        try:
            text = self.data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise KediUsageError(f"{self.label}: not UTF-8 text ({error.reason})") from None
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            for record in reader:
                if None in record:
                    raise KediUsageError(
                        f"{self.label}:{reader.line_num}: the row has more fields than the header"
                    )
                yield reader.line_num, {name: value for name, value in record.items()}
        except csv.Error as error:
            raise KediUsageError(f"{self.label}:{reader.line_num}: {error}") from None


def check_fields(rows: list[Row], reads: Mapping[str, int], program: str, label: str) -> None:
    """Refuse inputs in which no row has a field the program reads (`args.text` with no `text`).

    `reads` maps each field the program reads to the first line reading it.
    Checked before any row runs: otherwise every row would fail on a None
    deep in the program (`object of type 'NoneType' has no len()`).
    """
    if not rows:
        return
    present = set().union(*(row.fields() for row in rows))
    missing = [name for name in reads if name not in present]
    if not missing:
        return
    needs = ", ".join(f"args.{name} ({program}:{reads[name]})" for name in missing)
    fields = ", ".join(repr(name) for name in rows[0].args) or "none"
    message = f"{label}: no row has the field(s) the program reads: {needs}; the rows' fields are {fields}"
    if any(separator in name for name in rows[0].args for separator in ";\t|"):
        message += " (kedi reads CSV separated by commas: convert the file or give JSONL rows)"
    raise KediUsageError(message)


def job_fingerprint(program_source: str, inputs: Inputs) -> tuple[str, str]:
    """The (program, inputs) digests that identify a job's work."""
    return hashlib.sha256(program_source.encode()).hexdigest(), inputs.digest()


def default_job_name(program_path: str, program_digest: str, inputs_digest: str) -> str:
    """`<program stem>-<12 hex digits of both digests>`: the same command gives the same job."""
    both = hashlib.sha256(f"{program_digest}:{inputs_digest}".encode()).hexdigest()
    return f"{Path(program_path).stem}-{both[:12]}"
