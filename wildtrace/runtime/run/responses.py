"""Reading answers produced earlier (or elsewhere) for ``stage=judge``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wildtrace.core.records import AnswerStatus, FailReason
from wildtrace.core.tasks import DatasetError
from wildtrace.runtime.store.dataset import input_file
from wildtrace.runtime.net.secrets import ECHO_NOTE, scrub

#: Where answer text may sit in a foreign row, in order of preference.
TEXT_FIELDS = ("response", "answer", "output", "text", "raw_answer")
STATUSES = (AnswerStatus.ANSWERED, AnswerStatus.FAILED, AnswerStatus.OUT_OF_CONTEXT, AnswerStatus.BUDGET_EXHAUSTED)


def _rows(data: Any, source: str) -> list:
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        for key in ("responses", "rows", "data"):
            if isinstance(data.get(key), list):
                return data[key]
    raise DatasetError(f"{source}: expected a JSON list of response rows (or an object with a 'responses' list)")


def _text(row: Mapping) -> str | None:
    for key in TEXT_FIELDS:
        if isinstance(row.get(key), str):
            return row[key]
    return None


def load_responses(path: str | Path, known_ids: set[str]) -> dict[str, dict]:
    """question_id → normalised row: status, response text, and whatever else the row kept.

    A row without a status is ``answered`` when it holds non-blank text, else ``failed``
    (empty_output). Rows for unknown or duplicate question_ids are refused, naming the row.
    """
    source = str(path)
    try:
        data = json.loads(input_file(path, "responses", "responses file").read_text(encoding="utf-8"))
    except OSError as exc:
        raise DatasetError(f"{source}: cannot read the responses file (responses): {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{source}: not UTF-8 (responses): {exc}") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{source}: malformed JSON: {exc}") from None
    out: dict[str, dict] = {}
    for i, row in enumerate(_rows(data, source)):
        if not isinstance(row, Mapping) or row.get("question_id") is None:
            raise DatasetError(f"{source}: row #{i}: missing field 'question_id'")
        qid = str(row["question_id"])
        if qid not in known_ids:
            raise DatasetError(f"{source}: row #{i}: question_id {qid!r} is not among the dataset's selected tasks")
        if qid in out:
            raise DatasetError(f"{source}: row #{i}: duplicate question_id {qid!r}")
        text = _text(row)
        status = row.get("status")
        if status is not None and status not in STATUSES:
            raise DatasetError(f"{source}: row #{i}: field 'status' must be one of {STATUSES}, got {status!r}")
        if status is None:
            status = AnswerStatus.ANSWERED if text and text.strip() else AnswerStatus.FAILED
        reason = row.get("reason")
        if status == AnswerStatus.ANSWERED and not (text and text.strip()):
            status, reason = AnswerStatus.FAILED, FailReason.EMPTY_OUTPUT
        elif status == AnswerStatus.FAILED and reason is None and not (text and text.strip()):
            reason = FailReason.EMPTY_OUTPUT
        out[qid] = {**row, "question_id": qid, "status": status, "response": text, "reason": reason}
    return out


def scrub_answers(rows: dict[str, dict] | None) -> dict[str, dict] | None:
    """The rows with every key of the run replaced where it occurs (and the row noting it).

    Answers produced elsewhere may hold a key a gateway echoed; the judge prompt quotes the
    answer, so it would be sent to the judges. Called once the run's keys are read.
    """
    if rows is None:
        return None
    out: dict[str, dict] = {}
    for qid, row in rows.items():
        clean, echoed = scrub(row)
        if echoed:
            notes = clean.get("notes")
            clean["notes"] = [*(notes if isinstance(notes, list) else []), ECHO_NOTE]
        out[qid] = clean
    return out
