"""Conversation history: portable messages and the pure operations on them.

Importing this package is cheap: it defines a few pydantic models and does no
other work. See `docs/history.md` for the rules each operation follows.
"""

from kedi.errors import HistoryError, HistoryProcessingError, HistoryProcessingValidationError
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
