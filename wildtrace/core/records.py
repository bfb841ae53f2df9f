"""Typed outcome records: one per task answer, one per (task, judge) call.

Failures are outcomes with a status and a reason — never substituted text, never a
silent zero. These rows are what responses.json, judgments.json, scores.json and the
MLflow tables are made of, and what a later report reads back.
"""

from __future__ import annotations

from collections.abc import Mapping
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


class Verdict(StrEnum):
    """What runtime/net/retry.py's ``classify`` says of one attempt's outcome."""

    OK = "ok"  # a 2xx: nothing to retry
    RETRY = "retry"  # transient: try again after ``retry_hint`` or backoff
    QUOTA = "quota"  # a quota, spend limit or billing stop: no retry can cure it today
    FAIL = "fail"  # final: the request itself is wrong (4xx), or the server said not to retry


class FailReason(StrEnum):
    """Why a call failed (``CallResult.reason`` and a row's ``reason``; a row may also hold the judge
    reply's reason (core/judging.py) or the caps rule's words)."""

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
    SERVED_MODEL_MISMATCH = "served_model_mismatch"  # another model answered (the name is the row's served_model)
    BATCH_TIMEOUT = "batch_timeout"  # a batch not finished within batch.max_wait_h (a rerun polls it again)


class RunStatus(StrEnum):
    """How a run ended (``RunEnd.status``, run_stats.json's ``status``)."""

    FINISHED = "finished"
    PARTIAL = "partial"  # stopped by a signal or a storage failure: the files hold what was done
    FAILED = "failed"  # raised before its files were complete


class LogStatus(StrEnum):
    """A run's MLflow state, as its ``mlflow.json`` says."""

    RUNNING = "running"  # logging begun
    LOGGED = "logged"  # complete
    PARTIAL = RunStatus.PARTIAL.value  # complete, for a partial run
    NOT_LOGGED = "not_logged"  # failed: ``python -m wildtrace.upload`` completes it


@dataclass(frozen=True)
class Usage:
    """Token counts as the provider reports them (None where it reports nothing)."""

    prompt_tokens: int | None = None  # input tokens
    completion_tokens: int | None = None  # output tokens (reasoning included where the provider counts it so)
    reasoning_tokens: int | None = None  # reasoning/thinking tokens, where reported separately
    cached_tokens: int | None = None  # input tokens read from the provider's prompt cache (a part of prompt_tokens)
    cache_write_tokens: int | None = None  # input tokens written to the prompt cache (a part of prompt_tokens)
    cache_write_1h_tokens: int | None = None  # of those, written for one hour (Anthropic's ``ttl: 1h``)

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
    reason: FailReason | None
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


@dataclass(frozen=True)
class CallProvenance:
    """Where a call's outcome came from and what it cost: the same facts for an answer and a judgment.

    Its fields are the last keys of a responses.json and a judgments.json row, in this order
    (``row_of`` writes them flat, as the rows have always held them).
    """

    raw: Any = None  # the provider's JSON (or error body) as received
    reasoning: str | None = None  # reasoning text returned beside the answer (never judged)
    served_model: str | None = None  # the model the response says answered
    cached: bool = False  # served from the outcome cache in this run
    original_latency_s: float | None = None  # when cached: the paid call's latency
    temperature_sent: bool | str | None = None  # False: rejected and omitted; "ignored": sent, documented as ignored
    notes: tuple[str, ...] = ()  # what the harness changed on the way
    cost_usd: float | None = None  # what this call cost in this run (0 when cached); None: unknown
    original_cost_usd: float | None = None  # when cached: what the paid call cost
    batched: bool = False  # sent through the provider's batch API (its batch discount applies)

    @classmethod
    def of(cls, result: CallResult) -> CallProvenance:
        """A call's provenance, from its outcome."""
        return cls(raw=result.raw, reasoning=result.reasoning, served_model=result.served_model, cached=result.cached,
                   original_latency_s=result.original_latency_s, temperature_sent=result.temperature_sent,
                   notes=tuple(result.notes), cost_usd=result.cost_usd, original_cost_usd=result.original_cost_usd,
                   batched=result.batched)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CallProvenance:
        """Read back from a row: keys an older row lacks take their defaults (rows before costs, batches, …)."""
        given = {name: row[name] for name in PROVENANCE_KEYS if name in row}
        if "notes" in given:  # a list in the file (a foreign row's may be anything: then it says nothing)
            given["notes"] = tuple(given["notes"]) if isinstance(given["notes"], (list, tuple)) else ()
        return cls(**given)


#: CallProvenance's fields, in row order.
PROVENANCE_KEYS = tuple(f.name for f in fields(CallProvenance))


_OWN_NAMES: dict[type, tuple[str, ...]] = {}


def _own_names(cls: type) -> tuple[str, ...]:
    """A record type's own field names, in order, found once (``fields()`` on every row cost a third of ``row_of``)."""
    names = _OWN_NAMES.get(cls)
    if names is None:
        names = _OWN_NAMES[cls] = tuple(f.name for f in fields(cls) if f.name != "provenance")
    return names


def _shallow(value: Any) -> Any:
    """Lists and dicts copied one level deep (as ``plain`` does), so a row never aliases the record's own."""
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def row_of(record: AnswerRecord | JudgmentRecord) -> dict:
    """A record as its flat JSON row: its own fields, then its provenance's (the layout readers expect)."""
    row = {name: _shallow(getattr(record, name)) for name in _own_names(type(record))}
    provenance = record.provenance
    for name in PROVENANCE_KEYS:
        row[name] = _shallow(getattr(provenance, name))
    row["notes"] = list(provenance.notes)
    return row


def _own(cls: type, row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's values for ``cls``'s own fields (not its provenance); keys an older row lacks are left out."""
    return {name: row[name] for name in _own_names(cls) if name in row}


@dataclass
class AnswerRecord:
    """A task's row in responses.json."""

    question_id: str
    status: AnswerStatus
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
    provenance: CallProvenance = field(default_factory=CallProvenance)  # raw … batched, last in the row

    def to_dict(self) -> dict:
        """The responses.json row (flat: see ``row_of``)."""
        return row_of(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AnswerRecord:
        """A responses.json row read back (an older row lacks the newer keys; a foreign row's extra keys are
        not part of the record)."""
        own = _own(cls, row)
        own["status"] = AnswerStatus(own["status"])
        own.setdefault("caps", {})
        return cls(**own, provenance=CallProvenance.from_row(row))


@dataclass
class JudgmentRecord:
    """One (task, judge) row in judgments.json."""

    question_id: str
    judge: str
    status: JudgmentStatus
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
    provenance: CallProvenance = field(default_factory=CallProvenance)  # raw … batched, last in the row

    def to_dict(self) -> dict:
        """The judgments.json row (flat: see ``row_of``)."""
        return row_of(self)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JudgmentRecord:
        """A judgments.json row read back (an older row lacks the newer keys: they take their defaults)."""
        own = {"reason": None, "total": None, "score": None, "parsed": None, "reply": None, "error": None,
               "usage": {}, "attempts": 0, "latency_s": None, "http_status": None, "prompt_sha256": "",
               **_own(cls, row)}
        own["status"] = JudgmentStatus(own["status"])
        return cls(**own, provenance=CallProvenance.from_row(row))
