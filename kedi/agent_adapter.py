"""The adapter API under the name the Kedi documentation uses.

    from kedi.agent_adapter import HistoryProcessorContext, LangChainAdapter, PydanticAdapter

`HistoryProcessorContext` is the history-processor context; the adapter
classes are those of `kedi.adapters`, imported on first access (PEP 562), so
importing this module loads no model framework until an adapter is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

_ADAPTERS = frozenset({"LangChainAdapter", "OpenAIAdapter", "PydanticAdapter"})


def __getattr__(name: str) -> Any:
    if name not in _ADAPTERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import kedi.adapters

    return getattr(kedi.adapters, name)
