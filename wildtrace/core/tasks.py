"""Task records: the release's JSON shape, validated once into typed objects.

Parsing works on already-decoded JSON data so that it stays pure; runtime/store/dataset.py
reads the files. Every problem names the file, the record and the field, because a
benchmark run that dies on task 300 after paying for 299 answers is the failure to avoid.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

#: Kept where present, for breakdowns (paradigm, tier) and provenance (freeze, release).
META_FIELDS = ("paradigm", "context_tier", "corpus_id", "doc_token_estimate", "freeze_id", "release_version",
               "language")


class DatasetError(ValueError):
    """Bad input, found before any request. The message names file, record and field."""


@dataclass(frozen=True)
class RubricItem:
    """One rubric line: the points it is worth and what earns them."""

    points: int | float
    criterion: str


@dataclass(frozen=True)
class Task:
    """One benchmark question over one corpus file."""

    question_id: str
    question_text: str
    corpus_file: str
    rubric: tuple[RubricItem, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def max_points(self) -> float:
        """Sum of the rubric's points (100 in the release)."""
        return float(sum(item.points for item in self.rubric))


def where(source: str, index: int, record: Any) -> str:
    """``file record #i (question_id=…)`` prefix for error messages."""
    qid = record.get("question_id") if isinstance(record, Mapping) else None
    suffix = f" (question_id={qid!r})" if qid is not None else ""
    return f"{source}: record #{index}{suffix}"


def _required_str(record: Mapping[str, Any], key: str, at: str) -> str:
    value = record.get(key)
    if value is None:
        raise DatasetError(f"{at}: missing field '{key}'")
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{at}: field '{key}' must be a non-empty string, got {value!r:.80}")
    return value


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_rubric(raw: Any, at: str) -> tuple[RubricItem, ...]:
    """Validate ``ground_truth.scoring_rubric``: a non-empty list of {points, correct_criterion}.

    Some releases store the rubric as a JSON-encoded string; that is accepted too.
    """
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{at}: field 'ground_truth.scoring_rubric' is a string but not JSON: {exc}") from exc
    if not isinstance(raw, list) or not raw:
        raise DatasetError(f"{at}: field 'ground_truth.scoring_rubric' must be a non-empty list")
    items = []
    for j, item in enumerate(raw):
        key = f"ground_truth.scoring_rubric[{j}]"
        if not isinstance(item, Mapping):
            raise DatasetError(f"{at}: field '{key}' must be an object with points and correct_criterion")
        points = item.get("points")
        if not _is_number(points) or points < 0:
            raise DatasetError(f"{at}: field '{key}.points' must be a non-negative number, got {points!r}")
        criterion = item.get("correct_criterion")
        if not isinstance(criterion, str) or not criterion.strip():
            raise DatasetError(f"{at}: field '{key}.correct_criterion' must be a non-empty string")
        items.append(RubricItem(points=points, criterion=criterion))
    return tuple(items)


def parse_task(record: Any, source: str, index: int) -> Task:
    """One record → Task, or a DatasetError naming where and what."""
    at = where(source, index, record)
    if not isinstance(record, Mapping):
        raise DatasetError(f"{at}: a task must be a JSON object, got {type(record).__name__}")
    question_id = record.get("question_id")
    if isinstance(question_id, int) and not isinstance(question_id, bool):
        question_id = str(question_id)
    if not isinstance(question_id, str) or not question_id.strip():
        raise DatasetError(f"{at}: missing field 'question_id'")
    ground_truth = record.get("ground_truth")
    if not isinstance(ground_truth, Mapping):
        raise DatasetError(f"{at}: missing field 'ground_truth' (an object holding scoring_rubric)")
    if "scoring_rubric" not in ground_truth:
        raise DatasetError(f"{at}: missing field 'ground_truth.scoring_rubric'")
    meta = {k: record[k] for k in META_FIELDS if record.get(k) is not None}
    corpus_file = _required_str(record, "corpus_file", at)
    if "\0" in corpus_file:  # no file can have the name; the OS would refuse it with a bare ValueError
        raise DatasetError(f"{at}: field 'corpus_file' {corpus_file!r} holds a NUL byte")
    return Task(
        question_id=question_id,
        question_text=_required_str(record, "question_text", at),
        corpus_file=corpus_file,
        rubric=parse_rubric(ground_truth["scoring_rubric"], at),
        meta=meta,
    )


