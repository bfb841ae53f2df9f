"""MlflowObserver fed a scripted run's events, read back from a real SQLite MLflow store.

The run directory is written here with rows shaped as the runtime writes them (cached rows
included), so these tests pin what tracking does with them, independent of the pipeline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import make_task, settings, write_release
from wildtrace import upload
from wildtrace.core.events import RunEnd, RunStart, TaskDone
from wildtrace.core.records import AnswerRecord, JudgmentRecord, TaskStatus
from wildtrace.files import write_json
from wildtrace.tracking import documents
from wildtrace.tracking.runs.mlflow_logger import read_marker
from wildtrace.tracking.runs.observer import MlflowObserver
from wildtrace.tracking.traces import build_trace, tracing_client

pytestmark = [pytest.mark.slow, pytest.mark.mlflow]  # a real MLflow store per test: seconds each

DOCS = {"doc_a.txt": "The pump failed at 03:14 because the seal was worn. " * 40,
        "doc_b.txt": "The harbour clock stopped at noon. " * 30}
T0 = 1_700_000_000.0  # when the paid calls were made, long before this run


def answer_row(qid: str, corpus_file: str, cached: bool, started: float) -> dict:
    """A responses.json row; a cached one is timed by THIS run's lookup, the paid latency kept apart (and, as
    the cache keeps them, the paid call's attempts)."""
    text = DOCS[corpus_file]
    return {
        "question_id": qid, "status": "answered",
        "caps": {"doc_chars": len(text), "ideographs": 0, "cap_kind": "en", "cap": 2000, "scope": "in_scope"},
        "document": {"corpus_file": f"corpus/{corpus_file}", "sha256": hashlib.sha256(text.encode()).hexdigest()},
        "reason": None, "response": f"The seal was worn ({qid}).", "finish_reason": "stop",
        "usage": {"prompt_tokens": 500, "completion_tokens": 40, "reasoning_tokens": 12},
        "error": None, "attempts": 1, "latency_s": 0.002 if cached else 1.5, "started_at": started,
        "http_status": 200, "prompt_sha256": "ab" * 32, "raw": {"id": f"chatcmpl-{qid}"},
        "prompt_ref": f"Question {qid}\n<<document corpus/{corpus_file} · sha256 …>>",
        "cached": cached, "original_latency_s": 1.5 if cached else None, "served_model": "test-model-2026-01-01",
        "reasoning": f"thinking about {qid}", "temperature_sent": True,
    }


def judgment_row(qid: str, judge: str, total: float, started: float, cached: bool) -> dict:
    """A judgments.json row."""
    return {"question_id": qid, "judge": judge, "status": "scored", "reason": None, "total": total,
            "score": total / 100, "parsed": {"total": total}, "reply": json.dumps({"total": total}), "error": None,
            "usage": {"prompt_tokens": 300, "completion_tokens": 20}, "attempts": 1, "latency_s": 0.5,
            "http_status": 200, "prompt_sha256": "cd" * 32, "started_at": started, "prompt": f"Grade {qid}",
            "raw": None, "cached": cached, "original_latency_s": 0.5 if cached else None}


@dataclasses.dataclass
class Scripted:
    """A run directory written as the runtime would, and its events."""

    tmp: Path
    out_dir: Path
    config: dict
    dones: list[TaskDone]
    uri: str

    def client(self) -> MlflowClient:
        return MlflowClient(tracking_uri=self.uri)

    def observer(self) -> MlflowObserver:
        m = self.config["mlflow"]
        return MlflowObserver(self.uri, m["experiment"], None, m["log_documents"], None)

    def start(self) -> RunStart:
        return RunStart(str(self.out_dir), self.config, len(self.dones), "2026-12-01T10:00:05+00:00", None)


