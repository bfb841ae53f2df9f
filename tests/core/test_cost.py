"""What calls cost: the pure sums at every boundary, the providers' usage as billed, prices in the config,
and ``cost_usd`` on every row of a run against loopback servers that report usage as real endpoints do."""

from __future__ import annotations

import json
import math
from decimal import ROUND_HALF_UP, Decimal

import pytest

from conftest import TEST_KEY_ENV, compose_config, make_task, openai_judge, settings, tracked_run, write_release
from servers.loopback import Call, LoopbackServer, Reply
from wildtrace.config import ConfigError, to_settings
from wildtrace.core.cost import Billable, Price, billable, cost_usd, in_tier, total_usd
from wildtrace.core.records import AnswerRecord
from wildtrace.providers.anthropic import AnthropicProvider
from wildtrace.providers.gemini import GeminiProvider
from wildtrace.providers.openai import OpenAIProvider
from wildtrace.runtime.run.execute import run
from wildtrace.tracking.traces import call_attributes

from conftest import endpoint_spec

TIERED = Price(input_per_mtok=2.5, output_per_mtok=15.0, cached_input_per_mtok=0.25, above_input_tokens=272_000,
               input_multiplier=2.0, output_multiplier=1.5, batch_discount=0.5)
FLAT = Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3, batch_discount=0.5)


def independent(price: Price, inp: int, cached: int, out: int, batched: bool = False) -> Decimal:
    """The bill as a person would write it on paper, in decimal dollars (not the module's code path)."""
    d = lambda v: Decimal(str(v))  # noqa: E731
    tier = price.above_input_tokens is not None and inp > price.above_input_tokens
    im = d(price.input_multiplier) if tier else Decimal(1)
    om = d(price.output_multiplier) if tier else Decimal(1)
    usd = ((inp - cached) * d(price.input_per_mtok) * im + cached * d(price.cached_input_per_mtok or 0) * im
           + out * d(price.output_per_mtok) * om) / Decimal(1_000_000)
    return usd * (1 - d(price.batch_discount)) if batched else usd


def cents(value: Decimal | float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


@pytest.mark.parametrize("price, inp, cached, out, batched", [
    (TIERED, 0, 0, 0, False),
    (TIERED, 1, 0, 1, False),
    (TIERED, 271_999, 0, 8_192, False),
    (TIERED, 272_000, 0, 8_192, False),  # at the threshold: not above it, standard rates
    (TIERED, 272_001, 0, 8_192, False),  # one token over: the whole request at the tier
    (TIERED, 272_001, 100_000, 8_192, False),  # cached input in the tier: the input multiplier applies to it too
    (TIERED, 900_000, 0, 32_768, False),
    (TIERED, 900_000, 0, 32_768, True),  # batched: half of the tier price
    (TIERED, 150_000, 150_000, 10, False),  # all input from the cache
    (FLAT, 2_000_000, 0, 64_000, False),  # no tier at any size
    (FLAT, 123_457, 3_333, 7_777, True),
])
def test_cost_matches_an_independent_bill_to_the_cent(price, inp, cached, out, batched):
    got = cost_usd(price, Billable(inp, cached, out), batched)
    want = independent(price, inp, cached, out, batched)
    assert cents(got) == cents(want)
    assert abs(Decimal(str(got)) - want) < Decimal("1e-9")


@pytest.mark.parametrize("tokens, tiered", [(0, False), (272_000, False), (272_001, True), (10**7, True)])
def test_tier_is_strictly_above_the_threshold(tokens, tiered):
    assert in_tier(TIERED, tokens) is tiered
    assert in_tier(FLAT, tokens) is False


@pytest.mark.parametrize("price, usage, batched", [
    (None, Billable(10, 0, 10), False),  # no price at all
    (Price(output_per_mtok=1.0), Billable(10, 0, 10), False),  # no input price
    (Price(input_per_mtok=1.0), Billable(10, 0, 10), False),  # no output price
    (Price(1.0, 1.0, None), Billable(10, 5, 10), False),  # cache read without a cached price
    (Price(1.0, 1.0, 0.1), Billable(10, 0, 10), True),  # batched without a batch discount
    (Price(1.0, 1.0, above_input_tokens=5), Billable(10, 0, 10), False),  # a tier without its multipliers
    (FLAT, None, False),  # the endpoint reported no usage
])
def test_unknown_is_none_never_zero(price, usage, batched):
    assert cost_usd(price, usage, batched) is None


def test_a_free_price_costs_nothing_even_without_usage():
    assert cost_usd(Price(0.0, 0.0, 0.0), None) == 0.0


@pytest.mark.parametrize("prompt, completion, cached, want", [
    (1000, 500, 0, Billable(1000, 0, 500)),  # OpenAI: completion_tokens includes reasoning
    (1000, 500, 200, Billable(1000, 200, 500)),  # Anthropic: output_tokens includes thinking
    (1000, 500, 300, Billable(1000, 300, 500)),  # Gemini: recorded completion = candidates + thoughts
    (10, 5, 99, Billable(10, 10, 5)),  # a cached count above the prompt is clamped
    (None, 5, None, None),
    (10, None, None, None),
])
def test_billable_counts_reasoning_as_output(prompt, completion, cached, want):
    assert billable(prompt, completion, cached) == want


def test_totals_are_unknown_when_any_part_is():
    assert total_usd([0.1, 0.2]) == pytest.approx(0.3)
    assert total_usd([0.1, None]) is None


# ---------------------------------------------------------------------- providers report cached tokens


def test_openai_cached_tokens_are_read():
    p = OpenAIProvider(endpoint_spec("openai"))
    c = p.parse_response({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                          "usage": {"prompt_tokens": 100, "completion_tokens": 9,
                                    "prompt_tokens_details": {"cached_tokens": 64},
                                    "completion_tokens_details": {"reasoning_tokens": 4}}})
    assert (c.usage.prompt_tokens, c.usage.cached_tokens, c.usage.reasoning_tokens) == (100, 64, 4)
    odd = p.parse_response({"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 1,
                                                                                  "prompt_tokens_details": [1]}})
    assert odd.usage.cached_tokens is None  # a malformed detail block is no count, not a crash


