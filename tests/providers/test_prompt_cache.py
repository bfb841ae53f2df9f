"""Provider prompt caching: the hints each provider documents (golden bodies), the cached-token counts
each reports, the bill made of them, and the harness's own cache key untouched by any hint."""

from __future__ import annotations

import asyncio
import hashlib
import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import endpoint_spec
from servers.loopback import Call, LoopbackServer, Reply, chat
from wildtrace.core.cost import Billable, Price, billable, cost_usd, exact_cost, saved_cost, worst_cost
from wildtrace.providers.anthropic import AnthropicProvider
from wildtrace.providers.base import Sampling
from wildtrace.providers.gemini import GeminiProvider
from wildtrace.providers.openai import OpenAIProvider
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.net.endpoint import Endpoint, prepare_request
from wildtrace.runtime.net.retry import RetryPolicy

PROMPT = "Answer using ONLY the document below.\n\nQuestion: Qu'est-ce que 问题?\n\nDocument:\n" + "lorem " * 50
PROMPT_SHA = hashlib.sha256(PROMPT.encode("utf-8")).hexdigest()
SAMPLING = Sampling(temperature=0.3, max_tokens=512)
#: Anthropic's published multipliers on a $3 input: write 1.25x (5 min) and 2x (1 h), read 0.1x.
SONNET = Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75,
               cache_write_1h_per_mtok=6.0, batch_discount=0.5)
OPENAI = Price(input_per_mtok=2.5, output_per_mtok=15.0, cached_input_per_mtok=0.25, above_input_tokens=272_000,
               input_multiplier=2.0, output_multiplier=1.5)


# ---------------------------------------------------------------------- golden request bodies


def test_openai_body_without_and_with_the_hint():
    plain = OpenAIProvider(endpoint_spec("openai", route="gpt-5.4"))
    request = plain.build_request(PROMPT, SAMPLING)
    assert plain.with_cache_hint(request) is request  # nothing asked: nothing added
    hinted = OpenAIProvider(endpoint_spec("openai", route="gpt-5.4", prompt_cache_key=True,
                                          prompt_cache_retention="24h"))
    request = hinted.build_request(PROMPT, SAMPLING)
    assert request.body == {"model": "gpt-5.4", "messages": [{"role": "user", "content": PROMPT}],
                            "max_tokens": 512, "temperature": 0.3}  # the keyed request: no hint in it
    assert hinted.with_cache_hint(request).body == {
        "model": "gpt-5.4", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 512,
        "temperature": 0.3, "prompt_cache_key": PROMPT_SHA, "prompt_cache_retention": "24h"}
    streamed = hinted.stream_request(hinted.with_cache_hint(request)).body
    assert streamed["prompt_cache_key"] == PROMPT_SHA and streamed["stream"] is True


