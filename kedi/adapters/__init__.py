"""Model adapters and the registry that builds them by short name.

Adapter modules are imported on first use, so `import kedi` and runs on the
offline model never import a model framework.
"""

from __future__ import annotations

from collections.abc import Callable
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
    "LangChainAdapter",
    "OfflineAdapter",
    "OpenAIAdapter",
    "PydanticAdapter",
    "ScriptAdapter",
    "create_adapter",
    "model_framework",
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


def create_adapter(adapter: Any, model: Any) -> Adapter:
    """Build an adapter for an (adapter, model) pair.

    `adapter` is a short name, an `Adapter` instance or None; `model` a name,
    a model object (a Pydantic AI `Model`, a LangChain `BaseChatModel`) or
    None. An instance built without a model takes `model` (`Adapter.with_model`);
    a model object with no adapter selects its framework's adapter. `offline`
    and `script:PATH` models select their offline adapters whatever the
    adapter name, and `local[:GGUF]` the in-process llama.cpp one unless
    another adapter is named (then `local` is a model name, as
    `kedi serve-local` serves it); with neither name the offline model is used.
    """
    if isinstance(adapter, Adapter):
        return adapter.with_model(model)
    if model is not None and not isinstance(model, str):
        framework = model_framework(model)
        if framework is None:
            raise KediConfigError(
                f"model must be a name, a Pydantic AI Model or a LangChain chat model, not {type(model).__name__}"
            )
        if adapter is not None and adapter != framework:
            raise KediConfigError(f"a {framework} model object cannot run on adapter {adapter!r}")
        framework_adapter: Any = adapter_class(framework)
        return framework_adapter(model)
    if model is not None and model.startswith("script:"):
        return _build("script", model[len("script:") :])
    if adapter in (None, "local") and model is not None and model.split(":")[0] == "local":
        return _build("local", model)
    if model == "offline" or adapter == "offline" or (adapter is None and model is None):
        return _build("offline") if model in (None, "offline") else _build("offline", model)
    return _build(adapter or DEFAULT_ADAPTER, model)


def _build(name: str, *model: str | None) -> Adapter:
    # Concrete adapters take the model name first; the `Adapter` base declares no constructor.
    build: Callable[..., Adapter] = adapter_class(name)
    return build(*model)


_FRAMEWORK_BASES = {
    ("pydantic_ai.models", "Model"): "pydantic",
    ("langchain_core.language_models.chat_models", "BaseChatModel"): "langchain",
}


def model_framework(model: object) -> str | None:
    """The adapter short name for a model object (`pydantic`, `langchain`), else None.

    Read from the class hierarchy's module names, so no framework is imported
    to ask: a model object's framework is already loaded.
    """
    for cls in type(model).__mro__:
        found = _FRAMEWORK_BASES.get((cls.__module__, cls.__qualname__))
        if found is not None:
            return found
    return None


_CLASSES = {
    "OfflineAdapter": "offline",
    "ScriptAdapter": "script",
    "OpenAIAdapter": "openai",
    "PydanticAdapter": "pydantic",
    "LangChainAdapter": "langchain",
}
"""Adapter classes this package exports, imported on first access (PEP 562)."""


def __getattr__(name: str) -> Any:
    shortname = _CLASSES.get(name)
    if shortname is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return adapter_class(shortname)


# The history layer finds adapters by name through this registration, so it
# never imports the layer above it.
register_adapters(create_adapter, adapter_class)
