"""Typed outcome records: one per task answer, one per (task, judge) call.

Failures are outcomes with a status and a reason — never substituted text, never a
silent zero. These rows are what responses.json, judgments.json, scores.json and the
MLflow tables are made of, and what a later report reads back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum
from typing import Any


def plain(record: Any) -> dict:
    """A record as a plain dict, field by field (``dataclasses.asdict`` deep-copies every value:
    32 µs a judgment row against 9 µs, measured). Lists and dicts are copied one level deep,
    so a row never aliases the record's own containers."""
    out = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if is_dataclass(value) and not isinstance(value, type):
            value = plain(value)
        elif isinstance(value, list):
            value = list(value)
        elif isinstance(value, dict):
            value = dict(value)
        out[f.name] = value
    return out


class Scope(StrEnum):
    """A caps decision's verdict (spec §3): the document fits the model's cap, or it does not."""

    IN_SCOPE = "in_scope"
    OUT_OF_CONTEXT = "out_of_context_scope"


class AnswerStatus(StrEnum):
    """A responses.json row's ``status``."""

    ANSWERED = "answered"
    FAILED = "failed"
    OUT_OF_CONTEXT = Scope.OUT_OF_CONTEXT.value  # not sent: the caps decision said so
    #: Not sent: its worst-case cost did not fit the spend cap (budget.max_usd / <endpoint>.max_usd).
    #: Not a failure of the model, never cached.
    BUDGET_EXHAUSTED = "budget_exhausted"
    MISSING = "missing"  # stage=judge: the responses file has no row for the task


class JudgmentStatus(StrEnum):
    """A judgments.json row's ``status``."""

    SCORED = "scored"  # a usable total was read from the reply
    UNAVAILABLE = "unavailable"  # the call failed or the reply held no usable total (never counted as 0)
    BUDGET_EXHAUSTED = AnswerStatus.BUDGET_EXHAUSTED.value  # not sent: the spend cap held it back


class TaskStatus(StrEnum):
    """A task's ``status`` in scores.json: its answer's, with ``answered`` split by the panel's outcome."""

    SCORED = JudgmentStatus.SCORED.value  # at least one judge gave a score
    UNSCORED = "unscored"  # answered, but no judge gave a usable score
    FAILED = AnswerStatus.FAILED.value
    OUT_OF_CONTEXT = AnswerStatus.OUT_OF_CONTEXT.value
    MISSING = AnswerStatus.MISSING.value
    BUDGET_EXHAUSTED = AnswerStatus.BUDGET_EXHAUSTED.value  # the answer or a judge call was held back by the cap


class FailReason(StrEnum):
    """Why a call failed (``CallResult.reason`` and a row's ``reason``; a row may also hold the judge
    reply's reason (core/judging.py), the caps rule's words or a served-model mismatch)."""

    REFUSAL = "refusal"
    EMPTY_OUTPUT = "empty_output"
    CONTEXT_LENGTH = "context_length"
    RETRIES_EXHAUSTED = "retries_exhausted"
    HTTP_ERROR = "http_error"
    TRANSPORT_ERROR = "transport_error"
    BAD_RESPONSE = "bad_response"
    BUDGET_EXHAUSTED = AnswerStatus.BUDGET_EXHAUSTED.value  # not sent: the spend cap held it back
    QUOTA_EXHAUSTED = "quota_exhausted"  # a quota / spend-limit / billing refusal: never cured by retrying
    RESPONSE_TOO_LARGE = "response_too_large"


class RunStatus(StrEnum):
    """How a run ended (``RunEnd.status``, run_stats.json's ``status``)."""

    FINISHED = "finished"
    PARTIAL = "partial"  # stopped by a signal or a storage failure: the files hold what was done
    FAILED = "failed"  # raised before its files were complete


@dataclass(frozen=True)
class Usage:
    """Token counts as the provider reports them (None where it reports nothing)."""

    prompt_tokens: int | None = None  # input tokens
    completion_tokens: int | None = None  # output tokens (reasoning included where the provider counts it so)
    reasoning_tokens: int | None = None  # reasoning/thinking tokens, where reported separately
    cached_tokens: int | None = None  # input tokens read from the provider's prompt cache (a part of prompt_tokens)

    def to_dict(self) -> dict:
        """Plain dict for JSON rows."""
        return plain(self)


