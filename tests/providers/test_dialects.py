"""Each vendor's dialect, against loopback servers that answer exactly as the vendor's documentation
and public bug reports show: Kimi's stream usage, Gemini's thought tokens, GLM's
finish reasons, Zhipu's and MiniMax's balance errors, LiteLLM's temperature wording and a 422, the
reasoning controls each model family takes, DeepSeek's ignored temperature, documented output limits.

Every call goes through the real ``Endpoint`` (HTTP, streaming, retries, quota latch, cache) to a real
server on 127.0.0.1; the sources of the bodies are named beside them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import compose_config, endpoint_spec
from servers.loopback import Call, LoopbackServer, Reply, chat, chat_stream, sse

from wildtrace.config import ConfigError, effective_max_tokens, to_settings
from wildtrace.config.checks import spec_warnings
from wildtrace.core import records as R
from wildtrace.core.records import Usage
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.runtime.net.retry import RetryPolicy
from wildtrace.runtime.run.plan import model_spec

ROOT = Path(__file__).resolve().parents[2]
FAST = RetryPolicy(max_retries=2, backoff_base_s=0.001, backoff_max_s=0.005)
PROMPT = "Document: 守夜人在凌晨三点签署了报告。\nQuestion: who signed the report?"
SAMPLING = Sampling(temperature=0.1, max_tokens=32768)
KEY = "sk-dialect-test-0123456789"


def utf8(body: Any) -> bytes:
    """A JSON body as the vendor sends it: UTF-8, Chinese not escaped."""
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def run_calls(server: LoopbackServer, provider: str = "openai", calls: int = 1, sampling: Sampling = SAMPLING,
              cache: Cache | None = None, **spec: Any) -> tuple[list, Endpoint]:
    """``calls`` calls of one request through a real Endpoint to the loopback server, one after another."""
    base = server.url if provider == "gemini" else server.url + "/v1"
    p = make_provider(endpoint_spec(provider, base_url=base, **{"route": "route-x", **spec}))
    request = p.build_request(PROMPT, sampling)

    async def go() -> tuple[list, Endpoint]:
        endpoint = Endpoint(p, KEY, FAST, cache=cache)
        try:
            return [await endpoint.call(request) for _ in range(calls)], endpoint
        finally:
            await endpoint.aclose()

    return asyncio.run(go())


def scripted(*replies: Reply):
    """A responder answering the listed replies in order (the last one repeats)."""
    def respond(call: Call) -> Reply:
        index = min(len(responder.seen), len(replies) - 1)
        responder.seen.append(call)
        return replies[index]
    responder = respond
    responder.seen = []  # type: ignore[attr-defined]
    return responder


# --------------------------------------------------------------------------------------
# token counts: Kimi's stream usage, Gemini's thought tokens
# --------------------------------------------------------------------------------------

#: Moonshot's stream as quoted in github.com/northes/go-moonshot/issues/17 and
#: github.com/higress-group/higress/pull/1568: the final chunk carries usage in choices[0].
KIMI_STREAM = sse(
    {"id": "cmpl-1305", "object": "chat.completion.chunk", "created": 1698999575, "model": "kimi-k2.6",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"id": "cmpl-1305", "object": "chat.completion.chunk", "created": 1698999575, "model": "kimi-k2.6",
     "choices": [{"index": 0, "delta": {"content": "守夜人"}, "finish_reason": None}]},
    {"id": "cmpl-1305", "object": "chat.completion.chunk", "created": 1698999575, "model": "kimi-k2.6",
     "choices": [{"index": 0, "delta": {"content": "签署了报告。"}, "finish_reason": None}]},
    {"id": "cmpl-1305", "object": "chat.completion.chunk", "created": 1698999575, "model": "kimi-k2.6",
     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop",
                  "usage": {"prompt_tokens": 19, "completion_tokens": 13, "total_tokens": 32}}]},
    done=True,
)
#: The same answer with both places filled (a gateway normalising Moonshot's chunk): the top-level wins.
BOTH_PLACES = sse(
    {"choices": [{"index": 0, "delta": {"content": "守夜人签署了报告。"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop",
                  "usage": {"prompt_tokens": 1, "completion_tokens": 1}}]},
    {"choices": [], "usage": {"prompt_tokens": 19, "completion_tokens": 13, "total_tokens": 32}},
    done=True,
)
TOP_FIRST = sse(
    {"choices": [{"index": 0, "delta": {"content": "守夜人签署了报告。"}, "finish_reason": None}],
     "usage": {"prompt_tokens": 19, "completion_tokens": 13}},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop",
                  "usage": {"prompt_tokens": 1, "completion_tokens": 1}}]},
    done=True,
)
#: Moonshot's plain body with usage only in choices[0] (a proxy that assembled the stream).
KIMI_PLAIN_IN_CHOICE = Reply(200, {"id": "x", "object": "chat.completion", "model": "kimi-k2.6", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "守夜人签署了报告。"}, "finish_reason": "stop",
     "usage": {"prompt_tokens": 19, "completion_tokens": 13, "total_tokens": 32}}]})

#: Gemini 2.5 Pro: usageMetadata with thoughtsTokenCount apart from candidatesTokenCount; totalTokenCount
#: is their sum with the prompt (google-genai UsageMetadata reference).
GEMINI_META = {"promptTokenCount": 900, "candidatesTokenCount": 40, "thoughtsTokenCount": 300, "totalTokenCount": 1240}
GEMINI_PLAIN = Reply(200, {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "守夜人签署了报告。"}]}, "finishReason": "STOP",
                    "index": 0}],
    "usageMetadata": GEMINI_META, "modelVersion": "gemini-2.5-pro", "responseId": "r-1"})
GEMINI_STREAM = sse(
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "守夜人"}]}, "index": 0}],
     "usageMetadata": {"promptTokenCount": 900, "totalTokenCount": 1200, "thoughtsTokenCount": 300},
     "modelVersion": "gemini-2.5-pro", "responseId": "r-1"},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "签署了报告。"}]}, "finishReason": "STOP",
                     "index": 0}],
     "usageMetadata": GEMINI_META, "modelVersion": "gemini-2.5-pro", "responseId": "r-1"},
)
GEMINI_NO_THINKING = Reply(200, {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "守夜人签署了报告。"}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 40, "totalTokenCount": 940}})


@pytest.mark.parametrize(
    ("provider", "stream", "reply", "usage"),
    [
        pytest.param("openai", True, KIMI_STREAM, Usage(19, 13, None), id="kimi-stream-usage-in-choices"),
        pytest.param("openai", False, KIMI_PLAIN_IN_CHOICE, Usage(19, 13, None), id="kimi-plain-usage-in-choices"),
        pytest.param("openai", True, chat_stream("守夜人签署了报告。"), Usage(11, 7, None), id="openai-top-level"),
        pytest.param("openai", True, BOTH_PLACES, Usage(19, 13, None), id="top-level-after-choice-wins"),
        pytest.param("openai", True, TOP_FIRST, Usage(19, 13, None), id="top-level-before-choice-wins"),
        pytest.param("gemini", False, GEMINI_PLAIN, Usage(900, 340, 300), id="gemini-plain-thoughts"),
        pytest.param("gemini", True, GEMINI_STREAM, Usage(900, 340, 300), id="gemini-stream-thoughts"),
        pytest.param("gemini", False, GEMINI_NO_THINKING, Usage(900, 40, None), id="gemini-no-thinking"),
    ],
)
def test_token_counts_as_each_vendor_reports_them(provider, stream, reply, usage):
    with LoopbackServer(lambda call: reply) as server:
        (result,), _ = run_calls(server, provider, stream=stream,
                                 route="gemini-2.5-pro" if provider == "gemini" else "kimi-k2.6")
        path = server.calls[0].path
    assert result.ok and result.text == "守夜人签署了报告。", result
    assert result.usage == usage
    if provider == "gemini":
        assert path.endswith(":streamGenerateContent?alt=sse" if stream else ":generateContent")


# --------------------------------------------------------------------------------------
# GLM finish reasons: sensitive is a refusal, network_error is transient
# --------------------------------------------------------------------------------------


def glm_plain(finish: str, content: str = "") -> Reply:
    """GLM's chat completion (docs.bigmodel.cn 对话补全): finish_reason stop | length | sensitive | network_error."""
    return Reply(200, utf8({"id": "2026120121", "created": 1764590000, "model": "glm-5.2", "request_id": "2026120121",
                            "choices": [{"index": 0, "finish_reason": finish,
                                         "message": {"role": "assistant", "content": content}}],
                            "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}}))


def glm_stream(finish: str, content: str = "") -> Reply:
    """GLM's stream: deltas, then the last chunk with the finish_reason and usage, then [DONE]."""
    head = {"id": "2026120121", "created": 1764590000, "model": "glm-5.2"}
    events = ([{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}}]}]
              if content else [])
    events.append({**head,
                   "choices": [{"index": 0, "finish_reason": finish, "delta": {"role": "assistant", "content": ""}}],
                   "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}})
    return sse(*events, done=True)


GOOD = "守夜人签署了报告。"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(
    ("replies", "ok", "reason", "error", "requests", "cached_second"),
    [
        # The moderation filter blocked the output: a refusal (recorded, kept as that refusal, never an answer).
        pytest.param(["sensitive"], False, R.FailReason.REFUSAL, "finish_reason=sensitive", 1, True,
                     id="sensitive-refusal"),
        # Half an answer, then blocked: still a refusal, the partial text is not an answer.
        pytest.param(["sensitive:守夜人"], False, R.FailReason.REFUSAL, "finish_reason=sensitive", 1, True,
                     id="sensitive-partial"),
        # An inference fault, then a good answer: retried, the answer kept.
        pytest.param(["network_error", "stop:" + GOOD], True, None, None, 2, True, id="network-error-retried"),
        # Faults all the way: retries exhausted, nothing stored (a rerun asks again).
        pytest.param(["network_error"], False, R.FailReason.RETRIES_EXHAUSTED, "finish_reason=network_error", 3, False,
                     id="network-error-exhausted"),
    ],
)
def test_glm_finish_reasons(tmp_path, stream, replies, ok, reason, error, requests, cached_second):
    make = glm_stream if stream else glm_plain
    script = scripted(*(make(*r.split(":", 1)) for r in replies))
    with LoopbackServer(script) as server:
        (first, second), _ = run_calls(server, calls=2, stream=stream, route="glm-5.2", cache=Cache(tmp_path))
        sent = len(server.calls)
    assert first.ok is ok and first.reason == reason, first
    if error:
        assert error in (first.error or "")
    if ok:
        assert first.text == GOOD and first.attempts == 2
    assert sent == requests + (0 if cached_second else requests)  # a stored outcome is not asked again
    assert second.cached is cached_second and second.ok is ok and second.reason == reason


# --------------------------------------------------------------------------------------
# balance errors: Zhipu 1113, MiniMax 1008 fail fast (the quota latch), by code not wording
# --------------------------------------------------------------------------------------

QUOTA_REPLIES = [
    # Zhipu China endpoint, current wording (HTTP 429, code 1113).
    pytest.param("openai", Reply(429, utf8({"error": {"code": "1113", "message": "余额不足或无可用资源包,请充值。"}})),
                 id="zhipu-1113-cn"),
    # Zhipu's earlier wording for 1113, HTTP 429 (github.com/langgenius/dify/issues/5850).
    pytest.param("openai", Reply(429, utf8({"error": {"code": "1113", "message": "您的账户已欠费，请充值后重试。"}})),
                 id="zhipu-1113-arrears"),
    # Z.ai's Anthropic-compatible route: a rate_limit_error type, but code 1113 (zai-org/feedback#789).
    pytest.param("anthropic", Reply(429, {"type": "error", "error": {
        "type": "rate_limit_error", "code": "1113",
        "message": "[1113][Insufficient balance or no resource package. Please recharge.]"
                   "[20260922232915e8288c66f9ff4aaa]"},
        "request_id": "20260922232915e8288c66f9ff4aaa"}), id="zai-1113-anthropic-route"),
    # MiniMax answering an empty balance with HTTP 500 (github.com/MiniMax-AI/MiniMax-M2/issues/62).
    pytest.param("anthropic", Reply(500, {"type": "error",
                                          "error": {"type": "api_error", "message": "insufficient balance (1008)"},
                                          "request_id": "05997465cd2ee4bd50b24b216c911b75"}),
                 id="minimax-1008-500-anthropic"),
    pytest.param("openai", Reply(500, {"type": "error",
                                       "error": {"type": "api_error", "message": "insufficient balance (1008)"},
                                       "request_id": "05997465cd2ee4bd50b24b216c911b75"}),
                 id="minimax-1008-500-openai"),
    # MiniMax through ModelScope: HTTP 429, insufficient_balance_error (github.com/modelscope/modelscope/issues/1691).
    pytest.param("openai", Reply(429, {"error": {"http_code": "429", "message": "insufficient balance (1008)",
                                                 "type": "insufficient_balance_error"}, "request_id": "x"}),
                 id="minimax-1008-429"),
    # MiniMax's own envelope: HTTP 200, the error code in base_resp.
    pytest.param("openai", Reply(200, {"id": "0612", "choices": None, "created": 1764590000, "model": "MiniMax-M2.7",
                                       "base_resp": {"status_code": 1008, "status_msg": "insufficient balance"}}),
                 id="minimax-1008-base-resp"),
]


@pytest.mark.parametrize(("provider", "reply"), QUOTA_REPLIES)
def test_balance_errors_fail_fast_and_latch(provider, reply):
    with LoopbackServer(lambda call: reply) as server:
        (first, second), endpoint = run_calls(server, provider, calls=2, route="glm-5.2")
        sent = len(server.calls)
    assert first.reason == R.FailReason.QUOTA_EXHAUSTED and first.attempts == 1, first
    assert sent == 1  # no retry of the first, and the second is never sent
    assert second.reason == R.FailReason.QUOTA_EXHAUSTED
    assert second.error.startswith("not sent: an earlier call was refused for quota")
    assert endpoint.retries == 0


@pytest.mark.parametrize(
    ("reply", "attempts"),
    [
        # A plain 500 and a rate limit without a balance code stay transient (retried, then the answer).
        pytest.param(Reply(500, {"type": "error", "error": {"type": "api_error", "message": "internal error"}}), 2,
                     id="500"),
        pytest.param(Reply(429, {"error": {"message": "Rate limit reached for requests", "type": "rate_limit_error"}}),
                     2,
                     id="429-rate-limit"),
        # MiniMax's base_resp 1002 is its rate limit ("please retry later"): retried.
        pytest.param(Reply(200, {"choices": None, "base_resp": {"status_code": 1002, "status_msg": "rate limit"}}), 2,
                     id="minimax-1002-base-resp"),
    ],
)
def test_other_vendor_errors_stay_transient(reply, attempts):
    with LoopbackServer(scripted(reply, chat(GOOD))) as server:
        (result,), endpoint = run_calls(server)
    assert result.ok and result.text == GOOD and result.attempts == attempts, result
    assert endpoint.quota_error is None


# --------------------------------------------------------------------------------------
# the temperature rule: LiteLLM's wording and a 422
# --------------------------------------------------------------------------------------

#: LiteLLM's UnsupportedParamsError texts (litellm/llms/openai/chat/gpt_5_transformation.py,
#: o_series_transformation.py), in the proxy's error envelope.
LITELLM_GPT5 = ("litellm.UnsupportedParamsError: gpt-5 models (including gpt-5-codex) don't support temperature=0.1. "
                "Only temperature=1 is supported. For gpt-5.1, temperature is supported when reasoning_effort='none' "
                "(or not specified, as it defaults to 'none'). "
                "To drop unsupported params set `litellm.drop_params = True`")
LITELLM_O = ("litellm.UnsupportedParamsError: O-series models don't support temperature=0.1. Only temperature=1 is "
             "supported. To drop unsupported openai params from the call, set `litellm.drop_params = True`")


def litellm(status: int, message: str) -> Reply:
    return Reply(status, {"error": {"message": message, "type": "None", "param": "None", "code": str(status)}})


@pytest.mark.parametrize(
    ("reply", "dropped"),
    [
        pytest.param(litellm(400, LITELLM_GPT5), True, id="litellm-gpt5-400"),
        pytest.param(litellm(400, LITELLM_O), True, id="litellm-o-series-400"),
        pytest.param(litellm(422, LITELLM_GPT5), True, id="litellm-wording-422"),
        pytest.param(Reply(422, {"error": {"message": "Unsupported value: 'temperature' does not support 0.1 with this "
                                                      "model. Only the default (1) value is supported.",
                                           "type": "invalid_request_error", "param": "temperature",
                                           "code": "unsupported_value"}}), True, id="openai-shape-422"),
        # Not a rejection of temperature: the config is wrong (or something else is), nothing is dropped.
        pytest.param(litellm(400, "temperature must be between 0 and 2"), False, id="out-of-range-400"),
        pytest.param(litellm(422, "Invalid Parameters: max_tokens"), False, id="other-422"),
    ],
)
def test_temperature_rule_learns_from_litellm_and_422(reply, dropped):
    with LoopbackServer(scripted(reply, chat(GOOD))) as server:
        (result,), endpoint = run_calls(server)
        bodies = [c.body for c in server.calls]
    assert bodies[0]["temperature"] == 0.1
    if dropped:
        assert result.ok and result.temperature_sent is False and endpoint.temperature_dropped
        assert len(bodies) == 2 and "temperature" not in bodies[1]
        assert {k: v for k, v in bodies[0].items() if k != "temperature"} == bodies[1]
    else:
        assert not result.ok and result.reason == R.FailReason.HTTP_ERROR and len(bodies) == 1
        assert not endpoint.temperature_dropped


# --------------------------------------------------------------------------------------
# reasoning controls per model family: a config error before any request
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key", "allowed"),
    [
        (["model=gemini-2.5-pro", "decoding.reasoning_effort=none"], "decoding.reasoning_effort",
         "minimal, low, medium, high, xhigh"),
        (["model=gemini-3.1", "decoding.reasoning_effort=minimal"], "decoding.reasoning_effort", "low, medium, high"),
        (["model=gemini-3.1", "decoding.reasoning_effort=none"], "decoding.reasoning_effort", "low, medium, high"),
        (["model=gemini-3.1", "decoding.reasoning_effort=xhigh"], "decoding.reasoning_effort", "low, medium, high"),
        (["model=gpt-5.1", "decoding.reasoning_effort=minimal"], "decoding.reasoning_effort",
         "none, low, medium, high"),
        (["model=gpt-5.1", "decoding.reasoning_effort=xhigh"], "decoding.reasoning_effort",
         "none, low, medium, high"),
        (["model=gpt-5.5", "decoding.reasoning_effort=minimal"], "decoding.reasoning_effort",
         "none, low, medium, high, xhigh"),
        (["model=claude-opus-4.8", "model.reasoning_format=anthropic-budget"], "model.reasoning_format",
         "anthropic-adaptive, none"),
        # Through the gateway the model is the same: its limits still hold.
        (["model=gemini-2.5-pro", "access=gateway", "gateway.base_url=http://127.0.0.1:9/v1",
          "decoding.reasoning_effort=none"], "decoding.reasoning_effort", "minimal, low, medium, high, xhigh"),
    ],
)
def test_impossible_reasoning_settings_are_config_errors(overrides, key, allowed):
    with pytest.raises(ConfigError) as info:
        to_settings(compose_config(overrides))
    message = str(info.value)
    assert message.startswith(key + ":") and f"choose from {allowed} (" in message, message


@pytest.mark.parametrize(
    ("overrides", "field", "value"),
    [
        (["model=gemini-2.5-pro", "decoding.reasoning_effort=high"], "thinkingConfig",
         {"thinkingBudget": 16384, "includeThoughts": True}),
        (["model=gemini-3.1", "decoding.reasoning_effort=medium"], "thinkingConfig",
         {"thinkingLevel": "medium", "includeThoughts": True}),
        (["model=gpt-5.1", "decoding.reasoning_effort=none"], "reasoning_effort", "none"),
        (["model=gpt-5.5", "decoding.reasoning_effort=xhigh"], "reasoning_effort", "xhigh"),
        # Opus 4.7+ has an xhigh effort of its own; 4.6 tops out at max.
        (["model=claude-opus-4.8", "decoding.reasoning_effort=xhigh"], "output_config", {"effort": "xhigh"}),
        (["model=claude-opus-4.6", "decoding.reasoning_effort=xhigh"], "output_config", {"effort": "max"}),
        (["model=qwen3.6-plus", "decoding.reasoning_effort=high"], "thinking_budget", 16384),
        (["model=deepseek-v4", "decoding.reasoning_effort=none"], "thinking", {"type": "disabled"}),
    ],
)
def test_possible_reasoning_settings_reach_the_wire(overrides, field, value):
    cfg = to_settings(compose_config(overrides))
    p = make_provider(model_spec(cfg))
    body = p.build_request(PROMPT, Sampling(None, effective_max_tokens(cfg.model, cfg.decoding),
                                            cfg.decoding.reasoning_effort)).body
    where = body.get("generationConfig", body)
    assert where[field] == value


@pytest.mark.slow
def test_app_refuses_an_impossible_reasoning_setting_before_any_request(tmp_path):
    """`python -m wildtrace model=gemini-3.1 decoding.reasoning_effort=minimal`: exit 2, key and values named."""
    with LoopbackServer(lambda call: Reply(200, {})) as server:
        cmd = [sys.executable, "-m", "wildtrace", "model=gemini-3.1", "decoding.reasoning_effort=minimal",
               f"model.base_url={server.url}", "model.api_key_env=WT_DIALECT_KEY", "progress=false",
               "mlflow.enabled=false", f"root={tmp_path / 'outputs'}"]
        env = {**os.environ, "WT_DIALECT_KEY": "k", "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert server.calls == []
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "decoding.reasoning_effort: reasoning_effort='minimal' is not possible on Gemini 3.1 Pro" in proc.stderr
    assert "choose from low, medium, high" in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------------------
# DeepSeek's thinking mode ignores temperature: recorded as "ignored"
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "level", "recorded"),
    [
        ("deepseek", None, "ignored"),  # thinking is on by default (api-docs.deepseek.com/guides/thinking_mode)
        ("deepseek", "high", "ignored"),
        ("deepseek", "none", True),  # thinking off: temperature applies
        (None, None, True),  # any other OpenAI-compatible endpoint
    ],
)
def test_deepseek_thinking_mode_records_temperature_ignored(fmt, level, recorded):
    reply = Reply(200, {"id": "x", "object": "chat.completion", "model": "deepseek-v4-pro", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": GOOD, "reasoning_content": "先读文档。"},
         "finish_reason": "stop"}], "usage": {"prompt_tokens": 30, "completion_tokens": 12}})
    with LoopbackServer(lambda call: reply) as server:
        (result,), _ = run_calls(server, route="deepseek-v4-pro", reasoning_format=fmt,
                                 sampling=Sampling(0.1, 32768, level))
        body = server.calls[0].body
    assert body["temperature"] == 0.1  # sent as the spec says; the record says what the provider did with it
    assert result.ok and result.temperature_sent == recorded and result.reasoning == "先读文档。"


