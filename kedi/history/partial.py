"""What a failed call leaves behind (C9)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from kedi.errors import HistoryError
from kedi.history.messages import Message

__all__ = ["PartialResult", "PartialStage"]

PartialStage = Literal["model", "decode", "tool", "loop", "usage", "canceled"]
"""Where the call failed: a model request, decoding its reply, a tool, the tool
loop's limits, the usage limits, or cancellation."""

_STAGES = frozenset(get_args(PartialStage))


@dataclass(frozen=True, slots=True, kw_only=True)
class PartialResult:
    """Evidence of a failed call, carried by its error as `partial`.

    Errors carry one only when the call completed something (a model turn,
    reported usage, an executed tool); otherwise `partial` is `None`.
    """

    stage: PartialStage
    """Where the call failed."""
    messages: list[Message] = field(default_factory=list)
    """Resume-ready history: the conversation through the last completed model
    turn. Passing it back as history continues the conversation."""
    usage: Any = None
    """The adapter's usage totals for the requests that completed."""
    requests: int = 0
    """How many model requests completed."""
    tool_calls: int = 0
    """How many tools were executed."""
    run_id: str = ""
    """The failed call's run id."""
    conversation_id: str = ""
    """The conversation the call belonged to."""

    def __post_init__(self) -> None:
        """Reject an unknown stage (a bug in the adapter that built this)."""
        if self.stage not in _STAGES:
            raise HistoryError(
                f"unknown partial-result stage {self.stage!r}; expected one of {', '.join(sorted(_STAGES))}"
            )