def test_anthropic_input_adds_cache_reads_and_writes():
    p = AnthropicProvider(endpoint_spec("anthropic"))
    c = p.parse_response({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                          "usage": {"input_tokens": 50, "cache_read_input_tokens": 900,
                                    "cache_creation_input_tokens": 50, "output_tokens": 30}})
    assert (c.usage.prompt_tokens, c.usage.cached_tokens, c.usage.completion_tokens) == (1000, 900, 30)
    plain = p.parse_response({"content": [{"type": "text", "text": "ok"}], "usage": {"input_tokens": 7,
                                                                                     "output_tokens": 3}})
    assert (plain.usage.prompt_tokens, plain.usage.cached_tokens) == (7, None)


def test_gemini_cached_content_tokens_are_read():
    p = GeminiProvider(endpoint_spec("gemini"))
    c = p.parse_response({"candidates": [{"content": {"parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
                          "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 20,
                                            "thoughtsTokenCount": 80, "cachedContentTokenCount": 256}})
    assert (c.usage.prompt_tokens, c.usage.cached_tokens, c.usage.reasoning_tokens) == (300, 256, 80)


# ---------------------------------------------------------------------- prices in the config


def test_every_model_and_judge_has_a_price_block(tmp_path):
    from pathlib import Path

    from wildtrace.app import CONF_DIR

    files = sorted(Path(CONF_DIR, "model").glob("*.yaml")) + sorted(Path(CONF_DIR, "judge").glob("*.yaml"))
    assert len(files) >= 21
    for f in files:
        group = f.parent.name
        overrides = [f"model={f.stem}"] if group == "model" else [f"+judge@judge_panel.judges.x={f.stem}"]
        cfg = compose_config([f"root={tmp_path}", *overrides, "model.route=r"] if f.stem == "custom"
                             else [f"root={tmp_path}", *overrides])
        node = cfg.model if group == "model" else cfg.judge_panel.judges.x
        assert "price" in node and set(node.price) >= {"input_per_mtok", "output_per_mtok", "cached_input_per_mtok",
                                                      "batch_discount", "source", "as_of"}, f
        assert "price:" in f.read_text().split("\n# Price")[-1], f"{f}: the price block is appended at the end"


def test_custom_model_price_by_override(tmp_path):
    cfg = settings(tmp_path, ["model=custom", "model.route=m", "model.base_url=http://127.0.0.1:9/v1",
                              "model.price.input_per_mtok=1.25", "model.price.output_per_mtok=10",
                              "model.price.above_input_tokens=200000", "model.price.input_multiplier=2",
                              "model.price.output_multiplier=1.5", "model.max_usd=3", "budget.max_usd=5"])
    p = cfg.model.price
    assert (p.input_per_mtok, p.output_per_mtok, p.above_input_tokens, p.input_multiplier) == (1.25, 10.0, 200000, 2.0)
    assert (cfg.model.max_usd, cfg.budget.max_usd) == (3.0, 5.0)


@pytest.mark.parametrize("override, key", [
    ("model.price.input_per_mtok=-1", "model.price.input_per_mtok"),
    ("model.price.output_multiplier=0.5", "model.price.output_multiplier"),
    ("model.price.batch_discount=1", "model.price.batch_discount"),
    ("model.max_usd=0", "model.max_usd"),
    ("budget.max_usd=-2", "budget.max_usd"),
])
def test_bad_price_names_the_key(tmp_path, override, key):
    cfg = compose_config([f"root={tmp_path}", "mlflow.enabled=false", override])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        to_settings(cfg)


# ---------------------------------------------------------------------- a run's cost, end to end

DOC = "The seal was worn. The pump failed at 03:14. 故障 " * 60
MODEL_PRICE = dict(input_per_mtok=1.25, output_per_mtok=10.0, cached_input_per_mtok=0.125)
JUDGE_PRICE = dict(input_per_mtok=0.3, output_per_mtok=2.5)


def usage_of(call: Call) -> dict:
    """Usage as a real endpoint reports it: input proportional to the prompt, reasoning inside output."""
    prompt = math.ceil(len(call.prompt) / 4) + 7
    if call.route == "test-model":
        return {"prompt_tokens": prompt, "completion_tokens": 120,
                "completion_tokens_details": {"reasoning_tokens": 90},
                "prompt_tokens_details": {"cached_tokens": 64 if call.seen else 0}}
    return {"prompt_tokens": prompt, "completion_tokens": 25}


def responder(call: Call) -> Reply:
    text = "The seal was worn at 03:14." if call.route == "test-model" else '{"points_awarded":[60],"total":60}'
    return Reply(200, {"id": "x", "object": "chat.completion", "model": call.route,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}], "usage": usage_of(call)})


