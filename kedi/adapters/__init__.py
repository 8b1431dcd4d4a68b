"""Model adapters and the registry that builds them by short name.

Adapter modules are imported on first use, so `import kedi` and runs on the
offline model never import a model framework.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from kedi.adapters.base import (
    Adapter,
    AdapterProfile,
    CallRequest,
    CallResult,
    Exchange,
    OutputSpec,
    ToolSpec,
    Usage,
)
from kedi.errors import KediConfigError
from kedi.history.lanes import register_adapters

__all__ = [
    "Adapter",
    "AdapterProfile",
    "CallRequest",
    "CallResult",
    "Exchange",
    "OutputSpec",
    "ToolSpec",
    "Usage",
    "ADAPTERS",
    "create_adapter",
]

ADAPTERS: dict[str, str] = {
    "offline": "kedi.adapters.offline:OfflineAdapter",
    "script": "kedi.adapters.scripted:ScriptAdapter",
    "openai": "kedi.adapters.openai:OpenAIAdapter",
    "pydantic": "kedi.adapters.pydantic_ai:PydanticAdapter",
    "langchain": "kedi.adapters.langchain:LangChainAdapter",
    "local": "kedi.adapters.local:LocalAdapter",
}
"""Short name -> `module:Class`, imported lazily."""

HARNESSES = frozenset({"claude", "codex", "acp"})
DEFAULT_ADAPTER = "pydantic"
"""Used when a model is named without an adapter (the Kedi docs' default)."""


def adapter_class(shortname: str) -> type[Adapter]:
    """Import and return the adapter class registered under `shortname`."""
    target = ADAPTERS.get(shortname)
    if target is None:
        if shortname in HARNESSES:
            raise KediConfigError(f"agent harness {shortname!r} is not supported by kedi yet")
        known = ", ".join(sorted(ADAPTERS))
        raise KediConfigError(f"unknown adapter {shortname!r} (known: {known})")
    module_name, _, class_name = target.partition(":")
    cls: type[Adapter] = getattr(import_module(module_name), class_name)
    return cls


def create_adapter(adapter: str | None, model: str | None) -> Adapter:
    """Build an adapter for an (adapter, model) pair of names.

    `offline` and `script:PATH` models select their offline adapters whatever
    the adapter name, and `local[:GGUF]` the in-process llama.cpp one unless
    another adapter is named (then `local` is a model name, as
    `kedi serve-local` serves it); with neither name the offline model is used.
    """
    if model is not None and model.startswith("script:"):
        return adapter_class("script")(model[len("script:") :])
    if adapter in (None, "local") and model is not None and model.split(":")[0] == "local":
        return adapter_class("local")(model)
    if model == "offline" or adapter == "offline" or (adapter is None and model is None):
        cls: Any = adapter_class("offline")
        return cls() if model in (None, "offline") else cls(model)
    name = adapter or DEFAULT_ADAPTER
    return adapter_class(name)(model)


# The history layer finds adapters by name through this registration, so it
# never imports the layer above it.
register_adapters(create_adapter, adapter_class)
