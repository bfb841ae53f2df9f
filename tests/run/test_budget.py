"""A spend cap that holds: reservations before sending, the cap never passed by the endpoints' own usage
figures even with calls in flight at once, budget_exhausted outcomes, and a rerun that pays only for them."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
import threading
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, make_task, openai_judge, settings, write_release
from servers.loopback import Call, LoopbackServer, Reply
from wildtrace.config import ConfigError
from wildtrace.core import records as R
from wildtrace.core.cost import Price
from wildtrace.core.records import CallResult, Usage
from wildtrace.runtime.spend.cap import TEMPLATE_TOKENS, Ledger
from wildtrace.runtime.run.execute import EXIT_BUDGET, run

PRICE = dict(input_per_mtok=1.0, output_per_mtok=10.0, cached_input_per_mtok=0.1)
MAX_TOKENS = 200
N_TASKS = 24


# ---------------------------------------------------------------------- the ledger alone


def result(prompt: int | None, completion: int | None, ok: bool = True, cached: bool = False,
           status: int | None = 200, attempts: int = 1) -> CallResult:
    return CallResult(ok, "x" if ok else None, None if ok else R.FailReason.TRANSPORT_ERROR, None, "stop",
                      Usage(prompt, completion), attempts, 0.1, status, {}, cached=cached)


def ledger(run_cap: float | None = None, cap: float | None = None) -> Ledger:
    return Ledger.build({"model": (Price(**PRICE), cap)}, run_cap)


def test_a_reservation_is_replaced_by_the_real_cost():
    async def go() -> None:
        book = ledger(run_cap=0.01)
        t = book.ticket("model", 1000 - TEMPLATE_TOKENS, 200)  # worst: 1000 in, 200 out = $0.003
        assert t.worst == Fraction(3, 1000)
        assert await t.reserve() and book.committed() == Fraction(3, 1000)
        settled = book.settle("model", result(400, 100), t)  # $0.0004 + $0.001
        assert settled.cost_usd == pytest.approx(0.0014) and book.committed() == Fraction(14, 10000)
    asyncio.run(go())


@pytest.mark.parametrize("cached", [False, True])
def test_an_outcome_from_a_batch_is_priced_at_the_batch_discount(cached):
    """A batched result (runtime/batch marks it) costs (1 - batch_discount), also as a cached original cost."""
    from dataclasses import replace

    book = Ledger.build({"model": (Price(**PRICE, batch_discount=0.5), None)}, None)
    settled = book.settle("model", replace(result(400, 100, cached=cached), batched=True))
    paid = settled.original_cost_usd if cached else settled.cost_usd
    assert paid == pytest.approx(0.0007)  # half of $0.0004 + $0.001


@pytest.mark.parametrize("run_cap, cap, fits", [
    (0.003, None, True),  # exactly the worst case fits
    (0.0029999, None, False),
    (None, 0.003, True),
    (None, 0.0029999, False),
    (0.01, 0.002, False),  # the endpoint's own cap is the tighter one
])
def test_a_call_whose_worst_case_does_not_fit_is_refused(run_cap, cap, fits):
    async def go() -> None:
        book = ledger(run_cap, cap)
        t = book.ticket("model", 1000 - TEMPLATE_TOKENS, 200)
        assert await t.reserve() is fits
        if not fits:
            refusal = t.refusal()
            assert refusal.reason == R.FailReason.BUDGET_EXHAUSTED and refusal.attempts == 0
            assert "max_usd" in refusal.error
            assert book.not_sent() == 1 and book.committed() == 0
    asyncio.run(go())


def test_a_call_that_fits_once_in_flight_calls_settle_waits_for_them():
    async def go() -> None:
        book = ledger(run_cap=0.005)
        first, second = (book.ticket("model", 1000 - TEMPLATE_TOKENS, 200) for _ in range(2))
        assert await first.reserve()
        waiting = asyncio.create_task(second.reserve())
        await asyncio.sleep(0)
        assert not waiting.done()  # $0.003 held + $0.003 > $0.005, but nothing is spent yet
        book.settle("model", result(100, 10), first)  # spent $0.0002: now it fits
        assert await waiting and book.not_sent() == 0
    asyncio.run(go())


def test_a_lost_call_keeps_its_reservation_against_the_cap():
    async def go() -> None:
        book = ledger(run_cap=0.005)
        t = book.ticket("model", 1000 - TEMPLATE_TOKENS, 200)
        await t.reserve()
        settled = book.settle("model", result(None, None, ok=False, status=None), t)  # cut after sending
        assert settled.cost_usd is None and book.committed() == Fraction(3, 1000)
        assert book.stats()["endpoints"]["model"]["attempts_cost_unknown"] == 1
        refused = book.ticket("model", 1000 - TEMPLATE_TOKENS, 200)
        assert await refused.reserve() is False  # $0.003 may have been billed: $0.003 more cannot fit
    asyncio.run(go())


@pytest.mark.parametrize("status, cost, committed", [
    (400, 0.0, Fraction(0)),  # refused before any work: not billed, the reservation released
    (429, 0.0, Fraction(0)),
    (500, None, Fraction(3, 1000)),  # the work may have run: unknown, kept at its worst case
    (503, None, Fraction(3, 1000)),
    (None, None, Fraction(3, 1000)),  # cut off after sending
])
def test_an_outcome_without_usage_is_billed_by_its_status(status, cost, committed):
    async def go() -> None:
        book = ledger(run_cap=0.005)
        t = book.ticket("model", 1000 - TEMPLATE_TOKENS, 200)
        await t.reserve()
        assert book.settle("model", result(None, None, ok=False, status=status), t).cost_usd == cost
        assert book.committed() == committed
    asyncio.run(go())


def test_a_cap_over_an_unpriced_endpoint_is_refused_naming_the_key():
    book = Ledger.build({"model": (Price(), None), "a": (Price(output_per_mtok=1.0), 2.0)}, None)
    with pytest.raises(ValueError, match=r"judge_panel\.judges\.a\.max_usd is set but .*price\.input_per_mtok"):
        book.check(["model", "a"], {"model": "model", "a": "judge_panel.judges.a"})


# ---------------------------------------------------------------------- runs against a loopback endpoint

DOC = "The seal was worn. The pump failed at 03:14. " * 90


def usage_of(call: Call) -> dict:
    """As a real endpoint reports it: input proportional to the prompt, reasoning tokens inside the output."""
    return {"prompt_tokens": math.ceil(len(call.prompt) / 4) + 9, "completion_tokens": 80,
            "completion_tokens_details": {"reasoning_tokens": 60}}


def reply(call: Call) -> Reply:
    text = "The seal was worn at 03:14." if call.route == "test-model" else '{"points_awarded":[60],"total":60}'
    return Reply(200, {"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": usage_of(call)})


def billed(calls: list[Call], price: dict = PRICE) -> Decimal:
    """What the endpoint's own usage figures add up to, in decimal dollars."""
    total = Decimal(0)
    for c in calls:
        u = usage_of(c)
        total += (u["prompt_tokens"] * Decimal(str(price["input_per_mtok"]))
                  + u["completion_tokens"] * Decimal(str(price["output_per_mtok"]))) / 1_000_000
    return total


