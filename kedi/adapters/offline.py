"""The offline model: deterministic answers with no network, the default model.

Replies depend only on the request (never on a clock, randomness, history or
settings), so a program run twice gives the same values:

- **Structured calls** answer with an instance of the output schema from
  `kedi.adapters._values.synthesize` (formats, patterns, bounds, enums, nested
  and recursive models, strings made from field names: `{"home_city": "home
  city"}`), validated like any model's reply. A schema the generator cannot
  satisfy raises `OutputValidationError` naming the field and suggesting a
  `script:` reply.
- **Text calls** answer `"[offline] <prompt>"`, the prompt's whitespace
  collapsed. A prompt longer than 60 characters (or one whose whitespace was
  collapsed) is cut to its first 60 characters and followed by `… #<8 hex
  digits of its SHA-256>`, so different prompts always get different replies.
  A word the cut would split is left out whole when it holds a secret
  (`kedi.redaction`): a key cut short is no longer one redaction recognises,
  and its prefix would reach transcripts and stores unmasked.
- **Tools** are accepted (they are part of the lane key) but never called.

Turns, lanes and transcripts work exactly as with a real portable adapter.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from pydantic import ValidationError

from kedi.adapters._capture_stream import stream_in_one_piece
from kedi.adapters._portable import (
    PortableTurn,
    at_origin,
    compact_json,
    decode_outputs,
    validation_problems,
)
from kedi.adapters._values import synthesize
from kedi.adapters.base import (
    Adapter,
    AdapterProfile,
    CallRequest,
    CallResult,
    OutputSpec,
)
from kedi.errors import OutputValidationError
from kedi.redaction import redact_text
from kedi.settings import ANY_KNOWN_SETTING

_PREVIEW = 60


def offline_text(prompt: str) -> str:
    """The offline model's reply to a text prompt (see the module docstring)."""
    preview = " ".join(prompt.split())
    if preview == prompt and len(preview) <= _PREVIEW:
        return f"[offline] {preview}"
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
    return f"[offline] {_cut(preview)}… #{digest}"


def _cut(preview: str) -> str:
    """The first `_PREVIEW` characters, less a cut word that holds a secret (see the module docs)."""
    cut = preview[:_PREVIEW]
    if len(preview) <= _PREVIEW or preview[_PREVIEW] == " ":
        return cut
    start = cut.rfind(" ") + 1
    end = preview.find(" ", _PREVIEW)
    word = preview[start : None if end < 0 else end]
    return cut[:start].rstrip() if redact_text(word) != word else cut


class OfflineAdapter(Adapter):
    """Deterministic offline model; `offline` is the default when none is configured."""

    shortname: ClassVar[str] = "offline"
    checks_requests: ClassVar[bool] = True
    profile: ClassVar[AdapterProfile] = AdapterProfile(
        structured_output=True,
        tools=True,
        history=True,
        offline=True,
        settings=ANY_KNOWN_SETTING,
    )

    def __init__(self, model: str = "offline") -> None:
        self.model_name = model

    @classmethod
    def capability_rows(cls) -> dict[str, str]:
        """What this adapter supports: every setting name, so a program runs unchanged on it."""
        return {**super().capability_rows(), "settings": "every name kedi knows, all ignored"}

    async def request(self, request: CallRequest) -> CallResult:
        """Answer one call deterministically (see the module docstring)."""
        self.check(request)
        turn = PortableTurn.start(request)
        await turn.process(self)
        if request.output is None:
            text = offline_text(request.prompt)
            turn.respond(turn.stamp(role="assistant", content=text))
            stream_in_one_piece(request, text)
            return turn.result(text)
        outputs = synthesize(request.output.json_schema)
        content = compact_json(outputs)
        turn.respond(turn.stamp(role="assistant", content=content))
        stream_in_one_piece(request, content)
        return turn.result(_validated(request.output, outputs, turn))


def _validated(spec: OutputSpec, outputs: Any, turn: PortableTurn) -> dict[str, Any]:
    try:
        return decode_outputs(spec, outputs if isinstance(outputs, dict) else {})
    except ValidationError as error:
        problems = "; ".join(validation_problems(error))
        raise OutputValidationError(
            f"the offline model cannot produce a valid value for the call"
            f"{at_origin(turn.request)}: {problems}; "
            'give this call a scripted reply instead (`script:PATH` with an {"outputs": {...}} entry)',
            partial=turn.partial("decode"),
        ) from None
