"""Providers are pure wire formats: exact requests in, exact Completions out."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, replace

import pytest

from conftest import endpoint_spec

from wildtrace.core import records as R
from wildtrace.core.prompts import answer_prompt, judge_prompt
from wildtrace.core.records import Completion, Usage
from wildtrace.core.tasks import RubricItem
from wildtrace.providers.anthropic import AnthropicProvider
from wildtrace.providers.base import Sampling, WireRequest, merge_extra
from wildtrace.providers.gemini import GeminiProvider
from wildtrace.providers.offline import OfflineProvider
from wildtrace.providers.openai import OpenAIProvider
from wildtrace.providers.registry import PROVIDERS, make_provider
from wildtrace.runtime.net.call import interpret

PROMPT = "Answer using ONLY the document below.\n\nQuestion: Qu'est-ce que 问题?"
SAMPLING = Sampling(temperature=0.3, max_tokens=512)
SECRET = "sk-SECRET-do-not-leak-1234567890"


spec = endpoint_spec


def as_dict(request: WireRequest) -> dict:
    return {"url": request.url, "body": request.body, "headers": dict(request.headers)}


# --------------------------------------------------------------------------------------
# build_request: golden requests
# --------------------------------------------------------------------------------------

OPENAI_MSGS = [{"role": "user", "content": PROMPT}]
GEMINI_CONTENTS = [{"role": "user", "parts": [{"text": PROMPT}]}]

BUILD_CASES = [
    pytest.param(
        spec("openai", route="gpt-4o"),
        SAMPLING,
        {
            "url": "https://api.example.com/v1/chat/completions",
            "body": {"model": "gpt-4o", "messages": OPENAI_MSGS, "max_tokens": 512, "temperature": 0.3},
            "headers": {},
        },
        id="openai-basic",
    ),
    pytest.param(
        spec("openai", route="gpt-4o", base_url="https://api.example.com/v1/"),
        SAMPLING,
        {
            "url": "https://api.example.com/v1/chat/completions",
            "body": {"model": "gpt-4o", "messages": OPENAI_MSGS, "max_tokens": 512, "temperature": 0.3},
            "headers": {},
        },
        id="openai-trailing-slash",
    ),
    pytest.param(
        spec("openai", route="o3", send_temperature=False, budget_field="max_completion_tokens",
             extra_body={"reasoning_effort": "high"}),
        SAMPLING,
        {
            "url": "https://api.example.com/v1/chat/completions",
            "body": {"model": "o3", "messages": OPENAI_MSGS, "max_completion_tokens": 512,
                     "reasoning_effort": "high"},
            "headers": {},
        },
        id="openai-reasoning-no-temperature",
    ),
    pytest.param(
        spec("openai", route="gpt-4o"),
        Sampling(temperature=None, max_tokens=64),
        {
            "url": "https://api.example.com/v1/chat/completions",
            "body": {"model": "gpt-4o", "messages": OPENAI_MSGS, "max_tokens": 64},
            "headers": {},
        },
        id="openai-temperature-none-omitted",
    ),
    pytest.param(
        spec("openai", route="gpt-4o"),
        Sampling(temperature=0.0, max_tokens=64),
        {
            "url": "https://api.example.com/v1/chat/completions",
            "body": {"model": "gpt-4o", "messages": OPENAI_MSGS, "max_tokens": 64, "temperature": 0.0},
            "headers": {},
        },
        id="openai-temperature-zero-is-sent",
    ),
    pytest.param(
        spec("anthropic", route="claude-sonnet-4", base_url="https://api.anthropic.com"),
        SAMPLING,
        {
            "url": "https://api.anthropic.com/v1/messages",
            "body": {"model": "claude-sonnet-4", "max_tokens": 512, "messages": OPENAI_MSGS, "temperature": 0.3},
            "headers": {"anthropic-version": "2023-06-01"},
        },
        id="anthropic-basic",
    ),
    pytest.param(
        spec("anthropic", route="claude-sonnet-4", base_url="https://api.anthropic.com/", send_temperature=False,
             extra_body={"thinking": {"type": "enabled", "budget_tokens": 2048}}),
        SAMPLING,
        {
            "url": "https://api.anthropic.com/v1/messages",
            "body": {"model": "claude-sonnet-4", "max_tokens": 512, "messages": OPENAI_MSGS,
                     "thinking": {"type": "enabled", "budget_tokens": 2048}},
            "headers": {"anthropic-version": "2023-06-01"},
        },
        id="anthropic-trailing-slash-no-temperature-extra",
    ),
    pytest.param(
        spec("gemini", route="gemini-2.5-pro", base_url="https://generativelanguage.googleapis.com"),
        SAMPLING,
        {
            "url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent",
            "body": {"contents": GEMINI_CONTENTS, "generationConfig": {"maxOutputTokens": 512, "temperature": 0.3}},
            "headers": {},
        },
        id="gemini-basic",
    ),
    pytest.param(
        spec("gemini", route="gemini-2.5-pro", base_url="https://generativelanguage.googleapis.com/",
             send_temperature=False,
             extra_body={"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}}),
        SAMPLING,
        {
            "url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent",
            "body": {"contents": GEMINI_CONTENTS,
                     "generationConfig": {"maxOutputTokens": 512, "thinkingConfig": {"thinkingBudget": 1024}}},
            "headers": {},
        },
        id="gemini-trailing-slash-thinking-merge-no-temperature",
    ),
    pytest.param(
        spec("gemini", route="gemini-2.5-flash", base_url="https://generativelanguage.googleapis.com",
             extra_body={"generationConfig": {"thinkingConfig": {"thinkingBudget": 0}, "topP": 0.9},
                         "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]}),
        SAMPLING,
        {
            "url": "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
            "body": {"contents": GEMINI_CONTENTS,
                     "generationConfig": {"maxOutputTokens": 512, "temperature": 0.3,
                                          "thinkingConfig": {"thinkingBudget": 0}, "topP": 0.9},
                     "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]},
            "headers": {},
        },
        id="gemini-nested-merge-keeps-temperature",
    ),
    pytest.param(
        spec("offline", route="extractive-bm25", base_url="http://offline.local/v1"),
        SAMPLING,
        {
            "url": "http://offline.local/v1/chat/completions",
            "body": {"model": "extractive-bm25", "messages": OPENAI_MSGS, "max_tokens": 512, "temperature": 0.3},
            "headers": {},
        },
        id="offline-is-openai-shaped",
    ),
]


@pytest.mark.parametrize(("endpoint", "sampling", "expected"), BUILD_CASES)
def test_build_request_golden(endpoint, sampling, expected):
    request = make_provider(endpoint).build_request(PROMPT, sampling)
    assert as_dict(request) == expected
    # Key order is part of the exact bytes sent; the body must also be JSON-encodable.
    assert json.loads(json.dumps(request.body)) == expected["body"]


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini", "offline"])
def test_temperature_key_absent_when_not_sent(provider):
    request = make_provider(spec(provider, send_temperature=False)).build_request(PROMPT, SAMPLING)
    body = request.body
    assert "temperature" not in body
    assert "temperature" not in body.get("generationConfig", {})


@pytest.mark.parametrize("budget_field", ["max_tokens", "max_completion_tokens"])
def test_openai_budget_field_is_the_only_budget_key(budget_field):
    body = OpenAIProvider(spec("openai", budget_field=budget_field)).build_request(PROMPT, SAMPLING).body
    assert body[budget_field] == 512
    other = {"max_tokens", "max_completion_tokens"} - {budget_field}
    assert not other & body.keys()


def test_extra_body_does_not_mutate_the_spec_or_leak_between_requests():
    extra = {"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}}
    provider = GeminiProvider(spec("gemini", extra_body=extra))
    first = provider.build_request("one", Sampling(0.1, 10)).body
    second = provider.build_request("two", Sampling(0.2, 20)).body
    assert extra == {"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}}
    assert first["generationConfig"] == {"maxOutputTokens": 10, "temperature": 0.1,
                                         "thinkingConfig": {"thinkingBudget": 1024}}
    assert second["generationConfig"] == {"maxOutputTokens": 20, "temperature": 0.2,
                                          "thinkingConfig": {"thinkingBudget": 1024}}


@pytest.mark.parametrize(
    ("body", "extra", "expected"),
    [
        ({"a": 1}, {}, {"a": 1}),
        ({"a": 1}, {"a": 2}, {"a": 2}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"y": 3, "z": 4}}, {"a": {"x": 1, "y": 3, "z": 4}}),
        ({"a": {"x": {"p": 1}}}, {"a": {"x": {"q": 2}}}, {"a": {"x": {"p": 1, "q": 2}}}),
        ({"a": {"x": 1}}, {"a": 5}, {"a": 5}),  # a scalar replaces a mapping
        ({"a": 5}, {"a": {"x": 1}}, {"a": {"x": 1}}),  # a mapping replaces a scalar
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),  # lists replace, never concatenate
        ({"a": 1}, {"b": None}, {"a": 1, "b": None}),
    ],
)
def test_merge_extra_table(body, extra, expected):
    before = json.dumps(body)
    assert merge_extra(body, extra) == expected
    assert json.dumps(body) == before  # the input body is not mutated


# --------------------------------------------------------------------------------------
# auth headers, and the key never in the request
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("openai", {"Authorization": "Bearer k"}),
        ("offline", {"Authorization": "Bearer k"}),
        ("anthropic", {"x-api-key": "k"}),
        ("gemini", {"x-goog-api-key": "k"}),
    ],
)
def test_auth_headers(provider, expected):
    assert make_provider(spec(provider)).auth_headers("k") == expected


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini", "offline"])
def test_key_never_in_built_request(provider):
    p = make_provider(spec(provider, extra_body={"metadata": {"x": 1}}))
    p.auth_headers(SECRET)  # asking for auth headers must not taint later requests
    request = p.build_request(PROMPT, SAMPLING)
    assert SECRET not in request.url
    assert SECRET not in json.dumps(request.body, ensure_ascii=False)
    assert SECRET not in json.dumps(dict(request.headers))
    lowered = {k.lower() for k in request.headers}
    assert not lowered & {"authorization", "x-api-key", "x-goog-api-key"}
    assert "key=" not in request.url


# --------------------------------------------------------------------------------------
# parse_response tables
# --------------------------------------------------------------------------------------

OPENAI_PARSE = [
    pytest.param(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "The answer is 42."},
                      "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 100, "completion_tokens": 50,
                   "completion_tokens_details": {"reasoning_tokens": 30}}},
        Completion("The answer is 42.", "stop", Usage(100, 50, 30), None),
        id="normal-with-reasoning-usage",
    ),
    pytest.param(
        {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}]},
        Completion("ok", "length", Usage(None, None, None), None),
        id="no-usage",
    ),
    pytest.param(
        {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": "12", "completion_tokens": True, "completion_tokens_details": None}},
        Completion("x", "stop", Usage(None, None, None), None),
        id="non-int-usage-ignored",
    ),
    pytest.param(
        {"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't help with that."},
                      "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 10, "completion_tokens": 5}},
        Completion(None, "stop", Usage(10, 5, None), "I can't help with that."),
        id="message-refusal",
    ),
    pytest.param(
        {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]},
        Completion(None, "stop", Usage(), None),
        id="content-null",
    ),
    pytest.param(
        {"choices": [{"message": {"role": "assistant", "content": [
            {"type": "text", "text": "Hello "}, {"type": "image_url", "image_url": {"url": "x"}},
            {"text": "world"}, "junk"]}, "finish_reason": "stop"}]},
        Completion("Hello world", "stop", Usage(), None),
        id="content-list-of-parts",
    ),
    pytest.param(
        {"choices": [{"message": {"role": "assistant", "content": ""}, "finish_reason": "content_filter"}]},
        Completion("", "content_filter", Usage(), "finish_reason=content_filter"),
        id="finish-content-filter",
    ),
    pytest.param(
        {"choices": [{"message": {"content": None, "refusal": "No."}, "finish_reason": "content_filter"}]},
        Completion(None, "content_filter", Usage(), "No."),
        id="refusal-message-wins-over-content-filter",
    ),
    pytest.param(
        {"choices": [{"message": {"content": "fine", "refusal": None}, "finish_reason": "stop"}]},
        Completion("fine", "stop", Usage(), None),
        id="refusal-null",
    ),
]

ANTHROPIC_PARSE = [
    pytest.param(
        {"id": "msg_1", "type": "message", "role": "assistant",
         "content": [{"type": "text", "text": "The answer is 42."}],
         "stop_reason": "end_turn", "usage": {"input_tokens": 120, "output_tokens": 33}},
        Completion("The answer is 42.", "end_turn", Usage(120, 33, None), None),
        id="normal",
    ),
    pytest.param(
        {"content": [{"type": "thinking", "thinking": "Let me think...", "signature": "sig"},
                     {"type": "redacted_thinking", "data": "xx"},
                     {"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}],
         "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 2}},
        # Thinking is recorded as reasoning (a redacted block as a marker), never as the answer.
        Completion("Part one. Part two.", "end_turn", Usage(1, 2, None), None,
                   reasoning="Let me think...\n\n[redacted thinking]"),
        id="thinking-then-text",
    ),
    pytest.param(
        {"content": [], "stop_reason": "refusal", "usage": {"input_tokens": 9, "output_tokens": 0}},
        Completion("", "refusal", Usage(9, 0, None), "stop_reason=refusal"),
        id="stop-reason-refusal",
    ),
    pytest.param(
        {"content": [{"type": "text", "text": "partial"}], "stop_reason": "max_tokens"},
        Completion("partial", "max_tokens", Usage(), None),
        id="max-tokens-no-usage",
    ),
]

GEMINI_PARSE = [
    pytest.param(
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "The answer "}, {"text": "is 42."}]},
                         "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 200, "candidatesTokenCount": 40, "thoughtsTokenCount": 300,
                           "totalTokenCount": 540}},
        Completion("The answer is 42.", "STOP", Usage(200, 340, 300), None),  # candidates exclude thoughts
        id="normal-with-thoughts-usage",
    ),
    pytest.param(
        {"candidates": [{"content": {"parts": [{"text": "secret reasoning", "thought": True},
                                               {"text": "Final."}]}, "finishReason": "STOP"}]},
        Completion("Final.", "STOP", Usage(), None, reasoning="secret reasoning"),
        id="thought-parts-excluded",
    ),
    pytest.param(
        {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 5}},
        Completion(None, None, Usage(5, None, None), "blockReason=PROHIBITED_CONTENT"),
        id="prompt-blocked-no-candidates",
    ),
    pytest.param(
        {"candidates": [{"finishReason": "SAFETY", "safetyRatings": []}]},
        Completion("", "SAFETY", Usage(), "finishReason=SAFETY"),
        id="finish-safety-no-content",
    ),
    pytest.param(
        {"candidates": [{"content": {"parts": [{"text": "half"}]}, "finishReason": "RECITATION"}]},
        Completion("half", "RECITATION", Usage(), "finishReason=RECITATION"),
        id="finish-recitation",
    ),
    pytest.param(
        {"candidates": [{"content": {"parts": [{"text": "cut off"}]}, "finishReason": "MAX_TOKENS"}]},
        Completion("cut off", "MAX_TOKENS", Usage(), None),
        id="max-tokens-not-refusal",
    ),
]


@pytest.mark.parametrize(("payload", "expected"), OPENAI_PARSE)
def test_openai_parse(payload, expected):
    assert OpenAIProvider(spec("openai")).parse_response(payload) == expected


@pytest.mark.parametrize(("payload", "expected"), ANTHROPIC_PARSE)
def test_anthropic_parse(payload, expected):
    assert AnthropicProvider(spec("anthropic")).parse_response(payload) == expected


@pytest.mark.parametrize(("payload", "expected"), GEMINI_PARSE)
def test_gemini_parse(payload, expected):
    assert GeminiProvider(spec("gemini")).parse_response(payload) == expected


MALFORMED = [
    ("openai", None),
    ("openai", []),
    ("openai", "text"),
    ("openai", {}),
    ("openai", {"error": {"message": "overloaded"}}),
    ("openai", {"choices": None}),
    ("openai", {"choices": {"0": {}}}),
    ("openai", {"choices": [], "usage": {"prompt_tokens": 7}}),  # no answer at all, not an empty one
    ("openai", {"choices": [{"message": {"content": 42}}]}),
    ("anthropic", None),
    ("anthropic", {}),
    ("anthropic", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ("anthropic", {"content": "just a string"}),
    ("gemini", None),
    ("gemini", []),
    ("gemini", {}),
    ("gemini", {"candidates": []}),
    ("gemini", {"usageMetadata": {"promptTokenCount": 3}}),
]


@pytest.mark.parametrize(("provider", "payload"), MALFORMED)
def test_malformed_bodies_raise_value_error(provider, payload):
    with pytest.raises(ValueError):
        make_provider(spec(provider)).parse_response(payload)


# Structurally wrong *inside* the expected containers. The documented contract
# (Provider.parse_response: "raise ValueError when it is not the expected shape") says
# ValueError; interpret() also swallows TypeError/AttributeError, so the run outcome is
# the same (bad_response) — but the contract itself is broken.
MALFORMED_INNER = [
    pytest.param("openai", {"choices": ["not an object"]}, id="openai-choice-not-object"),
    pytest.param("openai", {"choices": [{"message": "str"}]}, id="openai-message-not-object"),
    pytest.param("openai", {"choices": [{"message": {"content": "x"}}], "usage": ["bad"]}, id="openai-usage-list"),
    pytest.param("gemini", {"candidates": ["not an object"]}, id="gemini-candidate-not-object"),
    pytest.param("gemini", {"candidates": [{"content": "str"}]}, id="gemini-content-not-object"),
    pytest.param("anthropic", {"content": [], "usage": ["bad"]}, id="anthropic-usage-list"),
    pytest.param("openai", {"choices": [{"message": {"content": [{"type": "text", "text": None}]}}]},
                 id="openai-text-part-null"),
    pytest.param("anthropic", {"content": [{"type": "text", "text": None}]}, id="anthropic-text-null"),
    pytest.param("gemini", {"candidates": [{"content": {"parts": [{"text": None}]}}]}, id="gemini-text-null"),
]


@pytest.mark.parametrize(("provider", "payload"), MALFORMED_INNER)
def test_malformed_inner_shapes_raise_value_error(provider, payload):
    with pytest.raises(ValueError):
        make_provider(spec(provider)).parse_response(payload)


@pytest.mark.parametrize(("provider", "payload"), [(p.values[0], p.values[1]) for p in MALFORMED_INNER])
def test_malformed_inner_shapes_still_become_bad_response(provider, payload):
    result = interpret(make_provider(spec(provider)), payload, 200, 1, 0.0)
    assert (result.ok, result.reason) == (False, R.FailReason.BAD_RESPONSE)


def test_error_message_extraction():
    p = OpenAIProvider(spec("openai"))
    assert p.error_message({"error": {"message": "Invalid model", "code": "x"}}) == "Invalid model"
    assert p.error_message({"error": "plain string error"}) == "plain string error"
    assert p.error_message({"message": "top-level message"}) == "top-level message"
    assert p.error_message("raw text") == "raw text"
    assert len(p.error_message("x" * 5000)) == 2000


# --------------------------------------------------------------------------------------
# interpret(): 2xx body → CallResult
# --------------------------------------------------------------------------------------


def openai_reply(content, refusal=None, finish="stop"):
    message = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    return {"choices": [{"message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4}}


@pytest.mark.parametrize(
    ("provider", "payload", "ok", "reason", "text"),
    [
        ("openai", openai_reply("A real answer."), True, None, "A real answer."),
        ("openai", openai_reply(None, refusal="I can't."), False, R.FailReason.REFUSAL, None),
        ("openai", openai_reply("", finish="content_filter"), False, R.FailReason.REFUSAL, ""),
        ("openai", openai_reply(""), False, R.FailReason.EMPTY_OUTPUT, ""),
        ("openai", openai_reply("   \n"), False, R.FailReason.EMPTY_OUTPUT, "   \n"),
        ("openai", openai_reply("\t\u3000\n"), False, R.FailReason.EMPTY_OUTPUT, "\t\u3000\n"),
        ("openai", openai_reply(None), False, R.FailReason.EMPTY_OUTPUT, None),
        ("openai", {"oops": 1}, False, R.FailReason.BAD_RESPONSE, None),
        ("anthropic", {"content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn"}, True, None, "Hi"),
        ("anthropic", {"content": [], "stop_reason": "refusal"}, False, R.FailReason.REFUSAL, ""),
        ("anthropic", {"content": [{"type": "thinking", "thinking": "hm"}], "stop_reason": "end_turn"},
         False, R.FailReason.EMPTY_OUTPUT, ""),
        ("gemini", {"candidates": [{"content": {"parts": [{"text": "Yes"}]}, "finishReason": "STOP"}]},
         True, None, "Yes"),
        ("gemini", {"promptFeedback": {"blockReason": "SAFETY"}}, False, R.FailReason.REFUSAL, None),
        ("gemini", {"candidates": [{"content": {"parts": [{"text": "only thought", "thought": True}]},
                                    "finishReason": "STOP"}]}, False, R.FailReason.EMPTY_OUTPUT, ""),
    ],
)
def test_interpret_outcomes(provider, payload, ok, reason, text):
    result = interpret(make_provider(spec(provider)), payload, 200, 1, 0.25)
    assert (result.ok, result.reason, result.text) == (ok, reason, text)
    assert result.attempts == 1
    assert result.http_status == 200
    assert result.latency_s == 0.25
    assert result.raw == payload
    if ok:
        assert result.error is None
    else:
        assert result.error


def test_interpret_refusal_keeps_provider_words_and_usage():
    result = interpret(OpenAIProvider(spec("openai")), openai_reply(None, refusal="I can't help."), 200, 2, 1.0)
    assert result.error == "I can't help."
    assert result.usage == Usage(3, 4, None)
    assert result.finish_reason == "stop"
    assert result.attempts == 2


# --------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------


def test_registry_knows_every_provider():
    assert set(PROVIDERS) == {"openai", "anthropic", "gemini", "offline"}
    for name, cls in PROVIDERS.items():
        provider = make_provider(spec(name))
        assert type(provider) is cls
        assert provider.spec.provider == name


def test_registry_unknown_provider_names_the_choices():
    with pytest.raises(ValueError) as info:
        make_provider(spec("cohere", label="judge_2"))
    message = str(info.value)
    assert "judge_2" in message
    assert "'cohere'" in message
    assert "anthropic, gemini, offline, openai" in message


# --------------------------------------------------------------------------------------
# offline provider
# --------------------------------------------------------------------------------------

QUESTION = "What year was the bridge completed?"
DOCUMENT = "The bridge was completed in 1932. It is painted red.\n\nThe city grew quickly."
RUBRIC = (
    RubricItem(points=30, criterion="States the bridge was completed in 1932"),
    RubricItem(points=12.5, criterion="Mentions the architect Joseph Strauss"),
    RubricItem(points=57.5, criterion="Says the bridge is painted red"),
)


def offline(route: str) -> OfflineProvider:
    provider = make_provider(spec("offline", route=route, base_url="http://offline.local/v1"))
    assert isinstance(provider, OfflineProvider)
    return provider


def test_offline_extractive_answers_a_real_answer_prompt():
    provider = offline("extractive-bm25")
    body = provider.build_request(answer_prompt(QUESTION, DOCUMENT), SAMPLING).body
    status, payload = provider.answer_locally(body)
    assert status == 200
    assert payload["model"] == "extractive-bm25"
    assert payload["choices"][0]["message"] == {"role": "assistant", "content": "The bridge was completed in 1932."}
    completion = provider.parse_response(payload)
    # The offline reply names its route as the model that answered, as a real server does.
    assert completion == Completion("The bridge was completed in 1932.", "stop", Usage(), None,
                                    served_model="extractive-bm25")
    assert interpret(provider, payload, status, 1, 0.0).ok


def test_offline_lexical_judge_answers_a_real_judge_prompt():
    provider = offline("lexical-judge")
    response = "The bridge was completed in 1932. It is painted red."
    body = provider.build_request(judge_prompt(QUESTION, RUBRIC, response), SAMPLING).body
    status, payload = provider.answer_locally(body)
    assert status == 200
    reply = provider.parse_response(payload).text
    assert reply == '{"points_awarded": [30, 0, 57.5], "total": 87.5}'
    assert json.loads(reply) == {"points_awarded": [30, 0, 57.5], "total": 87.5}


def test_offline_lexical_judge_fractional_points():
    provider = offline("lexical-judge")
    response = "Joseph Strauss was the architect."
    body = provider.build_request(judge_prompt(QUESTION, RUBRIC, response), SAMPLING).body
    status, payload = provider.answer_locally(body)
    assert status == 200
    assert json.loads(provider.parse_response(payload).text) == {"points_awarded": [0, 12.5, 0], "total": 12.5}


def test_offline_unknown_route_is_404():
    provider = offline("gpt-4o")
    status, payload = provider.answer_locally(provider.build_request(answer_prompt(QUESTION, DOCUMENT), SAMPLING).body)
    assert status == 404
    message = payload["error"]["message"]
    assert "'gpt-4o'" in message
    assert "extractive-bm25" in message and "lexical-judge" in message


@pytest.mark.parametrize("body", [None, [], "text", {}])
def test_offline_body_without_model_is_404(body):
    status, _ = offline("extractive-bm25").answer_locally(body)
    assert status == 404


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("extractive-bm25", {"model": "extractive-bm25", "messages": [{"role": "user", "content": "hello"}]}),
        ("lexical-judge", {"model": "lexical-judge", "messages": [{"role": "user", "content": "hello"}]}),
        ("extractive-bm25", {"model": "extractive-bm25", "messages": []}),
        ("extractive-bm25", {"model": "extractive-bm25"}),
    ],
)
def test_offline_unreadable_request_is_400(route, body):
    status, payload = offline(route).answer_locally(body)
    assert status == 400
    assert route in payload["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"model": "extractive-bm25", "messages": [{"role": "user", "content": None}]},
        {"model": "extractive-bm25", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {"model": "lexical-judge", "messages": [{"role": "user", "content": None}]},
    ],
    ids=["extractive-null", "extractive-parts", "judge-null"],
)
def test_offline_non_string_content_is_400(body):
    status, _ = offline(body["model"]).answer_locally(body)
    assert status == 400


def test_offline_answer_prompt_with_braces_and_cjk():
    provider = offline("extractive-bm25")
    document = "桥梁于1932年建成。它是红色的。 The {bridge} opened in 1932."
    body = provider.build_request(answer_prompt("桥梁 建成 {bridge}?", document), SAMPLING).body
    status, payload = provider.answer_locally(body)
    assert status == 200
    assert provider.parse_response(payload).text.strip()


def test_spec_is_frozen():
    s = spec("openai")
    with pytest.raises(FrozenInstanceError):
        s.route = "other"  # type: ignore[misc]
    assert replace(s, route="other").route == "other"