class TwoAtOnce:
    """Holds the second and third requests until both are in flight: the cap is tested with concurrent calls.

    The endpoint's first request goes alone (its answer's headers set the pace), so the pair after it.
    """

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=30)
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, call: Call) -> Reply:
        with self.lock:
            self.count += 1
            held = self.count in (2, 3)
        if held:
            self.barrier.wait()  # breaks (and fails the test) if the third never comes while the second is out
        return reply(call)


@pytest.fixture
def release(tmp_path, test_key):
    tasks = [make_task(f"q{i:02d}", f"What failed? [q{i:02d}]", "doc.txt") for i in range(N_TASKS)]
    return write_release(tmp_path, tasks, {"doc.txt": DOC})


def overrides(url: str, tasks: Path, corpus: Path, cache: Path, *extra: str) -> list[str]:
    return ["model=custom", "model.route=test-model", f"model.base_url={url}/v1", f"model.api_key_env={TEST_KEY_ENV}",
            "model.stream=false", "model.max_concurrency=4", f"decoding.max_tokens={MAX_TOKENS}",
            f"dataset.tasks={tasks}", f"dataset.corpus={corpus}", f"cache.dir={cache}",
            *[f"model.price.{k}={v}" for k, v in PRICE.items()], *extra]


def worst_case(tasks: Path, corpus: Path) -> float:
    """One answer's reservation: a UTF-8 byte of body a token in, max_tokens out (independently of the code)."""
    from wildtrace.core.prompts import answer_prompt
    from wildtrace.runtime.net.attempt import encode_body

    body = {"model": "test-model", "messages": [{"role": "user", "content": answer_prompt("What failed? [q00]", DOC)}],
            "temperature": 0.1, "max_tokens": MAX_TOKENS}
    return ((len(encode_body(body)) + TEMPLATE_TOKENS) * PRICE["input_per_mtok"]
            + MAX_TOKENS * PRICE["output_per_mtok"]) / 1e6