def priced_overrides(url: str, tasks, corpus, *extra: str) -> list[str]:
    return ["model=custom", "model.route=test-model", f"model.base_url={url}/v1", f"model.api_key_env={TEST_KEY_ENV}",
            "model.stream=false", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
            *[f"model.price.{k}={v}" for k, v in MODEL_PRICE.items()], *extra]


def judges(url: str, priced: bool = True) -> dict:
    j = {**openai_judge(url, "judge-a"), "stream": False}
    return {"a": {**j, "price": dict(JUDGE_PRICE)}} if priced else {"a": j}


def bill(call: Call, price: dict) -> Decimal:
    u = usage_of(call)
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    p = Price(**price)
    return independent(p, u["prompt_tokens"], cached, u["completion_tokens"])


@pytest.fixture
def release(tmp_path, test_key):
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(4)]
    return write_release(tmp_path, tasks, {"doc.txt": DOC})


def test_rows_stats_and_headline_carry_the_cost(tmp_path, release):
    tasks, corpus = release
    with LoopbackServer(responder) as server:
        result = run(settings(tmp_path / "a", priced_overrides(server.url, tasks, corpus), judges=judges(server.url)))
    calls = {(c.route, c.prompt): c for c in server.calls}
    model_bill = sum(bill(c, MODEL_PRICE) for c in server.calls if c.route == "test-model")
    judge_bill = sum(bill(c, JUDGE_PRICE) for c in server.calls if c.route == "judge-a")
    responses = json.loads((result.out_dir / "responses.json").read_text())
    judgments = json.loads((result.out_dir / "judgments.json").read_text())
    assert len(calls) == 8 and all(r["cost_usd"] is not None and r["cost_usd"] > 0 for r in responses + judgments)
    for j in judgments:  # each row's cost is its own call's bill
        call = next(c for c in server.calls if c.route == "judge-a" and j["prompt"] == c.prompt)
        assert cents(j["cost_usd"]) == cents(bill(call, JUDGE_PRICE))
        assert abs(Decimal(str(j["cost_usd"])) - bill(call, JUDGE_PRICE)) < Decimal("1e-9")
    cost = result.stats["cost"]
    assert cents(cost["endpoints"]["model"]["cost_usd"]) == cents(model_bill)
    assert cents(cost["endpoints"]["a"]["cost_usd"]) == cents(judge_bill)
    assert abs(Decimal(str(cost["total_usd"])) - (model_bill + judge_bill)) < Decimal("1e-8")
    assert cost["not_sent_budget"] == 0 and result.exit_code == 0
    assert json.loads((result.out_dir / "run_stats.json").read_text())["cost"] == cost
    assert "cost: $" in result.headline