def records_of(data: Any, source: str) -> Sequence[Any]:
    """The task list inside a decoded file: a list, or an object with ``tasks`` / ``data``."""
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        for key in ("tasks", "data"):
            if isinstance(data.get(key), list):
                return data[key]
    raise DatasetError(f"{source}: expected a JSON list of tasks, or an object with a 'tasks' or 'data' list")


def parse_tasks(records: Iterable[Any], source: str) -> list[Task]:
    """Validate every record, refusing duplicate question_ids."""
    return [task for _, task in select_records(enumerate(records), source)]


def select_records(records: Iterable[tuple[int, Any]], source: str, ids: Sequence[str] | None = None,
                   limit: int | None = None) -> list[tuple[int, Task]]:
    """(record index, task) of ``dataset.ids`` (in file order) then the first ``dataset.limit``, validated.

    Records are taken one at a time and only the chosen ones are kept, so a reader that
    streams them holds one record at a time; with a limit and no ids, reading stops after
    the limit's last task (the records after it are not read, nor checked).
    """
    if limit is not None and limit < 1:
        raise DatasetError(f"dataset.limit must be at least 1, got {limit}")
    wanted = set(ids) if ids else None
    chosen: list[tuple[int, Task]] = []
    seen: dict[str, int] = {}
    for index, record in records:
        task = parse_task(record, source, index)
        if task.question_id in seen:
            raise DatasetError(f"{source}: record #{index}: duplicate question_id {task.question_id!r} "
                               f"(first at record #{seen[task.question_id]})")
        seen[task.question_id] = index
        if wanted is None or task.question_id in wanted:
            chosen.append((index, task))
            if wanted is None and limit is not None and len(chosen) >= limit:
                break
    if not seen:
        raise DatasetError(f"{source}: no tasks")
    unknown = [i for i in ids or () if i not in seen]
    if unknown:
        raise DatasetError(f"{source}: dataset.ids names unknown question_id(s): {', '.join(map(str, unknown))}")
    return chosen[:limit]


# ---------------------------------------------------------------------- oddities: warned, not refused

#: The points a release's rubric sums to; the spec's score is total/100 whatever they sum to.
RUBRIC_TOTAL = 100
#: Task ids shown in one warning's message (all of them are kept beside it).
SHOWN_IDS = 10


@dataclass(frozen=True)
class Oddity:
    """Something the spec does not forbid but a release should not hold, and the tasks that have it."""

    code: str
    message: str
    question_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """As run_stats.json keeps a warning (code, message) plus the task ids."""
        return {"code": self.code, "message": self.message, "question_ids": list(self.question_ids)}


def _ids(items: Sequence[str]) -> str:
    shown = ", ".join(items[:SHOWN_IDS])
    return shown + (f" and {len(items) - SHOWN_IDS} more" if len(items) > SHOWN_IDS else "")


def oddities(tasks: Sequence[Task], document_chars: Mapping[str, int]) -> list[Oddity]:
    """Rubrics not summing to 100, rubric items of 0 points, empty documents: one Oddity each, naming the tasks.

    ``document_chars``: corpus_file → its length. These run as the spec says (score =
    total/100, an empty document is sent as it is); a run only says so, once.
    """
    off = [(t.question_id, t.max_points) for t in tasks if not math.isclose(t.max_points, RUBRIC_TOTAL, abs_tol=1e-6)]
    zero = [t.question_id for t in tasks if any(item.points == 0 for item in t.rubric)]
    empty = [t for t in tasks if document_chars.get(t.corpus_file) == 0]
    out = []
    if off:
        sums = [f"{qid} ({points:g})" for qid, points in off]
        out.append(Oddity("rubric_points_not_100",
                          f"{len(off)} task(s) have rubric points that do not sum to {RUBRIC_TOTAL}: {_ids(sums)}; "
                          "the score is still total/100 (spec §4), so such a task cannot reach 1.0 or reaches it "
                          "early", tuple(qid for qid, _ in off)))
    if zero:
        out.append(Oddity("rubric_zero_points", f"{len(zero)} task(s) have a rubric item of 0 points: {_ids(zero)}",
                          tuple(zero)))
    if empty:
        files = sorted({t.corpus_file for t in empty})
        out.append(Oddity("empty_document",
                          f"{len(empty)} task(s) use an empty (0-byte) document, sent as it is: "
                          f"{_ids([t.question_id for t in empty])} ({_ids(files)})",
                          tuple(t.question_id for t in empty)))
    return out
