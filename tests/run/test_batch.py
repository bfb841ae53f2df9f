"""Batch mode against loopback servers that speak OpenAI's Files + Batch API and Anthropic's
Message Batches as their documentation shows: multipart uploads, batch objects that move
through their states across polls, result files in the providers' shapes, errors, and
usage reported as real endpoints report it (input tokens proportional to the prompt,
reasoning tokens inside the output).

The rule under test: a batch item is the synchronous call's request (same bytes, same
cache key), its result goes through the same parser into the same cache.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY_ENV, make_task, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat_stream

from wildtrace.config import ConfigError
from wildtrace.runtime.batch.base import _split
from wildtrace.runtime.store.cache import cache_key
from wildtrace.runtime.run.execute import run

QID = re.compile(r"\[(q\d+)\]")
JUDGE_REPLY = '{"points_awarded":[60,40],"total":100}'


def usage_for(prompt: str, text: str) -> tuple[int, int, int]:
    """(input, output, reasoning) tokens as a real endpoint counts them: input ∝ the prompt,
    reasoning inside the output."""
    reasoning = 5
    return len(prompt) // 4 + 3, len(text) // 4 + 1 + reasoning, reasoning


def prompt_of(body: dict) -> str:
    if "contents" in body:
        return "".join(p["text"] for p in body["contents"][-1]["parts"])
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(block["text"] for block in content)


def answer_text(body: dict, route: str | None = None) -> str:
    if (route or body.get("model", "")).startswith("judge"):
        return JUDGE_REPLY
    return f"Answer for {QID.search(prompt_of(body)).group(1)}: the seal was worn."


def gemini_body(body: dict, route: str) -> dict:
    """A GenerateContentResponse: thoughts are a bucket of their own, as Gemini counts them."""
    text = answer_text(body, route)
    prompt_tokens, completion, reasoning = usage_for(prompt_of(body), text)
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": completion - reasoning,
                              "thoughtsTokenCount": reasoning, "totalTokenCount": prompt_tokens + completion},
            "modelVersion": route}


def openai_body(body: dict) -> dict:
    """A chat.completion as OpenAI returns it, usage included."""
    text = answer_text(body)
    prompt_tokens, completion, reasoning = usage_for(body["messages"][-1]["content"], text)
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                      "total_tokens": prompt_tokens + completion,
                      "completion_tokens_details": {"reasoning_tokens": reasoning}}}


def anthropic_body(body: dict) -> dict:
    """A Message as Anthropic returns it."""
    text = answer_text(body)
    prompt_tokens, completion, _ = usage_for(prompt_of(body), text)
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": completion}}


def multipart(call: Call) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body's fields: name → (filename, bytes)."""
    head = f"Content-Type: {call.headers['content-type']}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + call.raw)
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[name] = (part.get_filename(), part.get_payload(decode=True))
    return fields