def test_a_cap_stops_the_run_part_way_and_is_never_passed(tmp_path, release):
    tasks, corpus = release
    cache = tmp_path / "cache"
    responder = TwoAtOnce()
    with LoopbackServer(responder) as server:
        per_call = worst_case(tasks, corpus)
        cap = round(per_call * 7.5, 6)  # room for several calls, four of them reserved at once, not all 24
        first = run(settings(tmp_path / "a", overrides(server.url, tasks, corpus, cache, "stage=answer",
                                                       f"budget.max_usd={cap}")))
    sent = [c for c in server.calls if c.route == "test-model"]
    assert server.max_in_flight >= 2  # calls really were in flight together
    assert 0 < len(sent) < N_TASKS
    assert billed(sent) <= Decimal(str(cap))  # by the endpoint's own usage figures
    cost = first.stats["cost"]
    assert abs(Decimal(str(cost["total_usd"])) - billed(sent)) < Decimal("1e-8")
    rows = json.loads((first.out_dir / "responses.json").read_text())
    held = [r for r in rows if r["status"] == R.AnswerStatus.BUDGET_EXHAUSTED]
    assert len(held) == N_TASKS - len(sent) == cost["not_sent_budget"]
    assert all(r["attempts"] == 0 and r["cost_usd"] == 0.0 and "budget.max_usd" in r["error"] for r in held)
    assert first.exit_code == EXIT_BUDGET
    assert "BUDGET CAP REACHED" in first.headline and f"{len(held)} calls not sent" in first.headline
    hint = re.search(r"resume with a higher cap: python -m wildtrace .*budget\.max_usd=([\d.]+) \(this command has "
                     r"paid at most \$([\d.]+) so far", first.headline)
    assert hint and float(hint[1]) >= float(billed(sent)) + per_call * len(held) - 1e-6  # paid + what is left
    assert float(hint[2]) == pytest.approx(float(billed(sent)), abs=1e-4)
    assert first.stats["failures"] == {}  # not a failure of the model


def test_a_rerun_with_a_higher_cap_pays_only_for_the_unsent_calls(tmp_path, release):
    tasks, corpus = release
    cache = tmp_path / "cache"
    with LoopbackServer(reply) as server:
        cap = round(worst_case(tasks, corpus) * 6.5, 6)
        first = run(settings(tmp_path / "a", overrides(server.url, tasks, corpus, cache, "stage=answer",
                                                       f"budget.max_usd={cap}")))
        paid_first = list(server.calls)
        unsent = first.stats["cost"]["not_sent_budget"]
        assert unsent > 0
        second = run(settings(tmp_path / "b", overrides(server.url, tasks, corpus, cache, "stage=answer",
                                                        "budget.max_usd=10")))
    paid_second = server.calls[len(paid_first):]
    assert len(paid_second) == unsent  # only the calls the cap held back
    assert {c.raw for c in paid_second}.isdisjoint({c.raw for c in paid_first})
    assert abs(Decimal(str(second.stats["cost"]["total_usd"])) - billed(paid_second)) < Decimal("1e-8")
    rows = json.loads((second.out_dir / "responses.json").read_text())
    assert all(r["status"] == R.AnswerStatus.ANSWERED for r in rows) and second.exit_code == 0
    assert sum(r["cached"] for r in rows) == N_TASKS - unsent


def test_a_judge_cap_holds_judgments_back_without_counting_them_against_anyone(tmp_path, release):
    tasks, corpus = release
    judge_price = dict(input_per_mtok=1.0, output_per_mtok=1.0)
    with LoopbackServer(reply) as server:
        judge = {**openai_judge(server.url, "judge-a"), "stream": False, "price": judge_price, "max_usd": 0.004}
        result = run(settings(tmp_path / "a", overrides(server.url, tasks, corpus, tmp_path / "cache",
                                                        "judge_panel.max_tokens=500"), judges={"a": judge}))
    judged = [c for c in server.calls if c.route == "judge-a"]
    assert 0 < len(judged) < N_TASKS and billed(judged, judge_price) <= Decimal("0.004")
    rows = json.loads((result.out_dir / "judgments.json").read_text())
    held = [j for j in rows if j["status"] == R.JudgmentStatus.BUDGET_EXHAUSTED]
    assert len(held) == N_TASKS - len(judged)
    summary = result.summary
    assert summary["n_budget_exhausted"] == len(held) and summary["n_scored"] == len(judged)
    assert summary["scored"] == pytest.approx(60.0)  # the Scored view holds only what was judged: no zeros
    assert summary["overall"] == pytest.approx(60.0 * len(judged) / N_TASKS)  # All: zero-filled, as a missing answer
    assert summary["judges"]["a"]["n_unavailable"] == 0  # never sent is not the judge's failure
    assert result.exit_code == EXIT_BUDGET and "judge_panel.judges.a.max_usd" in result.headline
    assert all("would pass judge_panel.judges.a.max_usd=$0.004" in j["error"] for j in held)


