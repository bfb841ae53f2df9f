"""The document-cluster bootstrap (report.bootstrap.by_document): its interval against a direct
resampling of documents written here, its design effect against the linearised (sandwich) ratio of
variances and against constructed cases whose answer is known."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_report import QIDS, write_run

from wildtrace.report import render, sources
from wildtrace.report.assemble import build
from wildtrace.report.statistics import stats
from wildtrace.report.statistics.stats import Bootstrap


def direct(values: np.ndarray, clusters: list[str], boot: Bootstrap) -> tuple[float, float]:
    """Resample documents with replacement (numpy Generator, boot.seed, one integers call over the
    documents in order of first appearance), each draw's mean over the tasks drawn; the percentile interval."""
    names = list(dict.fromkeys(clusters))
    members = [values[[c == name for c in clusters]] for name in names]
    idx = np.random.default_rng(boot.seed).integers(0, len(names), size=(boot.resamples, len(names)))
    means = [np.concatenate([members[i] for i in row]).mean() for row in idx]
    tail = 100 * (1 - boot.level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def test_the_interval_is_a_bootstrap_over_documents():
    rng = np.random.default_rng(1)
    clusters = [f"doc{int(i)}" for i in rng.integers(0, 12, 60)]
    values = np.array([0.1 * int(c[3:]) % 1 for c in clusters]) + rng.normal(0, 0.1, 60)
    boot = Bootstrap(resamples=400, seed=5)
    found = stats.cluster_interval(values, clusters, boot)
    assert (found["ci_low"], found["ci_high"]) == pytest.approx(direct(values, clusters, boot), abs=1e-12)
    assert found["n_clusters"] == len(set(clusters))


def test_design_effect_is_the_cluster_over_the_iid_variance_of_the_mean():
    """Linearised: var_cluster ∝ Σ_c (Σ_{i∈c} e_i)², var_iid ∝ Σ_i e_i² with e_i = y_i − ȳ."""
    rng = np.random.default_rng(2)
    clusters = [f"d{i // 5}" for i in range(200)]  # 40 documents of 5 tasks
    shared = np.repeat(rng.normal(0, 0.2, 40), 5)
    values = 0.5 + shared + rng.normal(0, 0.1, 200)
    e = values - values.mean()
    expected = sum(e[i * 5:(i + 1) * 5].sum() ** 2 for i in range(40)) / float((e ** 2).sum())
    found = stats.cluster_interval(values, clusters, Bootstrap(resamples=4000, seed=0))["design_effect"]
    assert found == pytest.approx(expected, rel=0.1)


@pytest.mark.parametrize("size", [1, 4])
def test_known_design_effects(size):
    """Tasks alone in their documents: the same draws as the task bootstrap, effect 1 and the same
    interval. Identical values within documents of ``size`` tasks: the effect is ``size``."""
    rng = np.random.default_rng(3)
    values = np.repeat(rng.uniform(0, 1, 60), size)
    clusters = [f"d{i // size}" for i in range(len(values))]
    boot = Bootstrap(resamples=3000, seed=4)
    found = stats.cluster_interval(values, clusters, boot)
    if size == 1:
        assert found["design_effect"] == pytest.approx(1.0, abs=1e-12)
        assert (found["ci_low"], found["ci_high"]) == pytest.approx(stats.all_interval(values, boot), abs=1e-12)
    else:
        assert found["design_effect"] == pytest.approx(size, rel=0.1)


def test_one_document_has_no_interval():
    assert stats.cluster_interval([0.1, 0.2, 0.3], ["d", "d", "d"]) == {
        "ci_low": None, "ci_high": None, "design_effect": None, "n_clusters": 1}


def test_the_setting_adds_the_design_effect_to_the_baseline_and_says_so(tmp_path):
    """Two documents of four tasks each; the design effect is the cluster bootstrap's on the
    replicate-averaged scores, each task's document read from responses.json."""
    scores = {"a": [0.2, 0.3, 0.25, 0.3, 0.8, 0.9, 0.85, 0.7]}
    out = write_run(tmp_path / "runs", "r", "alpha", scores)
    docs = {q: "one.txt" if i < 4 else "two.txt" for i, q in enumerate(QIDS)}
    (out / "responses.json").write_text(json.dumps([{"question_id": q, "status": "answered", "response": "x",
                                                     "document": {"corpus_file": d, "sha256": d}}
                                                    for q, d in docs.items()]))
    plain = build(sources.from_run_dirs([str(tmp_path / "runs" / "*")]))
    assert "design_effect" not in plain.baseline
    boot = Bootstrap(resamples=500, by_document=True)
    report = build(sources.from_run_dirs([str(tmp_path / "runs" / "*")]), boot)
    expected = stats.cluster_interval(scores["a"], list(docs.values()), boot)["design_effect"]
    assert report.baseline.loc[0, "design_effect"] == pytest.approx(round(expected, 4))
    assert report.baseline.loc[0, "n_documents"] == 2 and expected > 1
    assert report.baseline.loc[0, "small_n"]  # 8 tasks: the interval stays a t interval
    render.write(report, tmp_path / "out")
    assert "resample documents" in (tmp_path / "out" / "report.html").read_text()
