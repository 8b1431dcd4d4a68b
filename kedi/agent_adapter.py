"""The adapter API under the name the Kedi documentation uses.

    from kedi.agent_adapter import HistoryProcessorContext, LangChainAdapter, PydanticAdapter

`HistoryProcessorContext` is the history-processor context; the adapter
classes are those of `kedi.adapters`, imported on first access (PEP 562), so
importing this module loads no model framework until an adapter is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kedi._lazy import lazy_exports as _lazy_exports
from kedi.history.processors import HistoryProcessorContext, MessageT

if TYPE_CHECKING:
    from kedi.adapters.langchain import LangChainAdapter
    from kedi.adapters.openai import OpenAIAdapter
    from kedi.adapters.pydantic_ai import PydanticAdapter

__all__ = [
    "HistoryProcessorContext",
    "LangChainAdapter",
    "MessageT",
    "OpenAIAdapter",
    "PydanticAdapter",
]

_LAZY = {
    "LangChainAdapter": ("kedi.adapters.langchain", "LangChainAdapter"),
    "OpenAIAdapter": ("kedi.adapters.openai", "OpenAIAdapter"),
    "PydanticAdapter": ("kedi.adapters.pydantic_ai", "PydanticAdapter"),
}
"""Adapter class -> (module, attribute), imported on first access; the `TYPE_CHECKING` imports say the same."""

__getattr__, __dir__ = _lazy_exports(globals(), _LAZY)