@pytest.mark.parametrize(("model", "fmt"), [("deepseek-v4", "deepseek"), ("deepseek-v3.2", "deepseek"),
                                           ("qwen3.5-plus", "qwen"), ("qwen3.6-plus", "qwen"), ("qwen3.7-max", "qwen"),
                                           ("qwen3.7-plus", "qwen"), ("glm-5.2", "thinking"),
                                           ("minimax-m2.7", "minimax")])
def test_vendors_with_their_own_controls_name_them(model, fmt):
    assert to_settings(compose_config([f"model={model}"])).model.reasoning_format == fmt


# --------------------------------------------------------------------------------------
# documented output limits: a warning with the limit and its source; the spec's budget still sent
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        (["model=minimax-m2.7"], True),  # 32768 > MiniMax's 2048 on the OpenAI-compatible API
        (["model=minimax-m2.7", "decoding.max_tokens=2048"], False),
        (["model=minimax-m2.7", "stage=judge", "responses=x.json"], False),  # no answers generated
        (["model=gemini-2.5-pro"], False),  # 32768 <= 65535
        (["model=gpt-4.1"], False),  # 8192 <= 32768
        (["model=gpt-4.1", "decoding.max_tokens=32769"], True),
        (["model=qwen3.6-plus"], False),  # no documented limit recorded: nothing to compare
        (["model=gemini-3.1"], False),  # 32768 <= 65536 (ai.google.dev)
        (["model=gemini-3.1", "decoding.max_tokens=65537"], True),
        (["model=qwen3-max", "decoding.max_tokens=65537"], True),
    ],
)
def test_output_limit_warning(overrides, warned):
    cfg = to_settings(compose_config(overrides))
    found = [message for code, message in spec_warnings(cfg) if code == "output_limit"]
    assert bool(found) is warned
    if warned:
        limit, source = cfg.model.max_output_tokens, cfg.model.max_output_tokens_source
        budget = effective_max_tokens(cfg.model, cfg.decoding)
        assert found == [f"model {cfg.model.name} documents an output limit of {limit} tokens ({source}); the run "
                         f"sends {cfg.model.budget_field}={budget} as the spec (§2) asks: the provider may cap "
                         f"answers at {limit} or reject the request, and a rejected call is sent again with "
                         f"{limit}, noted on its record"]


