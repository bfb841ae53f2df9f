"""The estimate: the run's own plan (caps, cache, replicates, stage) priced per endpoint, with no request sent."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply
from wildtrace.core.cost import Price
from wildtrace.core.prompts import answer_prompt, judge_prompt
from wildtrace.core.tasks import RubricItem
from wildtrace.estimate import CHARS_PER_TOKEN, estimate, fewest_tokens_of, price_calls, tokens_of
from wildtrace.runtime.run.pipeline import PlannedCall
from wildtrace.runtime.run.execute import run

ROOT = Path(__file__).resolve().parents[2]
TIERED = Price(input_per_mtok=2.0, output_per_mtok=10.0, above_input_tokens=1000, input_multiplier=2.0,
               output_multiplier=1.5)


@pytest.mark.parametrize("chars, cjk, tokens", [(0, False, 0), (1, False, 1), (33, False, 10), (34, False, 11),
                                               (3, True, 2), (15, True, 10), (16, True, 11)])
def test_input_tokens_from_characters_by_script(chars, cjk, tokens):
    assert tokens_of(chars, cjk) == tokens == math.ceil(chars / (1.5 if cjk else 3.3))


@pytest.mark.parametrize("chars, cjk, tokens", [(0, False, 0), (1, False, 1), (40, False, 10), (41, False, 11),
                                               (3, True, 2), (20, True, 10), (21, True, 11)])
def test_the_fewest_input_tokens_a_documented_tokenizer_makes(chars, cjk, tokens):
    """The estimate's low end: 4 characters a token in English, 2 in CJK (OpenAI's and Moonshot's descriptions)."""
    assert fewest_tokens_of(chars, cjk) == tokens == math.ceil(chars / (2 if cjk else 4))


@pytest.mark.parametrize("chars, low_in_tier, in_tier", [(3300, False, False), (3301, False, True), (4000, False, True),
                                                         (4001, True, True)])  # 1000 tokens: not above; 1001: above
def test_tier_calls_and_prices_at_the_boundary(chars, low_in_tier, in_tier):
    """Low: input at 4 characters a token; high and the tier column: at the spec's 3.3."""
    est = price_calls([PlannedCall("model", chars, False, 500)], {"model": TIERED}, {"model": 100}, 500)
    row = est["endpoints"]["model"]
    fewest, tokens = fewest_tokens_of(chars, False), tokens_of(chars, False)

    def mult(tier: bool) -> tuple[Decimal, Decimal]:
        return (Decimal(2), Decimal("1.5")) if tier else (Decimal(1), Decimal(1))

    (lim, lom), (im, om) = mult(low_in_tier), mult(in_tier)
    low = (fewest * 2 * lim + 100 * 10 * lom) / Decimal(10**6)
    high = (tokens * 2 * im + 500 * 10 * om) / Decimal(10**6)
    assert row["tier_calls"] == int(in_tier) and row["calls"] == 1
    assert (row["input_tokens"], row["input_tokens_max"]) == (fewest, tokens)
    assert Decimal(str(row["usd_min"])) == low.quantize(Decimal("1e-6"))
    assert Decimal(str(row["usd_max"])) == high.quantize(Decimal("1e-6"))
    assert est["total"]["usd_min"] == row["usd_min"] and est["total"]["usd_max"] == row["usd_max"]


def test_a_pending_judge_call_holds_an_answer_of_unknown_length():
    est = price_calls([PlannedCall("a", 330, False, 50, answer_pending=True)],
                      {"model": Price(1.0, 1.0), "a": Price(1.0, 1.0)}, {"model": 200, "a": 20}, 8192)
    row = est["endpoints"]["a"]
    assert (row["input_tokens"], row["input_tokens_max"]) == (83 + 200, 100 + 8192)
    assert (row["output_tokens_min"], row["output_tokens_max"]) == (20, 50)


@pytest.mark.parametrize(("discount", "factor"), [(0.5, Decimal("0.5")), (None, None)])
def test_a_batched_endpoint_is_estimated_at_its_batch_price(discount, factor):
    """Batched calls at (1 - batch_discount) of the price; no known discount: unknown, not the full price."""
    price = Price(1.0, 2.0, batch_discount=discount)
    calls = [PlannedCall("model", 3300, False, 100)]
    sync = price_calls(calls, {"model": price}, {"model": 100}, 100)["endpoints"]["model"]
    batch = price_calls(calls, {"model": price}, {"model": 100}, 100, frozenset({"model"}))["endpoints"]["model"]
    if factor is None:
        assert batch["usd_min"] is None and batch["usd_max"] is None
    else:
        assert Decimal(str(batch["usd_max"])) == (Decimal(str(sync["usd_max"])) * factor).quantize(Decimal("1e-6"))