def test_a_cached_call_costs_nothing_and_keeps_its_original_cost(tmp_path, release):
    tasks, corpus = release
    with LoopbackServer(responder) as server:
        first = run(settings(tmp_path / "a", priced_overrides(server.url, tasks, corpus), judges=judges(server.url)))
        a = json.loads((first.out_dir / "responses.json").read_text())
        sent = len(server.calls)
        second = run(settings(tmp_path / "a", priced_overrides(server.url, tasks, corpus), judges=judges(server.url)))
    assert len(server.calls) == sent  # nothing re-paid
    b = json.loads((second.out_dir / "responses.json").read_text())
    assert all(r["cached"] and r["cost_usd"] == 0.0 for r in b)
    assert [r["original_cost_usd"] for r in b] == [r["cost_usd"] for r in a]
    assert second.stats["cost"]["total_usd"] == 0.0


def test_a_missing_price_is_unknown_never_zero(tmp_path, release):
    tasks, corpus = release
    overrides = [o for o in priced_overrides("http://x", tasks, corpus) if ".price." not in o]
    with LoopbackServer(responder) as server:
        result = run(settings(tmp_path / "a", [o.replace("http://x", server.url) for o in overrides],
                              judges=judges(server.url, priced=False)))
    rows = json.loads((result.out_dir / "responses.json").read_text())
    assert all(r["cost_usd"] is None for r in rows) and result.exit_code == 0  # the run still runs
    assert result.stats["cost"]["total_usd"] is None
    assert result.stats["cost"]["endpoints"]["model"]["cost_usd"] is None
    assert "cost: unknown" in result.headline


@pytest.mark.slow
def test_mlflow_run_has_cost_metrics(tmp_path, release):
    import mlflow

    tasks, corpus = release
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with LoopbackServer(responder) as server:
        cfg = settings(tmp_path / "a", priced_overrides(server.url, tasks, corpus, "mlflow.enabled=true",
                                                        f"mlflow.tracking_uri={uri}"), judges=judges(server.url))
        result = tracked_run(cfg)
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("wildtrace").experiment_id])
    metrics = runs[0].data.metrics
    cost = result.stats["cost"]
    assert metrics["cost_usd"] == pytest.approx(cost["total_usd"], rel=5e-4)
    assert metrics["cost_usd/model"] == pytest.approx(cost["endpoints"]["model"]["cost_usd"], rel=5e-4)
    assert metrics["cost_usd/a"] == pytest.approx(cost["endpoints"]["a"]["cost_usd"], rel=5e-4)


def test_trace_spans_carry_each_calls_cost():
    def answer(**row):
        return AnswerRecord.from_row({"question_id": "q1", "status": "answered", **row})

    assert call_attributes(answer(cost_usd=0.0123, cached=False), "m")["wildtrace.cost_usd"] == 0.0123
    cached = call_attributes(answer(cost_usd=0.0, cached=True, original_cost_usd=0.5), "m")
    assert (cached["wildtrace.cost_usd"], cached["wildtrace.original_cost_usd"]) == (0.0, 0.5)
    assert "wildtrace.cost_usd" not in call_attributes(answer(cost_usd=None), "m")  # unknown: no attribute, never 0


