"""`kedi transcript expand FILE`: a linear transcript back as full records.

Prints one JSON line per record with every message its request sent (see
`kedi.runtime.transcripts`). A torn last record (the writer was killed
mid-line) is skipped and reported on stderr; the command still succeeds.
"""

from __future__ import annotations

import json
import sys

from kedi.runtime.transcripts import expand_records, read_transcript


def expand(path: str) -> None:
    """Print the full records of the transcript at `path` to stdout."""
    read = read_transcript(path)
    if read.torn:
        print(f"kedi: {read.torn}", file=sys.stderr)
    out = sys.stdout
    for record in expand_records(read.records):
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
