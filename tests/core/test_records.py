"""The records' types and the rows they make: one status type per family, one provenance type, a row
layout that stays put (readers of responses.json and judgments.json depend on it), old rows read back."""

import json

import pytest

from wildtrace.core.caps import CapKind, Caps, decide
from wildtrace.core.judging import ReplyReason
from wildtrace.core.records import (PROVENANCE_KEYS, AnswerRecord, AnswerStatus, CallProvenance, CallResult,
                                    FailReason, JudgmentRecord, JudgmentStatus, LogStatus, RunStatus, Scope, TaskStatus,
                                    Usage)
from wildtrace.core.tasks import RubricItem, Task
from wildtrace.runtime.batch.ledger import BatchState
from wildtrace.runtime.checks.catalog import ListingStatus
from wildtrace.runtime.run.pipeline import answer_record, judgment_record
from wildtrace.runtime.checks.preflight import CheckStatus
from wildtrace.runtime.net.retry import Verdict
from wildtrace.tracking.process import ToChild, ToParent

#: responses.json's keys, in the order every run since the cost fields has written them.
ANSWER_KEYS = ["question_id", "status", "caps", "document", "reason", "response", "finish_reason", "usage", "error",
               "attempts", "latency_s", "started_at", "http_status", "prompt_sha256", "prompt_ref", "raw",
               "reasoning", "served_model", "cached", "original_latency_s", "temperature_sent", "notes", "cost_usd",
               "original_cost_usd", "batched"]
#: judgments.json's keys, in order.
JUDGMENT_KEYS = ["question_id", "judge", "status", "reason", "total", "score", "parsed", "reply", "error", "usage",
                 "attempts", "latency_s", "http_status", "prompt_sha256", "started_at", "prompt", "raw", "reasoning",
                 "served_model", "cached", "original_latency_s", "temperature_sent", "notes", "cost_usd",
                 "original_cost_usd", "batched"]

TASK = Task("q1", "What happened?", "doc.txt", (RubricItem("the event", 100.0),))
CAPS = decide(1000, 0, Caps(en=2000, cjk=1000))
RESULT = CallResult(True, '{"total": 80}', None, None, "stop", Usage(prompt_tokens=10, completion_tokens=5), 2, 1.5,
                    200, {"id": "x", "choices": []}, started_at=1_700_000_000.0, reasoning="thought",
                    served_model="m-2026", cached=True, original_latency_s=3.0, temperature_sent="ignored",
                    notes=("nulled a NaN",), cost_usd=0.0, original_cost_usd=0.25, batched=True)


@pytest.mark.parametrize("family, values", [
    (AnswerStatus, ["answered", "failed", "out_of_context_scope", "budget_exhausted", "missing"]),
    (JudgmentStatus, ["scored", "unavailable", "budget_exhausted"]),
    (TaskStatus, ["scored", "unscored", "failed", "out_of_context_scope", "missing", "budget_exhausted"]),
    (FailReason, ["refusal", "empty_output", "context_length", "retries_exhausted", "http_error", "transport_error",
                  "bad_response", "budget_exhausted", "quota_exhausted", "response_too_large", "served_model_mismatch",
                  "batch_timeout"]),
    (RunStatus, ["finished", "partial", "failed"]),
    (LogStatus, ["running", "logged", "partial", "not_logged"]),
    (Scope, ["in_scope", "out_of_context_scope"]),
    (ReplyReason, ["empty_reply", "no_numeric_total", "ambiguous_total"]),
    (CapKind, ["en", "cjk"]),
    (Verdict, ["ok", "retry", "quota", "fail"]),
    (CheckStatus, ["ok", "not_sent"]),
    (ListingStatus, ["listed", "listed as", "missing", "retired", "no model list", "-"]),
    (BatchState, ["created", "collected", "missing"]),  # batches.json holds them beside the providers' own words
    (ToChild, ["run_started", "task_done", "run_finished"]),
    (ToParent, ["log", "started", "finished"]),
])
def test_each_family_keeps_the_strings_old_runs_hold(family, values):
    assert [m.value for m in family] == values
    assert [json.dumps(m) for m in family] == [json.dumps(v) for v in values]  # the files hold the plain strings
    assert all(family(v) == v and str(family(v)) == v for v in values)  # an old file's string reads back


def test_a_name_means_one_value_across_families():
    """The same member name in two families is the same string (JUDGED/SCORED, two QUOTAs, two OUT_OF_CONTEXTs)."""
    by_name: dict[str, set[str]] = {}
    for family in (AnswerStatus, JudgmentStatus, TaskStatus, FailReason, RunStatus, LogStatus, Scope, ListingStatus,
                   BatchState, ToParent):
        for member in family:
            by_name.setdefault(member.name, set()).add(member.value)
    assert {name: values for name, values in by_name.items() if len(values) > 1} == {}