@pytest.mark.parametrize("ttl, content", [
    pytest.param(None, PROMPT, id="no-repeat"),
    pytest.param("5m", [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral", "ttl": "5m"}}],
                 id="repeats-within-5-minutes"),
    pytest.param("1h", [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
                 id="repeats-within-the-hour"),
])
def test_anthropic_body_marks_the_prompt_for_the_lifetime_the_schedule_asks(ttl, content):
    p = AnthropicProvider(endpoint_spec("anthropic", route="claude-sonnet-4-6", base_url="https://api.anthropic.com"))
    request = p.build_request(PROMPT, SAMPLING)
    sent = p.with_cache_hint(request, ttl)
    assert json.dumps(sent.body) == json.dumps({"model": "claude-sonnet-4-6", "max_tokens": 512, "messages": [
        {"role": "user", "content": content}], "temperature": 0.3})
    assert (sent is request) == (ttl is None)  # no repeat: nothing marked, no write paid
    assert request.body["messages"][0]["content"] == PROMPT  # the keyed request is unchanged
    assert sent.headers == {"anthropic-version": "2023-06-01"}  # the hour needs no beta header


@pytest.mark.parametrize("repeats, gap_s, ttl", [
    (1, 0.0, None),  # not a sweep: no repeat, no write
    (6, 0.0, "5m"),  # the repeats go right after the first call
    (6, 300.0, "5m"),
    (6, 300.5, "1h"),  # a first call (or pacing) longer than the 5-minute lifetime
    (2, 3600.0, "1h"),
    (6, 3600.5, None),  # later than any lifetime: a write would never be read
])
def test_the_lifetime_is_the_shortest_that_holds_the_prompt_until_its_repeats(repeats, gap_s, ttl):
    from wildtrace.runtime.run.prompt_cache import cache_ttl

    assert cache_ttl(repeats, gap_s) == ttl


def test_the_schedule_moves_to_the_hour_once_a_gap_passes_5_minutes_and_batches_start_there():
    from wildtrace.runtime.run.prompt_cache import RepeatSchedule

    sweep = RepeatSchedule.of(6, batched=False)
    assert sweep.ttl() == "5m"
    sweep.note(12.0)
    assert sweep.ttl() == "5m"
    sweep.note(420.0)
    sweep.note(30.0)  # the longest gap seen decides
    assert sweep.ttl() == "1h"
    assert RepeatSchedule.of(6, batched=True).ttl() == "1h"  # the other jobs' batches: minutes to hours
    assert RepeatSchedule.of(1, batched=True).ttl() is None


def test_gemini_sends_nothing_its_caching_is_implicit():
    p = GeminiProvider(endpoint_spec("gemini", route="gemini-2.5-pro", prompt_cache_key=True))
    request = p.build_request(PROMPT, SAMPLING)
    assert p.with_cache_hint(request, "1h") is request


# ---------------------------------------------------------------------- the harness's cache key


def test_a_hint_changes_neither_the_key_nor_which_entries_serve(tmp_path: Path):
    """An outcome stored by an endpoint that sent no hint serves one that sends it, and the key is the
    key this request had before hints existed (pinned)."""
    seen: list[Call] = []

    def handler(call: Call) -> Reply:
        seen.append(call)
        return chat("The seal was worn.", usage={"prompt_tokens": 2000, "completion_tokens": 9,
                                                  "prompt_tokens_details": {"cached_tokens": 1920}})

    cache = Cache(tmp_path / "cache")
    policy = RetryPolicy(max_retries=0, backoff_base_s=0.0, backoff_max_s=0.0, retry_after_max_s=0.0)

    async def call(hinted: bool, url: str):
        p = OpenAIProvider(endpoint_spec("openai", route="gpt-5.4", base_url=url, stream=False,
                                         prompt_cache_key=hinted))
        endpoint = Endpoint(p, "sk-test", policy, cache=cache)
        try:
            request = p.build_request(PROMPT, SAMPLING)
            return prepare_request(p, request).key, await endpoint.call(request)
        finally:
            await endpoint.aclose()

    with LoopbackServer(handler) as server:
        key_hinted, first = asyncio.run(call(True, server.url))
        key_plain, second = asyncio.run(call(False, server.url))
    assert len(seen) == 1 and seen[0].body["prompt_cache_key"] == PROMPT_SHA  # sent on the wire
    assert key_hinted == key_plain and second.cached and second.text == first.text
    assert first.usage.cached_tokens == 1920
    # The key's material is the plain request's bytes, as before hints existed.
    material = {"v": 1, "provider": "openai", "url": server.url.rstrip("/") + "/chat/completions",
                "route": "gpt-5.4", "replicate": 0, "body_sha256": hashlib.sha256(json.dumps(
                    {"model": "gpt-5.4", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 512,
                     "temperature": 0.3}, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()}
    assert key_plain == hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------- what each provider reports


@pytest.mark.parametrize("usage, cached", [
    pytest.param({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}}, 64, id="openai-qwen-glm"),
    pytest.param({"prompt_tokens": 100, "prompt_cache_hit_tokens": 80, "prompt_cache_miss_tokens": 20}, 80,
                 id="deepseek"),
    pytest.param({"prompt_tokens": 100, "cached_tokens": 96}, 96, id="kimi"),
    pytest.param({"prompt_tokens": 100}, None, id="none-reported"),
])
def test_openai_compatible_cache_reads_are_read_where_each_provider_puts_them(usage, cached):
    body = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {**usage, "completion_tokens": 3}}
    assert OpenAIProvider(endpoint_spec("openai")).parse_response(body).usage.cached_tokens == cached


def test_anthropic_cache_writes_are_read_with_their_lifetime():
    body = {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "cache_creation_input_tokens": 3000, "cache_read_input_tokens": 0,
                      "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
                      "output_tokens": 7}}
    usage = AnthropicProvider(endpoint_spec("anthropic")).parse_response(body).usage
    assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens) == \
        (3010, 0, 3000, 2000)


