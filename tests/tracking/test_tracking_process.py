"""ProcessObserver: MLflow logging in a child process, fed a scripted run's events.

Each test reads the real SQLite store back. The child is a real interpreter; the faults are
real too: the child killed with SIGKILL mid-run, the run's side of the pipe closed without
run_finished, a SIGINT sent to the child, a machine where it cannot be started.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_tracking_observer import scripted_run, traces_of, wait_for_traces
from test_tracking_server import SAFETY_S
from wildtrace import upload
from wildtrace.core.events import RunEnd
from wildtrace.tracking import process as P
from wildtrace.tracking.runs.mlflow_logger import read_marker

pytestmark = [pytest.mark.slow, pytest.mark.mlflow]  # a child interpreter importing MLflow per test: seconds each


def observer_for(s) -> P.ProcessObserver:
    m = s.config["mlflow"]
    return P.ProcessObserver(s.uri, m["experiment"], None, m["log_documents"], None)


def marker_eventually(out_dir, status: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        marker = read_marker(out_dir)
        if marker.get("status") == status:
            return marker
        time.sleep(0.1)
    return read_marker(out_dir)


def test_a_run_is_logged_from_the_child_and_the_child_exits(tmp_path):
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    assert obs.process is not None and obs.fallback is None
    obs.run_started(s.start())
    for done in s.dones:
        obs.task_done(done)
    assert obs.wait_started(SAFETY_S)
    # Logging waits for idle CPU: the child runs nicer than the run.
    assert os.getpriority(os.PRIO_PROCESS, obs.process.pid) == min(
        19, os.getpriority(os.PRIO_PROCESS, 0) + P.CHILD_NICENESS)
    run_id = obs.run_finished(RunEnd(str(s.out_dir), "finished"))
    assert run_id is not None
    assert obs.process.wait(30) == 0
    assert obs.process.pid != os.getpid()
    run = s.client().get_run(run_id)
    assert run.info.status == "FINISHED"
    assert sorted(t.info.tags["question_id"] for t in traces_of(s.client(), run_id, False)) \
        == [d.question_id for d in s.dones]
    marker = read_marker(s.out_dir)
    assert (marker["status"], marker["run_id"]) == ("logged", run_id)


def test_the_childs_log_records_reach_this_process(tmp_path, caplog):
    s = scripted_run(tmp_path)
    obs = P.ProcessObserver("http://127.0.0.1:9", "wildtrace")  # port 9: discard, nothing listens
    with caplog.at_level(logging.WARNING):
        obs.run_started(s.start())
        assert obs.run_finished(RunEnd(str(s.out_dir), "finished")) is None
    messages = [(r.name, r.getMessage()) for r in caplog.records]
    assert any(name.startswith("wildtrace.tracking") and "could not start a run" in text for name, text in messages)
    assert any("NOT logged" in text and "python -m wildtrace.upload" in text for _, text in messages)
    assert read_marker(s.out_dir)["status"] == "not_logged"


def test_a_child_killed_mid_run_leaves_a_not_logged_marker_that_upload_completes(tmp_path, caplog):
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    obs.run_started(s.start())
    obs.task_done(s.dones[0])
    assert obs.wait_started(SAFETY_S)
    run_id = read_marker(s.out_dir)["run_id"]
    wait_for_traces(s.client(), run_id, 1)
    obs.process.send_signal(signal.SIGKILL)
    obs.process.wait(30)
    with caplog.at_level(logging.WARNING):
        assert obs.run_finished(RunEnd(str(s.out_dir), "finished")) is None
    marker = read_marker(s.out_dir)
    assert marker["status"] == "not_logged" and marker["run_id"] == run_id  # the MLflow run is not forgotten
    assert "logging process" in marker["error"]
    assert any("NOT logged" in r.getMessage() for r in caplog.records)
    assert upload.main([str(s.out_dir)]) == 0  # completes the same run, no second one
    runs = s.client().search_runs([s.client().get_run(run_id).info.experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]
    assert s.client().get_run(run_id).info.status == "FINISHED"
    assert len(traces_of(s.client(), run_id, False)) == len(s.dones)


def test_a_run_process_that_goes_away_leaves_its_traces_stored_and_the_mlflow_run_closed(tmp_path):
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    child = obs.process
    obs.run_started(s.start())
    for done in s.dones[:3]:
        obs.task_done(done)
    assert obs.wait_started(SAFETY_S)
    obs._outbox.put(None)  # what the run's process dying does to the pipe: it closes, no run_finished
    assert child.wait(60) == 0
    run_id = read_marker(s.out_dir)["run_id"]
    assert s.client().get_run(run_id).info.status == "FAILED"
    assert marker_eventually(s.out_dir, "not_logged")["run_id"] == run_id
    assert len(traces_of(s.client(), run_id, False)) == 3  # what was sent is kept
    assert upload.main([str(s.out_dir)]) == 0
    assert s.client().get_run(run_id).info.status == "FINISHED"
    assert len(traces_of(s.client(), run_id, False)) == len(s.dones)


def test_the_child_ignores_sigint_the_run_decides_when_it_ends(tmp_path):
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    obs.run_started(s.start())
    assert obs.wait_started(SAFETY_S)
    obs.process.send_signal(signal.SIGINT)  # a Ctrl-C reaches the whole process group
    time.sleep(0.5)
    assert obs.process.poll() is None
    for done in s.dones:
        obs.task_done(done)
    run_id = obs.run_finished(RunEnd(str(s.out_dir), "partial"))
    assert run_id is not None
    assert s.client().get_run(run_id).info.status == "KILLED"
    assert read_marker(s.out_dir)["status"] == "partial"


def test_without_a_child_process_it_logs_from_this_one(tmp_path, monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    s = scripted_run(tmp_path)
    with caplog.at_level(logging.WARNING):
        obs = observer_for(s)
    assert obs.process is None and obs.fallback is not None
    assert any("could not start the logging process" in r.getMessage() for r in caplog.records)
    obs.run_started(s.start())
    for done in s.dones:
        obs.task_done(done)
    run_id = obs.run_finished(RunEnd(str(s.out_dir), "finished"))
    assert run_id is not None and s.client().get_run(run_id).info.status == "FINISHED"


def test_an_observer_dropped_before_its_run_starts_lets_its_child_exit(tmp_path):
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    child = obs.process
    del obs  # a job that failed its checks before any request
    assert child.wait(60) == 0
    assert read_marker(s.out_dir) == {}  # nothing was started, nothing is claimed


def test_a_run_process_killed_before_its_mlflow_run_exists_still_leaves_its_id(tmp_path):
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    child = obs.process
    obs.run_started(s.start())
    obs._outbox.put(None)  # gone at once: the child may still be importing MLflow
    assert child.wait(120) == 0
    marker = read_marker(s.out_dir)
    assert marker["status"] == "not_logged" and marker["run_id"]
    assert s.client().get_run(marker["run_id"]).info.status == "FAILED"
    assert upload.main([str(s.out_dir)]) == 0  # completes that run
    assert s.client().get_run(marker["run_id"]).info.status == "FINISHED"


def test_a_hung_logging_process_is_killed_after_its_bound_and_the_run_marked_not_logged(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "FINISH_WAIT_S", 2.0)
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    obs.run_started(s.start())
    assert obs.wait_started(SAFETY_S)
    run_id = read_marker(s.out_dir)["run_id"]
    obs.process.send_signal(signal.SIGSTOP)  # hung: alive, answering nothing
    started = time.monotonic()
    assert obs.run_finished(RunEnd(str(s.out_dir), "finished")) is None
    assert 2.0 <= time.monotonic() - started < 30
    assert obs.process.poll() is not None  # killed, not left behind
    marker = read_marker(s.out_dir)
    assert marker["status"] == "not_logged" and marker["run_id"] == run_id
    assert "did not finish within 2 s" in marker["error"]


@pytest.mark.parametrize("user_pool", [None, "jemalloc"])
def test_the_childs_pyarrow_allocates_from_malloc_unless_the_user_chose(tmp_path, monkeypatch, user_pool):
    if user_pool:
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", user_pool)
    else:
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    assert obs.process is not None
    raw = Path(f"/proc/{obs.process.pid}/environ").read_bytes().decode()
    environ = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
    assert environ["ARROW_DEFAULT_MEMORY_POOL"] == (user_pool or "system")
    obs.run_started(s.start())
    assert obs.run_finished(RunEnd(str(s.out_dir), "finished")) is not None
    assert obs.process.wait(30) == 0


def _busy(pid: int, cpu_s: float = 0.5, timeout: float = 60.0) -> bool:
    """Whether the process used ``cpu_s`` of CPU (an interpreter waiting on its pipe uses a tenth of that)."""
    tick = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return False
        if (int(fields[11]) + int(fields[12])) / tick >= cpu_s:  # utime + stime
            return True
        time.sleep(0.1)
    return False


def test_a_prestarted_child_imports_mlflow_at_once_and_the_run_adopts_it(tmp_path):
    P.prestart()
    parked = P._prestarted
    assert parked is not None
    P.prestart()  # a second call starts no second child
    assert P._prestarted is parked
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    assert obs.process is parked[0] and P._prestarted is None  # adopted: no second logging process
    obs.run_started(s.start())
    for done in s.dones:
        obs.task_done(done)
    run_id = obs.run_finished(RunEnd(str(s.out_dir), "finished"))
    assert run_id is not None and obs.process.wait(30) == 0
    assert s.client().get_run(run_id).info.status == "FINISHED"
    assert len(traces_of(s.client(), run_id, False)) == len(s.dones)


def test_a_prestarted_child_the_run_does_not_want_ends_without_logging(tmp_path):
    P.prestart()
    parked = P._prestarted
    assert parked is not None
    pid = parked[0].pid
    store = tmp_path / "mlflow.db"
    assert _busy(pid)  # importing MLflow before it was told anything (while the config is composed)
    P.discard_prestarted()
    assert P._prestarted is None and parked[0].wait(30) == 0
    assert not store.exists()  # told nothing, it opened nothing
    P.discard_prestarted()  # nothing parked: a no-op


def test_a_dead_prestarted_child_is_not_adopted(tmp_path):
    P.prestart()
    parked = P._prestarted
    assert parked is not None
    parked[0].kill()
    parked[0].wait(30)
    s = scripted_run(tmp_path)
    obs = observer_for(s)
    assert obs.process is not None and obs.process.pid != parked[0].pid  # a fresh child instead
    obs.run_started(s.start())
    assert obs.run_finished(RunEnd(str(s.out_dir), "finished")) is not None
    assert obs.process.wait(30) == 0