@dataclass(frozen=True)
class Completion:
    """A provider's 2xx reply, parsed: answer text (or None), why it stopped, a refusal.

    ``reasoning`` is recorded, never judged: the answer ``text`` never contains it.
    """

    text: str | None  # the answer (reasoning split off), None when the reply carries none
    finish_reason: str | None  # the provider's own stop/finish reason
    usage: Usage = field(default_factory=Usage)  # token counts
    refusal: str | None = None  # the provider's refusal signal or message, if any
    reasoning: str | None = None  # reasoning text (reasoning_content, thinking blocks, thought parts, <think>)
    served_model: str | None = None  # model the response says answered (OpenAI/Anthropic model, Gemini modelVersion)


@dataclass(frozen=True)
class CallResult:
    """One logical call (all its attempts): the outcome the rest of the harness sees."""

    ok: bool
    text: str | None
    reason: str | None
    error: str | None
    finish_reason: str | None
    usage: Usage
    attempts: int
    latency_s: float
    http_status: int | None
    raw: Any  # the provider's JSON (or error body) as received, non-finite numbers as null
    started_at: float | None = None  # Unix time the first attempt began (for traces and reports)
    reasoning: str | None = None  # reasoning text returned beside the answer; recorded, never judged
    served_model: str | None = None  # the model the response names
    cached: bool = False  # served from the outcome cache (started_at / latency_s are then this run's look-up)
    original_latency_s: float | None = None  # when cached: the paid call's latency
    temperature_sent: bool | str | None = None  # False: rejected and omitted; "ignored": sent, documented as ignored
    notes: tuple[str, ...] = ()  # what the harness changed on the way (non-finite numbers nulled, …)
    cost_usd: float | None = None  # this run's cost of the call (0 when cached); None: unknown
    original_cost_usd: float | None = None  # when cached: what the paid call cost
    batched: bool = False  # sent through the provider's batch API (its batch discount applies)


@dataclass
class AnswerRecord:
    """A task's row in responses.json."""

    question_id: str
    status: str
    caps: dict
    document: dict = field(default_factory=dict)  # corpus_file, sha256: the document by reference
    reason: str | None = None
    response: str | None = None
    finish_reason: str | None = None
    usage: dict = field(default_factory=dict)
    error: str | None = None
    attempts: int = 0
    latency_s: float | None = None
    started_at: float | None = None
    http_status: int | None = None
    prompt_sha256: str | None = None
    prompt_ref: str | None = None  # the prompt with the document replaced by its reference
    raw: Any = None
    reasoning: str | None = None  # reasoning text returned beside the answer (never judged)
    served_model: str | None = None  # the model the response says answered
    cached: bool = False  # served from the outcome cache in this run
    original_latency_s: float | None = None  # when cached: the paid call's latency
    temperature_sent: bool | str | None = None  # False: rejected and omitted; "ignored": sent, documented as ignored
    notes: list[str] = field(default_factory=list)  # what the harness changed on the way
    cost_usd: float | None = None  # what this call cost in this run (0 when cached); None: unknown
    original_cost_usd: float | None = None  # when cached: what the paid call cost
    batched: bool = False  # sent through the provider's batch API (its batch discount applies)

    def to_dict(self) -> dict:
        """Plain dict for JSON rows."""
        return plain(self)


@dataclass
class JudgmentRecord:
    """One (task, judge) row in judgments.json."""

    question_id: str
    judge: str
    status: str
    reason: str | None
    total: float | None
    score: float | None
    parsed: dict | None
    reply: str | None
    error: str | None
    usage: dict
    attempts: int
    latency_s: float | None
    http_status: int | None
    prompt_sha256: str
    started_at: float | None = None
    prompt: str = ""  # the full judge prompt: small, and what an auditor needs to see
    raw: Any = None
    reasoning: str | None = None  # reasoning text returned beside the answer (never judged)
    served_model: str | None = None  # the model the response says answered
    cached: bool = False  # served from the outcome cache in this run
    original_latency_s: float | None = None  # when cached: the paid call's latency
    temperature_sent: bool | str | None = None  # False: rejected and omitted; "ignored": sent, documented as ignored
    notes: list[str] = field(default_factory=list)  # what the harness changed on the way
    cost_usd: float | None = None  # what this call cost in this run (0 when cached); None: unknown
    original_cost_usd: float | None = None  # when cached: what the paid call cost
    batched: bool = False  # sent through the provider's batch API (its batch discount applies)

    def to_dict(self) -> dict:
        """Plain dict for JSON rows."""
        return plain(self)
