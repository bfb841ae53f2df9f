"""The run's events, and the observer interface that receives them.

The runtime emits events to an observer it is handed; tracking implements one; the entry
point wires them together. So the runtime never imports tracking, and tracking never
imports the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunStart:
    """A run is about to send its first request."""

    out_dir: str  #: the run directory (absolute)
    config: dict  #: the settings as config.json holds them (key NAMES only)
    n_tasks: int  #: tasks selected for the run
    run_date: str  #: ISO UTC date and time the run started
    parent_run_id: str | None  #: the sweep's parent MLflow run, when a multirun job


@dataclass(frozen=True)
class TaskDone:
    """A task has its answer and all its judgments."""

    question_id: str  #: the task
    answer: dict  #: its responses.json row
    judgments: list[dict]  #: its judgments.json rows (empty when not judged)
    status: str  #: scored | unscored | failed | out_of_context_scope | missing, as scores.json has it
    score: float | None  #: the panel mean, when scored
    meta: dict  #: paradigm and context_tier, when the task has them


@dataclass(frozen=True)
class RunEnd:
    """The run files are written (whole, or what a stopped run had)."""

    out_dir: str  #: the run directory
    status: str  #: "finished" | "partial" (stopped; files hold what was done) | "failed"


class RunObserver:
    """Receives a run's events; every method does nothing unless overridden.

    Methods are called on the event loop's thread and must not block (queue the work);
    ``run_finished`` is called after the loop and may block.
    """

    def run_started(self, start: RunStart) -> None:
        """Before the first request."""

    def task_started(self, question_id: str) -> None:
        """A task was taken up."""

    def call_finished(self, question_id: str, label: str, row: dict) -> None:
        """A call ended: ``label`` is "model" or a judge key, ``row`` its record."""

    def task_done(self, done: TaskDone) -> None:
        """A task is complete."""

    def run_finished(self, end: RunEnd) -> str | None:
        """After the run files are written; returns the tracking run id, if any."""
        return None