def test_answer_row_layout_is_pinned():
    row = answer_record(TASK, CAPS, {"corpus_file": "doc.txt", "sha256": "ab"}, "sha", "ref", RESULT).to_dict()
    assert list(row) == ANSWER_KEYS
    assert row == {
        "question_id": "q1", "status": "answered", "reason": None, "response": '{"total": 80}',
        "caps": {"doc_chars": 1000, "ideographs": 0, "cap_kind": "en", "cap": 2000, "scope": "in_scope"},
        "document": {"corpus_file": "doc.txt", "sha256": "ab"}, "finish_reason": "stop",
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "reasoning_tokens": None, "cached_tokens": None,
                  "cache_write_tokens": None, "cache_write_1h_tokens": None},
        "error": None, "attempts": 2, "latency_s": 1.5, "started_at": 1_700_000_000.0, "http_status": 200,
        "prompt_sha256": "sha", "prompt_ref": "ref", "raw": {"id": "x", "choices": []}, "reasoning": "thought",
        "served_model": "m-2026", "cached": True, "original_latency_s": 3.0, "temperature_sent": "ignored",
        "notes": ["nulled a NaN"], "cost_usd": 0.0, "original_cost_usd": 0.25, "batched": True}
    assert type(row["status"]) in (str, AnswerStatus) and json.loads(json.dumps(row))["status"] == "answered"


def test_judgment_row_layout_is_pinned():
    record = judgment_record(TASK, "j1", "the judge prompt", RESULT)
    row = record.to_dict()
    assert list(row) == JUDGMENT_KEYS
    assert (row["status"], row["total"], row["score"], row["prompt"]) == ("scored", 80.0, 0.8, "the judge prompt")
    assert {k: row[k] for k in PROVENANCE_KEYS} == {
        "raw": {"id": "x", "choices": []}, "reasoning": "thought", "served_model": "m-2026", "cached": True,
        "original_latency_s": 3.0, "temperature_sent": "ignored", "notes": ["nulled a NaN"], "cost_usd": 0.0,
        "original_cost_usd": 0.25, "batched": True}


def test_answer_and_judgment_share_one_provenance_type():
    answer = answer_record(TASK, CAPS, {}, "sha", "ref", RESULT)
    judgment = judgment_record(TASK, "j1", "p", RESULT)
    assert answer.provenance == judgment.provenance == CallProvenance.of(RESULT)
    assert answer.provenance.notes == ("nulled a NaN",)
    assert list(ANSWER_KEYS[-len(PROVENANCE_KEYS):]) == list(JUDGMENT_KEYS[-len(PROVENANCE_KEYS):]) \
        == list(PROVENANCE_KEYS)


def test_a_row_reads_back_as_the_record_it_was():
    for record in (answer_record(TASK, CAPS, {"corpus_file": "doc.txt", "sha256": "ab"}, "s", "r", RESULT),
                   judgment_record(TASK, "j1", "p", RESULT)):
        row = json.loads(json.dumps(record.to_dict()))  # as a later process reads the file
        back = type(record).from_row(row)
        assert back == record and list(back.to_dict()) == list(row) and back.to_dict() == row
        assert isinstance(back.status, (AnswerStatus, JudgmentStatus))


# Rows as runs before the cost, batch and temperature fields wrote them (no cost_usd, original_cost_usd,
# batched, temperature_sent, notes; no prompt_ref before prompts by reference).
OLD_ANSWER = {"question_id": "q7", "status": "failed", "caps": {"doc_chars": 5, "ideographs": 0, "cap_kind": "en",
              "cap": 10, "scope": "in_scope"}, "document": {"corpus_file": "a.txt", "sha256": "cd"},
              "reason": "retries_exhausted", "response": None, "finish_reason": None, "usage": {}, "error": "HTTP 503",
              "attempts": 3, "latency_s": 9.0, "started_at": 1.0, "http_status": 503, "prompt_sha256": "e",
              "raw": {"error": "busy"}, "reasoning": None, "served_model": None, "cached": False,
              "original_latency_s": None}
OLD_JUDGMENT = {"question_id": "q7", "judge": "j2", "status": "unavailable", "reason": "no_numeric_total",
                "total": None, "score": None, "parsed": None, "reply": "hm", "error": None,
                "usage": {"prompt_tokens": 3}, "attempts": 1, "latency_s": 0.5, "http_status": 200,
                "prompt_sha256": "f", "started_at": 2.0, "prompt": "judge this", "raw": {"choices": []}}


@pytest.mark.parametrize("cls, old", [(AnswerRecord, OLD_ANSWER), (JudgmentRecord, OLD_JUDGMENT)])
def test_an_old_row_reads_back(cls, old):
    record = cls.from_row(old)
    row = record.to_dict()
    assert {k: row[k] for k in old} == old  # everything the old row said is kept
    assert {k: row[k] for k in row if k not in old} == {  # the newer keys take their defaults
        k: v for k, v in {"prompt_ref": None, "reasoning": None, "served_model": None, "cached": False,
                          "original_latency_s": None, "temperature_sent": None, "notes": [], "cost_usd": None,
                          "original_cost_usd": None, "batched": False}.items() if k in row and k not in old}
    assert list(row) == (ANSWER_KEYS if cls is AnswerRecord else JUDGMENT_KEYS)
    assert record.status == old["status"] and record.provenance.raw == old["raw"]


def test_an_unknown_status_is_refused_naming_it():
    with pytest.raises(ValueError, match="'answred'"):
        AnswerRecord.from_row({**OLD_ANSWER, "status": "answred"})
