"""The spec's output budget is sent only if the provider accepts it.

Loopback servers reject a budget above the model's limit exactly as each provider documents
(OpenAI's, Anthropic's and Gemini's wording and status); the run sends the call again with the
documented limit (``model.max_output_tokens``), once learned for every later call, notes it on
each record and warns once; without a documented limit the rejection stays a failed outcome.
"""

from __future__ import annotations

import json

import pytest

from conftest import TEST_KEY_ENV, endpoint_spec, make_task, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat_stream, sse
from wildtrace.core.records import AnswerStatus, FailReason
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.run.execute import run

DOC = "The pump failed at 03:14 because the seal was worn. " * 10
FAST = ["retry.backoff_base_s=0.001", "retry.backoff_max_s=0.005"]
SPEC = 32768  # the spec's budget for a reasoning model (model.reasoning=true)
SOURCE = "the provider model page"

ANTHROPIC_EVENTS = [
    {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                          "model": "claude-test", "usage": {"input_tokens": 5}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Worn seal."}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
    {"type": "message_stop"}]


def openai_rejection(asked: int, limit: int) -> Reply:
    """OpenAI's 400 (NextChat#3195, forgecode#1185)."""
    return Reply(400, {"error": {
        "message": f"max_tokens is too large: {asked}. This model supports at most {limit} completion tokens, "
                   f"whereas you provided {asked}.",
        "type": "invalid_request_error", "param": "max_tokens", "code": "invalid_value"}})


def anthropic_rejection(asked: int, limit: int) -> Reply:
    """Anthropic's 400 (anthropics/claude-code#24451)."""
    return Reply(400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"max_tokens: {asked} > {limit}, which is the maximum allowed number of output tokens for "
                   "claude-test"}, "request_id": "req_011CXxg3eqF8ZMvqtkKHNjKQ"})


def gemini_rejection(asked: int, limit: int) -> Reply:
    """Gemini's 400 INVALID_ARGUMENT (BerriAI/litellm#10548)."""
    return Reply(400, {"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": f"Unable to submit request because it has a maxOutputTokens value of {asked} but the supported "
                   f"range is from 1 (inclusive) to {limit + 1} (exclusive). Update the value and try again."}})


def gemini_answer() -> Reply:
    return Reply(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": "Worn seal."}]},
                                       "finishReason": "STOP"}],
                       "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3},
                       "modelVersion": "gemini-test"})


# provider → (budget of a body, the rejection, an answer, model overrides, the field's name)
FORMATS = {
    "openai": (lambda body: body["max_tokens"], openai_rejection, lambda: chat_stream("Worn seal."),
               lambda url: ["model.provider=openai", f"model.base_url={url}/v1"], "max_tokens"),
    "anthropic": (lambda body: body["max_tokens"], anthropic_rejection,
                  lambda: sse(*ANTHROPIC_EVENTS, names=[e["type"] for e in ANTHROPIC_EVENTS]),
                  lambda url: ["model.provider=anthropic", f"model.base_url={url}"], "max_tokens"),
    "gemini": (lambda body: body["generationConfig"]["maxOutputTokens"], gemini_rejection, gemini_answer,
               lambda url: ["model.provider=gemini", f"model.base_url={url}", "model.stream=false"],
               "maxOutputTokens"),
}


@pytest.fixture
def release(tmp_path, test_key):
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(3)]
    return write_release(tmp_path, tasks, {"doc.txt": DOC})


def overrides(url: str, release, fmt: str, *extra: str) -> list[str]:
    tasks, corpus = release
    return ["model=custom", "model.route=test-model", "model.reasoning=true", f"model.api_key_env={TEST_KEY_ENV}",
            *FORMATS[fmt][3](url), f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "stage=answer",
            *FAST, *extra]


def limited(limit: int) -> list[str]:
    return [f"model.max_output_tokens={limit}", f"model.max_output_tokens_source='{SOURCE}'"]


def rejecting(fmt: str, limit: int):
    """A server that takes at most ``limit`` output tokens, as the provider's API does."""
    budget_of, rejection, answer = FORMATS[fmt][:3]

    def responder(call: Call) -> Reply:
        asked = budget_of(call.body)
        return rejection(asked, limit) if asked > limit else answer()

    return responder


def rows_of(result) -> list[dict]:
    return json.loads((result.out_dir / "responses.json").read_text())


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_rejected_budget_is_sent_again_with_the_documented_limit(tmp_path, release, fmt, caplog):
    limit, name = 2048, FORMATS[fmt][4]
    with LoopbackServer(rejecting(fmt, limit)) as server, caplog.at_level("WARNING"):
        result = run(settings(tmp_path, overrides(server.url, release, fmt, *limited(limit))))
    budgets = [FORMATS[fmt][0](c.body) for c in server.calls]
    assert budgets.count(limit) == 3 and set(budgets) == {SPEC, limit}  # the spec's budget went first
    rows = rows_of(result)
    note = f"{name} lowered to {limit} (documented limit, {SOURCE}): provider rejected {SPEC}"
    assert [(r["status"], r["attempts"], r["response"]) for r in rows] == [(AnswerStatus.ANSWERED, 1, "Worn seal.")] * 3
    assert all(note in r["notes"] for r in rows)
    assert result.stats["retries"] == 0  # the rejection is not an attempt of the task
    assert result.stats["budget_lowered"] == {"model": limit}  # run_stats.json says what was sent instead
    warnings = [r.getMessage() for r in caplog.records if "the endpoint rejects" in r.getMessage()]
    assert len(warnings) == 1 and f"sending {name}={limit}, the model's documented limit ({SOURCE})" in warnings[0]
    assert "output_limit" in [w["code"] for w in result.stats["warnings"]]  # warned before any request, too


