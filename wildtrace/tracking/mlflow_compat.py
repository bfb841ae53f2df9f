"""Every MLflow name wildtrace uses that is not in MLflow's documented API, in one place.

Why they stay: a task's trace is built here as MLflow entities with stable ids (a cut-off
export is completed onto the trace already stored, never stored twice) and stored with the
trace client MLflow's own exporter calls: each trace's info, then a batch's spans in one
``log_spans``. The documented path (``MlflowClient.start_trace``/``start_span``/``end_span``
with the global tracer) picks random ids and writes each span in its own transaction as it
ends: 120 ms of CPU a trace measured on a local store (about a minute for a full-size run's
481 traces), against about 20 ms this way (``benchmarks/traces.py``).

What this module uses, and what to check on an MLflow upgrade (``.ci/run`` runs the MLflow
tests on the lowest supported release and on the newest):

- ``mlflow.tracing.client.TracingClient``: ``start_trace(TraceInfo)``, ``log_spans(location,
  spans)``, ``search_traces``, ``log_assessment``.
- ``mlflow.store.tracking.rest_store.RestStore._get_server_version``: an ``lru_cache`` that keeps
  a failed ``/version`` probe for the life of the process, so after one failure (a tracking
  server restarting) every later ``log_spans`` to that server raises NotImplementedError, the
  upload of the same process included. ``forget_server_version`` clears it after such a failure;
  if a release drops the attribute there is nothing to clear.
- ``mlflow.tracing.utils``: ``dump_span_attribute_value`` (how the tracer encodes a span
  attribute), ``add_size_stats_to_trace_metadata``; ``mlflow.tracing.utils.environment.
  resolve_env_metadata`` (source, user, git, as the tracer records them);
  ``mlflow.tracing.utils.default_log_level`` (from 3.14: the span's log level; left off
  when absent, as that release's tracer does); ``mlflow.tracing.constant``'s metadata
  preview limit. ``tests/tracking/test_tracking_traces.py`` compares a trace built here with the
  tracer's own, attribute by attribute: a change in any of these fails there first.
"""

from __future__ import annotations

import functools
from typing import Any


def trace_client(tracking_uri: str) -> Any:
    """MLflow's trace client for one store (explicit: the global tracking URI is never touched)."""
    from mlflow.tracing.client import TracingClient

    return TracingClient(tracking_uri)


def dump_attribute(value: Any) -> str:
    """A span attribute's value as MLflow's tracer stores it (JSON)."""
    from mlflow.tracing.utils import dump_span_attribute_value

    return str(dump_span_attribute_value(value))


def span_log_level(span_type: str) -> int | None:
    """The log level MLflow's tracer gives a span of this type; None before MLflow 3.14 (no levels)."""
    try:
        from mlflow.tracing.utils.default_log_level import default_log_level_for_span_type
    except ImportError:
        return None
    return int(default_log_level_for_span_type(span_type))


@functools.lru_cache(maxsize=1)
def env_metadata() -> dict[str, str]:
    """What MLflow's tracer says about the process (source, user, git), resolved once."""
    from mlflow.tracing.utils.environment import resolve_env_metadata

    return dict(resolve_env_metadata())


def metadata_preview(value: Any) -> str:
    """A root span's inputs/outputs as MLflow's trace metadata holds them (JSON, truncated)."""
    from mlflow.tracing.constant import MAX_CHARS_IN_TRACE_INFO_METADATA, TRUNCATION_SUFFIX

    text = dump_attribute(value)
    if len(text) > MAX_CHARS_IN_TRACE_INFO_METADATA:
        text = text[:MAX_CHARS_IN_TRACE_INFO_METADATA - len(TRUNCATION_SUFFIX)] + TRUNCATION_SUFFIX
    return text


def add_size_stats(trace: Any) -> None:
    """The trace's size figures in its metadata, as MLflow's tracer adds them."""
    from mlflow.tracing.utils import add_size_stats_to_trace_metadata

    add_size_stats_to_trace_metadata(trace)


def forget_server_version() -> None:
    """Forget what MLflow's REST store cached of the tracking servers' versions, a failed probe
    included, so the next ``log_spans`` asks the server again."""
    from mlflow.store.tracking.rest_store import RestStore

    clear = getattr(getattr(RestStore, "_get_server_version", None), "cache_clear", None)
    if callable(clear):
        clear()