def scripted_run(tmp: Path, name: str = "run", n: int = 4, cached: frozenset = frozenset({"q1"}),
                 status: str = "finished") -> Scripted:
    """Write corpus, config.json, responses/judgments/scores/run_stats for ``n`` tasks."""
    tasks, corpus = write_release(tmp, [make_task(f"q{i}", f"Why {i}?", "doc_a.txt" if i % 2 else "doc_b.txt")
                                        for i in range(n)], DOCS)
    cfg = settings(tmp, ["model=custom", "model.route=test-model", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
                         "mlflow.enabled=true"])
    out_dir = tmp / name
    cfg.out_dir = str(out_dir)
    config = dataclasses.asdict(cfg)
    now = time.time()
    answers, judgments, dones, score_rows = [], [], [], []
    for i in range(n):
        qid, hit = f"q{i}", f"q{i}" in cached
        a = answer_row(qid, "doc_a.txt" if i % 2 else "doc_b.txt", hit, now if hit else T0 + i)
        js = [judgment_row(qid, "offline", 60.0 + i, (now if hit else T0 + i) + 2, hit)]
        answers.append(a)
        judgments += js
        score_rows.append({"question_id": qid, "status": "scored", "score": js[0]["score"], "judges": {},
                           "paradigm": "causal", "context_tier": "T1"})
        dones.append(TaskDone(qid, AnswerRecord.from_row(a), [JudgmentRecord.from_row(j) for j in js],
                              TaskStatus.SCORED, js[0]["score"], {"paradigm": "causal", "context_tier": "T1"}))
    write_json(out_dir / "responses.json", answers)
    write_json(out_dir / "judgments.json", judgments)
    write_json(out_dir / "scores.json", {"overall": 61.5, "scored": 61.5, "n_total": n, "n_scored": n,
                                         "n_out_of_context": 0, "n_failed": 0, "n_unscored": 0, "n_missing": 0,
                                         "judges": {"offline": {"mean": 0.615, "unavailable_rate": 0.0, "n": n}},
                                         "tasks": score_rows})
    write_json(out_dir / "run_stats.json", {
        "harness_version": "0.1.0", "git_commit": "abc", "run_date": "2026-12-01T10:00:05+00:00", "stage": "all",
        "dataset": {"name": "sample", "tasks": str(tasks),
                    "tasks_sha256": hashlib.sha256(tasks.read_bytes()).hexdigest(),
                    "n_tasks": n, "release_version": "v1.0", "freeze_id": "f1"},
        "wall_s": 1.0, "retries": 0, "cache_hits": len(cached), "requests": {"model": n - len(cached)},
        "overrides": [], "effective_max_tokens": 8192, "status": status,
        "warnings": [{"code": "reasoning_budget", "message": "reasoning model under 32768 tokens"}],
        "served_models": {"model": ["test-model-2026-01-01"]}, "temperature_dropped": ["model"]})
    write_json(out_dir / "config.json", config)
    return Scripted(tmp, out_dir, config, dones, config["mlflow"]["tracking_uri"])


def traces_of(client: MlflowClient, run_id: str, spans: bool = True) -> list:
    run = client.get_run(run_id)
    return client.search_traces(locations=[run.info.experiment_id], run_id=run_id, max_results=500,
                                include_spans=spans)


