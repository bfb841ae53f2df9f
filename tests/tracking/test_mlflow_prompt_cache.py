"""What the providers' prompt caches did, as run_stats.json, MLflow and the report show it: per endpoint the
input tokens, those read from and written to the cache, the hit rate and the USD saved, each checked against
the usage the loopback servers (caching as OpenAI, Anthropic and Gemini document) sent back, read here
field by field as each provider documents them, and the model file's prices."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, settings, tracked_run, write_release
from servers.loopback import Call, LoopbackServer, Reply
from servers.prefix_cache import PrefixCache

#: shape -> (model file, base URL suffix, extra overrides): the three usage shapes of tests/servers/prefix_cache.py.
SHAPES = {"openai": ("gpt-5.1", "/v1", ["model.send_temperature=true"]),
          "anthropic": ("claude-opus-4.6", "", []),
          "gemini": ("gemini-2.5-pro", "", [])}
DOCUMENT = "The seal was worn. The pump failed at 03:14. The valve held. " * 300  # ~4,500 loopback tokens


class Recording:
    """A responder that keeps the body of every reply it gives."""

    def __init__(self, inner: PrefixCache) -> None:
        self.inner, self.bodies = inner, []

    def __call__(self, call: Call) -> Reply:
        reply = self.inner(call)
        self.bodies.append(reply.body)
        return reply


def usage_of(shape: str, body: dict) -> tuple[int, int, int]:
    """(input tokens, read from the cache, written to it), from the fields each provider documents."""
    if shape == "openai":
        u = body["usage"]
        return u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], 0
    if shape == "anthropic":
        u = body["usage"]
        read, written = u["cache_read_input_tokens"], u["cache_creation_input_tokens"]
        return u["input_tokens"] + read + written, read, written
    u = body["usageMetadata"]
    return u["promptTokenCount"], u.get("cachedContentTokenCount", 0), 0


def expected(shape: str, bodies: list[dict], price: dict) -> dict:
    """The endpoint's figures computed directly: a read saves (input − read price), a write costs
    (write price − input) more where the provider charges one."""
    rows = [usage_of(shape, b) for b in bodies]
    total, read, written = (sum(r[i] for r in rows) for i in range(3))
    f = lambda v: Fraction(repr(float(v)))  # noqa: E731
    write_price = price.get("cache_write_per_mtok") or price["input_per_mtok"]
    saved = (read * (f(price["input_per_mtok"]) - f(price["cached_input_per_mtok"]))
             - written * (f(write_price) - f(price["input_per_mtok"]))) / 1_000_000
    return {"calls": len(rows), "input_tokens": total, "cached_input_tokens": read, "cache_write_tokens": written,
            "hit_rate": read / total, "saved_usd": float(saved)}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    """One run per provider shape, each sending every task twice (the second while the provider holds the
    prompt), logged to one MLflow store."""
    import os

    from wildtrace.config import DecodingConfig

    root = tmp_path_factory.mktemp("prompt-cache")
    tasks, corpus = write_release(root, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(3)],
                                  {"doc.txt": DOCUMENT})
    os.environ[TEST_KEY_ENV] = "sk-loopback"
    out: dict = {"uri": f"sqlite:///{root / 'outputs' / 'mlflow.db'}", "runs": {}}
    try:
        for shape, (model, suffix, extra) in SHAPES.items():
            responder = Recording(PrefixCache(shape))
            with LoopbackServer(responder) as server:
                cfg = settings(root / shape, [f"model={model}", f"model.base_url={server.url}{suffix}", *extra,
                                              f"model.api_key_env={TEST_KEY_ENV}", "model.stream=false",
                                              f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
                                              "judge_panel=offline", "mlflow.enabled=true",
                                              "mlflow.log_documents=false", f"root={root / 'outputs'}"])
                cfg.prompt_repeats = 2
                cfg.sweep_decodings = [DecodingConfig(replicate=1)]
                result = tracked_run(cfg)
            run_dir = Path(result.out_dir)
            price = json.loads((run_dir / "config.json").read_text())["model"]["price"]
            out["runs"][shape] = {"stats": result.stats, "dir": run_dir, "expected": expected(shape, responder.bodies,
                                                                                               price),
                                  "run_id": json.loads((run_dir / "mlflow.json").read_text())["run_id"]}
    finally:
        os.environ.pop(TEST_KEY_ENV, None)
    return out


@pytest.mark.parametrize("shape", list(SHAPES))
def test_run_stats_count_cache_reads_writes_hit_rate_and_saving_per_endpoint(store, shape):
    run = store["runs"][shape]
    want, got = run["expected"], run["stats"]["prompt_cache"]["endpoints"]["model"]
    assert want["calls"] == 6 and want["cached_input_tokens"] > 0  # three tasks, each sent twice, repeats read
    assert {k: got[k] for k in ("calls", "input_tokens", "cached_input_tokens", "cache_write_tokens")} == \
        {k: want[k] for k in ("calls", "input_tokens", "cached_input_tokens", "cache_write_tokens")}
    assert got["hit_rate"] == pytest.approx(want["hit_rate"], abs=5e-5)  # of the input tokens, not of the calls
    assert got["saved_usd"] == pytest.approx(want["saved_usd"], abs=1e-9)
    assert run["stats"]["prompt_cache"]["saved_usd"] == pytest.approx(want["saved_usd"], abs=1e-9)


def test_the_hit_rate_is_the_share_of_input_read_not_of_calls(store):
    """OpenAI caches in 128-token steps: half the calls read, but less than half the input."""
    want = store["runs"]["openai"]["expected"]
    assert 0 < want["hit_rate"] < 0.5
    assert store["runs"]["openai"]["stats"]["prompt_cache"]["endpoints"]["model"]["hits"] == 3


@pytest.mark.parametrize("shape", list(SHAPES))
def test_mlflow_metrics_hold_the_same_figures_with_their_unit_in_the_key(store, shape):
    from mlflow.tracking import MlflowClient

    run = store["runs"][shape]
    want = run["expected"]
    m = MlflowClient(tracking_uri=store["uri"]).get_run(run["run_id"]).data.metrics
    assert m["prompt_cache/model/input_tokens"] == want["input_tokens"]
    assert m["prompt_cache/model/cached_input_tokens"] == want["cached_input_tokens"]
    assert m["prompt_cache/model/cache_write_tokens"] == want["cache_write_tokens"]
    assert m["prompt_cache/model/hit_rate"] == pytest.approx(want["hit_rate"], abs=5e-5)
    assert m["prompt_cache/model/saved_usd"] == pytest.approx(want["saved_usd"], rel=1e-3)
    assert m["prompt_cache/saved_usd"] == pytest.approx(want["saved_usd"], rel=1e-3)


def test_the_report_shows_each_run_s_prompt_cache_per_endpoint(store):
    """Read back from MLflow as the report reads it: one row per run and endpoint, the hit rate in %."""
    from wildtrace.report import render, sources
    from wildtrace.report.assemble import build

    report = build(sources.from_mlflow(store["uri"], "wildtrace"))
    table = render.tables(report)["prompt_cache"].set_index("run_id")
    assert len(table) == len(SHAPES) and set(table["endpoint"]) == {"model"}
    for shape, run in store["runs"].items():
        row, want = table.loc[run["run_id"]], run["expected"]
        assert (row["calls"], row["input_tokens"], row["cached_input_tokens"], row["cache_write_tokens"]) == \
            (want["calls"], want["input_tokens"], want["cached_input_tokens"], want["cache_write_tokens"])
        assert row["hit_rate_pct"] == pytest.approx(100 * want["hit_rate"], abs=0.1), shape
        assert row["saved_usd"] == pytest.approx(want["saved_usd"], abs=1e-4), shape
    page = render.page(report, {})
    assert '<h3>Prompt cache</h3>' in page and "hit_rate_pct" in page


def test_a_sweep_parent_holds_the_sweep_s_prompt_cache(store):
    """The three runs as the children of one parent: the parent's metrics are their figures summed, the hit
    rate that of the sums (the first job of a sweep sends the repeats, so the sum is what the sweep did)."""
    from mlflow.tracking import MlflowClient

    from wildtrace.tracking.runs.parent import SWEEP_TAG, refresh_parent

    client = MlflowClient(tracking_uri=store["uri"])
    experiment = client.get_experiment_by_name("wildtrace").experiment_id
    parent = client.create_run(experiment, tags={SWEEP_TAG: "parent"}).info.run_id
    for run in store["runs"].values():
        client.set_tag(run["run_id"], "mlflow.parentRunId", parent)
    refresh_parent(client, parent)
    m = client.get_run(parent).data.metrics
    want = [run["expected"] for run in store["runs"].values()]
    total = {k: sum(w[k] for w in want) for k in ("input_tokens", "cached_input_tokens", "cache_write_tokens",
                                                    "saved_usd")}
    assert m["prompt_cache/model/input_tokens"] == total["input_tokens"]
    assert m["prompt_cache/model/cached_input_tokens"] == total["cached_input_tokens"]
    assert m["prompt_cache/model/cache_write_tokens"] == total["cache_write_tokens"]
    assert m["prompt_cache/model/hit_rate"] == pytest.approx(total["cached_input_tokens"] / total["input_tokens"],
                                                             abs=5e-5)
    assert m["prompt_cache/model/saved_usd"] == pytest.approx(total["saved_usd"], rel=1e-3)
    assert m["prompt_cache/saved_usd"] == pytest.approx(total["saved_usd"], rel=1e-3)


def child(**metrics: float):
    from types import SimpleNamespace

    return SimpleNamespace(data=SimpleNamespace(metrics=metrics))


@pytest.mark.parametrize("children, want", [
    pytest.param([], {}, id="no child"),
    pytest.param([child(overall_pct=30.0)], {}, id="no prompt cache"),
    pytest.param([child(**{"prompt_cache/model/input_tokens": 100, "prompt_cache/model/cached_input_tokens": 0,
                           "prompt_cache/model/saved_usd": -0.25, "prompt_cache/saved_usd": -0.25}),
                  child(**{"prompt_cache/model/input_tokens": 300, "prompt_cache/model/cached_input_tokens": 300,
                           "prompt_cache/model/saved_usd": 1.35, "prompt_cache/saved_usd": 1.35})],
                 {"prompt_cache/model/input_tokens": 400, "prompt_cache/model/cached_input_tokens": 300,
                  "prompt_cache/model/hit_rate": 0.75, "prompt_cache/model/saved_usd": 1.1,
                  "prompt_cache/saved_usd": 1.1}, id="a write, then reads"),
    pytest.param([child(**{"prompt_cache/a/input_tokens": 100, "prompt_cache/a/cached_input_tokens": 50,
                           "prompt_cache/a/saved_usd": 0.5, "prompt_cache/b/input_tokens": 10,
                           "prompt_cache/b/cached_input_tokens": 0}),
                  child(**{"prompt_cache/a/input_tokens": 100, "prompt_cache/a/cached_input_tokens": 50,
                           "prompt_cache/a/saved_usd": 0.5})],
                 {"prompt_cache/a/input_tokens": 200, "prompt_cache/a/cached_input_tokens": 100,
                  "prompt_cache/a/hit_rate": 0.5, "prompt_cache/a/saved_usd": 1.0,
                  "prompt_cache/b/input_tokens": 10, "prompt_cache/b/cached_input_tokens": 0,
                  "prompt_cache/b/hit_rate": 0.0}, id="a saving unknown (no price) is no sum"),
])
def test_the_sweep_s_prompt_cache_is_its_children_summed(children, want):
    from wildtrace.tracking.runs.parent import prompt_cache_totals

    assert prompt_cache_totals(children) == pytest.approx(want)


@pytest.mark.parametrize("block, want", [
    pytest.param({}, {}, id="a run from before prompt caching"),
    pytest.param({"endpoints": {}, "saved_usd": 0.0}, {"prompt_cache/saved_usd": 0.0}, id="nothing sent"),
    pytest.param({"endpoints": {"model": {"calls": 2, "hits": 1, "input_tokens": 2000, "cached_input_tokens": 1000,
                                          "cache_write_tokens": 1000, "cache_write_1h_tokens": 1000,
                                          "hit_rate": 0.5, "saved_usd": 0.000123456}},
                  "saved_usd": 0.000123456},
                 {"prompt_cache/model/input_tokens": 2000, "prompt_cache/model/cached_input_tokens": 1000,
                  "prompt_cache/model/cache_write_tokens": 1000, "prompt_cache/model/cache_write_1h_tokens": 1000,
                  "prompt_cache/model/hit_rate": 0.5, "prompt_cache/model/saved_usd": 0.0001235,
                  "prompt_cache/saved_usd": 0.0001235}, id="a write for the hour, a read; dollars to 4 digits"),
    pytest.param({"endpoints": {"judge a/b": {"input_tokens": 10, "cached_input_tokens": 0, "cache_write_tokens": 0,
                                              "hit_rate": 0.0, "saved_usd": None}}, "saved_usd": None},
                 {"prompt_cache/judge a_b/input_tokens": 10, "prompt_cache/judge a_b/cached_input_tokens": 0,
                  "prompt_cache/judge a_b/cache_write_tokens": 0, "prompt_cache/judge a_b/hit_rate": 0.0},
                 id="an unknown saving is no metric; a label is one key part"),
])
def test_prompt_cache_metrics_from_run_stats(block, want):
    from wildtrace.tracking.rundir import prompt_cache_metrics

    assert prompt_cache_metrics(block) == want
