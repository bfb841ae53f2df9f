"""Logging a finished run directory to MLflow: params, tags, metrics, artifacts, tables, traces.

Everything is read back from the run directory's files, so the end of a run and
``python -m wildtrace.upload RUN_DIR`` are one code path, and MLflow trouble can never
cost results: the files are written first, logging comes after and may be redone.

The client is an explicit ``MlflowClient(tracking_uri=…)``; only the tracing API needs the
global URI, which is set for the duration of the trace export and then restored
(``mlflow.set_tracking_uri`` exports MLFLOW_TRACKING_URI to every later child process).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from wildtrace.core import views

# MLflow 3.17 keeps at most 1000 traces in memory and 1000 queued exports, dropping the rest
# without a word; a 481-task run must lose none. HTTP retries default to 7 with backoff,
# minutes against a dead server: a run should say "not logged" and move on.
for _name, _value in (("MLFLOW_TRACE_BUFFER_MAX_SIZE", "100000"),
                      ("MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE", "100000"),
                      ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
                      ("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")):
    os.environ.setdefault(_name, _value)

# Alembic's "Creating initial MLflow database tables..." on a new store is noise after a run.
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)

RUN_FILES = ("scores.json", "responses.json", "judgments.json", "run_stats.json", "config.json")
#: Span inputs/outputs are capped: documents go by reference, long texts are cut here.
SPAN_TEXT_LIMIT = 20_000
MAX_PARAM_CHARS = 6000
MARKER = "mlflow.json"
#: Beyond the trace queues, OpenTelemetry's span queue holds 2048 spans and drops the rest
#: ("Queue full, dropping Span", seen at 1100 tasks): drain it every this-many traces.
FLUSH_EVERY = 100


@dataclass
class RunDir:
    """A finished run directory, read back."""

    path: Path
    config: dict
    stats: dict
    scores: dict | None
    responses: list[dict]
    judgments: list[dict]

    @property
    def mlflow(self) -> dict:
        """The run's mlflow settings."""
        return self.config["mlflow"]


