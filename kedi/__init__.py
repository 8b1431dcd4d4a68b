"""kedi: an interpreter for the Kedi LLM orchestration language.

    import kedi
    program = kedi.compile(source, path="flow.kedi")
    result = program.run_sync(model="offline")

Importing kedi never imports a model framework (Pydantic AI, LangChain):
adapters load them on first use.
"""

from kedi.adapters.base import Adapter
from kedi.errors import (
    AdapterError,
    AuthenticationError,
    CapabilityError,
    ContextLengthError,
    ExtraNotInstalledError,
    HistoryProcessingError,
    HistoryProcessingValidationError,
    HistoryShapeError,
    KediCheckError,
    KediConfigError,
    KediDiagnosticError,
    KediError,
    KediExecutionError,
    KediKeyExecutionError,
    KediNameError,
    KediParseError,
    KediPromiseLeak,
    KediSyntaxError,
    KediTypeExecutionError,
    KediUsageError,
    KediValueExecutionError,
    ModelNotFoundError,
    OutputValidationError,
    ProviderError,
    RateLimitError,
    ScriptExhaustedError,
    TurnAbandoned,
)
from kedi.history import (
    INTERRUPTED_RESULT,
    HistoryError,
    HistoryRepair,
    Message,
    Part,
    SanitizeReport,
    ThinkingBlock,
    ToolCall,
    UnsafePart,
    budget_history,
    new_id,
    normalize_history,
    sanitize_history,
    trim_history,
    wire_tool_arguments,
)
from kedi.history.lanes import Conversation
from kedi.history.processors import HistoryProcessorContext
from kedi.runtime.calls import PromptEvent
from kedi.runtime.config import configure, context, parallel, reset_config
from kedi.runtime.embedding import bind, query
from kedi.runtime.program import Program, compile_program
from kedi.runtime.tools import tool
from kedi.syntax.parser import parse

compile = compile_program
"""`kedi.compile(source, *, path=None) -> Program`: parse and check a program."""

__version__ = "0.1.0"

__all__ = [
    "INTERRUPTED_RESULT",
    "Adapter",
    "AdapterError",
    "AuthenticationError",
    "CapabilityError",
    "ContextLengthError",
    "Conversation",
    "ExtraNotInstalledError",
    "HistoryError",
    "HistoryProcessingError",
    "HistoryProcessingValidationError",
    "HistoryProcessorContext",
    "HistoryRepair",
    "HistoryShapeError",
    "KediCheckError",
    "KediConfigError",
    "KediDiagnosticError",
    "KediError",
    "KediExecutionError",
    "KediKeyExecutionError",
    "KediNameError",
    "KediParseError",
    "KediPromiseLeak",
    "KediSyntaxError",
    "KediTypeExecutionError",
    "KediUsageError",
    "KediValueExecutionError",
    "Message",
    "ModelNotFoundError",
    "OutputValidationError",
    "Part",
    "Program",
    "PromptEvent",
    "ProviderError",
    "RateLimitError",
    "SanitizeReport",
    "ScriptExhaustedError",
    "ThinkingBlock",
    "ToolCall",
    "TurnAbandoned",
    "UnsafePart",
    "bind",
    "budget_history",
    "compile",
    "compile_program",
    "configure",
    "context",
    "new_id",
    "normalize_history",
    "parallel",
    "parse",
    "query",
    "reset_config",
    "sanitize_history",
    "tool",
    "trim_history",
    "wire_tool_arguments",
]
