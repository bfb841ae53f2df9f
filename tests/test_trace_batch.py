"""A batch of trace infos in one transaction stores what one ``start_trace`` per trace stores.

Two real SQLite stores get the same 30 traces (their spans too): one through MLflow's trace
client a trace at a time, one through ``trace_batch.start_traces``. Every row of every table
is compared (ids made of the store's own counters and the times of writing left out).
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from pathlib import Path

import pytest

from test_tracking_traces import DONE, ROUTES
from wildtrace.core.events import TaskDone
from wildtrace.tracking import trace_batch
from wildtrace.tracking.store import client_for
from wildtrace.tracking.traces import TraceTarget, build_trace, log_spans, traced_tasks, tracing_client

#: Columns a second store fills differently whatever writes it: its own counters and clocks.
VOLATILE = {"assessment_id", "created_timestamp", "last_updated_timestamp", "last_update_time", "creation_time",
            "start_time", "end_time", "lifecycle_stage", "artifact_uri", "run_uuid", "experiment_id"}
#: Tables that hold the run and experiment themselves, made apart from the traces.
NOT_TRACES = {"alembic_version", "experiments", "runs", "experiment_tags", "tags", "metrics", "latest_metrics",
              "params", "inputs", "input_tags", "datasets"}


def fresh_store(path: Path, run: bool = True, uri: str | None = None) -> tuple[str, TraceTarget]:
    """A store with one experiment and a run (or, with ``run=False``, a run id the same in every store);
    SQLite in ``path`` unless ``uri`` names another database."""
    uri = uri or f"sqlite:///{path / 'mlflow.db'}"
    client = client_for(uri)
    experiment = client.create_experiment("traces", artifact_location=f"file://{path}/mlartifacts")
    run_id = client.create_run(experiment).info.run_id if run else "run-fixed"
    return uri, TraceTarget(experiment, run_id, ROUTES, "route-model")


def tasks(n: int) -> list[TaskDone]:
    return [dataclasses.replace(DONE, question_id=f"q{i}", answer=dataclasses.replace(DONE.answer, question_id=f"q{i}"))
            for i in range(n)]


def rows(path: Path) -> dict[str, list[tuple]]:
    """Every trace table's rows, without the columns a store fills by its own counters and clocks."""
    db = sqlite3.connect(path / "mlflow.db")
    out = {}
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        if table in NOT_TRACES:
            continue
        cursor = db.execute(f'SELECT * FROM "{table}"')  # the names come from the store's own schema
        keep = [i for i, d in enumerate(cursor.description) if d[0] not in VOLATILE]
        out[table] = sorted((tuple(str(r[i]).replace(str(path), "<store>") for i in keep) for r in cursor), key=repr)
    db.close()
    return out


def store_both_ways(tmp_path: Path, dones: list[TaskDone]) -> tuple[Path, Path]:
    one_by_one, batched = tmp_path / "one", tmp_path / "batch"
    traces: list = []
    for path, batch in ((one_by_one, False), (batched, True)):
        path.mkdir()
        uri, target = fresh_store(path, run=False)  # the same experiment and run ids in both stores
        client = tracing_client(uri)
        traces = traces or [build_trace(d, target) for d in dones]  # the same traces (their feedback's times too)
        if batch:
            assert trace_batch.start_traces(client, [t.info for t in traces]) == []
        else:
            for t in traces:
                client.start_trace(t.info)
        log_spans(client, target.experiment_id, [s for t in traces for s in t.data.spans])
    return one_by_one, batched


def test_a_batch_stores_the_rows_one_start_trace_each_stores(tmp_path):
    one_by_one, batched = store_both_ways(tmp_path, tasks(30))
    expected, got = rows(one_by_one), rows(batched)
    assert sum(map(len, expected.values())) > 30 * 10  # infos, tags, metadata, assessments, spans…
    assert expected.keys() == got.keys()
    for table in expected:
        assert got[table] == expected[table], table