def _load(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else default


def read_run_dir(path: str | Path) -> RunDir:
    """Load the files a run wrote; a folder without config.json is not a run directory."""
    path = Path(path).resolve()
    if not (path / "config.json").exists() or not (path / "responses.json").exists():
        raise FileNotFoundError(f"{path}: not a wildtrace run directory (no config.json / responses.json)")
    return RunDir(path, _load(path / "config.json"), _load(path / "run_stats.json", {}), _load(path / "scores.json"),
                  _load(path / "responses.json", []), _load(path / "judgments.json", []))


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping → {"a.b.c": "value"} (the config holds key NAMES only, never keys)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = str(value)[:MAX_PARAM_CHARS]
    return out


def metric_name(*parts: str) -> str:
    """A legal MLflow metric name from parts (alphanumerics, _ - . / and space)."""
    return ".".join(re.sub(r"[^A-Za-z0-9_\-/ ]", "_", str(p)) for p in parts)


def run_name(rd: RunDir) -> str:
    """model · panel · decoding (· replicates), readable in the run list."""
    c, s = rd.config, rd.stats
    name = (f"{c['model']['name']} · {c['judge_panel']['name']} · t={c['decoding']['temperature']} "
            f"mt={s.get('effective_max_tokens')}")
    reps = (c["decoding"]["replicate"], c["judge_panel"]["replicate"])
    return name + (f" · rep={reps[0]}/{reps[1]}" if any(reps) else "")


def params_of(rd: RunDir) -> dict[str, str]:
    """The resolved configuration, dotted, plus the effective completion budget."""
    config = {k: v for k, v in rd.config.items() if k not in ("out_dir", "progress")}
    params = flatten(config)
    params["decoding.effective_max_tokens"] = str(rd.stats.get("effective_max_tokens"))
    return params


def tags_of(rd: RunDir, parent_run_id: str | None) -> dict[str, str]:
    """Provenance: harness, data, date, context policy, overrides, replicates."""
    s, c, d = rd.stats, rd.config, rd.stats.get("dataset", {})
    tags = {
        "wildtrace.version": s.get("harness_version"),
        "wildtrace.git_commit": s.get("git_commit"),
        "wildtrace.prompts_sha256": s.get("prompts_sha256"),
        "wildtrace.run_dir": str(rd.path),
        "wildtrace.stage": c.get("stage"),
        "run_date": s.get("run_date"),
        "dataset.name": d.get("name"),
        "dataset.tasks_sha256": d.get("tasks_sha256"),
        "dataset.freeze_id": d.get("freeze_id"),
        "dataset.release_version": d.get("release_version"),
        "context_policy": (f"native caps en={c['model']['caps']['en']} cjk={c['model']['caps']['cjk']} chars; "
                           "cjk if >20 of U+4E00-U+9FFF in first 4000 chars; len>cap → out_of_context_scope = 0"),
        "hydra.overrides": " ".join(s.get("overrides", [])),
        "replicate.decoding": str(c["decoding"]["replicate"]),
        "replicate.judge_panel": str(c["judge_panel"]["replicate"]),
        "model.route": c["model"]["route"],
        "judge_panel.name": c["judge_panel"]["name"],
    }
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    return {k: str(v) for k, v in tags.items() if v is not None}


def _frames(rd: RunDir) -> tuple[pd.DataFrame, pd.DataFrame]:
    judgments = views.judgments_frame(rd.judgments)
    tasks = pd.DataFrame((rd.scores or {}).get("tasks", []))
    return tasks, judgments


def metrics_of(rd: RunDir) -> dict[str, float]:
    """Headline, counts, per judge, agreement, per paradigm and tier, tokens, requests, time."""
    m: dict[str, float] = {}
    s = rd.scores or {}
    for key in ("overall", "scored", "n_total", "n_scored", "n_out_of_context", "n_failed", "n_unscored", "n_missing"):
        if s.get(key) is not None:
            m[key] = s[key]
    for judge, row in s.get("judges", {}).items():
        for key in ("mean", "unavailable_rate", "n"):
            if row.get(key) is not None:
                m[metric_name("judge", judge, key)] = row[key]
    tasks, judgments = _frames(rd)
    for pair, row in views.agreement(judgments).items():
        for key in ("mad", "corr"):
            if row[key] is not None:
                m[metric_name("agreement", pair.replace("~", "__"), key)] = row[key]
    if len(tasks):
        for column, label in ((views.PARADIGM, "paradigm"), (views.TIER, "tier")):
            if column not in tasks:
                continue
            for row in views.breakdown(tasks[[views.QID, views.STATUS, views.SCORE]], tasks, column).to_dict("records"):
                for key in ("all", "scored"):
                    if row[key] is not None and row[key] == row[key]:
                        m[metric_name(label, row[column], key)] = 100.0 * row[key]
    for label, usage in views.token_totals(rd.responses).items():
        for key, value in usage.items():
            m[metric_name("tokens", "model", key)] = value
    for judge, usage in views.token_totals(rd.judgments, "judge").items():
        for key, value in usage.items():
            m[metric_name("tokens", "judge", judge, key)] = value
    for label, count in rd.stats.get("requests", {}).items():
        m[metric_name("requests", label)] = count
    for key in ("retries", "cache_hits", "wall_s"):
        if key in rd.stats:
            m[key] = rd.stats[key]
    return {k: float(v) for k, v in m.items()}


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str)


def task_table(rd: RunDir) -> pd.DataFrame:
    """A row per task: caps decision, prompt by reference, raw answer and provider JSON, score."""
    scores = {t["question_id"]: t for t in (rd.scores or {}).get("tasks", [])}
    rows = []
    for r in rd.responses:
        caps = r.get("caps") or {}
        score = scores.get(r["question_id"], {})
        rows.append({
            "question_id": r["question_id"], "status": r["status"], "reason": r.get("reason"),
            "paradigm": score.get("paradigm"), "context_tier": score.get("context_tier"),
            "corpus_file": (r.get("document") or {}).get("corpus_file"),
            "document_sha256": (r.get("document") or {}).get("sha256"),
            "doc_chars": caps.get("doc_chars"), "ideographs": caps.get("ideographs"), "cap_kind": caps.get("cap_kind"),
            "cap": caps.get("cap"), "scope": caps.get("scope"), "prompt_sha256": r.get("prompt_sha256"),
            "prompt": r.get("prompt_ref"), "response": r.get("response"), "finish_reason": r.get("finish_reason"),
            "attempts": r.get("attempts"), "error": r.get("error"), "raw": _json(r.get("raw")),
            "task_status": score.get("status"), "score": score.get("score"),
        })
    return pd.DataFrame(rows)


def judgment_table(rd: RunDir) -> pd.DataFrame:
    """A row per (task, judge): the full judge prompt, raw reply, parsed JSON, total, score or why not."""
    return pd.DataFrame([{
        "question_id": j["question_id"], "judge": j["judge"], "status": j["status"], "reason": j.get("reason"),
        "total": j.get("total"), "score": j.get("score"), "prompt": j.get("prompt"), "reply": j.get("reply"),
        "parsed": _json(j.get("parsed")), "error": j.get("error"), "attempts": j.get("attempts"),
    } for j in rd.judgments])