class BatchServer:
    """Both batch APIs (and the synchronous calls) on one loopback server.

    A batch moves one state per poll (OpenAI: validating → in_progress → finalizing →
    completed; Anthropic: in_progress → ended), and stays in_progress while ``hold`` is set.
    ``script(custom_id, body, n)`` may replace an item's result (n = how many times that
    custom_id was seen in batches before); ``expire_after`` ends the next batch as expired
    (canceled for Anthropic when ``cancel``) after that many items.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.items: dict[str, list[tuple[str, dict]]] = {}  # batch id → (custom_id, body)
        self.results: dict[str, bytes] = {}
        self.seen: dict[str, int] = {}
        self.hold = threading.Event()
        self.expire_after: int | None = None
        self.cancel = False
        self.script: Any = None
        self.sync_calls: list[Call] = []
        self.polls = 0
        self.server = LoopbackServer(self.respond)

    def __enter__(self) -> BatchServer:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hold.clear()
        self.server.__exit__(*exc)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def calls(self) -> list[Call]:
        return self.server.calls

    def respond(self, call: Call) -> Reply:
        path = call.path
        with self.lock:
            if path == "/v1/files" and call.method == "POST":
                return self.upload(call)
            if path == "/v1/batches" and call.method == "POST":
                return self.openai_create(call)
            if m := re.fullmatch(r"/v1/batches/(batch_\d+)", path):
                return self.openai_poll(m.group(1))
            if m := re.fullmatch(r"/v1/files/(file-[\w-]+)/content", path):
                return Reply(200, self.files[m.group(1)], content_type="application/octet-stream")
            if path == "/v1/messages/batches" and call.method == "POST":
                return self.anthropic_create(call)
            if m := re.fullmatch(r"/v1/messages/batches/(msgbatch_\d+)", path):
                return self.anthropic_poll(m.group(1))
            if m := re.fullmatch(r"/v1/messages/batches/(msgbatch_\d+)/results", path):
                return Reply(200, self.results[m.group(1)], content_type="application/binary")
            if m := re.fullmatch(r"/v1beta/models/([\w.-]+):batchGenerateContent", path):
                return self.gemini_create(call, m.group(1))
            if m := re.fullmatch(r"/v1beta/batches/(g\d+)", path):
                return self.gemini_poll(m.group(1))
        if m := re.fullmatch(r"/v1beta/models/([\w.-]+):generateContent", path):
            self.sync_calls.append(call)
            return Reply(200, gemini_body(call.body, m.group(1)))
        if path == "/v1/chat/completions":
            self.sync_calls.append(call)
            if not call.body.get("stream"):
                return Reply(200, openai_body(call.body))
            text = answer_text(call.body)
            prompt_tokens, completion, reasoning = usage_for(call.body["messages"][-1]["content"], text)
            return chat_stream(text, usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                                            "completion_tokens_details": {"reasoning_tokens": reasoning}})
        if path == "/v1/messages":
            self.sync_calls.append(call)
            return Reply(200, anthropic_body(call.body))
        return Reply(404, {"error": {"message": f"no route {path}", "type": "not_found_error"}})

    # ------------------------------------------------------------------ OpenAI

    def upload(self, call: Call) -> Reply:
        fields = multipart(call)
        if fields.get("purpose", (None, b""))[1] != b"batch" or "file" not in fields:
            return Reply(400, {"error": {"message": "purpose must be batch", "type": "invalid_request_error"}})
        name, data = fields["file"]
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = data
        return Reply(200, {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                           "filename": name, "purpose": "batch", "status": "processed"})

    def openai_create(self, call: Call) -> Reply:
        body = call.body
        if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h" \
                or body.get("input_file_id") not in self.files:
            return Reply(400, {"error": {"message": "bad batch", "type": "invalid_request_error"}})
        lines = [json.loads(line) for line in self.files[body["input_file_id"]].splitlines()]
        assert all(line["method"] == "POST" and line["url"] == "/v1/chat/completions" for line in lines)
        batch_id = f"batch_{len(self.batches) + 1}"
        self.items[batch_id] = [(line["custom_id"], line["body"]) for line in lines]
        self.batches[batch_id] = {
            "id": batch_id, "object": "batch", "endpoint": body["endpoint"], "errors": None,
            "input_file_id": body["input_file_id"], "completion_window": "24h", "status": "validating",
            "output_file_id": None, "error_file_id": None, "created_at": int(time.time()),
            "in_progress_at": None, "expires_at": int(time.time()) + 86400, "finalizing_at": None,
            "completed_at": None, "failed_at": None, "expired_at": None, "cancelling_at": None,
            "cancelled_at": None, "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": None}
        return Reply(200, self.batches[batch_id])

    def openai_poll(self, batch_id: str) -> Reply:
        self.polls += 1
        batch = self.batches[batch_id]
        if getattr(self, "fail_next", False) and batch["status"] == "validating":
            self.fail_next = False
            batch.update(status="failed", failed_at=int(time.time()),
                         errors={"object": "list", "data": [{"code": "invalid_request", "line": None, "param": None,
                                                             "message": "Enqueued token limit reached"}]})
            return Reply(200, batch)
        step = {"validating": "in_progress", "in_progress": "finalizing", "finalizing": "completed"}
        if batch["status"] == "in_progress" and self.hold.is_set():
            return Reply(200, batch)
        if batch["status"] in step:
            batch["status"] = step[batch["status"]]
            if batch["status"] == "finalizing":
                self.openai_finish(batch_id, batch)
        return Reply(200, batch)

    def openai_finish(self, batch_id: str, batch: dict) -> None:
        out, err = [], []
        for n, (custom_id, body) in enumerate(self.items[batch_id]):
            if self.expire_after is not None and n >= self.expire_after:
                err.append({"id": f"batch_req_{n}", "custom_id": custom_id, "response": None,
                            "error": {"code": "batch_expired", "message": "This request could not be executed "
                                      "before the completion window expired."}})
                continue
            status, reply = self.item(custom_id, body, openai_body)
            line = {"id": f"batch_req_{n}", "custom_id": custom_id,
                    "response": {"status_code": status, "request_id": f"req_{n}", "body": reply}, "error": None}
            (out if status == 200 else err).append(line)
        if self.expire_after is not None:
            batch["status"] = "expired"
            self.expire_after = None
        counts = batch["request_counts"]
        counts["completed"], counts["failed"] = len(out), len(err)
        for ref, lines in (("output_file_id", out), ("error_file_id", err)):
            if lines:
                file_id = f"file-{batch_id}-{ref[:3]}"
                data = "".join(json.dumps(line) + "\n" for line in lines).encode()
                if getattr(self, "garbage", False):  # hostile bytes around the real lines
                    data = (b"not json at all\n\xff\xfe\x00\n[1,2]\n" + data
                            + json.dumps({"custom_id": "f" * 64, "response": {"status_code": 200, "body": {}}}).encode()
                            + b"\n" + b'{"custom_id": ' * 1000 + b"\n")
                self.files[file_id] = data
                batch[ref] = file_id

    def item(self, custom_id: str, body: dict, shape: Any) -> tuple[int, dict]:
        n = self.seen.get(custom_id, 0)
        self.seen[custom_id] = n + 1
        if self.script is not None:
            scripted = self.script(custom_id, body, n)
            if scripted is not None:
                return scripted
        return 200, shape(body)

    # ------------------------------------------------------------------ Gemini

    def gemini_create(self, call: Call, route: str) -> Reply:
        if not call.headers.get("x-goog-api-key"):
            return Reply(401, {"error": {"code": 401, "message": "no key", "status": "UNAUTHENTICATED"}})
        batch = call.body["batch"]
        requests = batch["input_config"]["requests"]["requests"]
        batch_id = f"g{len(self.batches) + 1}"
        self.items[batch_id] = [(r["metadata"]["key"], r["request"]) for r in requests]
        self.routes = getattr(self, "routes", {})
        self.routes[batch_id] = route
        self.batches[batch_id] = {
            "name": f"batches/{batch_id}",
            "metadata": {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
                         "model": f"models/{route}", "displayName": batch["display_name"],
                         "createTime": "2026-12-01T00:00:00Z", "state": "BATCH_STATE_PENDING",
                         "batchStats": {"requestCount": str(len(requests)),
                                        "pendingRequestCount": str(len(requests))},
                         "name": f"batches/{batch_id}"}}
        return Reply(200, self.batches[batch_id])

    def gemini_poll(self, batch_id: str) -> Reply:
        self.polls += 1
        operation = self.batches[batch_id]
        meta = operation["metadata"]
        if meta["state"] == "BATCH_STATE_PENDING":
            meta["state"] = "BATCH_STATE_RUNNING"
        elif meta["state"] == "BATCH_STATE_RUNNING" and not self.hold.is_set():
            inlined = []
            for n, (key, request) in enumerate(self.items[batch_id]):
                if self.expire_after is not None and n >= self.expire_after:
                    break
                status, reply = self.item(key, request, lambda body: gemini_body(body, self.routes[batch_id]))
                entry = {"response": reply} if status == 200 else {"error": reply["error"]}
                inlined.append({**entry, "metadata": {"key": key}})
            meta["state"] = "BATCH_STATE_EXPIRED" if self.expire_after is not None else "BATCH_STATE_SUCCEEDED"
            self.expire_after = None
            ok = sum("response" in e for e in inlined)
            meta["batchStats"].update(successfulRequestCount=str(ok), failedRequestCount=str(len(inlined) - ok),
                                      pendingRequestCount="0")
            operation["done"] = True
            operation["response"] = {
                "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput",
                "inlinedResponses": {"inlinedResponses": inlined}}
        return Reply(200, operation)

    # ------------------------------------------------------------------ Anthropic

    def anthropic_create(self, call: Call) -> Reply:
        if call.headers.get("anthropic-version") != "2023-06-01" or not call.headers.get("x-api-key"):
            return Reply(401, {"type": "error", "error": {"type": "authentication_error", "message": "no key"}})
        requests = call.body["requests"]
        batch_id = f"msgbatch_{len(self.batches) + 1}"
        self.items[batch_id] = [(r["custom_id"], r["params"]) for r in requests]
        self.batches[batch_id] = {
            "id": batch_id, "type": "message_batch", "processing_status": "in_progress",
            "request_counts": {"processing": len(requests), "succeeded": 0, "errored": 0, "canceled": 0,
                               "expired": 0},
            "ended_at": None, "created_at": "2026-12-01T00:00:00Z", "expires_at": "2026-12-02T00:00:00Z",
            "cancel_initiated_at": None, "archived_at": None, "results_url": None}
        return Reply(200, self.batches[batch_id])

    def anthropic_poll(self, batch_id: str) -> Reply:
        self.polls += 1
        batch = self.batches[batch_id]
        if batch["processing_status"] == "ended" or self.hold.is_set() or self.polls % 2:
            return Reply(200, batch)
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        lines = []
        for n, (custom_id, params) in enumerate(self.items[batch_id]):
            if self.expire_after is not None and n >= self.expire_after:
                kind = "canceled" if self.cancel else "expired"
                counts[kind] += 1
                lines.append({"custom_id": custom_id, "result": {"type": kind}})
                continue
            status, reply = self.item(custom_id, params, anthropic_body)
            if status == 200:
                counts["succeeded"] += 1
                lines.append({"custom_id": custom_id, "result": {"type": "succeeded", "message": reply}})
            else:
                counts["errored"] += 1
                lines.append({"custom_id": custom_id, "result": {"type": "errored", "error": reply}})
        self.expire_after = None
        self.results[batch_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()
        batch.update(processing_status="ended", request_counts=counts, ended_at="2026-12-01T01:00:00Z",
                     results_url=f"{self.url}/v1/messages/batches/{batch_id}/results")
        return Reply(200, batch)


# ---------------------------------------------------------------------- helpers

N_TASKS = 4


@pytest.fixture
def release(tmp_path):
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", f"doc{i % 2}.txt") for i in range(N_TASKS)]
    return write_release(tmp_path / "release", tasks, {"doc0.txt": "The seal was worn. " * 40,
                                                       "doc1.txt": "The pump failed at 03:14. " * 60})


def overrides(url: str, release: tuple[Path, Path], provider: str = "openai", model_batch: bool = True,
              judge_batch: bool = False, cache: Path | None = None) -> list[str]:
    tasks, corpus = release
    base = f"{url}/v1" if provider == "openai" else url
    out = ["model=custom", f"model.provider={provider}", "model.route=test-model", f"model.base_url={base}",
           f"model.api_key_env={TEST_KEY_ENV}", f"model.batch={str(model_batch).lower()}",
           f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "batch.poll_s=0.01",
           "retry.backoff_base_s=0", "retry.backoff_max_s=0"]
    if provider != "openai":
        out.append("model.stream=false")
    if judge_batch:
        out.append("judge_panel.batch=true")
    if cache is not None:
        out.append(f"cache.dir={cache}")
    return out


def judges(url: str, provider: str = "openai") -> dict:
    base = f"{url}/v1" if provider == "openai" else url
    return {"j1": {"name": "judge-one", "provider": provider, "route": "judge-one", "base_url": base,
                   "api_key_env": TEST_KEY_ENV, "stream": False}}


def rows(run_dir: Path, name: str) -> list[dict]:
    return json.loads((run_dir / name).read_text())


def batch_items(server: BatchServer) -> list[str]:
    return [custom_id for items in server.items.values() for custom_id, _ in items]


# ---------------------------------------------------------------------- tests


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_batch_run_answers_and_judges_every_task_through_the_batch_api(tmp_path, release, test_key, provider):
    with BatchServer() as server:
        cfg = settings(tmp_path, overrides(server.url, release, provider, judge_batch=True),
                       judges=judges(server.url, provider))
        result = run(cfg)
    assert result.exit_code == 0, result.headline
    assert server.sync_calls == [], "batch mode sent a synchronous call"
    assert len(server.batches) == 2  # one for the answers, then one for the judge
    run_dir = Path(cfg.out_dir)
    answers, judgments = rows(run_dir, "responses.json"), rows(run_dir, "judgments.json")
    assert [r["status"] for r in answers] == ["answered"] * N_TASKS
    assert all(r["batched"] and not r["cached"] for r in answers + judgments)
    assert all(any(n.startswith(f"batched: {provider} batch ") for n in r["notes"]) for r in answers)
    assert [r["status"] for r in judgments] == ["scored"] * N_TASKS
    # Usage as the endpoint reported it, input proportional to the prompt.
    for row in answers:
        assert row["usage"]["prompt_tokens"] > 100 and row["usage"]["completion_tokens"] > 0
    if provider != "anthropic":
        assert all(r["usage"]["reasoning_tokens"] == 5 for r in answers)
    # Answers before judges: the judge batch was created after the answer batch had ended.
    first, second = list(server.items)
    assert all(answer_text(body, "test-model").startswith("Answer") for _, body in server.items[first])
    assert all(JUDGE_REPLY not in prompt_of(body) and "Answer for" in prompt_of(body)
               for _, body in server.items[second])
    # The batch ids and every custom_id are in the run folder.
    recorded = json.loads((run_dir / "batches.json").read_text())["batches"]
    assert {r["batch_id"] for r in recorded} == set(server.batches)
    assert sorted(k for r in recorded for k in r["custom_ids"]) == sorted(batch_items(server))
    assert all(r["state"] == "collected" for r in recorded)
    # The key is in none of the files the run wrote, nor in the shared batch records.
    for path in [*run_dir.rglob("*"), *Path(cfg.cache.dir).rglob("*")]:
        if path.is_file():
            assert test_key.encode() not in path.read_bytes(), path


def test_a_batch_item_is_the_synchronous_request_byte_for_byte(tmp_path, release, test_key):
    """Same bytes (streaming off), and the custom_id is the synchronous call's cache key."""
    with BatchServer() as server:
        cfg = settings(tmp_path, [*overrides(server.url, release, judge_batch=False), "stage=answer"])
        assert run(cfg).exit_code == 0
        uploaded = server.files["file-1"]
    from wildtrace.core.prompts import answer_prompt
    from wildtrace.providers.base import Sampling
    from wildtrace.providers.openai import OpenAIProvider
    from wildtrace.runtime.net.attempt import encode_body
    from wildtrace.runtime.run.plan import model_spec

    provider = OpenAIProvider(model_spec(cfg))
    _tasks, corpus = release
    for line in uploaded.splitlines():
        head, body_bytes = line.split(b',"body":', 1)
        body_bytes = body_bytes[:-1]
        custom_id = json.loads(head + b"}")["custom_id"]
        qid = QID.search(json.loads(body_bytes)["messages"][0]["content"]).group(1)
        doc = (corpus / f"doc{int(qid[1:]) % 2}.txt").read_text()
        request = provider.build_request(answer_prompt(f"What failed? [{qid}]", doc), Sampling(0.1, 8192))
        assert body_bytes == encode_body(request.body)
        assert "stream" not in json.loads(body_bytes)
        assert custom_id == cache_key("openai", request.url, "test-model", body_bytes, 0)[0]