def test_an_unpriced_endpoint_makes_the_total_unknown_not_smaller():
    est = price_calls([PlannedCall("model", 3300, False, 10), PlannedCall("a", 330, False, 10)],
                      {"model": Price(1.0, 1.0), "a": Price()}, {"model": 10, "a": 10}, 10)
    assert est["endpoints"]["a"]["usd_min"] is None and est["total"]["usd_min"] is None
    assert est["total"]["priced_usd_min"] == est["endpoints"]["model"]["usd_min"] > 0


#: The model files' price blocks (USD per million tokens): OpenAI's and Gemini's writes cost nothing extra.
GPT = Price(input_per_mtok=1.25, output_per_mtok=10.0, cached_input_per_mtok=0.125, batch_discount=0.5)
OPUS = Price(input_per_mtok=5.0, output_per_mtok=25.0, cached_input_per_mtok=0.5, cache_write_per_mtok=6.25,
             cache_write_1h_per_mtok=10.0, batch_discount=0.5)
GEMINI = Price(input_per_mtok=1.25, output_per_mtok=10.0, cached_input_per_mtok=0.125, batch_discount=0.5)


@pytest.mark.parametrize("price, batched, first, dearest", [
    (GPT, False, "1.25", "1.25"),  # the first call a miss: a write costs nothing extra
    (OPUS, False, "6.25", "10.0"),  # marked for 5 minutes: its repeats come right after
    (OPUS, True, "10.0", "10.0"),  # batched: the repeats come in other jobs' batches, marked for the hour
    (GEMINI, False, "1.25", "1.25"),
])
@pytest.mark.parametrize("jobs", [1, 6])  # a single run; a 3x2 sweep (three temperatures, two replicates)
def test_the_low_end_writes_each_prompt_once_and_reads_its_repeats(price, batched, first, dearest, jobs):
    """Summed over the sweep's jobs, the low end of a prompt sent N times is its first call at the write price
    (the input price where a write costs nothing extra) and its N - 1 repeats at the read price; a single
    run reads nothing (low = high for input). The high end: every call missed, or written at the dearest write."""
    from wildtrace.runtime.run.prompt_cache import RepeatSchedule

    calls = [PlannedCall("model", 396_000, False, 1000), PlannedCall("model", 33_000, False, 1000)]
    tokens = [fewest_tokens_of(c.prompt_chars, c.cjk) for c in calls]  # low: 4 characters a token
    spec = [tokens_of(c.prompt_chars, c.cjk) for c in calls]  # high: the spec's 3.3
    per_job = price_calls(calls, {"model": price}, {"model": 100}, 1000, frozenset({"model"} if batched else ()),
                          {"model": RepeatSchedule.of(jobs, batched)})["endpoints"]["model"]
    mtok, discount = Decimal(10**6), Decimal(1) - (Decimal("0.5") if batched else 0)
    read, out, plain = (Decimal(str(p)) for p in (price.cached_input_per_mtok, price.output_per_mtok,
                                                  price.input_per_mtok))
    write = Decimal(first) if jobs > 1 else plain
    low = sum(t * (write + (jobs - 1) * read) + jobs * 100 * out for t in tokens) * discount / mtok
    high = sum(jobs * (t * (Decimal(dearest) if jobs > 1 else plain) + 1000 * out) for t in spec) * discount / mtok
    assert jobs * Decimal(str(per_job["usd_min"])) == pytest.approx(low, abs=Decimal("1e-5"))
    assert jobs * Decimal(str(per_job["usd_max"])) == pytest.approx(high, abs=Decimal("1e-5"))
    assert per_job["cache_read_tokens"] == round(Fraction(sum(tokens) * (jobs - 1), jobs))


# ---------------------------------------------------------------------- the run's own plan, nothing sent

SHORT = "The seal was worn. The pump failed at 03:14. " * 40
LONG = "Plenty of text. " * 400
CJK = "密封件磨损了,水泵在三点十四分停止运转。" * 60


def reply(call: Call) -> Reply:
    text = "The seal was worn." if call.route == "test-model" else '{"points_awarded":[60],"total":60}'
    return Reply(200, {"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": math.ceil(len(call.prompt) / 4), "completion_tokens": 12}})