# ---------------------------------------------------------------------- the bill


def paper(price: Price, inp: int, read: int, write5: int, write1h: int, out: int) -> Decimal:
    """The bill written by hand, in decimal dollars."""
    d = lambda v: Decimal(str(v or 0))  # noqa: E731
    miss = inp - read - write5 - write1h
    return (miss * d(price.input_per_mtok) + read * d(price.cached_input_per_mtok)
            + write5 * d(price.cache_write_per_mtok) + write1h * d(price.cache_write_1h_per_mtok)
            + out * d(price.output_per_mtok)) / Decimal(1_000_000)


@pytest.mark.parametrize("inp, read, write5, write1h, out", [
    (100_000, 0, 100_000, 0, 500),  # a first call that writes for 5 minutes: 1.25x
    (100_000, 0, 0, 100_000, 500),  # for an hour: 2x
    (100_000, 99_990, 0, 0, 500),  # a repeat: reads at 0.1x, the rest at the input price
    (100_000, 50_000, 40_000, 0, 500),  # reads and writes in one call
    (100_000, 0, 0, 0, 500),  # no cache at all
])
def test_cache_reads_and_writes_are_billed_at_their_prices(inp, read, write5, write1h, out):
    usage = billable(inp, out, read, write5 + write1h, write1h)
    assert usage == Billable(inp, read, out, write5 + write1h, write1h)
    assert abs(Decimal(str(cost_usd(SONNET, usage))) - paper(SONNET, inp, read, write5, write1h, out)) < Decimal("1e-9")


def _write_priced() -> list:
    """Every model and judge file whose price has cache writes (Anthropic's models, wherever served)."""
    import yaml

    conf = Path(__file__).resolve().parents[2] / "conf"
    files = sorted([*conf.glob("model/*.yaml"), *conf.glob("judge/*.yaml")])
    prices = {path.parent.name + "/" + path.stem: (yaml.safe_load(path.read_text()) or {}).get("price") or {}
              for path in files}
    return [pytest.param(price, id=name) for name, price in prices.items()
            if price.get("cache_write_per_mtok") is not None or price.get("cache_write_1h_per_mtok") is not None]


@pytest.mark.parametrize("price", _write_priced())
def test_price_blocks_hold_anthropic_s_cache_multipliers(price):
    """Anthropic's pricing page: a 5-minute write 1.25x input, an hour's 2x, a read 0.1x."""
    base = Decimal(str(price["input_per_mtok"]))
    assert [Decimal(str(price[k])) for k in ("cache_write_per_mtok", "cache_write_1h_per_mtok",
                                             "cached_input_per_mtok")] == [base * Decimal("1.25"), base * 2,
                                                                           base * Decimal("0.1")]


def test_a_cache_write_without_its_price_is_unknown_never_input():
    no_write = Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3)
    assert cost_usd(no_write, Billable(1000, 0, 10, 1000, 0)) is None
    assert cost_usd(no_write, Billable(1000, 0, 10, 1000, 1000)) is None
    assert cost_usd(no_write, Billable(1000, 900, 10)) is not None