def _batches(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def default_artifact_location(tracking_uri: str, configured: str | None, root: str) -> str | None:
    """Artifacts beside a local store; a tracking server decides for itself unless told."""
    if configured:
        return configured
    if tracking_uri.startswith(("sqlite:", "file:")) or "://" not in tracking_uri:
        return f"file://{Path(root).resolve()}/mlartifacts"
    return None


@contextmanager
def global_tracking_uri(uri: str) -> Iterator[None]:
    """Point MLflow's global state (which tracing uses) at ``uri``, then put it back."""
    import mlflow

    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)  # None unsets the variable again


def _cap(text: Any) -> Any:
    if isinstance(text, str) and len(text) > SPAN_TEXT_LIMIT:
        return text[:SPAN_TEXT_LIMIT] + f"… [{len(text) - SPAN_TEXT_LIMIT} more characters]"
    return text


def _window(row: Mapping) -> tuple[int, int] | None:
    """(start, end) in ns of a recorded call, from its started_at and latency_s."""
    started = row.get("started_at")
    if not isinstance(started, (int, float)):
        return None
    start = int(started * 1e9)
    return start, start + int(float(row.get("latency_s") or 0.0) * 1e9)


def log_traces(rd: RunDir, experiment_id: str, run_id: str, tracking_uri: str) -> int:
    """One trace per task: task → caps decision, answer call, judge calls; judge scores as feedback."""
    import mlflow
    from mlflow.entities import AssessmentSource, SpanType

    by_task: dict[str, list[dict]] = {}
    for j in rd.judgments:
        by_task.setdefault(j["question_id"], []).append(j)
    scores = {t["question_id"]: t for t in (rd.scores or {}).get("tasks", [])}
    routes = {k: v["route"] for k, v in rd.config["judge_panel"]["judges"].items()}
    traced: list[tuple[str, list[dict]]] = []
    with global_tracking_uri(tracking_uri):
        for r in rd.responses:
            qid = r["question_id"]
            score = scores.get(qid, {})
            judged = by_task.get(qid, [])
            windows = [w for w in map(_window, [r, *judged]) if w]
            start = min((w[0] for w in windows), default=time.time_ns())
            end = max((w[1] for w in windows), default=start)
            root = mlflow.start_span_no_context(
                f"task {qid}", span_type=SpanType.CHAIN, experiment_id=experiment_id, start_time_ns=start,
                inputs={"question_id": qid, "document": r.get("document"), "prompt": _cap(r.get("prompt_ref"))},
                metadata={"mlflow.sourceRun": run_id}, tags={"question_id": qid, "status": r["status"]},
                attributes={"paradigm": str(score.get("paradigm")), "context_tier": str(score.get("context_tier"))})
            caps = mlflow.start_span_no_context("caps decision", span_type=SpanType.PARSER, parent_span=root,
                                                inputs={"doc_chars": (r.get("caps") or {}).get("doc_chars")},
                                                start_time_ns=start)
            caps.end(outputs=r.get("caps"), end_time_ns=start)
            if r["status"] != "out_of_context_scope" and r.get("attempts"):
                span_start, span_end = _window(r) or (start, end)
                answer = mlflow.start_span_no_context(
                    "answer", span_type=SpanType.LLM, parent_span=root, inputs={"prompt": _cap(r.get("prompt_ref"))},
                    start_time_ns=span_start,
                    attributes={"attempts": r.get("attempts"), "latency_s": r.get("latency_s"),
                                "usage": _json(r.get("usage")), "finish_reason": str(r.get("finish_reason"))})
                answer.end(outputs={"status": r["status"], "reason": r.get("reason"), "response": _cap(r.get("response")),
                                    "error": r.get("error")}, end_time_ns=span_end)
            for j in judged:
                span_start, span_end = _window(j) or (start, end)
                span = mlflow.start_span_no_context(
                    f"judge {j['judge']}", span_type=SpanType.LLM, parent_span=root, inputs={"prompt": _cap(j.get("prompt"))},
                    start_time_ns=span_start, attributes={"attempts": j.get("attempts"), "usage": _json(j.get("usage"))})
                span.end(outputs={"reply": _cap(j.get("reply")), "total": j.get("total"), "score": j.get("score"),
                                  "status": j["status"], "reason": j.get("reason")}, end_time_ns=span_end)
            root.end(outputs={"status": score.get("status", r["status"]), "score": score.get("score")}, end_time_ns=end)
            traced.append((root.trace_id, judged))
            if len(traced) % FLUSH_EVERY == 0:
                mlflow.flush_trace_async_logging()
        # Feedback needs the trace stored: export everything first, then attach the scores.
        mlflow.flush_trace_async_logging()
        for trace_id, judged in traced:
            for j in judged:
                mlflow.log_feedback(
                    trace_id=trace_id, name=f"judge/{j['judge']}", value=j.get("score"),
                    source=AssessmentSource(source_type="LLM_JUDGE", source_id=routes.get(j["judge"], j["judge"])),
                    rationale=j.get("reason") or _cap(j.get("reply")),
                    metadata={"total": str(j.get("total")), "status": j["status"]})
    return len(traced)