@pytest.fixture
def release(tmp_path, test_key):
    tasks = [make_task("q0", "What failed? [q0]", "short.txt"), make_task("q1", "What failed? [q1]", "short.txt"),
             make_task("q2", "Too long? [q2]", "long.txt"), make_task("q3", "什么坏了? [q3]", "cjk.txt")]
    return write_release(tmp_path, tasks, {"short.txt": SHORT, "long.txt": LONG, "cjk.txt": CJK})


def overrides(url: str, tasks: Path, corpus: Path, cache: Path, *extra: str) -> list[str]:
    return ["model=custom", "model.route=test-model", f"model.base_url={url}/v1", f"model.api_key_env={TEST_KEY_ENV}",
            "model.stream=false", "model.caps.en=5000", "model.caps.cjk=5000", "decoding.max_tokens=300",
            "judge_panel.max_tokens=100", "estimate.answer_tokens=40", "estimate.judge_tokens=10",
            "model.price.input_per_mtok=1.25", "model.price.output_per_mtok=10",
            f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", f"cache.dir={cache}", *extra]


def judges(url: str) -> dict:
    return {"a": {**openai_judge(url, "judge-a"), "stream": False,
                  "price": {"input_per_mtok": 0.3, "output_per_mtok": 2.5}}}


def test_estimate_plans_as_the_run_does_and_sends_nothing(tmp_path, release):
    tasks, corpus = release
    cache = tmp_path / "cache"
    with LoopbackServer(reply) as server:
        est = estimate(settings(tmp_path / "e", overrides(server.url, tasks, corpus, cache), judges=judges(server.url)))
        assert server.calls == []  # nothing sent
        model, judge = est["endpoints"]["model"], est["endpoints"]["a"]
        assert model["calls"] == 3 and est["plan"]["out_of_context"] == 1  # long.txt is past the 5000-character cap
        planned = [("What failed? [q0]", SHORT, False), ("What failed? [q1]", SHORT, False),
                   ("什么坏了? [q3]", CJK, True)]
        low, high = (sum(count(len(answer_prompt(q, doc)), cjk) for q, doc, cjk in planned)
                     for count in (fewest_tokens_of, tokens_of))
        assert (model["input_tokens"], model["input_tokens_max"]) == (low, high)
        assert (model["output_tokens_min"], model["output_tokens_max"]) == (3 * 40, 3 * 300)
        assert judge["calls"] == 3 and est["plan"]["judge_calls_pending_answers"] == 3  # answers not known yet
        # the run it estimated: what it really sent is what was planned, and cost no more than the high end
        result = run(settings(tmp_path / "r", overrides(server.url, tasks, corpus, cache), judges=judges(server.url)))
        assert len([c for c in server.calls if c.route == "test-model"]) == model["calls"]
        assert len([c for c in server.calls if c.route == "judge-a"]) == judge["calls"]
        assert result.stats["cost"]["total_usd"] <= est["total"]["usd_max"]
        again = estimate(settings(tmp_path / "e2", overrides(server.url, tasks, corpus, cache),
                                  judges=judges(server.url)))
        assert again["endpoints"]["model"]["calls"] == 0 and again["endpoints"]["a"]["calls"] == 0  # cache hits
        assert again["total"] == {"usd_min": 0.0, "usd_max": 0.0, "priced_usd_min": 0.0, "priced_usd_max": 0.0}
        fresh = estimate(settings(tmp_path / "e3", overrides(server.url, tasks, corpus, cache, "decoding.replicate=1"),
                                  judges=judges(server.url)))
        assert fresh["endpoints"]["model"]["calls"] == 3  # a replicate asks for fresh answers
        answers_only = estimate(settings(tmp_path / "e4", overrides(server.url, tasks, corpus, cache, "stage=answer",
                                                                    "decoding.replicate=2"), judges=judges(server.url)))
        assert list(answers_only["endpoints"]) == ["model"]
        assert len(server.calls) == 6  # only the run sent anything


def test_known_answers_are_judged_at_their_real_length(tmp_path, release):
    tasks, corpus = release
    cache = tmp_path / "cache"
    with LoopbackServer(reply) as server:
        run(settings(tmp_path / "r", overrides(server.url, tasks, corpus, cache, "stage=answer")))
        est = estimate(settings(tmp_path / "e", overrides(server.url, tasks, corpus, cache), judges=judges(server.url)))
    judge = est["endpoints"]["a"]
    rubric = [RubricItem(60, "names the cause"), RubricItem(40, "gives the time")]
    low, high = (sum(count(len(judge_prompt(q, rubric, "The seal was worn.")), False)
                     for q in ("What failed? [q0]", "What failed? [q1]", "什么坏了? [q3]"))
                 for count in (fewest_tokens_of, tokens_of))
    assert judge["calls"] == 3 and (judge["input_tokens"], judge["input_tokens_max"]) == (low, high)
    assert est["endpoints"]["model"]["calls"] == 0


@pytest.mark.slow
def test_the_command_prints_a_table_writes_estimate_json_and_sends_nothing(tmp_path, release):
    tasks, corpus = release
    env = {k: v for k, v in os.environ.items() if k != TEST_KEY_ENV}  # no key needed: nothing is sent
    with LoopbackServer(reply) as server:
        args = [sys.executable, "-m", "wildtrace.estimate", f"root={tmp_path / 'out'}",
                *overrides(server.url, tasks, corpus, tmp_path / "cache"), "judge_panel=paper",
                "judge_panel.judges.claude_sonnet.price.input_per_mtok=3"]
        proc = subprocess.run(args, cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                              text=True, timeout=300)
        assert server.calls == []
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The paper's third judge is retired at Google (docs/providers/routes.md): a run would be refused,
    # the estimate warns.
    assert "gemini_flash: route 'gemini-2.5-flash'" in proc.stderr and "estimated all the same" in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["endpoint", "calls", "input"]
    assert [line.split()[0] for line in lines[1:5]] == ["model", "claude_sonnet", "qwen", "gemini_flash"]
    assert any(line.startswith("estimate: unknown – unknown") and "the priced endpoints alone: $" in line
               for line in lines)  # qwen has no confirmed price
    written = Path(next(line for line in lines if line.startswith("written: ")).removeprefix("written: "))
    data = json.loads(written.read_text())
    assert written.name == "estimate.json" and set(data["total"]) >= {"usd_min", "usd_max"}
    for name, row in data["endpoints"].items():
        assert set(row) >= {"calls", "input_tokens", "usd_min", "usd_max"}, name
    assert data["endpoints"]["model"]["calls"] == 3
    assert data["endpoints"]["qwen"]["usd_min"] is None and data["total"]["usd_min"] is None
    assert data["endpoints"]["gemini_flash"]["usd_max"] > data["endpoints"]["gemini_flash"]["usd_min"] > 0
    assert json.loads(json.dumps(data["assumptions"]["chars_per_token"])) == CHARS_PER_TOKEN


#: shape -> (model file, base URL suffix, extra overrides), as benchmarks/sweep_cost.py runs them.
CACHE_SHAPES = {"openai": ("gpt-5.1", "/v1", ["model.send_temperature=true"]),
                "anthropic": ("claude-opus-4.6", "", []),
                "gemini": ("gemini-2.5-pro", "", [])}


@pytest.mark.parametrize("shape", list(CACHE_SHAPES))
def test_the_range_holds_what_a_cached_sweep_is_billed(tmp_path, test_key, shape):
    """Two replicates of a prompt against a loopback that caches as the provider documents: the estimate of
    each job (prompt_repeats=2: low, the repeats read; high, every call missed or written) summed over
    the jobs holds what the two jobs were billed, the first call written or missed, the second read. The
    loopback's tokenizer packs 4 characters a token, not the spec's 3.3: the range holds it (its low end
    counts input at the most characters a token the providers describe)."""
    from servers.prefix_cache import PrefixCache

    model, suffix, extra = CACHE_SHAPES[shape]
    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(2)],
                                  {"doc.txt": "The seal was worn. The pump failed at 03:14. " * 200})
    low = high = billed = 0.0
    with LoopbackServer(PrefixCache(shape)) as server:
        jobs = []
        for replicate in (0, 1):
            cfg = settings(tmp_path / f"job{replicate}", [
                f"model={model}", f"model.base_url={server.url}{suffix}", *extra, f"model.api_key_env={TEST_KEY_ENV}",
                "model.stream=false", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "judge_panel=offline",
                f"decoding.replicate={replicate}", "decoding.max_tokens=256", "estimate.answer_tokens=12"])
            cfg.prompt_repeats = 2
            row = estimate(cfg)["endpoints"]["model"]
            assert row["cache_read_tokens"] == round(row["input_tokens"] / 2) > 0  # low: the job's half read
            low, high = low + row["usd_min"], high + row["usd_max"]
            jobs.append(cfg)
        assert server.calls == []
        for cfg in jobs:
            stats = run(cfg).stats
            billed += stats["cost"]["endpoints"]["model"]["cost_usd"]
    assert stats["prompt_cache"]["endpoints"]["model"]["hit_rate"] > 0.9  # the second job read what the first wrote
    assert low <= billed <= high, (low, billed, high)