def test_report_has_a_cost_column_and_cost_per_point(tmp_path, release):
    from wildtrace.report import assemble, sources
    from wildtrace.report.render import leaderboard_view
    from wildtrace.report.statistics.stats import Bootstrap

    tasks, corpus = release
    with LoopbackServer(responder) as server:
        paid = run(settings(tmp_path / "a", priced_overrides(server.url, tasks, corpus), judges=judges(server.url)))
        model_bill = sum(bill(c, MODEL_PRICE) for c in server.calls if c.route == "test-model")
        judge_bill = sum(bill(c, JUDGE_PRICE) for c in server.calls if c.route == "judge-a")
        rerun = settings(tmp_path / "a", priced_overrides(server.url, tasks, corpus), judges=judges(server.url))
        rerun.out_dir = str(tmp_path / "rerun")
        cached = run(rerun)
    assert cached.stats["cost"]["total_usd"] == 0.0  # nothing paid in this run ...
    assert cents(cached.stats["cost"]["results_usd"]) == cents(model_bill + judge_bill)  # ... for what they cost
    for out_dir in (paid.out_dir, cached.out_dir):
        board = assemble.build(sources.from_run_dirs([str(out_dir)]), Bootstrap(resamples=50)).leaderboard
        row = board.iloc[0]
        assert cents(row["cost_usd"]) == cents(model_bill + judge_bill)
        assert row["usd_per_point"] == pytest.approx(row["cost_usd"] / row["overall"])
        view = leaderboard_view(board)
        assert {"cost USD", "USD / point"} <= set(view.columns)


def wire_usage(call: Call) -> tuple[int, int, int]:
    """(input, cached, output+reasoning) each wire format reports for this call, proportional to the prompt."""
    prompt = math.ceil(len(call.prompt) / 4)
    return prompt, prompt // 2, 300 + 70


def anthropic_or_gemini(call: Call) -> Reply:
    from servers.loopback import sse

    inp, cached, out = wire_usage(call)
    if call.path.endswith("/v1/messages"):  # input_tokens excludes the cache read, output_tokens holds thinking
        events = [
            {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                                  "model": "claude-opus-4-6", "stop_reason": None, "usage": {
                                                      "input_tokens": inp - cached, "cache_read_input_tokens": cached,
                                                      "output_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "The seal was worn."}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": out}},
            {"type": "message_stop"}]
        return sse(*events, names=[e["type"] for e in events])
    # Gemini: thoughtsTokenCount beside candidatesTokenCount, cachedContentTokenCount inside promptTokenCount
    return sse({"candidates": [{"content": {"parts": [{"text": '{"points_awarded":[40],"total":40}'}], "role": "model"},
                                "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": inp, "cachedContentTokenCount": cached,
                                  "candidatesTokenCount": 300, "thoughtsTokenCount": 70},
                "modelVersion": "gemini-2.5-flash"})


def test_shipped_prices_bill_anthropic_and_gemini_usage_to_the_cent(tmp_path, release):
    tasks, corpus = release
    with LoopbackServer(anthropic_or_gemini) as server:
        cfg = settings(tmp_path, ["model=claude-opus-4.6", f"model.base_url={server.url}",
                                  f"model.api_key_env={TEST_KEY_ENV}", f"dataset.tasks={tasks}",
                                  f"dataset.corpus={corpus}", "judge_panel=paper_only_gemini_flash",
                                  f"judge_panel.judges.gemini_flash.base_url={server.url}",
                                  f"judge_panel.judges.gemini_flash.api_key_env={TEST_KEY_ENV}",
                                  "judge_panel.judges.gemini_flash.price.cached_input_per_mtok=0.03"])
        result = run(cfg)
    opus, flash = cfg.model.price, cfg.judge_panel.judges["gemini_flash"].price
    assert (opus.input_per_mtok, opus.output_per_mtok, opus.cached_input_per_mtok) == (5.0, 25.0, 0.5)  # the file's
    want = {"model": Decimal(0), "gemini_flash": Decimal(0)}
    for c in server.calls:
        inp, cached, out = wire_usage(c)
        label, p = ("model", opus) if c.path.endswith("/v1/messages") else ("gemini_flash", flash)
        want[label] += independent(p, inp, cached, out)
    cost = result.stats["cost"]["endpoints"]
    assert len(server.calls) == 8
    for label in want:
        assert cents(cost[label]["cost_usd"]) == cents(want[label])
        assert abs(Decimal(str(cost[label]["cost_usd"])) - want[label]) < Decimal("1e-8")