def _log_documents(client: Any, run_id: str, rd: RunDir) -> int:
    """Each document the run used, once, under documents/ (never once per task)."""
    from wildtrace.runtime.dataset import resolve_corpus_file

    corpus = Path(rd.config["dataset"]["corpus"])
    seen: set[str] = set()
    for r in rd.responses:
        corpus_file = (r.get("document") or {}).get("corpus_file")
        if not corpus_file or corpus_file in seen:
            continue
        seen.add(corpus_file)
        path = resolve_corpus_file(corpus, corpus_file, str(rd.path))
        client.log_artifact(run_id, str(path), artifact_path="documents/" + str(Path(corpus_file).parent).strip("."))
    return len(seen)


def log_run_dir(path: str | Path, parent_run_id: str | None = None, tracking_uri: str | None = None,
                experiment: str | None = None) -> str:
    """Log one run directory as one MLflow run; returns its run id. Raises on MLflow trouble."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    rd = read_run_dir(path)
    uri = tracking_uri or rd.mlflow["tracking_uri"]
    client = MlflowClient(tracking_uri=uri)
    name = experiment or rd.mlflow["experiment"]
    found = client.get_experiment_by_name(name)
    experiment_id = found.experiment_id if found else client.create_experiment(
        name, artifact_location=default_artifact_location(uri, rd.mlflow.get("artifact_location"), rd.config["root"]))
    tags = tags_of(rd, parent_run_id)
    run = client.create_run(experiment_id, run_name=run_name(rd), tags=tags)
    run_id = run.info.run_id
    try:
        for chunk in _batches([Param(k, v) for k, v in params_of(rd).items()], 100):
            client.log_batch(run_id, params=chunk)
        metrics = [Metric(k, v, 0, 0) for k, v in metrics_of(rd).items()]
        for chunk in _batches(metrics, 1000):
            client.log_batch(run_id, metrics=chunk)
        for name_ in RUN_FILES:
            if (rd.path / name_).exists():
                client.log_artifact(run_id, str(rd.path / name_))
        if (rd.path / ".hydra").is_dir():
            client.log_artifacts(run_id, str(rd.path / ".hydra"), artifact_path="hydra")
        client.log_table(run_id, task_table(rd), "tables/tasks.json")
        if rd.judgments:
            client.log_table(run_id, judgment_table(rd), "tables/judgments.json")
        if rd.mlflow.get("log_documents", True):
            _log_documents(client, run_id, rd)
        log_traces(rd, experiment_id, run_id, uri)
        client.set_terminated(run_id, "FINISHED")
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    if parent_run_id:
        from wildtrace.tracking.sweep import refresh_parent

        try:  # this run is logged; a stale parent table is worth a warning, not a failure
            refresh_parent(client, parent_run_id)
        except Exception as exc:  # noqa: BLE001
            print(f"wildtrace: MLflow: could not refresh the sweep's parent run ({exc})", file=sys.stderr)
    return run_id


def log_run_dir_safely(path: str | Path, parent_run_id: str | None = None) -> str | None:
    """log_run_dir that never raises: on trouble it says what was not logged and how to redo it.

    Writes ``mlflow.json`` in the run directory either way, so the state is on disk too.
    """
    path = Path(path)
    from wildtrace.runtime.outputs import write_json

    try:
        run_id = log_run_dir(path, parent_run_id)
    except Exception as exc:  # noqa: BLE001 - MLflow trouble must never cost results
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        write_json(path / MARKER, {"status": "not_logged", "error": reason, "parent_run_id": parent_run_id})
        print(f"wildtrace: MLflow: this run was NOT logged ({reason}). Results are safe in {path}; log them later with\n"
              f"  python -m wildtrace.upload {path}", file=sys.stderr)
        return None
    write_json(path / MARKER, {"status": "logged", "run_id": run_id, "parent_run_id": parent_run_id})
    return run_id