def test_a_cap_over_an_endpoint_without_a_price_fails_before_any_request(tmp_path, release):
    tasks, corpus = release
    with LoopbackServer(reply) as server:
        every = overrides(server.url, tasks, corpus, tmp_path / "cache", "stage=answer")
        bare = [o for o in every if ".price." not in o]
        with pytest.raises(ConfigError, match=r"budget\.max_usd is set but model has no model\.price\.input_per_mtok"):
            run(settings(tmp_path / "a", [*bare, "budget.max_usd=1"]))
    assert server.calls == []


@pytest.mark.slow
def test_exit_statuses_of_the_command(tmp_path, release):
    tasks, corpus = release
    env = {**os.environ, TEST_KEY_ENV: "sk-test-budget"}
    with LoopbackServer(reply) as server:
        base = [sys.executable, "-m", "wildtrace", f"root={tmp_path / 'out'}", "mlflow.enabled=false", "progress=false",
                *overrides(server.url, tasks, corpus, tmp_path / "cache", "stage=answer")]
        capped = subprocess.run([*base, f"budget.max_usd={round(worst_case(tasks, corpus) * 3.5, 6)}"], env=env,
                                capture_output=True, text=True, timeout=300)
        sent = len(server.calls)
        unpriced = subprocess.run([a for a in base if ".price." not in a] + ["model.max_usd=1"], env=env,
                                  capture_output=True, text=True, timeout=300)
    assert capped.returncode == EXIT_BUDGET, capped.stderr[-2000:]
    assert "BUDGET CAP REACHED" in capped.stdout and "resume with a higher cap" in capped.stdout
    assert unpriced.returncode == 2 and "model.max_usd is set but model has no model.price" in unpriced.stderr
    assert "Traceback" not in unpriced.stderr and len(server.calls) == sent  # refused before any request


def test_a_batched_call_is_reserved_and_priced_with_the_batch_discount():
    async def go() -> None:
        book = Ledger.build({"model": (Price(**PRICE, batch_discount=0.5), None)}, 0.01)
        t = book.ticket("model", 1000 - TEMPLATE_TOKENS, 200, batched=True)
        assert t.worst == Fraction(3, 2000) and await t.reserve()
        assert book.settle("model", result(400, 100), t).cost_usd == pytest.approx(0.0007)
    asyncio.run(go())


def test_the_progress_line_shows_spend_against_the_cap(caplog):
    import logging

    from wildtrace.runtime.run.pipeline import Counters
    from wildtrace.runtime.run.progress import _Progress

    async def go() -> Ledger:
        book = ledger(run_cap=5.0)
        t = book.ticket("model", 1000, 200)
        await t.reserve()
        book.settle("model", result(1_000_000, 23_000), t)  # $1 + $0.23
        return book
    book = asyncio.run(go())
    assert book.progress() == "spent $1.23/$5.00"
    capped = Ledger.build({"model": (Price(**PRICE), 2.0)}, None)
    assert capped.progress() == "spent model $0.00/$2.00"
    assert Ledger.build({"model": (Price(), None)}, None).progress() == ""  # no price, no cap: nothing
    progress = _Progress(3, False, 30.0, {}, book)
    with caplog.at_level(logging.INFO, logger="wildtrace"):
        progress.line(Counters())
    assert caplog.records[-1].getMessage().endswith("· spent $1.23/$5.00")


def test_a_run_cap_holds_over_the_model_and_its_judges_together(tmp_path, release):
    tasks, corpus = release
    judge_price = dict(input_per_mtok=2.0, output_per_mtok=5.0)
    with LoopbackServer(TwoAtOnce()) as server:
        judge = {**openai_judge(server.url, "judge-a"), "stream": False, "price": judge_price, "max_concurrency": 3}
        cap = round(worst_case(tasks, corpus) * 9, 6)
        result = run(settings(tmp_path / "a", overrides(server.url, tasks, corpus, tmp_path / "cache",
                                                        "judge_panel.max_tokens=300", f"budget.max_usd={cap}"),
                              judges={"a": judge}))
    answers = [c for c in server.calls if c.route == "test-model"]
    judged = [c for c in server.calls if c.route == "judge-a"]
    spent = billed(answers) + billed(judged, judge_price)
    assert answers and judged and len(answers) < N_TASKS
    assert spent <= Decimal(str(cap))  # by the endpoints' own usage figures, both endpoints together
    assert abs(Decimal(str(result.stats["cost"]["total_usd"])) - spent) < Decimal("1e-8")
    assert result.summary["n_budget_exhausted"] == N_TASKS - result.summary["n_scored"] > 0
    assert result.exit_code == EXIT_BUDGET
