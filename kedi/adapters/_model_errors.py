"""A model's own failures as kedi's errors: by HTTP status where the SDK reports one.

For the errors a framework does not map itself (a LangChain chat model's, a
Pydantic AI model's plain exception). It imports no framework: an SDK's
error is read by its attributes (`status_code`, `response`, `code`) and its
class names.
"""

from __future__ import annotations

from kedi.adapters._openai_wire import provider_error
from kedi.errors import ProviderError
from kedi.history import PartialResult


def model_error(
    error: Exception, where: str, partial: PartialResult | None, key_hint: str
) -> ProviderError:
    """The kedi error of a model's failure: by HTTP status where the SDK reports one.

    Without a status, a connection failure or a timeout is retryable.
    """
    status = getattr(error, "status_code", None)
    if not isinstance(status, int):
        status = getattr(getattr(error, "response", None), "status_code", None)
    detail = f"{type(error).__name__}: {error}"
    if not isinstance(status, int):
        return ProviderError(
            f"{where} failed: {detail}", retryable=_transient(error), partial=partial
        )
    code = str(getattr(error, "code", "") or "")
    mapped = provider_error(status, code, detail, where, key_hint)
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
