"""`kedi parse` starts light: the grammar comes from Lark's cache, no model framework loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import lark.lark
built = []
original = lark.lark.load_grammar
lark.lark.load_grammar = lambda *a, **k: built.append(1) or original(*a, **k)
from kedi.cli import main
try:
    main(["parse", sys.argv[1]], standalone_mode=False)
finally:
    frameworks = sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic_ai", "langchain_core", "openai"))
    print(json.dumps({"grammar_built": bool(built), "frameworks": frameworks}))
"""


def probe(path: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, cwd=ROOT, check=True
    )
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "Parsed successfully."
    return json.loads(lines[-1])


def test_parse_of_a_200_line_file_uses_the_cached_grammar_and_no_framework(tmp_path: Path) -> None:
    rows = []
    for i in range(40):
        rows += [f"@step{i}(text: str) -> str:", f"  >> Step {i} of <text>: [out{i}: str].", f"  = <out{i}>", ""]
    rows += [f"[value{i}] = item {i}" for i in range(40)]
    path = tmp_path / "long.kedi"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert len(rows) >= 200
    probe(path)  # the first start may build the grammar and fill Lark's cache
    second = probe(path)
    assert second == {"grammar_built": False, "frameworks": []}
