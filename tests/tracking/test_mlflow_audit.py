"""Every run auditable in MLflow: read the store back with MlflowClient after a scripted run."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, tracked_run, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat
from wildtrace import upload
from wildtrace.tracking import documents


pytestmark = [pytest.mark.slow, pytest.mark.mlflow]
DOC = "The seal was worn. The pump failed at 03:14. " * 20
LONG = "z" * 3000


def responder(call: Call) -> Reply:
    if call.route == "test-model":
        if "[refuse]" in call.prompt:
            return chat(None, refusal="no")
        return chat("The seal was worn at 03:14.")
    if call.route == "judge-b" and "[odd]" in call.prompt:
        return chat("no numbers here")
    return chat('{"points_awarded":[50],"total":50}' if call.route == "judge-a" else '{"total":70}')


def store(tmp: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{tmp / 'outputs' / 'mlflow.db'}")


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("audit")
    key = "sk-canary-audit-" + "5e" * 12
    mp = pytest.MonkeyPatch()
    mp.setenv(TEST_KEY_ENV, key)
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    tasks = [make_task("ok1", "What failed? [ok]", "doc.txt", paradigm="causal", context_tier="T1"),
             make_task("ok2", "When did it fail? [odd]", "doc.txt", paradigm="temporal", context_tier="T1"),
             make_task("ooc", "What? [long]", "long.txt", paradigm="causal", context_tier="T2"),
             make_task("ref", "Why? [refuse]", "doc.txt", paradigm="temporal", context_tier="T1")]
    tasks_path, corpus = write_release(tmp, tasks, {"doc.txt": DOC, "long.txt": LONG})
    with LoopbackServer(responder) as server:
        cfg = settings(tmp, ["model=custom", "model.route=test-model", f"model.base_url={server.url}/v1",
                             f"model.api_key_env={TEST_KEY_ENV}", "model.caps.en=2000", f"dataset.tasks={tasks_path}",
                             f"dataset.corpus={corpus}", "mlflow.enabled=true"],
                       judges={"a": openai_judge(server.url, "judge-a"), "b": openai_judge(server.url, "judge-b")})
        result = tracked_run(cfg)
    leaked = os.environ.get("MLFLOW_TRACKING_URI")
    mp.undo()
    client = store(tmp)
    experiment = client.get_experiment_by_name("wildtrace")
    runs = client.search_runs([experiment.experiment_id])
    return {"tmp": tmp, "key": key, "result": result, "client": client, "experiment": experiment, "runs": runs,
            "leaked": leaked, "scores": json.loads((result.out_dir / "scores.json").read_text()),
            "responses": json.loads((result.out_dir / "responses.json").read_text()),
            "judgments": json.loads((result.out_dir / "judgments.json").read_text())}


def download(a, path: str) -> Path:
    return Path(a["client"].download_artifacts(a["runs"][0].info.run_id, path, str(a["tmp"] / "dl")))


def table(a, path: str) -> list[dict]:
    data = json.loads(download(a, path).read_text())
    return [dict(zip(data["columns"], row, strict=True)) for row in data["data"]]


def test_one_run_with_the_headline(audited):
    (mlrun,) = audited["runs"]
    s = audited["scores"]
    assert mlrun.info.status == "FINISHED"
    assert mlrun.data.metrics["overall_pct"] == pytest.approx(s["overall"], abs=0.005)
    assert mlrun.data.metrics["scored_pct"] == pytest.approx(s["scored"], abs=0.005)
    assert mlrun.data.metrics["n_out_of_context"] == 1 and mlrun.data.metrics["n_failed"] == 1
    assert mlrun.data.metrics["judge/b/unavailable_rate"] == pytest.approx(0.5)
    assert mlrun.data.metrics["agreement/a__b/mad"] == pytest.approx(0.2)  # ok1: |0.5 - 0.7|
    assert mlrun.data.metrics["paradigm/causal/all_pct"] == pytest.approx(30.0)  # ok1 0.6, ooc 0
    assert mlrun.data.metrics["tier/T1/scored_pct"] == pytest.approx(55.0)  # ok1 0.6, ok2 0.5 (b unavailable)
    assert mlrun.data.metrics["requests/model"] == 3 and mlrun.data.metrics["requests/a"] == 2
    assert "tokens/model/prompt" in mlrun.data.metrics and "wall_s" in mlrun.data.metrics


def test_params_and_tags(audited):
    (mlrun,) = audited["runs"]
    p, t = mlrun.data.params, mlrun.data.tags
    assert (p["model.route"], p["model.caps.en"], p["decoding.temperature"]) == ("test-model", "2000", "0.1")
    assert p["decoding.effective_max_tokens"] == "8192" and p["judge_panel.judges.a.route"] == "judge-a"
    assert p["model.api_key_env"] == TEST_KEY_ENV
    assert t["dataset.tasks_sha256"] == audited["result"].stats["dataset"]["tasks_sha256"]
    assert t["wildtrace.git_commit"] and t["run_date"].startswith("20") and "cap" in t["context_policy"]
    assert t["replicate.decoding"] == "0" and t["replicate.judge_panel"] == "0"
    assert re.fullmatch(r"limit=\d+ · custom · offline · \d\d-\d\d \d\d:\d\d:\d\d|custom · offline · "
                        r"\d\d-\d\d \d\d:\d\d:\d\d", mlrun.info.run_name)
    assert (t["judge_panel.judges"], t["judge_panel.n_judges"]) == ("a,b", "2")
    assert p["decoding.temperature_sent"] == "true"


def test_every_answer_reply_and_caps_decision_is_in_the_artifacts(audited):
    tasks = {r["question_id"]: r for r in table(audited, "tables/tasks.json")}
    for row in audited["responses"]:
        logged = tasks[row["question_id"]]
        assert logged["response"] == row["response"]
        assert (logged["scope"], logged["doc_chars"], logged["cap"]) == (row["caps"]["scope"], row["caps"]["doc_chars"],
                                                                          row["caps"]["cap"])
    assert tasks["ooc"]["scope"] == "out_of_context_scope" and tasks["ooc"]["prompt"] is None
    assert "<<document corpus/doc.txt · sha256 " in tasks["ok1"]["prompt"] and DOC not in tasks["ok1"]["prompt"]
    assert json.loads(tasks["ref"]["raw"])["choices"][0]["message"]["refusal"] == "no"
    judged = {(j["question_id"], j["judge"]): j for j in table(audited, "tables/judgments.json")}
    assert len(judged) == len(audited["judgments"]) == 4
    for j in audited["judgments"]:
        logged = judged[(j["question_id"], j["judge"])]
        assert (logged["reply"], logged["prompt"], logged["status"]) == (j["reply"], j["prompt"], j["status"])
    assert judged[("ok2", "b")]["reason"] == "no_numeric_total"
    for name in ("scores.json", "responses.json", "judgments.json", "config.json", "run_stats.json"):
        assert name in {a.path for a in audited["client"].list_artifacts(audited["runs"][0].info.run_id)}


def test_documents_stored_once_in_the_store_and_referenced(audited):
    client, mlrun = audited["client"], audited["runs"][0]
    store = mlrun.data.tags[documents.RUN_TAG]
    assert "documents" not in {a.path for a in client.list_artifacts(mlrun.info.run_id)}
    stored = {Path(a.path).name for a in client.list_artifacts(store, "documents")}
    by_sha = {r["document"]["sha256"]: r["document"]["corpus_file"] for r in audited["responses"]}
    assert stored == set(by_sha)
    tasks = {r["question_id"]: r for r in table(audited, "tables/tasks.json")}
    sha = tasks["ok1"]["document_sha256"]
    assert tasks["ok1"]["document_uri"] == f"runs:/{store}/documents/{sha}/doc.txt"


def test_one_trace_per_task_with_judge_feedback(audited):
    client, mlrun = audited["client"], audited["runs"][0]
    traces = client.search_traces(locations=[audited["experiment"].experiment_id], run_id=mlrun.info.run_id)
    assert len(traces) == 4
    by_task = {t.info.tags["question_id"]: t for t in traces}
    spans = [s.name for s in by_task["ok1"].data.spans]
    assert spans[0] == "task ok1" and set(spans[1:]) == {"caps decision", "answer", "judge a", "judge b"}
    assert [s.name for s in by_task["ooc"].data.spans] == ["task ooc", "caps decision"]
    feedback = {a.name: a.value for a in by_task["ok1"].info.assessments if a.name != "rubric"}
    assert feedback == {"judge/a": 0.5, "judge/b": 0.7, "panel/score": 0.6, "panel/spread": 0.2}


def test_no_secret_and_no_leaked_tracking_uri(audited):
    assert audited["leaked"] is None
    for path in audited["tmp"].rglob("*"):
        if path.is_file():
            assert audited["key"].encode() not in path.read_bytes(), path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tracking_server_down_costs_nothing_and_upload_logs_later(tmp_path, caplog):
    cfg = settings(tmp_path, ["mlflow.enabled=true", f"mlflow.tracking_uri=http://127.0.0.1:{closed_port()}",
                              "dataset.limit=3"])
    result = tracked_run(cfg)
    assert result.summary["n_total"] == 3 and (result.out_dir / "scores.json").exists()
    marker = json.loads((result.out_dir / "mlflow.json").read_text())
    assert marker["status"] == "not_logged"
    assert f"python -m wildtrace.upload {result.out_dir}" in caplog.text
    uri = f"sqlite:///{tmp_path / 'later.db'}"
    assert upload.main([str(result.out_dir), "--tracking-uri", uri]) == 0
    client = MlflowClient(tracking_uri=uri)
    (mlrun,) = client.search_runs([client.get_experiment_by_name("wildtrace").experiment_id])
    assert mlrun.data.metrics["overall_pct"] == pytest.approx(result.summary["overall"], abs=0.005)
    assert json.loads((result.out_dir / "mlflow.json").read_text())["run_id"] == mlrun.info.run_id
    assert len(client.search_traces(run_id=mlrun.info.run_id, locations=[mlrun.info.experiment_id])) == 3


def test_documents_can_be_left_out(tmp_path):
    result = tracked_run(settings(tmp_path, ["mlflow.enabled=true", "mlflow.log_documents=false", "dataset.limit=2"]))
    client = store(tmp_path)
    (mlrun,) = client.search_runs([client.get_experiment_by_name("wildtrace").experiment_id])
    assert "documents" not in {a.path for a in client.list_artifacts(mlrun.info.run_id)}
    assert documents.RUN_TAG not in mlrun.data.tags and client.get_experiment_by_name(documents.EXPERIMENT) is None
    assert result.summary["n_total"] == 2


def test_trace_spans_carry_the_calls_real_times(audited):
    client, mlrun = audited["client"], audited["runs"][0]
    traces = client.search_traces(locations=[audited["experiment"].experiment_id], run_id=mlrun.info.run_id)
    trace = {t.info.tags["question_id"]: t for t in traces}["ok1"]
    row = {r["question_id"]: r for r in audited["responses"]}["ok1"]
    answer = next(s for s in trace.data.spans if s.name == "answer")
    assert answer.start_time_ns == int(row["started_at"] * 1e9)
    assert (answer.end_time_ns - answer.start_time_ns) / 1e9 == pytest.approx(row["latency_s"], abs=1e-3)
