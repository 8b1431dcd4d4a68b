"""Where the tests find the Kedi documentation corpus, and how they skip without it.

The corpus is not part of the repository: it lives beside it
(`<repo>/../shared/conformance/kedi-docs`, as in CI's checkout) or wherever
`KEDI_CONFORMANCE_DIR` points (the directory holding `kedi-docs`). A clean
clone with nothing beside it skips the tests that need it, with a reason
naming the path; CI has it (and turns every skip into a failure).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFORMANCE = Path(os.environ.get("KEDI_CONFORMANCE_DIR") or REPO.parent / "shared" / "conformance")
CORPUS = CONFORMANCE / "kedi-docs"
MISSING = (
    f"needs the conformance corpus at {CORPUS}: check out shared/ beside the repository "
    "or set KEDI_CONFORMANCE_DIR to the directory holding kedi-docs"
)

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=MISSING)
"""Mark a test that reads the corpus."""


def skip_module_without_corpus() -> None:
    """Skip the whole calling test module at collection when the corpus is absent."""
    if not CORPUS.is_dir():
        pytest.skip(MISSING, allow_module_level=True)