@pytest.mark.parametrize("provider, extra, hint", [
    pytest.param("openai", ["model.prompt_cache_key=true"], "prompt_cache_key", id="openai-prompt_cache_key"),
    pytest.param("anthropic", [], "cache_control", id="anthropic-cache_control-1h"),
])
def test_a_batch_item_carries_the_cache_hint_a_synchronous_call_sends(tmp_path, release, test_key, provider,
                                                                      extra, hint):
    """A sweep's batch lines ask the provider to cache their prompts as a synchronous call would (OpenAI's
    prompt_cache_key; Anthropic's cache_control for the hour: the repeats come in the other jobs' batches);
    each custom_id is still the plain request's cache key."""
    import hashlib

    from wildtrace.core.prompts import answer_prompt
    from wildtrace.runtime.net.attempt import encode_body

    with BatchServer() as server:
        cfg = settings(tmp_path, [*overrides(server.url, release, provider), *extra, "stage=answer"])
        cfg.prompt_repeats = 2
        assert run(cfg).exit_code == 0
    _tasks, corpus = release
    base = f"{server.url}/v1/chat/completions" if provider == "openai" else f"{server.url}/v1/messages"
    items = [item for batch in server.items.values() for item in batch]
    assert len(items) == N_TASKS
    for custom_id, body in items:
        qid = QID.search(prompt_of(body)).group(1)
        prompt = answer_prompt(f"What failed? [{qid}]", (corpus / f"doc{int(qid[1:]) % 2}.txt").read_text())
        if provider == "openai":
            plain = {"model": "test-model", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8192,
                     "temperature": 0.1}
            golden = {**plain, "prompt_cache_key": hashlib.sha256(prompt.encode()).hexdigest()}
        else:
            plain = {"model": "test-model", "max_tokens": 8192, "messages": [{"role": "user", "content": prompt}],
                     "temperature": 0.1}
            golden = {**plain, "messages": [{"role": "user", "content": [
                {"type": "text", "text": prompt, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}
        assert json.dumps(body) == json.dumps(golden) and hint in json.dumps(body)
        assert custom_id == cache_key(provider, base, "test-model", encode_body(plain), 0)[0]


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_batch_run_then_synchronous_rerun_sends_nothing_and_the_reverse(tmp_path, release, test_key, provider):
    with BatchServer() as server:
        first = settings(tmp_path / "a", overrides(server.url, release, provider, judge_batch=True,
                                                   cache=tmp_path / "cache1"), judges=judges(server.url, provider))
        assert run(first).exit_code == 0
        sent = len(server.calls)
        sync = settings(tmp_path / "b", overrides(server.url, release, provider, model_batch=False,
                                                  cache=tmp_path / "cache1"), judges=judges(server.url, provider))
        assert run(sync).exit_code == 0
        assert len(server.calls) == sent, "the synchronous rerun sent a request the batch run had paid for"
        cached = rows(Path(sync.out_dir), "responses.json")
        assert all(r["cached"] and r["batched"] and r["status"] == "answered" for r in cached)

        # The reverse: a synchronous run first, then a batch run of the same config sends nothing.
        plain = settings(tmp_path / "c", overrides(server.url, release, provider, model_batch=False,
                                                   cache=tmp_path / "cache2"), judges=judges(server.url, provider))
        assert run(plain).exit_code == 0
        assert len(server.sync_calls) == 2 * N_TASKS
        sent = len(server.calls)
        batched = settings(tmp_path / "d", overrides(server.url, release, provider, judge_batch=True,
                                                     cache=tmp_path / "cache2"), judges=judges(server.url, provider))
        assert run(batched).exit_code == 0
        assert len(server.calls) == sent, "the batch rerun sent a request the synchronous run had paid for"
    assert json.loads((Path(sync.out_dir) / "scores.json").read_text()) == \
        json.loads((Path(first.out_dir) / "scores.json").read_text())


@pytest.mark.parametrize("provider,cancel", [("openai", False), ("anthropic", False), ("anthropic", True),
                                             ("gemini", False)])
def test_expired_or_cancelled_batch_resends_only_its_unfinished_items(tmp_path, release, test_key, provider, cancel):
    with BatchServer() as server:
        server.expire_after, server.cancel = 1, cancel
        cfg = settings(tmp_path, [*overrides(server.url, release, provider), "stage=answer"])
        result = run(cfg)
        first, second = list(server.items)
    assert result.exit_code == 0, result.headline
    done_first = [k for k, _ in server.items[first]][:1]
    assert sorted(k for k, _ in server.items[second]) == sorted(k for k, _ in server.items[first][1:])
    assert not set(done_first) & {k for k, _ in server.items[second]}
    answers = rows(Path(cfg.out_dir), "responses.json")
    assert [r["status"] for r in answers] == ["answered"] * N_TASKS
    assert sorted(r["attempts"] for r in answers) == [1, 2, 2, 2]


def transient_then_ok(custom_id: str, body: dict, n: int) -> tuple[int, dict] | None:
    if "[q1]" in body["messages"][0]["content"] and n == 0:
        return 500, {"error": {"message": "The server had an error", "type": "server_error"}}
    if "[q2]" in body["messages"][0]["content"]:
        return 400, {"error": {"message": "Invalid 'max_tokens'", "type": "invalid_request_error"}}
    return None


def always_500(custom_id: str, body: dict, n: int) -> tuple[int, dict]:
    return 500, {"error": {"message": "The server had an error", "type": "server_error"}}


def refusal_and_empty(custom_id: str, body: dict, n: int) -> tuple[int, dict] | None:
    prompt = body["messages"][0]["content"]
    reply = openai_body(body)
    if "[q0]" in prompt:
        reply["choices"][0]["message"].update(content=None, refusal="I can't help with that.")
        return 200, reply
    if "[q3]" in prompt:
        reply["choices"][0]["message"]["content"] = "   "
        return 200, reply
    return None


def test_item_failures_follow_the_synchronous_retry_rule(tmp_path, release, test_key):
    """A transient item error is sent again in a later batch; a final one is a recorded failure."""
    with BatchServer() as server:
        server.script = transient_then_ok
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer"])
        run(cfg)
    answers = {r["question_id"]: r for r in rows(Path(cfg.out_dir), "responses.json")}
    assert answers["q1"]["status"] == "answered" and answers["q1"]["attempts"] == 2
    assert answers["q2"]["status"] == "failed" and answers["q2"]["reason"] == "http_error"
    assert "Invalid 'max_tokens'" in answers["q2"]["error"] and answers["q2"]["attempts"] == 1
    # q2 was sent once, q1 twice, the others once.
    assert sorted(server.seen.values()) == [1, 1, 1, 2]
    assert server.sync_calls == []


def test_an_item_that_always_fails_is_sent_max_retries_plus_one_times(tmp_path, release, test_key):
    with BatchServer() as server:
        server.script = always_500
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer", "retry.max_retries=2"])
        run(cfg)
    answers = rows(Path(cfg.out_dir), "responses.json")
    assert [r["reason"] for r in answers] == ["retries_exhausted"] * N_TASKS
    assert [r["attempts"] for r in answers] == [3] * N_TASKS
    assert sorted(server.seen.values()) == [3] * N_TASKS and len(server.batches) == 3


def test_refusals_and_empty_outputs_are_failures_as_in_a_synchronous_call(tmp_path, release, test_key):
    with BatchServer() as server:
        server.script = refusal_and_empty
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer"])
        run(cfg)
        assert len(server.batches) == 1  # neither is sent again
    answers = {r["question_id"]: r for r in rows(Path(cfg.out_dir), "responses.json")}
    assert (answers["q0"]["status"], answers["q0"]["reason"]) == ("failed", "refusal")
    assert (answers["q3"]["status"], answers["q3"]["reason"]) == ("failed", "empty_output")
    assert answers["q1"]["status"] == "answered"


@pytest.mark.parametrize("key,value,message", [
    ("model.batch", "true", "provider 'offline' has no batch mode"),
    ("judge_panel.batch", "true", "judge_panel.batch=true: provider 'offline' has no batch mode"),
    ("batch.poll_s", "0", "batch.poll_s must be positive"),
    ("batch.max_wait_h", "-1", "batch.max_wait_h must be positive"),
])
def test_bad_batch_settings_are_refused_naming_the_key(tmp_path, key, value, message):
    extra = [] if key == "model.batch" else ["model=custom", "model.route=x", "model.base_url=http://127.0.0.1:9/v1",
                                             "model.batch=true"]
    with pytest.raises(ConfigError, match=re.escape(message)):
        settings(tmp_path, [*extra, f"{key}={value}"])


@pytest.mark.parametrize("data,max_line,expected", [
    (b'{"a":1}\n{"b":2}\n', 100, [b'{"a":1}', b'{"b":2}']),
    (b'{"a":1}\n{"b":2}', 100, [b'{"a":1}', b'{"b":2}']),
    (b'\n\n{"a":1}\r\n', 100, [b'{"a":1}\r']),
    (b'x' * 50 + b'\n{"a":1}\n', 10, [None, b'{"a":1}']),
    (b'{"a":1}\n' + b'y' * 30, 10, [b'{"a":1}', None]),
])
def test_results_lines_are_bounded(data, max_line, expected):
    import asyncio

    async def pieces():
        for i in range(0, len(data), 3):  # any split gives the same lines
            yield data[i:i + 3]

    async def collect():
        return [line async for line in _split(pieces(), max_line, 1 << 20)]

    assert asyncio.run(collect()) == expected


def test_results_file_past_its_bound_is_not_read(tmp_path):
    import asyncio

    from wildtrace.runtime.batch.base import BatchError

    async def pieces():
        for _ in range(100):
            yield b'{"a":1}\n' * 10

    async def collect():
        return [line async for line in _split(pieces(), 100, 1000)]

    with pytest.raises(BatchError, match="larger than 1000 bytes"):
        asyncio.run(collect())


# ---------------------------------------------------------------------- kill and resume


def command(root: Path, url: str, release: tuple[Path, Path], cache: Path) -> list[str]:
    return [sys.executable, "-m", "wildtrace", f"root={root}", *overrides(url, release, cache=cache),
            "stage=answer", "mlflow.enabled=false", "progress=false", "batch.poll_s=0.05"]


def test_killed_while_a_batch_is_pending_resumes_by_polling_that_batch(tmp_path, release):
    env = {**os.environ, TEST_KEY_ENV: "sk-test-batch-resume", "PYTHONPATH": os.pathsep.join(sys.path)}
    cache = tmp_path / "cache"
    with BatchServer() as server:
        server.hold.set()
        cmd = command(tmp_path / "out", server.url, release, cache)
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        found: list[Path] = []
        while not found and time.monotonic() < deadline and first.poll() is None:
            found = list((tmp_path / "out").glob("runs/*/*/batches.json"))
            time.sleep(0.05)
        assert found, first.communicate()
        while server.polls == 0 and time.monotonic() < deadline:  # the batch is pending and being polled
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()
        recorded = json.loads(found[0].read_text())["batches"]
        assert [r["batch_id"] for r in recorded] == ["batch_1"]
        assert sorted(recorded[0]["custom_ids"]) == sorted(batch_items(server))
        assert len(recorded[0]["custom_ids"]) == N_TASKS

        server.hold.clear()
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stderr
    assert list(server.batches) == ["batch_1"], "the resumed run created a second batch"
    assert server.sync_calls == [] and len(server.files) == 2  # one upload and its output file
    run_dir = Path(re.search(r"^run dir: (.+)$", second.stdout, re.M).group(1))
    answers = rows(run_dir, "responses.json")
    assert [r["status"] for r in answers] == ["answered"] * N_TASKS
    assert "resuming openai batch batch_1" in second.stderr
    assert json.loads((run_dir / "batches.json").read_text())["batches"][0]["state"] == "collected"


def test_only_judges_in_batch_answers_first_then_one_judge_batch(tmp_path, release, test_key):
    with BatchServer() as server:
        cfg = settings(tmp_path, overrides(server.url, release, model_batch=False, judge_batch=True),
                       judges=judges(server.url))
        assert run(cfg).exit_code == 0
    assert len(server.sync_calls) == N_TASKS and all(c.body["model"] == "test-model" for c in server.sync_calls)
    assert len(server.batches) == 1 and all(b["model"] == "judge-one" for _, b in server.items["batch_1"])
    answers, judgments = rows(Path(cfg.out_dir), "responses.json"), rows(Path(cfg.out_dir), "judgments.json")
    assert not any(r["batched"] or r["cached"] for r in answers)
    assert all(r["batched"] and r["status"] == "scored" for r in judgments) and len(judgments) == N_TASKS


def test_progress_line_shows_each_batch_state_and_counts(tmp_path, release, test_key, caplog):
    caplog.set_level("INFO")
    with BatchServer() as server:
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer"], progress=True)
        assert run(cfg).exit_code == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress:")]
    assert lines and "batch model batch_1: completed (total 4, completed 4, failed 0)" in lines[-1]
    states = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch model batch_1: ")]
    assert [s.split(": ")[1].split(" ")[0] for s in states] == ["in_progress", "finalizing", "completed"]


def test_a_batch_past_max_wait_fails_its_items_and_a_rerun_polls_it_again(tmp_path, release, test_key):
    with BatchServer() as server:
        server.hold.set()
        cache = tmp_path / "cache"
        first = settings(tmp_path / "a", [*overrides(server.url, release, cache=cache),
                                          "stage=answer", "batch.max_wait_h=0.00001"])
        run(first)
        answers = rows(Path(first.out_dir), "responses.json")
        assert [r["reason"] for r in answers] == ["batch_timeout"] * N_TASKS
        assert "batch_1" in answers[0]["error"] and "max_wait_h" in answers[0]["error"]
        server.hold.clear()
        second = settings(tmp_path / "b", [*overrides(server.url, release, cache=cache), "stage=answer"])
        assert run(second).exit_code == 0
    assert list(server.batches) == ["batch_1"]
    assert [r["status"] for r in rows(Path(second.out_dir), "responses.json")] == ["answered"] * N_TASKS


def test_results_url_on_another_host_never_gets_the_key(tmp_path, release, test_key):
    with LoopbackServer(lambda call: Reply(200, b"")) as elsewhere, BatchServer() as server:
        original = server.anthropic_poll

        def poll(batch_id: str) -> Reply:
            reply = original(batch_id)
            if reply.body.get("results_url"):
                reply.body["results_url"] = f"{elsewhere.url}/v1/messages/batches/{batch_id}/results"
            return reply

        server.anthropic_poll = poll
        cfg = settings(tmp_path, [*overrides(server.url, release, "anthropic"), "stage=answer", "retry.max_retries=1"])
        run(cfg)
    assert elsewhere.calls == []
    answers = rows(Path(cfg.out_dir), "responses.json")
    assert [r["reason"] for r in answers] == ["retries_exhausted"] * N_TASKS
    assert "results_url is not on" in answers[0]["error"]
    assert test_key not in (Path(cfg.out_dir) / "responses.json").read_text()


def test_stage_judge_sends_the_given_answers_judgments_in_batch(tmp_path, release, test_key):
    responses = tmp_path / "given.json"
    responses.write_text(json.dumps([{"question_id": f"q{i}", "status": "answered", "response": f"Answer {i}"}
                                     for i in range(N_TASKS - 1)]))
    with BatchServer() as server:
        cfg = settings(tmp_path, [*overrides(server.url, release, model_batch=False, judge_batch=True),
                                  "stage=judge", f"responses={responses}"], judges=judges(server.url))
        assert run(cfg).exit_code in (0, 1)
    assert server.sync_calls == [] and len(server.batches) == 1
    assert len(server.items["batch_1"]) == N_TASKS - 1  # the task without an answer is not judged
    judgments = rows(Path(cfg.out_dir), "judgments.json")
    assert [j["status"] for j in judgments] == ["scored"] * (N_TASKS - 1) and all(j["batched"] for j in judgments)


@pytest.mark.parametrize("status,body,reason", [
    (404, {"error": {"message": "Not found: /v1/batches", "type": "not_found_error"}}, "http_error"),
    (429, {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                     "code": "insufficient_quota"}}, "quota_exhausted"),
])
def test_a_batch_the_provider_refuses_to_create_fails_its_items_with_its_words(tmp_path, release, test_key,
                                                                               status, body, reason):
    with BatchServer() as server:
        server.respond_create = server.openai_create
        server.openai_create = lambda call: Reply(status, body)
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer"])
        result = run(cfg)
    assert result.exit_code != 0
    answers = rows(Path(cfg.out_dir), "responses.json")
    assert [r["reason"] for r in answers] == [reason] * N_TASKS
    assert body["error"]["message"] in answers[0]["error"]
    assert server.sync_calls == []
    assert len([c for c in server.calls if c.path == "/v1/batches"]) == 1  # final: not retried


def test_sigint_while_a_batch_is_pending_stops_waiting_and_keeps_the_batch_open(tmp_path, release):
    env = {**os.environ, TEST_KEY_ENV: "sk-test-batch-sigint", "PYTHONPATH": os.pathsep.join(sys.path)}
    with BatchServer() as server:
        server.hold.set()
        cmd = command(tmp_path / "out", server.url, release, tmp_path / "cache")
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while server.polls == 0 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=120)
        assert first.returncode != 0, err
        assert "resume with: python -m wildtrace" in out
        records = list((tmp_path / "cache" / "batches").glob("openai-batch_1.json"))
        assert records and json.loads(records[0].read_text())["state"] == "in_progress"
        server.hold.clear()
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stderr
    assert list(server.batches) == ["batch_1"] and server.sync_calls == []


def test_a_failed_batch_sends_its_items_again_in_the_next_round(tmp_path, release, test_key):
    with BatchServer() as server:
        server.fail_next = True
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer"])
        assert run(cfg).exit_code == 0
    assert list(server.batches) == ["batch_1", "batch_2"]
    assert sorted(k for k, _ in server.items["batch_1"]) == sorted(k for k, _ in server.items["batch_2"])
    answers = rows(Path(cfg.out_dir), "responses.json")
    assert [(r["status"], r["attempts"]) for r in answers] == [("answered", 2)] * N_TASKS


def test_hostile_result_files_are_read_around(tmp_path, release, test_key):
    """Lines that are not JSON, not objects, for a custom_id never sent, or unterminated: ignored."""
    with BatchServer() as server:
        server.garbage = True
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer"])
        assert run(cfg).exit_code == 0
    assert [r["status"] for r in rows(Path(cfg.out_dir), "responses.json")] == ["answered"] * N_TASKS
    assert len(server.batches) == 1


def test_a_result_line_past_its_bound_is_skipped_and_its_item_sent_again(tmp_path, release, test_key):
    def huge_once(custom_id: str, body: dict, n: int) -> tuple[int, dict] | None:
        if "[q1]" in body["messages"][0]["content"] and n == 0:
            reply = openai_body(body)
            reply["choices"][0]["message"]["content"] = "x" * (200 << 10)
            return 200, reply
        return None

    with BatchServer() as server:
        server.script = huge_once
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer", "max_response_mb=0.05"])
        assert run(cfg).exit_code == 0
    answers = {r["question_id"]: r for r in rows(Path(cfg.out_dir), "responses.json")}
    assert answers["q1"]["status"] == "answered" and answers["q1"]["attempts"] == 2
    assert answers["q1"]["response"].startswith("Answer for q1")
    assert [len(items) for items in server.items.values()] == [N_TASKS, 1]


@pytest.mark.parametrize("cap", ["budget.max_usd=5", "model.max_usd=5"])
def test_a_spend_cap_and_batch_mode_together_need_a_batch_price(cap):
    """A capped batch item is reserved at the batch price (tests/run/test_batch_cap.py): with one, the
    combination is a config like any other; without one, it is refused naming the missing key."""
    from conftest import compose_config
    from wildtrace.config import ConfigError, to_settings

    accepted = to_settings(compose_config(["model=gpt-4.1", "model.batch=true", cap]))
    assert accepted.model.batch and accepted.model.price.batch_discount == 0.5
    with pytest.raises(ConfigError, match=r"model\.batch=true with .*max_usd: model\.price\.batch_discount is not set"):
        to_settings(compose_config(["model=gpt-4.1", "model.batch=true", cap, "model.price.batch_discount=null"]))


class BatchServerWithFaults(BatchServer):
    """``lost_polls``: how many polls of the first batch answer 404 (a proxy or replica that does not know it yet);
    ``errors_first``: every item's results file holds a transient error line before its reply."""

    lost_polls = 0
    errors_first = False

    def openai_poll(self, batch_id: str) -> Reply:
        self.not_found = getattr(self, "not_found", {})
        if batch_id == "batch_1" and self.not_found.get(batch_id, 0) < self.lost_polls:
            self.not_found[batch_id] = self.not_found.get(batch_id, 0) + 1
            return Reply(404, {"error": {"message": f"No batch found with id '{batch_id}'.",
                                         "type": "invalid_request_error"}})
        return super().openai_poll(batch_id)

    def openai_finish(self, batch_id: str, batch: dict) -> None:
        super().openai_finish(batch_id, batch)
        if self.errors_first and batch.get("output_file_id"):
            file_id = batch["output_file_id"]
            errors = [json.dumps({"id": "batch_req_e", "custom_id": json.loads(line)["custom_id"],
                                  "response": {"status_code": 500, "request_id": "req_e",
                                               "body": {"error": {"message": "server error", "type": "server"}}},
                                  "error": None}) + "\n" for line in self.files[file_id].decode().splitlines()]
            self.files[file_id] = "".join(errors).encode() + self.files[file_id]


@pytest.mark.parametrize("lost_polls, batches", [(1, ["batch_1"]), (2, ["batch_1", "batch_2"])])
def test_one_404_on_a_poll_is_read_again_before_anything_is_sent_again(tmp_path, release, test_key, lost_polls,
                                                                       batches):
    """A batch is taken as gone only when a second read, a poll later, says 404 too: one 404 re-sends nothing."""
    with BatchServerWithFaults() as server:
        server.lost_polls = lost_polls
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer"])
        assert run(cfg).exit_code == 0
    assert list(server.batches) == batches
    assert [r["status"] for r in rows(Path(cfg.out_dir), "responses.json")] == ["answered"] * N_TASKS


def test_a_reply_line_wins_over_an_error_line_for_the_same_custom_id(tmp_path, release, test_key):
    """Several result lines for one item: the reply is taken (it was paid for), the item never sent again."""
    with BatchServerWithFaults() as server:
        server.errors_first = True
        cfg = settings(tmp_path, [*overrides(server.url, release), "stage=answer"])
        assert run(cfg).exit_code == 0
    assert list(server.batches) == ["batch_1"] and sorted(server.seen.values()) == [1] * N_TASKS
    answers = rows(Path(cfg.out_dir), "responses.json")
    assert [(r["status"], r["attempts"]) for r in answers] == [("answered", 1)] * N_TASKS


@pytest.mark.parametrize("ident", ["batch_abc123", "msgbatch_01HkcTjaV5uDC8jWR4ZsDV8d", "file-XjGx.jsonl~1",
                                   "a/b?c#d", "id with space%", "caf\u00e9-\u00fc", "", "../../etc"])
def test_a_batch_id_is_quoted_as_urllib_quotes_a_path_segment(ident):
    import urllib.parse

    from wildtrace.providers.batch import segment
    assert segment(ident) == urllib.parse.quote(ident, safe="")


class _Held:
    """An item's bytes held in memory: a batch format never reads files, so no spool is needed here."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_bytes(self) -> bytes:
        return self.data


def _laid_out(pieces) -> bytes:
    from wildtrace.providers.batch import Item
    return b"".join(p.path.read_bytes() if isinstance(p, Item) else p for p in pieces)


def _formats():
    from wildtrace.providers.anthropic.batch import body as anthropic_body
    from wildtrace.providers.gemini.batch import body as gemini_body
    from wildtrace.providers.openai import OpenAIBatch
    openai = OpenAIBatch(None, "http://127.0.0.1:1/v1/chat/completions", 1 << 20)
    return {"openai": openai.body, "anthropic": anthropic_body, "gemini": gemini_body}


@pytest.mark.parametrize(("provider", "golden"), [
    ("openai", b'{"custom_id":"k1","method":"POST","url":"/v1/chat/completions","body":{"m": 1.50}}\n'
               b'{"custom_id":"k2","method":"POST","url":"/v1/chat/completions","body":{"m":2}}\n'),
    ("anthropic", b'{"requests":[{"custom_id": "k1","params":{"m": 1.50}},{"custom_id": "k2","params":{"m":2}}]}'),
    ("gemini", b'{"batch":{"display_name": "wildtrace-k1-2","input_config":{"requests":{"requests":['
               b'{"request":{"m": 1.50},"metadata":{"key": "k1"}},{"request":{"m":2},"metadata":{"key": "k2"}}]}}}}'),
])
def test_a_batch_body_splices_each_items_exact_bytes(provider, golden):
    """The pure formats lay the body out; each item's bytes (its cache key's bytes) go in untouched."""
    from wildtrace.providers.batch import Item
    items = [Item("k1", _Held(b'{"m": 1.50}'), 11), Item("k2", _Held(b'{"m":2}'), 7)]
    assert _laid_out(_formats()[provider](items)) == golden
    assert json.loads(golden.splitlines()[0]) is not None  # valid JSON (the first line of OpenAI's JSONL)
