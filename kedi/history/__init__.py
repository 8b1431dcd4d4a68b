"""Conversation history: portable messages and the pure operations on them.

Importing this package is cheap: only the history errors load eagerly; every
other public name imports its module on first use (PEP 562), so the history
store (`kedi.history.store`) and `kedi history show` read sessions without
loading pydantic. See `docs/history.md` for the rules each operation follows.
"""

from __future__ import annotations

# Private aliases, and `annotations` (the __future__ feature) removed: no helper
# module or feature object is an attribute of the package (test_history_show).
import typing as _typing

from kedi._lazy import lazy_exports as _lazy_exports
from kedi.errors import HistoryError, HistoryProcessingError, HistoryProcessingValidationError

if _typing.TYPE_CHECKING:
    from kedi.history.grouping import PORTABLE, Classifier, Group, MessageInfo
    from kedi.history.identity import new_id, resolve_conversation_id, resolve_run_id
    from kedi.history.messages import (
        INTERRUPTED_RESULT,
        Message,
        Part,
        ThinkingBlock,
        ToolCall,
        as_messages,
        history_tail,
        interrupted_result,
        is_truncated_args,
        iter_messages,
        wire_tool_arguments,
    )
    from kedi.history.partial import PartialResult
    from kedi.history.processors import (
        HistoryProcessorContext,
        ProcessorOutcome,
        compose_bounds,
        max_messages,
        max_tokens,
        run_history_processor,
    )
    from kedi.history.repair import (
        HistoryRepair,
        SanitizeReport,
        UnsafePart,
        build_request_messages,
        join_instructions,
        normalize_history,
        repair_for_request,
        sanitize_history,
    )
    from kedi.history.trimming import budget_history, estimate_tokens, may_open_window, trim_history

__all__ = [
    "INTERRUPTED_RESULT",
    "PORTABLE",
    "Classifier",
    "Group",
    "HistoryError",
    "HistoryProcessingError",
    "HistoryProcessingValidationError",
    "HistoryProcessorContext",
    "HistoryRepair",
    "Message",
    "MessageInfo",
    "Part",
    "PartialResult",
    "ProcessorOutcome",
    "SanitizeReport",
    "ThinkingBlock",
    "ToolCall",
    "UnsafePart",
    "as_messages",
    "budget_history",
    "build_request_messages",
    "compose_bounds",
    "estimate_tokens",
    "history_tail",
    "interrupted_result",
    "is_truncated_args",
    "iter_messages",
    "join_instructions",
    "max_messages",
    "max_tokens",
    "may_open_window",
    "new_id",
    "normalize_history",
    "repair_for_request",
    "resolve_conversation_id",
    "resolve_run_id",
    "run_history_processor",
    "sanitize_history",
    "trim_history",
    "wire_tool_arguments",
]

_LAZY: dict[str, tuple[str, str]] = {
    "PORTABLE": ("kedi.history.grouping", "PORTABLE"),
    "Classifier": ("kedi.history.grouping", "Classifier"),
    "Group": ("kedi.history.grouping", "Group"),
    "MessageInfo": ("kedi.history.grouping", "MessageInfo"),
    "new_id": ("kedi.history.identity", "new_id"),
    "resolve_conversation_id": ("kedi.history.identity", "resolve_conversation_id"),
    "resolve_run_id": ("kedi.history.identity", "resolve_run_id"),
    "INTERRUPTED_RESULT": ("kedi.history.messages", "INTERRUPTED_RESULT"),
    "Message": ("kedi.history.messages", "Message"),
    "Part": ("kedi.history.messages", "Part"),
    "ThinkingBlock": ("kedi.history.messages", "ThinkingBlock"),
    "ToolCall": ("kedi.history.messages", "ToolCall"),
    "as_messages": ("kedi.history.messages", "as_messages"),
    "history_tail": ("kedi.history.messages", "history_tail"),
    "interrupted_result": ("kedi.history.messages", "interrupted_result"),
    "is_truncated_args": ("kedi.history.messages", "is_truncated_args"),
    "iter_messages": ("kedi.history.messages", "iter_messages"),
    "wire_tool_arguments": ("kedi.history.messages", "wire_tool_arguments"),
    "PartialResult": ("kedi.history.partial", "PartialResult"),
    "HistoryProcessorContext": ("kedi.history.processors", "HistoryProcessorContext"),
    "ProcessorOutcome": ("kedi.history.processors", "ProcessorOutcome"),
    "compose_bounds": ("kedi.history.processors", "compose_bounds"),
    "max_messages": ("kedi.history.processors", "max_messages"),
    "max_tokens": ("kedi.history.processors", "max_tokens"),
    "run_history_processor": ("kedi.history.processors", "run_history_processor"),
    "HistoryRepair": ("kedi.history.repair", "HistoryRepair"),
    "SanitizeReport": ("kedi.history.repair", "SanitizeReport"),
    "UnsafePart": ("kedi.history.repair", "UnsafePart"),
    "build_request_messages": ("kedi.history.repair", "build_request_messages"),
    "join_instructions": ("kedi.history.repair", "join_instructions"),
    "normalize_history": ("kedi.history.repair", "normalize_history"),
    "repair_for_request": ("kedi.history.repair", "repair_for_request"),
    "sanitize_history": ("kedi.history.repair", "sanitize_history"),
    "budget_history": ("kedi.history.trimming", "budget_history"),
    "estimate_tokens": ("kedi.history.trimming", "estimate_tokens"),
    "may_open_window": ("kedi.history.trimming", "may_open_window"),
    "trim_history": ("kedi.history.trimming", "trim_history"),
}
"""Public name -> (module, attribute) for every name imported on first use.

The `TYPE_CHECKING` imports above say the same for type checkers and IDEs;
`tests/test_history_show.py` checks that every name loads from its module.
"""


__getattr__, __dir__ = _lazy_exports(globals(), _LAZY)

del annotations  # the name the __future__ import binds; the feature stays on