def test_with_mlflows_trace_rollups_on_a_batch_still_stores_the_same_rows(tmp_path, monkeypatch):
    """Rollups lock a queue row per trace by reading it back: each trace then flushes on its own, as in MLflow."""
    monkeypatch.setenv("MLFLOW_SQL_TRACE_ROLLUPS_ENABLED", "true")
    one_by_one, batched = store_both_ways(tmp_path, tasks(12))
    expected, got = rows(one_by_one), rows(batched)
    assert expected.keys() == got.keys()
    for table in expected:
        assert got[table] == expected[table], table
    (tmp_path / "counted").mkdir()
    uri, target = fresh_store(tmp_path / "counted")
    client = tracing_client(uri)
    traces = [build_trace(d, target) for d in tasks(12)]
    flushes = counted_flushes(monkeypatch)
    assert trace_batch.start_traces(client, [t.info for t in traces]) == []
    assert len(flushes) >= 12  # a flush a trace (without rollups the batch is one flush)


def counted_flushes(monkeypatch) -> list[int]:
    """One entry per real flush of any SQLAlchemy session from now on (how many objects it wrote)."""
    from sqlalchemy.orm import Session

    flushes: list[int] = []
    real = Session._flush

    def counted(self, *args, **kwargs):
        flushes.append(len(self.new))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Session, "_flush", counted)
    return flushes


def test_a_batchs_rows_are_flushed_once_at_its_end(tmp_path, monkeypatch):
    uri, target = fresh_store(tmp_path)
    client = tracing_client(uri)
    traces = [build_trace(d, target) for d in tasks(20)]
    flushes = counted_flushes(monkeypatch)
    sessions, real_one_flush = [], trace_batch._one_flush

    def seen(session):
        sessions.append(session)
        return real_one_flush(session)

    monkeypatch.setattr(trace_batch, "_one_flush", seen)
    assert trace_batch.start_traces(client, [t.info for t in traces]) == []
    # One flush, of every trace's info, tags, metadata and assessments (MLflow's own path: one a trace).
    assert len(flushes) == 1
    assert flushes[0] >= 20 * (1 + len(traces[0].info.tags) + len(traces[0].info.assessments))
    assert len(sessions) == 1 and "flush" not in vars(sessions[0])  # the batch's no-op flush is gone again
    assert len(traced_tasks(client_for(uri), target)) == 20


def test_a_batch_whose_one_flush_fails_is_rolled_back_whole_and_goes_one_by_one(tmp_path, monkeypatch):
    uri, target = fresh_store(tmp_path)
    client = tracing_client(uri)
    traces = [build_trace(d, target) for d in tasks(8)]
    from sqlalchemy.orm import Session

    real, calls = Session._flush, []

    def fail_first(self, *args, **kwargs):
        calls.append(len(self.new))
        if len(calls) == 1:
            raise RuntimeError("disk I/O error")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Session, "_flush", fail_first)
    assert trace_batch.start_traces(client, [t.info for t in traces]) == []
    assert calls[0] >= 8  # the batch's one flush, of all its rows, failed …
    assert len(calls) > 8  # … and each trace went on its own after the rollback
    log_spans(client, target.experiment_id, [s for t in traces for s in t.data.spans])
    found = traced_tasks(client_for(uri), target)
    assert sorted(found) == sorted(f"q{i}" for i in range(8))
    assert all(s.has_spans and s.assessments == 2 for s in found.values())


def test_a_batch_is_one_transaction(tmp_path, monkeypatch):
    uri, target = fresh_store(tmp_path)
    client = tracing_client(uri)
    sessions = counted_sessions(client, monkeypatch)
    traces = [build_trace(d, target) for d in tasks(25)]
    assert trace_batch.start_traces(client, [t.info for t in traces]) == []
    # One read of what the store holds, one write for the 25, one read of what it holds now.
    assert sessions == [True, False, True]
    assert len(traced_tasks(client_for(uri), target)) == 25


def test_traces_the_store_holds_and_traces_it_refuses_go_one_by_one(tmp_path):
    held_and_refused(*fresh_store(tmp_path))