def test_reads_in_the_long_context_tier_take_its_multiplier():
    got = exact_cost(OPENAI, Billable(300_000, 299_000, 0))
    assert got == Fraction(1_000 * 5, 10**6) + Fraction(299_000 * 5, 10**7)  # 2x of 2.5 and of 0.25


def test_the_worst_case_is_a_miss_or_the_dearest_write():
    usage = Billable(1_000_000, 0, 0)
    assert worst_cost(OPENAI, usage) == Fraction(5)  # a miss in the tier: writes cost nothing extra
    assert worst_cost(SONNET, usage) == Fraction(6)  # an hour's write: 2x $3
    assert worst_cost(None, usage) is None


def test_saved_is_what_every_miss_would_have_cost_less_the_bill():
    assert saved_cost(SONNET, Billable(1_000_000, 1_000_000, 0)) == Fraction(27, 10)  # $3 - $0.30
    assert saved_cost(SONNET, Billable(1_000_000, 0, 0, 1_000_000)) == Fraction(-3, 4)  # a write costs more
    assert saved_cost(SONNET, None) is None


# ---------------------------------------------------------------------- a small sweep, end to end


def test_a_sweep_reads_its_repeats_from_the_provider_cache_and_run_stats_say_so(tmp_path, test_key):
    """Two replicates of a two-task run against a loopback that caches as Anthropic documents: the first
    job writes each prompt (cache_control, 5 minutes), the second reads it; run_stats count both."""
    from conftest import TEST_KEY_ENV, make_task, settings, write_release
    from servers.prefix_cache import PrefixCache, tokens_of
    from wildtrace.core.prompts import answer_prompt
    from wildtrace.runtime.run.execute import run

    document = "The seal was worn. The pump failed at 03:14. " * 120
    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt")
                                             for i in range(2)], {"doc.txt": document})
    cache = PrefixCache("anthropic")
    stats = []
    with LoopbackServer(cache) as server:
        for replicate in (0, 1):
            cfg = settings(tmp_path / f"job{replicate}", [
                "model=claude-opus-4.6", f"model.base_url={server.url}", f"model.api_key_env={TEST_KEY_ENV}",
                "model.stream=false", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
                f"decoding.replicate={replicate}", "judge_panel=offline"])
            cfg.prompt_repeats = 2
            stats.append(run(cfg).stats)
    sent = [c for c in server.calls if c.path.endswith("/v1/messages")]
    assert len(sent) == 4 and all(c.body["messages"][0]["content"][0]["cache_control"] ==
                                  {"type": "ephemeral", "ttl": "5m"} for c in sent)
    tokens = sum(tokens_of(answer_prompt(f"What failed? [q{i}]", document)) for i in range(2))
    first, second = (s["prompt_cache"]["endpoints"]["model"] for s in stats)
    assert (first["cache_write_tokens"], first["cached_input_tokens"], first["hit_rate"]) == (tokens, 0, 0.0)
    assert (second["cache_write_tokens"], second["cached_input_tokens"], second["hit_rate"]) == (0, tokens, 1.0)
    # saved: a write costs 0.25x input more, a read 0.9x less ($5 input)
    assert first["saved_usd"] == pytest.approx(-tokens * 1.25 / 1e6)
    assert second["saved_usd"] == pytest.approx(tokens * 4.5 / 1e6)
    assert stats[1]["cost"]["endpoints"]["model"]["cost_usd"] == pytest.approx(tokens * 0.5 / 1e6 + 2 * 12 * 25 / 1e6)