def wait_for_traces(client: MlflowClient, run_id: str, n: int, timeout: float = 30.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = traces_of(client, run_id, spans=False)
        if len(found) >= n:
            return found
        time.sleep(0.2)
    return traces_of(client, run_id, spans=False)


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """One scripted run observed end to end; traces checked before run_finished."""
    s = scripted_run(tmp_path_factory.mktemp("observed"))
    obs = s.observer()
    obs.run_started(s.start())
    assert obs.wait_started(30)  # the MLflow run is made off the event loop, in seconds
    marker = read_marker(s.out_dir)
    for done in s.dones[:2]:
        obs.task_done(done)
    early = wait_for_traces(s.client(), marker["run_id"], 2, timeout=30)
    status_while_running = s.client().get_run(marker["run_id"]).info.status
    for done in s.dones[2:]:
        obs.task_done(done)
    run_id = obs.run_finished(RunEnd(str(s.out_dir), "finished"))
    return {"s": s, "marker_at_start": marker, "early": early, "running": status_while_running, "run_id": run_id}


def test_run_and_marker_exist_from_the_first_moment(logged):
    assert logged["marker_at_start"]["status"] == "running" and logged["marker_at_start"]["run_id"] == logged["run_id"]
    assert logged["running"] == "RUNNING"
    assert read_marker(logged["s"].out_dir)["status"] == "logged"


def test_traces_are_stored_while_the_run_goes(logged):
    assert {t.info.tags["question_id"] for t in logged["early"]} == {"q0", "q1"}


def test_run_finished_and_named_for_a_person(logged):
    run = logged["s"].client().get_run(logged["run_id"])
    assert run.info.status == "FINISHED"
    # no overrides: nothing differs, the name is model · panel · time; the temperature was dropped
    # (run_stats.temperature_dropped): the params and tags say so
    assert run.info.run_name == "custom · offline · 12-01 10:00:05"
    assert run.data.params["decoding.temperature_sent"] == "false"
    t = run.data.tags
    assert t["wildtrace.warning.reasoning_budget"] == "reasoning model under 32768 tokens"
    assert t["model.served"] == "test-model-2026-01-01" and t["temperature.sent.model"] == "false"


def test_dataset_is_an_mlflow_input(logged):
    run = logged["s"].client().get_run(logged["run_id"])
    (given,) = run.inputs.dataset_inputs
    stats = json.loads((logged["s"].out_dir / "run_stats.json").read_text())
    assert given.dataset.name == "sample@v1.0"
    assert given.dataset.digest == stats["dataset"]["tasks_sha256"][:12]
    assert json.loads(given.dataset.profile)["tasks_sha256"] == stats["dataset"]["tasks_sha256"]


def test_one_trace_per_task_none_twice(logged):
    traces = traces_of(logged["s"].client(), logged["run_id"])
    assert sorted(t.info.tags["question_id"] for t in traces) == ["q0", "q1", "q2", "q3"]


def test_cached_spans_are_marked_and_timed_as_this_run(logged):
    traces = {t.info.tags["question_id"]: t for t in traces_of(logged["s"].client(), logged["run_id"])}
    rows = {d.question_id: d.answer for d in logged["s"].dones}
    answer = next(s for s in traces["q1"].data.spans if s.name == "answer")
    assert answer.attributes["wildtrace.cached"] is True
    assert answer.attributes["wildtrace.original_latency_s"] == 1.5
    assert answer.start_time_ns == int(rows["q1"].started_at * 1e9)  # this run's lookup, not T0
    assert (answer.end_time_ns - answer.start_time_ns) / 1e9 == pytest.approx(0.002, abs=1e-4)
    paid = next(s for s in traces["q0"].data.spans if s.name == "answer")
    assert paid.attributes["wildtrace.cached"] is False and "wildtrace.original_latency_s" not in paid.attributes
    assert traces["q1"].info.tags["wildtrace.cached"] == "true"
    assert traces["q0"].info.tags["wildtrace.cached"] == "false"


def test_token_usage_is_read_by_mlflow_itself(logged):
    traces = traces_of(logged["s"].client(), logged["run_id"])
    for t in traces:  # answer 500/40 + one judge 300/20, aggregated by MLflow from the standard attribute
        assert t.info.token_usage == {"input_tokens": 800, "output_tokens": 60, "total_tokens": 860}


def test_spans_are_typed_and_chat_shaped(logged):
    (trace,) = [t for t in traces_of(logged["s"].client(), logged["run_id"]) if t.info.tags["question_id"] == "q0"]
    spans = {s.name: s for s in trace.data.spans}
    assert (spans["task q0"].span_type, spans["caps decision"].span_type) == ("CHAIN", "PARSER")
    assert spans["answer"].span_type == spans["judge offline"].span_type == "CHAT_MODEL"
    assert spans["answer"].inputs == {"messages": [{"role": "user",
                                                    "content": "Question q0\n<<document corpus/doc_b.txt"
                                                               " · sha256 …>>"}]}
    message = spans["answer"].outputs["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "The seal was worn (q0)."}
    assert spans["answer"].outputs["reasoning"] == "thinking about q0"  # apart from the answer
    assert spans["answer"].attributes["mlflow.llm.model"] == "test-model-2026-01-01"
    assert {a.name: a.value for a in trace.info.assessments if a.name.startswith("judge/")} == {"judge/offline": 0.6}


def test_second_upload_logs_nothing(logged, capsys):
    s = logged["s"]
    client = s.client()
    before = (len(client.search_runs([client.get_run(logged["run_id"]).info.experiment_id])),
              len(traces_of(client, logged["run_id"], spans=False)))
    assert upload.main([str(s.out_dir)]) == 0
    assert "already logged" in capsys.readouterr().out
    after = (len(client.search_runs([client.get_run(logged["run_id"]).info.experiment_id])),
             len(traces_of(client, logged["run_id"], spans=False)))
    assert after == before == (1, 4)


def started(s: Scripted) -> tuple[MlflowObserver, str]:
    """An observer whose MLflow run exists, and that run's id (as mlflow.json names it)."""
    obs = s.observer()
    obs.run_started(s.start())
    assert obs.wait_started(30)
    return obs, read_marker(s.out_dir)["run_id"]


def test_upload_completes_a_run_cut_off_mid_way(tmp_path):
    """A process killed after two tasks were traced: upload finishes THAT run, traces not repeated."""
    s = scripted_run(tmp_path, n=5)
    obs, run_id = started(s)
    for done in s.dones[:2]:
        obs.task_done(done)
    assert len(wait_for_traces(s.client(), run_id, 2)) == 2
    obs.exporter.close(30)  # the process dies here: no run_finished, the marker still says running
    assert read_marker(s.out_dir)["status"] == "running"
    assert upload.main([str(s.out_dir)]) == 0
    client = s.client()
    (mlrun,) = client.search_runs([client.get_run(run_id).info.experiment_id])
    assert mlrun.info.run_id == run_id and mlrun.info.status == "FINISHED"
    assert sorted(t.info.tags["question_id"] for t in traces_of(client, run_id, spans=False)) == [f"q{i}" for i in
                                                                                                 range(5)]
    assert read_marker(s.out_dir) == {**read_marker(s.out_dir), "status": "logged", "run_id": run_id}
    assert upload.main([str(s.out_dir), "--force"]) == 0  # --force: a new run, deliberately
    assert len(client.search_runs([mlrun.info.experiment_id])) == 2


def test_upload_sends_the_spans_of_a_trace_cut_off_before_them(tmp_path):
    """A process killed between a trace's info and its spans: upload adds the spans to THAT trace."""
    s = scripted_run(tmp_path, n=3)
    obs, run_id = started(s)
    cut = build_trace(s.dones[0], obs.exporter.target)
    tracing_client(obs.tracking_uri).start_trace(cut.info)  # its info only, then the process dies
    obs.exporter.close(30)
    assert upload.main([str(s.out_dir)]) == 0
    client = s.client()
    traces = {t.info.tags["question_id"]: t for t in traces_of(client, run_id)}
    assert sorted(traces) == ["q0", "q1", "q2"]
    assert traces["q0"].info.trace_id == cut.info.trace_id and len(traces["q0"].data.spans) == len(cut.data.spans)
    assert len(traces["q0"].info.assessments) == len(cut.info.assessments)  # its feedback not repeated


def test_a_cached_rerun_cut_off_and_uploaded_lists_each_task_once_and_links_what_it_can(tmp_path):
    """A first run pays for every call; its rerun, served from the cache, is killed after two tasks
    (linked to the first run's traces), and upload completes it: each task listed once, none stored twice."""
    first = scripted_run(tmp_path, "one", cached=frozenset())
    obs = first.observer()
    obs.run_started(first.start())
    first_id = obs.run_finished(RunEnd(str(first.out_dir), "finished"))
    client = first.client()
    stored = {t.info.tags["question_id"]: t.info.trace_id for t in traces_of(client, first_id, spans=False)}
    rerun = scripted_run(tmp_path, "two", cached=frozenset(stored))
    obs, run_id = started(rerun)
    for done in rerun.dones[:2]:
        obs.task_done(done)
    assert len(wait_for_traces(client, run_id, 2)) == 2
    assert obs.exporter.linked == {"q0", "q1"}
    obs.exporter.close(30)  # the process dies here
    assert upload.main([str(rerun.out_dir)]) == 0
    listed = {t.info.tags["question_id"]: t.info.trace_id for t in traces_of(client, run_id, spans=False)}
    assert sorted(listed) == sorted(stored) and len(traces_of(client, run_id, spans=False)) == len(stored)
    assert {q: listed[q] for q in ("q0", "q1")} == {q: stored[q] for q in ("q0", "q1")}
    # Upload tags the rest with the settings run_stats.json holds (the effective max_tokens), which the
    # live runs did not know: their content differs from the first run's, so they are stored, once.
    experiment = client.get_run(run_id).info.experiment_id
    every = {t.info.trace_id for t in client.search_traces(locations=[experiment], max_results=500,
                                                             include_spans=False)}
    assert every == set(stored.values()) | set(listed.values())  # no trace stored that no run lists
    assert upload.main([str(rerun.out_dir)]) == 0  # already logged: nothing linked or stored again
    assert len(client.search_traces(locations=[experiment], max_results=500, include_spans=False)) == len(every)
    assert len(traces_of(client, run_id, spans=False)) == len(stored)


def test_documents_are_stored_once_across_runs(tmp_path):
    first, second = scripted_run(tmp_path, "one"), scripted_run(tmp_path, "two")
    ids = []
    for s in (first, second):
        obs = s.observer()
        obs.run_started(s.start())
        ids.append(obs.run_finished(RunEnd(str(s.out_dir), "finished")))
    client = first.client()
    store_ids = {client.get_run(i).data.tags[documents.RUN_TAG] for i in ids}
    assert len(store_ids) == 1
    (store,) = store_ids
    stored = client.list_artifacts(store, documents.PREFIX)
    shas = {hashlib.sha256(t.encode()).hexdigest(): name for name, t in DOCS.items()}
    assert sorted(Path(a.path).name for a in stored) == sorted(shas)  # two documents, once
    for sha, name in shas.items():
        (f,) = client.list_artifacts(store, f"{documents.PREFIX}/{sha}")
        assert Path(f.path).name == name and f.file_size == len(DOCS[name].encode())
        assert "documents" not in {a.path for a in client.list_artifacts(ids[1])}
    table = json.loads(Path(client.download_artifacts(ids[1], "tables/tasks.json", str(tmp_path / "dl"))).read_text())
    rows = [dict(zip(table["columns"], r, strict=True)) for r in table["data"]]
    assert {r["document_uri"] for r in rows} == {f"runs:/{store}/documents/{sha}/{n}" for sha, n in shas.items()}
    # two runs started in the same second under the same settings still have different names
    assert len({client.get_run(i).info.run_name for i in ids}) == 2


def test_mlflow_down_never_raises_and_says_how_to_log_later(tmp_path, caplog):
    s = scripted_run(tmp_path)
    obs = MlflowObserver("http://127.0.0.1:9", "wildtrace")  # port 9: discard, nothing listens
    obs.run_started(s.start())
    for done in s.dones:
        obs.task_done(done)
    assert obs.run_finished(RunEnd(str(s.out_dir), "finished")) is None
    assert read_marker(s.out_dir)["status"] == "not_logged"
    assert f"python -m wildtrace.upload {s.out_dir}" in caplog.text


def test_a_partial_run_is_closed_killed(tmp_path):
    s = scripted_run(tmp_path, status="partial")
    obs = s.observer()
    obs.run_started(s.start())
    run_id = obs.run_finished(RunEnd(str(s.out_dir), "partial"))
    assert s.client().get_run(run_id).info.status == "KILLED"
    assert read_marker(s.out_dir)["status"] == "partial"


def test_an_existing_local_store_is_opened_before_the_run_starts_and_a_new_one_is_left_alone(tmp_path):
    from wildtrace.tracking import store as store_module
    from wildtrace.tracking.store import sqlite_path

    s = scripted_run(tmp_path)
    db = sqlite_path(s.uri)
    assert db is not None and not db.exists()
    fresh = s.observer()
    fresh.open_early()  # a store still to be made waits for the run: a refused command leaves none behind
    assert fresh._opener is None and not db.exists()
    first = s.observer()  # the first run makes the store
    first.run_started(s.start())
    assert first.run_finished(RunEnd(str(s.out_dir), "finished")) is not None
    store_module._READY.discard(s.uri)  # as a new process finds it
    again = s.observer()
    again.open_early()
    assert again._opener is not None
    again._opener.join(60)
    assert s.uri in store_module._READY  # opened (checked, its schema verified) before any event
    again.run_started(s.start())
    run_id = again.run_finished(RunEnd(str(s.out_dir), "finished"))
    assert run_id is not None and s.client().get_run(run_id).info.status == "FINISHED"
    assert len(traces_of(s.client(), run_id, False)) == len(s.dones)  # the end of the run traces them from the files


def test_a_failing_early_open_is_reported_by_the_run_itself(tmp_path, caplog):
    s = scripted_run(tmp_path)
    db = tmp_path / "broken.db"
    db.write_bytes(b"not a database at all" * 100)
    obs = MlflowObserver(f"sqlite:///{db}", "wildtrace")
    obs.open_early()
    assert obs._opener is not None
    obs._opener.join(60)  # it failed quietly
    obs.run_started(s.start())
    assert obs.run_finished(RunEnd(str(s.out_dir), "finished")) is None
    assert read_marker(s.out_dir)["status"] == "not_logged"
    assert caplog.text.count("could not start a run") == 1  # said once, by the run's own open
