"""A chat model's failures as kedi's errors: by HTTP status where the SDK reports one.

It imports no LangChain: an SDK's error is read by its attributes
(`status_code`, `response`, `code`) and its class names.
"""

from __future__ import annotations

from kedi.adapters._openai_wire import provider_error
from kedi.errors import ProviderError
from kedi.history import PartialResult

KEY_HINT = "check the API key of the chat model's provider"
"""What a refused key's error says to check (the chat model may be any provider's)."""


def chat_model_error(error: Exception, where: str, partial: PartialResult | None) -> ProviderError:
    """The kedi error of a chat-model failure: by HTTP status where the SDK reports one."""
    status = getattr(error, "status_code", None)
    if not isinstance(status, int):
        status = getattr(getattr(error, "response", None), "status_code", None)
    detail = f"{type(error).__name__}: {error}"
    if not isinstance(status, int):
        return ProviderError(
            f"{where} failed: {detail}", retryable=_transient(error), partial=partial
        )
    code = str(getattr(error, "code", "") or "")
    mapped = provider_error(status, code, detail, where, KEY_HINT)
    mapped.partial = partial
    return mapped


_TRANSIENT = frozenset(
    {"APIConnectionError", "APITimeoutError", "TransportError", "TimeoutException"}
)
"""Classes (of the openai and httpx clients, by name: neither is a dependency) of failures worth retrying."""


def _transient(error: Exception) -> bool:
    """Whether `error` is a connection failure or a timeout, which a later attempt may not meet."""
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    return any(cls.__name__ in _TRANSIENT for cls in type(error).__mro__)