def test_an_unrepeated_prompt_is_not_marked(tmp_path, test_key):
    from conftest import TEST_KEY_ENV, make_task, settings, write_release
    from servers.prefix_cache import PrefixCache
    from wildtrace.runtime.run.execute import run

    tasks, corpus = write_release(tmp_path, [make_task("q0", "What failed?", "doc.txt")],
                                  {"doc.txt": "The pump failed. " * 400})
    with LoopbackServer(PrefixCache("anthropic")) as server:
        result = run(settings(tmp_path / "job", [
            "model=claude-opus-4.6", f"model.base_url={server.url}", f"model.api_key_env={TEST_KEY_ENV}",
            "model.stream=false", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "judge_panel=offline"]))
    assert isinstance(server.calls[0].body["messages"][0]["content"], str)
    assert result.stats["prompt_cache"]["endpoints"]["model"]["cache_write_tokens"] == 0


def test_the_sweep_repeats_are_the_decoding_sweeps_sizes_multiplied(tmp_path):
    from wildtrace.app import sweep_repeats

    assert sweep_repeats(tmp_path) == 1  # not a sweep folder
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - decoding.temperature=0.1,0.4,0.7\n    - decoding.replicate=0,1\n"
        "    - model=gpt-5.4,gpt-5.5\n    - dataset.limit=3\n")
    assert sweep_repeats(tmp_path) == 6  # the model sweep changes the prompt's endpoint: not a repeat


# ---------------------------------------------------------------------- the sweep's schedule


def test_a_sweep_job_sends_each_task_s_repeats_right_after_its_own_answer(tmp_path, test_key):
    """Job 0 of a replicate sweep sends each task's replicate-1 answer right after its own (the provider
    holds the prompt: a read), into the shared cache; job 1 then sends nothing and answers the same."""
    from conftest import TEST_KEY_ENV, make_task, settings, write_release
    from servers.prefix_cache import PrefixCache
    from wildtrace.config import DecodingConfig
    from wildtrace.runtime.run.execute import run

    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt")
                                             for i in range(3)], {"doc.txt": "The pump failed. " * 600})
    results = []
    with LoopbackServer(PrefixCache("anthropic")) as server:
        for replicate in (0, 1):
            cfg = settings(tmp_path / f"job{replicate}", [
                "model=claude-opus-4.6", f"model.base_url={server.url}", f"model.api_key_env={TEST_KEY_ENV}",
                "model.stream=false", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
                f"decoding.replicate={replicate}", "judge_panel=offline", f"cache.dir={tmp_path / 'shared'}"])
            cfg.prompt_repeats = 2
            cfg.sweep_decodings = [DecodingConfig(replicate=1 - replicate)]
            results.append(run(cfg))
            if replicate == 0:
                sent_by_first = len(server.calls)
    assert sent_by_first == 6 and len(server.calls) == 6  # job 1 found every answer in the shared cache
    first, second = (r.stats["prompt_cache"]["endpoints"].get("model", {}) for r in results)
    # each task's repeat went after its first call was answered: it read what the first wrote
    assert first["hit_rate"] == 0.5 and first["cache_write_tokens"] == first["cached_input_tokens"] > 0
    assert second == {} and results[1].stats["cost"]["endpoints"]["model"]["cost_usd"] == 0
    answers = [sorted((row["question_id"], row["response"]) for row in json.loads((r.out_dir / "responses.json")
                                                                                  .read_text())) for r in results]
    assert answers[0] == answers[1]


def test_the_sweep_points_are_the_other_combinations_of_its_decoding_sweeps(tmp_path):
    from wildtrace.app import sweep_decodings
    from wildtrace.config import DecodingConfig

    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - decoding.temperature=0.1,0.4\n    - decoding.replicate=0,1\n"
        "    - dataset.limit=3\n")
    own = DecodingConfig(temperature=0.4, replicate=1)
    assert sweep_decodings(tmp_path, own) == [DecodingConfig(temperature=0.1, replicate=0),
                                               DecodingConfig(temperature=0.1, replicate=1),
                                               DecodingConfig(temperature=0.4, replicate=0)]
    assert sweep_decodings(tmp_path / "none", own) == []