def counted_sessions(client, monkeypatch) -> list[bool]:
    """The read_only flag of every managed session the client's store opens from now on."""
    sessions: list[bool] = []
    real = client.store.ManagedSessionMaker

    def counted(*args, **kwargs):
        sessions.append(kwargs.get("read_only", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(client.store, "ManagedSessionMaker", counted)
    return sessions


def test_a_batch_on_postgresql_is_one_transaction_and_loses_nothing(tmp_path, monkeypatch):
    """The team's store: the same batch against a real PostgreSQL server (MLflow's schema made there)."""
    from pg import postgres, skip_reason

    if skip_reason():
        pytest.skip(skip_reason())
    with postgres() as pg:
        pg.create_database("traces")
        uri, target = fresh_store(tmp_path, uri=pg.uri("traces"))
        client = tracing_client(uri)
        traces = [build_trace(d, target) for d in tasks(40)]
        with monkeypatch.context() as m:
            sessions = counted_sessions(client, m)
            assert trace_batch.start_traces(client, [t.info for t in traces[:30]]) == []
        assert sessions == [True, False, True]
        log_spans(client, target.experiment_id, [s for t in traces[:30] for s in t.data.spans])
        assert len(traced_tasks(client_for(uri), target)) == 30
        # The rest with a stored one and a refused one among them, as on SQLite.
        held_and_refused(uri, target, offset=30)


def held_and_refused(uri: str, target: TraceTarget, offset: int = 0) -> None:
    """A batch holding a trace the store has (a cut-off export) and one it refuses: each goes on its own."""
    client = tracing_client(uri)
    traces = [build_trace(d, target) for d in tasks(offset + 6)][offset:]
    client.start_trace(traces[0].info)  # stored before (a cut-off export): MLflow's merge path, on its own
    stray = build_trace(dataclasses.replace(DONE, question_id="stray"), TraceTarget("987654", target.run_id, ROUTES))
    infos = [t.info for t in traces[:3]] + [stray.info] + [t.info for t in traces[3:]]
    failed = trace_batch.start_traces(client, infos)
    assert [info.trace_id for info, _ in failed] == [stray.info.trace_id]  # the rest of the batch still goes
    log_spans(client, target.experiment_id, [s for t in traces for s in t.data.spans])
    found = traced_tasks(client_for(uri), target)
    assert sorted(found) == sorted(f"q{i}" for i in range(offset + 6))
    assert all(s.has_spans and s.assessments == 2 for s in found.values())  # the held one's feedback not doubled


def test_only_the_batchs_thread_shares_its_session(tmp_path):
    uri, _ = fresh_store(tmp_path)
    store = tracing_client(uri).store
    trace_batch._share_sessions(store)
    seen: dict[str, object] = {}
    with store.ManagedSessionMaker(read_only=False) as session:
        trace_batch._batch.store, trace_batch._batch.session, trace_batch._batch.experiments = store, session, {}
        try:
            with store.ManagedSessionMaker() as inner:
                seen["same thread"] = inner

            def other() -> None:
                with store.ManagedSessionMaker() as theirs:
                    seen["other thread"] = theirs

            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
        finally:
            trace_batch._batch.store = trace_batch._batch.session = trace_batch._batch.experiments = None
    assert seen["same thread"] is session
    assert seen["other thread"] is not session
    with store.ManagedSessionMaker() as after:
        assert after is not session  # outside a batch, every call gets its own session again


@pytest.mark.parametrize("n", [0, 1])
def test_a_batch_too_small_to_share_goes_as_before(tmp_path, n):
    uri, target = fresh_store(tmp_path)
    client = tracing_client(uri)
    traces = [build_trace(d, target) for d in tasks(n)]
    assert trace_batch.start_traces(client, [t.info for t in traces]) == []
    assert not getattr(client.store, "_wildtrace_batches", False)
    assert len(traced_tasks(client_for(uri), target)) == n


def test_the_trace_write_benchmark_stores_its_traces_and_says_what_each_cost():
    import re
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "traces.py"
    out = subprocess.run([sys.executable, str(script), "--traces", "7", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    half = r"[\d.]+ s \(([\d.]+) ms CPU a trace\)"
    line = re.fullmatch(rf"7 traces: infos {half}, spans {half}, together ([\d.]+) ms CPU a trace", out.stdout.strip())
    assert line, out.stdout
    infos, spans, together = map(float, line.groups())
    assert infos > 0 and spans > 0 and abs(infos + spans - together) < 0.02
