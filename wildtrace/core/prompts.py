"""The two prompts, byte for byte as the spec gives them (§1 and §4).

Templates are built by concatenation, never ``str.format``: the judge prompt contains
literal braces, and a question or document may contain ``{`` too. Any change here is a
change of benchmark: bump PROMPTS_VERSION, and the run logs ``prompts_sha256``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from wildtrace.core.tasks import RubricItem

PROMPTS_VERSION = "wildtrace-spec-2026-06"

ANSWER_HEAD = "Answer using ONLY the document below. Include every specific detail from the text.\n\nQuestion: "
ANSWER_MIDDLE = "\n\nDocument:\n"

JUDGE_HEAD = "STRICT grader. Only award points for SPECIFIC details present.\nQUESTION: "
JUDGE_RUBRIC = "\nRUBRIC:\n"
JUDGE_RESPONSE = "RESPONSE:\n"
JUDGE_TAIL = '\nReply JSON: {"points_awarded":[<pts>],"total":<sum>}'

QUESTION_LIMIT = 600
CRITERION_LIMIT = 260
RESPONSE_LIMIT = 5000


def answer_prompt(question: str, document: str) -> str:
    """The only user message sent to the model under test: no system prompt, no shots."""
    return ANSWER_HEAD + question + ANSWER_MIDDLE + document


def document_reference(corpus_file: str, sha256: str, chars: int) -> str:
    """What stands for the document in logged prompts: documents are logged once, by reference."""
    return f"<<document {corpus_file} · sha256 {sha256} · {chars} characters>>"


def format_points(points: int | float) -> str:
    """Points printed as the data has them: 30 → ``30``, 12.5 → ``12.5``."""
    return str(points)


def rubric_lines(rubric: Sequence[RubricItem]) -> str:
    """One ``P{i} ({points}pts): {criterion[:260]}`` line per item, numbered from 1."""
    return "".join(
        f"P{i} ({format_points(item.points)}pts): {item.criterion[:CRITERION_LIMIT]}\n"
        for i, item in enumerate(rubric, start=1)
    )


def judge_prompt(question: str, rubric: Sequence[RubricItem], response: str) -> str:
    """The judge's single user message for one answer."""
    return (
        JUDGE_HEAD
        + question[:QUESTION_LIMIT]
        + JUDGE_RUBRIC
        + rubric_lines(rubric)
        + JUDGE_RESPONSE
        + response[:RESPONSE_LIMIT]
        + JUDGE_TAIL
    )


def prompts_sha256() -> str:
    """A fingerprint of both templates, logged with every run."""
    parts = [PROMPTS_VERSION, ANSWER_HEAD, ANSWER_MIDDLE, JUDGE_HEAD, JUDGE_RUBRIC, JUDGE_RESPONSE, JUDGE_TAIL]
    limits = f"{QUESTION_LIMIT}/{CRITERION_LIMIT}/{RESPONSE_LIMIT}"
    return hashlib.sha256("\x00".join([*parts, limits]).encode()).hexdigest()