def test_once_learned_later_calls_go_with_the_limit_at_once(tmp_path, release):
    """One call at a time: only the first is rejected; the other two are sent with the limit straight away."""
    with LoopbackServer(rejecting("openai", 2048)) as server:
        run(settings(tmp_path, overrides(server.url, release, "openai", *limited(2048), "model.max_concurrency=1")))
    assert [c.body["max_tokens"] for c in server.calls] == [SPEC, 2048, 2048, 2048]


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_without_a_documented_limit_the_rejection_is_a_failed_outcome(tmp_path, release, fmt):
    with LoopbackServer(rejecting(fmt, 2048)) as server:
        result = run(settings(tmp_path, overrides(server.url, release, fmt)))
    assert [FORMATS[fmt][0](c.body) for c in server.calls] == [SPEC] * 3  # nothing resent
    assert result.stats["budget_lowered"] == {}
    rows = rows_of(result)
    assert [(r["status"], r["reason"], r["attempts"], r["http_status"]) for r in rows] == \
        [(AnswerStatus.FAILED, FailReason.HTTP_ERROR, 1, 400)] * 3
    assert all(f"{SPEC}" in r["error"] and "2048" in r["error"] for r in rows)  # the provider's own words


def test_a_limit_the_provider_also_rejects_fails_with_its_reason(tmp_path, release):
    """The documented limit is above what the endpoint takes: one resend, then the provider's message."""
    with LoopbackServer(rejecting("openai", 1024)) as server:
        result = run(settings(tmp_path, overrides(server.url, release, "openai", *limited(2048),
                                                  "model.max_concurrency=1")))
    assert [c.body["max_tokens"] for c in server.calls] == [SPEC, 2048, 2048, 2048]
    rows = rows_of(result)
    assert [(r["status"], r["reason"], r["attempts"]) for r in rows] == \
        [(AnswerStatus.FAILED, FailReason.HTTP_ERROR, 1)] * 3
    assert all("max_tokens is too large: 2048" in r["error"] for r in rows)


def test_the_spec_budget_keeps_its_cache_key(tmp_path, release):
    """A provider that accepts the spec's budget: a documented limit changes neither the request nor its key."""
    with LoopbackServer(lambda call: chat_stream("Worn seal.")) as server:
        run(settings(tmp_path, overrides(server.url, release, "openai")))
        again = run(settings(tmp_path, overrides(server.url, release, "openai", *limited(2048))))
    assert len(server.calls) == 3 and all(c.body["max_tokens"] == SPEC for c in server.calls)
    assert again.stats["cache_hits"] == 3
    assert all(not any("lowered" in n for n in r["notes"]) for r in rows_of(again))


def test_a_rerun_of_a_lowered_model_pays_nothing_twice(tmp_path, release):
    """Lowered calls are cached under the bytes really sent: a rerun is rejected once, learns, and hits."""
    with LoopbackServer(rejecting("openai", 2048)) as server:
        cfg = overrides(server.url, release, "openai", *limited(2048), "model.max_concurrency=1")
        run(settings(tmp_path, cfg))
        paid = [c for c in server.calls if c.body["max_tokens"] == 2048]
        again = run(settings(tmp_path, cfg))
    assert len(paid) == 3 and len([c for c in server.calls if c.body["max_tokens"] == 2048]) == 3
    assert again.stats["cache_hits"] == 3
    note = f"max_tokens lowered to 2048 (documented limit, {SOURCE}): provider rejected {SPEC}"
    assert all(r["cached"] and note in r["notes"] for r in rows_of(again))


@pytest.mark.parametrize(("provider", "spec", "path"), [
    ("openai", {}, ("max_tokens",)),
    ("openai", {"budget_field": "max_completion_tokens"}, ("max_completion_tokens",)),
    ("anthropic", {"budget_field": "max_completion_tokens"}, ("max_tokens",)),  # always max_tokens there
    ("gemini", {}, ("generationConfig", "maxOutputTokens")),
])
def test_each_format_reads_and_sets_its_budget_where_it_keeps_it(provider, spec, path):
    p = make_provider(endpoint_spec(provider, **spec))
    request = p.build_request("What failed?", Sampling(0.1, SPEC))
    lowered = p.with_budget(request, 2048)
    assert p.budget_path() == path and p.budget(request) == SPEC and p.budget(lowered) == 2048
    assert p.budget(p.stream_request(lowered)) == 2048  # the streamed form keeps it
    unchanged = json.loads(json.dumps(request.body))  # the original request is not touched
    assert p.with_budget(lowered, SPEC).body == unchanged and request.body == unchanged
    assert (lowered.url, dict(lowered.headers)) == (request.url, dict(request.headers))