def test_jobs_side_by_side_write_each_prompt_once(tmp_path, test_key):
    """Two jobs of a replicate sweep in parallel processes (joblib), one cache folder: each prompt is
    written once and read once, whichever job sends which call."""
    import os
    import subprocess
    import sys

    from conftest import TEST_KEY_ENV, make_task, write_release
    from servers.prefix_cache import PrefixCache

    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt")
                                             for i in range(3)], {"doc.txt": "The pump failed. " * 600})
    with LoopbackServer(PrefixCache("anthropic", latency_s=3.0)) as server:
        done = subprocess.run(
            [sys.executable, "-m", "wildtrace", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
             "decoding.replicate=0,1", "model=claude-opus-4.6", f"model.base_url={server.url}",
             f"model.api_key_env={TEST_KEY_ENV}", "model.stream=false", f"dataset.tasks={tasks}",
             f"dataset.corpus={corpus}", "judge_panel=offline", "mlflow.enabled=false", "progress=false",
             f"root={tmp_path / 'outputs'}"], capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    sent = [c for c in server.calls if c.path.endswith("/v1/messages")]
    stats = [json.loads(p.read_text()) for p in (tmp_path / "outputs" / "multirun").glob("*/*/*/run_stats.json")]
    rows = [s["prompt_cache"]["endpoints"].get("model", {}) for s in stats]
    assert len(stats) == 2 and len(sent) == 6  # each task's two answers sent once, by one job or the other
    writes = sum(r.get("cache_write_tokens", 0) for r in rows)
    reads = sum(r.get("cached_input_tokens", 0) for r in rows)
    assert writes == reads > 0  # one write and one read a prompt: no two first calls raced


def test_a_gap_past_the_5_minute_lifetime_moves_the_next_prompts_to_the_hour_billed_at_2x(tmp_path, test_key,
                                                                                          monkeypatch):
    """The 5-minute lifetime shortened to 0.5 s and every reply taking 0.6 s: the first task's repeat comes
    after the lifetime, so the next tasks ask for the hour (and pay its 2x write, billed as computed here)."""
    from conftest import TEST_KEY_ENV, make_task, settings, write_release
    from servers.prefix_cache import PrefixCache, tokens_of
    from wildtrace.config import DecodingConfig
    from wildtrace.core.prompts import answer_prompt
    from wildtrace.runtime.run import prompt_cache
    from wildtrace.runtime.run.execute import run

    monkeypatch.setattr(prompt_cache, "LIFETIMES", (("5m", 0.5), ("1h", 3600.0)))
    document = "The pump failed. " * 600
    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt")
                                             for i in range(3)], {"doc.txt": document})
    with LoopbackServer(PrefixCache("anthropic", latency_s=0.6)) as server:
        cfg = settings(tmp_path / "job0", [
            "model=claude-opus-4.6", f"model.base_url={server.url}", f"model.api_key_env={TEST_KEY_ENV}",
            "model.stream=false", "model.max_concurrency=1", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
            "judge_panel=offline"])
        cfg.prompt_repeats = 2
        cfg.sweep_decodings = [DecodingConfig(replicate=1)]
        result = run(cfg)
    marks = {}
    for call in server.calls:
        block = call.body["messages"][0]["content"][0]
        marks.setdefault(block["text"].split("[")[1][:2], []).append(block["cache_control"]["ttl"])
    assert marks == {"q0": ["5m", "5m"], "q1": ["1h", "1h"], "q2": ["1h", "1h"]}  # a prompt and its repeat alike
    # The bill, by hand: claude-opus-4.6 at $5 input, $6.25 (5 min) and $10 (1 h) a write, $0.50 a read,
    # $25 output; each prompt written once and read once, 12 output tokens a call.
    tokens = [tokens_of(answer_prompt(f"What failed? [q{i}]", document)) for i in range(3)]
    paid = (Decimal(tokens[0]) * Decimal("6.25") + sum(Decimal(t) * 10 for t in tokens[1:])
            + sum(Decimal(t) * Decimal("0.5") for t in tokens) + 6 * 12 * 25) / Decimal(1_000_000)
    cost = result.stats["cost"]["endpoints"]["model"]["cost_usd"]
    assert abs(Decimal(str(cost)) - paid) < Decimal("1e-9")
    row = result.stats["prompt_cache"]["endpoints"]["model"]
    assert (row["cache_write_tokens"], row["cache_write_1h_tokens"]) == (sum(tokens), sum(tokens[1:]))


