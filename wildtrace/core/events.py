"""What a run tells whoever observes it (MLflow, a progress log): plain events, no I/O.

The runtime emits these to the observer it is handed; tracking implements one. Neither
layer imports the other: the entry point composes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from wildtrace.core.records import AnswerRecord, AnswerStatus, JudgmentRecord, RunStatus, TaskStatus


@dataclass(frozen=True)
class RunStart:
    """A run about to send its first request."""

    out_dir: str
    """The run directory (absolute)."""
    config: dict
    """``dataclasses.asdict(WildtraceConfig)``: the same dict as config.json (key NAMES only)."""
    n_tasks: int
    """How many tasks the run holds."""
    run_date: str
    """When the run started, ISO 8601 UTC."""
    parent_run_id: str | None
    """The sweep's parent MLflow run, when this run is one job of a multirun."""


@dataclass(frozen=True)
class TaskDone:
    """A task whose answer and judgments are all in."""

    question_id: str
    """The task's id."""
    answer: AnswerRecord
    """The task's answer (its responses.json row is ``answer.to_dict()``)."""
    judgments: list[JudgmentRecord]
    """This task's judgments (may be empty)."""
    status: TaskStatus | AnswerStatus
    """Task status as scores.json has it: scored | unscored | failed | out_of_context_scope | missing | …;
    a run read back without scores.json (stage=answer) has its answer's."""
    score: float | None
    """The task's score in [0, 1], or None where it has none."""
    meta: dict
    """paradigm, context_tier when the task has them."""


@dataclass(frozen=True)
class RunEnd:
    """A run whose files are written (whole, or what a stopped run had)."""

    out_dir: str
    """The run directory (absolute)."""
    status: RunStatus
    """finished | partial (stopped by a signal / storage failure; files hold what was done) | failed."""


class RunObserver:
    """Receives a run's events. Methods are called on the event loop thread and must not block
    (queue work to a thread). Default methods do nothing."""

    def run_started(self, start: RunStart) -> None:
        """The run is about to send its first request."""

    def task_started(self, question_id: str) -> None:
        """A task's first call is about to be made."""

    def call_finished(self, question_id: str, label: str, record: AnswerRecord | JudgmentRecord) -> None:
        """A call ended; ``label`` is "model" or a judge key, ``record`` its outcome."""

    def task_done(self, done: TaskDone) -> None:
        """A task's answer and judgments are all in."""

    def run_finished(self, end: RunEnd) -> str | None:
        """Called after the run files are written (or on a stop); may block.

        Returns the MLflow run id, or None.
        """
        return None
