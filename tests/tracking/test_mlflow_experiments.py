"""MLflow answers an experiment's questions, on a real store: what differs between runs is in their
params and tags, and a run's traces filter by its settings and sort by how far the judges disagree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import settings, tracked_run

RUNS = {
    "full": ["judge_panel=offline_panel", "decoding.temperature=0.4"],
    "ablation": ["judge_panel=offline_panel", "~judge_panel.judges.strict", "decoding.temperature=0.4"],
    "cool": ["judge_panel=offline_panel"],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("experiments")
    out = {"root": root, "uri": f"sqlite:///{root / 'outputs' / 'mlflow.db'}", "run_ids": {}, "dirs": {}}
    for name, overrides in RUNS.items():
        cfg = settings(root, ["mlflow.enabled=true", "mlflow.log_documents=false", *overrides])
        cfg.out_dir = str(root / "runs" / name)
        tracked_run(cfg, overrides=overrides)
        out["run_ids"][name] = json.loads((Path(cfg.out_dir) / "mlflow.json").read_text())["run_id"]
        out["dirs"][name] = Path(cfg.out_dir)
    from mlflow.tracking import MlflowClient

    out["client"] = MlflowClient(tracking_uri=out["uri"])
    return out


def test_an_ablation_says_its_panel_in_params_tags_and_name(store):
    client = store["client"]
    full, ablation = (client.get_run(store["run_ids"][k]) for k in ("full", "ablation"))
    assert full.data.params["judge_panel.name"] == ablation.data.params["judge_panel.name"] == "offline_panel"
    assert full.data.params["judge_panel.judges"] == "balanced,lenient,strict"
    assert ablation.data.params["judge_panel.judges"] == "balanced,lenient"
    assert (full.data.params["judge_panel.n_judges"], ablation.data.params["judge_panel.n_judges"]) == ("3", "2")
    assert ablation.data.tags["judge_panel.judges"] == "balanced,lenient"
    assert ablation.info.run_name.startswith("judges=balanced,lenient t=0.4 · extractive · offline_panel · ")
    assert full.info.run_name.startswith("t=0.4 · extractive · offline_panel · ")
    found = client.search_runs([full.info.experiment_id], "params.`judge_panel.judges` = 'balanced,lenient'")
    assert [r.info.run_id for r in found] == [ablation.info.run_id]


def test_run_metrics_carry_their_unit_and_mlflow_run_type(store):
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_TYPE, MLFLOW_RUN_TYPE_GENAI_EVALUATE

    run = store["client"].get_run(store["run_ids"]["full"])
    scores = json.loads((store["dirs"]["full"] / "scores.json").read_text())
    assert run.data.tags[MLFLOW_RUN_TYPE] == MLFLOW_RUN_TYPE_GENAI_EVALUATE
    m = run.data.metrics
    assert m["overall_pct"] == pytest.approx(scores["overall"], abs=0.005) and "overall" not in m
    assert m["judge/strict/mean"] == pytest.approx(scores["judges"]["strict"]["mean"], abs=5e-5)
    assert 0 <= m["judge/strict/mean"] <= 1
    assert m["language/English/all_pct"] + m["language/Chinese/all_pct"] > 0


def search(store, **kwargs):
    import mlflow

    mlflow.set_tracking_uri(store["uri"])
    try:
        experiment = mlflow.get_experiment_by_name("wildtrace")
        return mlflow.search_traces(locations=[experiment.experiment_id], return_type="list", **kwargs)
    finally:
        mlflow.set_tracking_uri(None)


def test_traces_filter_by_a_temperature_tag(store):
    hot = search(store, filter_string="tag.`decoding.temperature` = '0.4'")
    cool = search(store, filter_string="tag.`decoding.temperature` = '0.1'")
    runs = store["run_ids"]
    assert {t.info.request_metadata["mlflow.sourceRun"] for t in hot} == {runs["full"], runs["ablation"]}
    assert len(hot) == 20 and len(cool) == 10
    assert {t.info.request_metadata["mlflow.sourceRun"] for t in cool} == {runs["cool"]}
    tags = cool[0].info.tags
    assert (tags["decoding.replicate"], tags["judge_panel.replicate"], tags["judge_panel.judges"]) == \
        ("0", "0", "balanced,lenient,strict")
    assert tags["language"] in ("English", "Chinese") and tags["paradigm"] and tags["context_tier"]
    chinese = search(store, filter_string=f"tag.language = 'Chinese' AND run_id = '{runs['cool']}'")
    responses = json.loads((store["dirs"]["cool"] / "responses.json").read_text())
    assert {t.info.tags["question_id"] for t in chinese} == {r["question_id"] for r in responses
                                                              if r["caps"]["cap_kind"] == "cjk"} != set()


def judge_scores(run_dir: Path) -> dict[str, list[float]]:
    by_task: dict[str, list[float]] = {}
    for j in json.loads((run_dir / "judgments.json").read_text()):
        if j["score"] is not None:
            by_task.setdefault(j["question_id"], []).append(j["score"])
    return by_task


def test_sorting_by_the_panel_spread_finds_where_the_judges_disagree_most(store):
    run_id = store["run_ids"]["full"]
    spreads = {q: max(s) - min(s) for q, s in judge_scores(store["dirs"]["full"]).items()}
    widest = max(spreads.values())
    assert widest > 0
    traces = search(store, run_id=run_id, order_by=["tag.`panel.spread` DESC"])
    first = traces[0].info.tags["question_id"]
    assert spreads[first] == pytest.approx(widest)
    by_feedback = search(store, run_id=run_id, filter_string=f"feedback.`panel/spread` >= {round(widest, 4)}")
    assert {t.info.tags["question_id"] for t in by_feedback} == {q for q, v in spreads.items()
                                                                  if round(v, 4) >= round(widest, 4)}
    for t in traces:
        got = {a.name: a for a in t.info.assessments}
        qid = t.info.tags["question_id"]
        assert got["panel/spread"].value == pytest.approx(spreads[qid], abs=5e-5)
        assert got["panel/spread"].span_id == got["panel/score"].span_id == t.data.spans[0].span_id
        assert got["rubric"].expectation.value.startswith("P1 (")
        judge_spans = {s.name: s.span_id for s in t.data.spans if s.name.startswith("judge ")}
        for key in ("lenient", "balanced", "strict"):
            assert got[f"judge/{key}"].span_id == judge_spans[f"judge {key}"]
            assert got[f"judge/{key}"].run_id == run_id
            assert got[f"judge/{key}"].source.source_id == f"lexical-judge-{key}"


DOCS = Path(__file__).resolve().parents[2] / "docs" / "mlflow" / "mlflow.md"


def docs_example() -> tuple[str, str]:
    """The docs' paragraph on finding where the judges disagree, and its Python block, as printed."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("**Finding the tasks where the judges disagree"):]
    prose, _, rest = section.partition("```python\n")
    return prose, rest.partition("```")[0]


