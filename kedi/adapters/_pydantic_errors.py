"""Pydantic AI's errors as kedi's, each with the partial evidence of the run.

Imported only by the Pydantic AI adapter's modules, after its import guard.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pydantic import ValidationError
from pydantic_ai import exceptions as pai
from pydantic_ai.messages import ModelMessage

from kedi.adapters._model_errors import model_error
from kedi.adapters._openai_wire import (
    provider_error,
    refused_output_format,
    timed_out,
    worded_error,
)
from kedi.adapters._portable import detail_problems, validation_problems
from kedi.adapters._pydantic_call import CallState
from kedi.adapters.base import CallRequest
from kedi.errors import (
    AdapterError,
    AuthenticationError,
    ContextLengthError,
    KediError,
    ModelNotFoundError,
    OutputValidationError,
    ProviderError,
    RateLimitError,
    StopRun,
)
from kedi.history import PartialResult

KEY_HINT = "check the API key of the model's provider"
"""What a refused key's error says to check (the model may be any provider's)."""


def at_origin(request: CallRequest) -> str:
    """` at <file:line>` of the call's source, for error messages; empty without one."""
    return f" at {request.origin}" if request.origin else ""


_INVALID_RESPONSE = "Invalid response from"
"""How Pydantic AI's models begin the error of a reply that does not parse (no choices, a null message)."""


@contextmanager
def mapped_errors(call: CallState, captured: Sequence[ModelMessage]) -> Iterator[None]:
    """Map Pydantic AI's errors to kedi's, with the partial evidence of the run.

    Cancellation is not an error here: it propagates untouched and the call
    commits nothing.
    """
    request = call.request
    # "model 'x' (POST <url>) at flow.kedi:4": one "at", for the call's place in the program.
    endpoint = f" ({call.adapter.endpoint})" if call.adapter.endpoint else ""
    where = f"model {call.adapter.model_name!r}{endpoint}{at_origin(request)}"
    try:
        yield
    except StopRun as stop:
        raise StopRun(
            stop.reason,
            message=f"a tool stopped the run of {where}: {stop.reason or 'no reason given'}",
            partial=call.stopped(captured),
        ) from stop
    except pai.UnexpectedModelBehavior as error:
        if str(error).startswith(_INVALID_RESPONSE):  # the server's reply, not the model's output
            raise ProviderError(
                f"{where} failed: the reply was cut off or malformed: {error}",
                retryable=True,
                partial=call.partial("model", captured),
            ) from error
        problems = _output_problems(error)
        raise OutputValidationError(
            f"{where} gave no valid output ({error}): {problems}"
            if problems
            else f"{where} gave no valid output: {error}",
            partial=call.partial("decode", captured),
        ) from error
    except pai.UsageLimitExceeded as error:
        raise AdapterError(
            f"{where} hit a usage limit: {error}; raise the request_limit setting if the call needs more requests",
            partial=call.partial("usage", captured),
        ) from error
    except pai.ModelTimeoutError as error:
        # Worded as the openai and langchain adapters word it; the bound is per
        # HTTP attempt here (the provider's client retries a timed-out attempt).
        timeout = request.settings.get("timeout")
        seconds = timeout if isinstance(timeout, int | float) else None
        partial = call.partial("model", captured)
        raise timed_out(where, seconds, per_attempt=True, partial=partial) from error
    except pai.ModelAPIError as error:
        mapped = _provider_error(error, where, call.partial("model", captured))
        if isinstance(mapped, ModelNotFoundError) and _misses_v1(call.adapter.endpoint):
            mapped = ModelNotFoundError(
                f"{mapped.message}; is `/v1` missing from the base URL?",
                status=mapped.status,
                partial=mapped.partial,
            )
        if request.output is not None:
            mapped = refused_output_format(mapped, "output_mode", "tool, prompted")
        raise mapped from error
    except RecursionError as error:  # a reply nested too deeply for the JSON parser
        raise ProviderError(
            f"{where} failed: the reply is not JSON kedi can read ({error})",
            partial=call.partial("model", captured),
        ) from error
    except pai.UserError as error:
        raise AdapterError(f"Pydantic AI rejected the call{at_origin(request)}: {error}") from error
    except pai.AgentRunError as error:
        raise AdapterError(
            f"{where} failed: {error}", partial=call.partial("model", captured)
        ) from error
    except KediError:
        raise  # kedi's own (a history processor's, a usage error) already say what failed
    except Exception as error:
        # The model's own error (a custom or FunctionModel raising, a transport error
        # Pydantic AI does not wrap): mapped as the LangChain adapter maps its chat
        # model's, with the call's partial and its location.
        raise model_error(error, where, call.partial("model", captured), KEY_HINT) from error


def _output_problems(error: pai.UnexpectedModelBehavior) -> str:
    """Why the last reply did not validate, from the error Pydantic AI chained (empty if none).

    Pydantic AI's own text only counts the retries ("Exceeded maximum output
    retries (1)"); the validation errors are its `__cause__`.
    """
    cause = error.__cause__
    if isinstance(cause, ValidationError):
        return "; ".join(validation_problems(cause))
    if isinstance(cause, pai.ToolRetryError):
        content = cause.tool_retry.content
        return "; ".join(detail_problems(content)) if isinstance(content, list) else str(content)
    return ""


def _misses_v1(endpoint: str | None) -> bool:
    return endpoint is not None and not endpoint.endswith("/v1/chat/completions")


def _provider_error(
    error: pai.ModelAPIError, where: str, partial: PartialResult | None
) -> ProviderError:
    """The kedi error of a provider failure: by Pydantic AI's category, else by HTTP status."""
    detail = str(getattr(error, "body", None) or error.message)
    status = error.status_code if isinstance(error, pai.ModelHTTPError) else None
    # Pydantic AI's models raise categorized errors; a bare `ModelHTTPError`
    # (a custom model, a test) is mapped by its status the same way.
    categories: tuple[tuple[type[pai.ModelAPIError], frozenset[int], type[ProviderError]], ...] = (
        (pai.ModelAuthenticationError, frozenset({401, 403}), AuthenticationError),
        (pai.ModelNotFoundError, frozenset({404}), ModelNotFoundError),
        (pai.ModelContextWindowExceededError, frozenset(), ContextLengthError),
        (pai.ModelRateLimitError, frozenset({429}), RateLimitError),
    )
    for category, statuses, kedi_error in categories:
        if isinstance(error, category) or status in statuses:
            return worded_error(
                kedi_error, where, detail, status=status, key_hint=KEY_HINT, partial=partial
            )
    if status is not None:
        code = error.provider_error_code or ""
        mapped = provider_error(status, code, detail, where, KEY_HINT)
        mapped.partial = partial
        return mapped
    retryable = isinstance(
        error, pai.ModelServerError | pai.ModelUnavailableError | pai.ModelConnectionError
    )
    return ProviderError(f"{where} failed: {error.message}", retryable=retryable, partial=partial)
