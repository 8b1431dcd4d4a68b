"""The names `> settings:` accepts, in one place (spec §9.6).

The checker (`kedi.syntax`) rejects a key no adapter knows; each adapter
(`kedi.adapters`) declares the names it takes, and a call with any other
fails before it is sent; lane keys (`kedi.history`)
leave out the transport-only ones. This module imports nothing from kedi, so
every layer may read it.
"""

from __future__ import annotations

PYDANTIC_AI_SETTINGS = frozenset(
    {
        "max_tokens",
        "temperature",
        "top_p",
        "timeout",
        "parallel_tool_calls",
        "tool_choice",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "stop_sequences",
        "extra_headers",
        "thinking",
        "service_tier",
        "extra_body",
    }
)
"""Pydantic AI's `ModelSettings`, which kedi forwards under the same names."""

MAPPING_SETTINGS = frozenset({"extra_body", "extra_headers", "logit_bias"})
"""Settings whose value is a mapping (of request fields, headers, token ids)."""

COMMON_SETTINGS = PYDANTIC_AI_SETTINGS | {"stop"}
"""What every built-in adapter accepts (`stop` is the OpenAI spelling of `stop_sequences`)."""

KEDI_SETTINGS = frozenset(
    {
        "output_retries",
        "tool_retries",
        "request_limit",
        "max_retries",
        "max_reply_bytes",
        # structured-output choices: the openai and local adapters' mode,
        # Pydantic AI's output mode, LangChain's with_structured_output method
        "structured_mode",
        "output_mode",
        "structured_method",
        # Pydantic AI's OpenAI Responses continuation (on by default where supported)
        "openai_previous_response_id",
    }
)
"""kedi's own retry, request and reply limits, and its structured-output choices."""

LLAMA_CPP_SETTINGS = frozenset({"repeat_penalty", "top_k", "min_p"})
"""llama.cpp sampling (the local adapter)."""

DSPY_SETTINGS = frozenset(
    {
        "model_type",
        "cache",
        "callbacks",
        "num_retries",
        "provider",
        "finetuning_model",
        "launch_kwargs",
        "train_kwargs",
        "use_developer_role",
        "reasoning_effort",
    }
)
CODEX_SETTINGS = frozenset(
    {"approval_policy", "config", "cwd", "model_provider", "personality", "sandbox", "summary"}
)
CLAUDE_SETTINGS = frozenset(
    {
        "allowed_tools",
        "disallowed_tools",
        "env",
        "fallback_model",
        "max_budget_usd",
        "max_turns",
        "permission_mode",
        "tools",
    }
)

SETTING_NAMES = (
    COMMON_SETTINGS
    | KEDI_SETTINGS
    | LLAMA_CPP_SETTINGS
    | DSPY_SETTINGS
    | CODEX_SETTINGS
    | CLAUDE_SETTINGS
)
"""Every key `> settings:` accepts: the union over all adapters.

The checker, which cannot know the adapter a call will use, rejects only keys
that no adapter knows; a key the adapter in force does not take (its
`AdapterProfile.settings`) fails the call before it is sent
(`kedi.runtime.calls`; docs/adapters.md, "Settings an adapter does not take").
"""

ANY_KNOWN_SETTING = SETTING_NAMES | {"effort"}
"""What the offline and script stand-ins take and ignore: every name, and `> effort:` (`effort`)."""

TRANSPORT_SETTINGS = frozenset(
    {"timeout", "max_retries", "num_retries", "extra_headers", "request_limit", "max_reply_bytes"}
)
"""Settings that change how a request travels, not what the model sees or says.

Lane keys leave them out (docs/history.md, "What splits a lane"): rotating a
bearer token in `extra_headers` or raising `timeout` continues the same history.
"""