def spreads_of(run_dir: Path, run_id: str) -> dict[tuple[str, str], float]:
    """(run id, task) → the judges' spread (max − min), computed from judgments.json."""
    return {(run_id, q): round(max(s) - min(s), 4) for q, s in judge_scores(run_dir).items() if len(s) >= 2}


def test_the_docs_filter_and_sort_work_as_printed(store, monkeypatch, capsys):
    """The docs' Python block, run as printed in a folder whose outputs/ holds the store: the UI's filter
    string finds every trace at t = 0.4 (the full panel's and the ablation's), sorted by the panel's
    spread, widest first; the feedback filter finds the spreads of 0.5 and more."""
    import mlflow

    prose, block = docs_example()
    assert "filter_string=\"tags.`decoding.temperature` = '0.4'\"" in block
    assert "``tags.`decoding.temperature` = '0.4'``" in prose  # what the UI's filter sends is what Python runs
    runs, dirs = store["run_ids"], store["dirs"]
    spreads = {**spreads_of(dirs["full"], runs["full"]), **spreads_of(dirs["ablation"], runs["ablation"])}
    monkeypatch.chdir(store["root"])
    scope: dict = {}
    try:
        exec(compile(block, str(DOCS), "exec"), scope)  # the docs' own example, run as printed
    finally:
        mlflow.set_tracking_uri(None)
    traces, wide = scope["traces"], scope["wide"]
    got = [(t.info.request_metadata["mlflow.sourceRun"], t.info.tags["question_id"]) for t in traces]
    assert len(got) == len(set(got)) == 20 and {r for r, _ in got} == {runs["full"], runs["ablation"]}
    tagged = [spreads[k] for k in got if k in spreads]
    assert tagged == sorted(spreads.values(), reverse=True) and tagged[0] > tagged[-1]
    assert all(float(t.info.tags["panel.spread"]) == spreads[k] for t, k in zip(traces, got, strict=True)
               if k in spreads)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split() for line in printed] == [[q, f"{spreads[(r, q)]:.4f}", r] for r, q in got[:5]]
    every = {**spreads, **spreads_of(dirs["cool"], runs["cool"])}  # the feedback filter reads all three runs
    wanted = {k for k, v in every.items() if v >= 0.5}
    assert wanted and wanted != set(every)
    assert {(t.info.request_metadata["mlflow.sourceRun"], t.info.tags["question_id"]) for t in wide} == wanted