def test_a_prompt_whose_repeats_the_cache_already_holds_is_not_marked(tmp_path, test_key):
    """A sweep job whose other point's answers are all in the shared cache sends its own answers only:
    no repeat will come, so nothing is marked and no write is paid."""
    from conftest import TEST_KEY_ENV, make_task, settings, write_release
    from servers.prefix_cache import PrefixCache
    from wildtrace.config import DecodingConfig
    from wildtrace.runtime.run.execute import run

    tasks, corpus = write_release(tmp_path, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt")
                                             for i in range(2)], {"doc.txt": "The pump failed. " * 600})
    with LoopbackServer(PrefixCache("anthropic")) as server:
        def job(replicate: int, sweep: bool):
            cfg = settings(tmp_path / f"job{replicate}", [
                "model=claude-opus-4.6", f"model.base_url={server.url}", f"model.api_key_env={TEST_KEY_ENV}",
                "model.stream=false", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}",
                f"decoding.replicate={replicate}", "judge_panel=offline", f"cache.dir={tmp_path / 'shared'}"])
            if sweep:
                cfg.prompt_repeats = 2
                cfg.sweep_decodings = [DecodingConfig(replicate=1 - replicate)]
            return run(cfg)

        job(0, sweep=False)  # replicate 0's answers, in the shared cache
        before = len(server.calls)
        result = job(1, sweep=True)
    sent = server.calls[before:]
    assert len(sent) == 2 and all(isinstance(c.body["messages"][0]["content"], str) for c in sent)
    assert result.stats["prompt_cache"]["endpoints"]["model"]["cache_write_tokens"] == 0


def test_repeats_after_the_lifetime_send_one_first_to_write_again_then_the_rest(tmp_path, test_key, monkeypatch):
    """The 5-minute lifetime shortened to 0.5 s and every reply taking 0.6 s: the first call outlived it, so of
    the three repeats one goes alone (it writes the prompt again) and the other two after it is answered
    (they read), instead of three writes at once. Arrival order only: each reply takes at least 0.6 s."""
    import time

    from conftest import TEST_KEY_ENV, make_task, settings, write_release
    from servers.prefix_cache import PrefixCache
    from wildtrace.config import DecodingConfig
    from wildtrace.runtime.run import prompt_cache
    from wildtrace.runtime.run.execute import run

    monkeypatch.setattr(prompt_cache, "LIFETIMES", (("5m", 0.5), ("1h", 3600.0)))
    arrived: list[float] = []
    cache = PrefixCache("anthropic", latency_s=0.6)

    def handler(call: Call) -> Reply:
        arrived.append(time.monotonic())
        return cache(call)

    tasks, corpus = write_release(tmp_path, [make_task("q0", "What failed? [q0]", "doc.txt")],
                                  {"doc.txt": "The pump failed. " * 600})
    with LoopbackServer(handler) as server:
        cfg = settings(tmp_path / "job0", [
            "model=claude-opus-4.6", f"model.base_url={server.url}", f"model.api_key_env={TEST_KEY_ENV}",
            "model.stream=false", f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", "judge_panel=offline"])
        cfg.prompt_repeats = 4
        cfg.sweep_decodings = [DecodingConfig(replicate=r) for r in (1, 2, 3)]
        assert run(cfg).exit_code == 0
    assert len(server.calls) == 4
    first, alone, *rest = sorted(arrived)
    assert alone - first >= 0.6 and all(t - alone >= 0.6 for t in rest)  # the rest waited for the lone repeat