def test_minimax_still_gets_the_spec_budget_and_warns_in_the_run(tmp_path, monkeypatch):
    """The warning does not change the request: MiniMax is sent max_tokens=32768, and the run records the warning."""
    from conftest import settings
    from wildtrace.runtime.run.execute import run

    monkeypatch.setenv("WT_DIALECT_KEY", "k")
    with LoopbackServer(lambda call: chat(GOOD)) as server:
        cfg = settings(tmp_path, ["model=minimax-m2.7", f"model.base_url={server.url}/v1",
                                  "model.api_key_env=WT_DIALECT_KEY", "stage=answer", "dataset.limit=1"])
        result = run(cfg)
        bodies = [c.body for c in server.calls]
    assert bodies and all(b["max_tokens"] == 32768 for b in bodies)
    codes = [w["code"] for w in result.stats["warnings"]]
    assert "output_limit" in codes


# --------------------------------------------------------------------------------------
# hostile shapes: the dialect readers never raise past the boundary
# --------------------------------------------------------------------------------------

HOSTILE = [None, [], "text", 7, {"base_resp": "x"}, {"base_resp": {"status_code": "1008"}},
           {"base_resp": {"status_code": True}}, {"base_resp": []}, {"choices": "x"}, {"choices": [None]},
           {"choices": [{"finish_reason": ["network_error"]}]}, {"error": {"code": {"x": 1}}},
           {"error": ["1113"]}, {"choices": [{"usage": "x", "message": {"content": "a"}}]}]


@pytest.mark.parametrize("payload", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_dialect_readers_take_any_body(payload):
    from wildtrace.runtime.net.retry import classify, is_quota

    p = make_provider(endpoint_spec("openai"))
    assert p.failure_status(payload) is None  # nothing there says the 2xx was an error
    assert isinstance(p.error_message(payload), str)
    assert is_quota(500, payload) is False and classify(500, {}, payload) == "retry"
    with contextlib.suppress(ValueError):  # an unreadable body is one error type, never another
        p.parse_response(payload)
