"""kedi: an interpreter for the Kedi LLM orchestration language.

    import kedi
    program = kedi.compile(source, path="flow.kedi")
    result = program.run_sync(model="offline")

Importing kedi never imports a model framework (Pydantic AI, LangChain):
adapters load them on first use. Importing kedi is cheap too: only the errors
load eagerly, and every other public name imports its module on first use
(PEP 562), so `kedi parse` never loads the runtime and `kedi --help` loads
neither the parser nor the runtime.
"""

from __future__ import annotations

# Private aliases, and `annotations` (the __future__ feature) removed: no helper
# module or feature object is an attribute of the package (test_public_api).
import typing as _typing

from kedi._lazy import lazy_exports as _lazy_exports
from kedi.errors import (
    AdapterError,
    AuthenticationError,
    CapabilityError,
    ContextLengthError,
    ExtraNotInstalledError,
    HistoryError,
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
    StopRun,
    TurnAbandoned,
)

if _typing.TYPE_CHECKING:
    from kedi.adapters.base import Adapter
    from kedi.history import (
        INTERRUPTED_RESULT,
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
    from kedi.runtime.program import Program, RunResult, compile_program
    from kedi.runtime.program import compile_program as compile
    from kedi.runtime.tools import tool
    from kedi.syntax.parser import parse

_LAZY: dict[str, tuple[str, str]] = {
    "Adapter": ("kedi.adapters.base", "Adapter"),
    **{
        name: ("kedi.history", name)
        for name in (
            "INTERRUPTED_RESULT",
            "HistoryRepair",
            "Message",
            "Part",
            "SanitizeReport",
            "ThinkingBlock",
            "ToolCall",
            "UnsafePart",
            "budget_history",
            "new_id",
            "normalize_history",
            "sanitize_history",
            "trim_history",
            "wire_tool_arguments",
        )
    },
    "Conversation": ("kedi.history.lanes", "Conversation"),
    "HistoryProcessorContext": ("kedi.history.processors", "HistoryProcessorContext"),
    "PromptEvent": ("kedi.runtime.calls", "PromptEvent"),
    **{
        name: ("kedi.runtime.config", name)
        for name in ("configure", "context", "parallel", "reset_config")
    },
    "bind": ("kedi.runtime.embedding", "bind"),
    "query": ("kedi.runtime.embedding", "query"),
    "Program": ("kedi.runtime.program", "Program"),
    "RunResult": ("kedi.runtime.program", "RunResult"),
    "compile_program": ("kedi.runtime.program", "compile_program"),
    # `kedi.compile(source, *, path=None) -> Program`: parse and check a program.
    "compile": ("kedi.runtime.program", "compile_program"),
    "tool": ("kedi.runtime.tools", "tool"),
    "parse": ("kedi.syntax.parser", "parse"),
}
"""Public name -> (module, attribute) for every name imported on first use.

The `TYPE_CHECKING` imports above say the same for type checkers and IDEs;
`tests/test_public_api.py` checks that the two agree.
"""


__getattr__, __dir__ = _lazy_exports(globals(), _LAZY)

del annotations  # the name the __future__ import binds; the feature stays on

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
    "RunResult",
    "SanitizeReport",
    "ScriptExhaustedError",
    "StopRun",
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
