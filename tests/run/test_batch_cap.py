"""The spend cap in batch mode, against the loopback batch servers of tests/run/test_batch.py.

A batch item's worst case is reserved at the batch price before the item goes into a batch;
an item the cap cannot fit is not sent and is recorded as a refused synchronous call is
(``budget_exhausted``, never cached); an admitted item's reservation becomes its real,
discounted cost when its result arrives. Costs are checked against the endpoints' own usage
figures, computed here independently of the code.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import TEST_KEY_ENV, make_task, settings, write_release
from servers.loopback import Call, Reply
from test_batch import QID, BatchServer, answer_text, overrides, prompt_of, rows, usage_for

from wildtrace.core.records import AnswerStatus
from wildtrace.core.prompts import answer_prompt, judge_prompt
from wildtrace.core.tasks import parse_rubric
from wildtrace.providers.base import Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.spend.cap import TEMPLATE_TOKENS
from wildtrace.runtime.net.attempt import encode_body
from wildtrace.runtime.run.plan import model_spec
from wildtrace.runtime.run.execute import EXIT_BUDGET, run

#: Output-heavy, so an item's worst case (max_tokens out) is close to what it really costs.
PRICE = {"input_per_mtok": "0.01", "output_per_mtok": "100", "batch_discount": "0.5"}
MAX_TOKENS = 16  # a reply here is 14-15 tokens (usage_for): the worst case is near the real cost
N = 6
DOC = "The seal was worn. " * 40


@pytest.fixture
def release(tmp_path):
    tasks = [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt") for i in range(N)]
    return write_release(tmp_path / "release", tasks, {"doc.txt": DOC})


def capped(url: str, release: tuple[Path, Path], cache: Path, *extra: str, provider: str = "openai",
           model_batch: bool = True, max_tokens: int = MAX_TOKENS) -> list[str]:
    return [*overrides(url, release, provider, model_batch=model_batch, cache=cache),
            f"decoding.max_tokens={max_tokens}", f"judge_panel.max_tokens={MAX_TOKENS}",
            *[f"model.price.{k}={v}" for k, v in PRICE.items()], *extra]


def judge(url: str, route: str) -> dict:
    return {"name": route, "provider": "openai", "route": route, "base_url": f"{url}/v1", "api_key_env": TEST_KEY_ENV,
            "stream": False, "batch": True, "price": {k: float(v) for k, v in PRICE.items()}}


def usd(input_tokens: int, output_tokens: int, batched: bool = True) -> Decimal:
    total = (input_tokens * Decimal(PRICE["input_per_mtok"]) + output_tokens * Decimal(PRICE["output_per_mtok"])) \
        / 1_000_000
    return total * (1 - Decimal(PRICE["batch_discount"])) if batched else total


def billed(body: dict, batched: bool = True) -> Decimal:
    """What one item cost by the usage the loopback endpoint reports for it."""
    route = body.get("model")
    prompt_tokens, completion, _ = usage_for(prompt_of(body), answer_text(body, route))
    return usd(prompt_tokens, completion, batched)


def sent_items(server: BatchServer, route: str | None = None) -> list[tuple[str, dict]]:
    """(custom_id, body) of every item in every batch (of one route, when given)."""
    return [(key, body) for batch in server.items.values() for key, body in batch
            if route is None or body.get("model", route) == route]


def answer_worst(cfg, question: str, max_tokens: int = MAX_TOKENS) -> Decimal:
    """An answer's reservation, independently: a token per UTF-8 byte of its body (+ the template), max_tokens out."""
    provider = make_provider(model_spec(cfg))
    body = encode_body(provider.build_request(answer_prompt(question, DOC), Sampling(0.1, max_tokens)).body)
    return usd(len(body) + TEMPLATE_TOKENS, max_tokens)


def judge_worst(prompt: str | None = None) -> Decimal:
    """A judgment's reservation: a token per UTF-8 byte of its prompt (+ the template), max_tokens out
    (by default of the judgment of q0's answer: every task's is as long)."""
    if prompt is None:
        rubric = parse_rubric(make_task("q0", "", "doc.txt")["ground_truth"]["scoring_rubric"], "test")
        prompt = judge_prompt("What failed? [q0]", rubric, "Answer for q0: the seal was worn.")
    return usd(len(prompt.encode("utf-8")) + TEMPLATE_TOKENS, MAX_TOKENS)


def total_recorded(run_dir: Path) -> Decimal:
    paid = [r["cost_usd"] for name in ("responses.json", "judgments.json") if (run_dir / name).is_file()
            for r in rows(run_dir, name)]
    assert None not in paid
    return sum((Decimal(str(c)) for c in paid), Decimal(0))


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_a_capped_batch_sends_only_what_fits_and_never_passes_the_cap(tmp_path, release, test_key, provider):
    with BatchServer() as server:
        probe = settings(tmp_path / "p", capped(server.url, release, tmp_path / "cache", provider=provider))
        worst = answer_worst(probe, "What failed? [q0]")
        cap = (worst * Decimal("2.5")).quantize(Decimal("1e-9"))  # two worst cases fit, a third never does
        cfg = settings(tmp_path / "a", [*capped(server.url, release, tmp_path / "cache", provider=provider),
                                        "stage=answer", f"budget.max_usd={cap}"])
        result = run(cfg)
    items = sent_items(server)
    # The first batch holds the two that fit; the third waited for them to settle, then could not fit.
    assert [len(batch) for batch in server.items.values()] == [2]
    assert server.sync_calls == []
    spent = sum((billed(body) for _, body in items), Decimal(0))
    assert spent <= cap  # by the endpoint's own usage figures
    run_dir = Path(cfg.out_dir)
    assert total_recorded(run_dir) <= cap
    assert abs(Decimal(str(result.stats["cost"]["total_usd"])) - spent) < Decimal("1e-8")
    answers = rows(run_dir, "responses.json")
    paid = [r for r in answers if r["status"] == AnswerStatus.ANSWERED]
    held = [r for r in answers if r["status"] == AnswerStatus.BUDGET_EXHAUSTED]
    assert len(paid) == 2 and len(held) == N - 2 == result.stats["cost"]["not_sent_budget"]
    assert all(r["batched"] and r["cost_usd"] > 0 for r in paid)
    assert all(r["reason"] == AnswerStatus.BUDGET_EXHAUSTED and r["attempts"] == 0 and r["cost_usd"] == 0.0
               and not r["cached"] and f"budget.max_usd=${float(cap)}" in r["error"] for r in held)
    assert result.exit_code == EXIT_BUDGET and "BUDGET CAP REACHED" in result.headline
    assert result.stats["failures"] == {}  # held back is not a failure of the model


def test_items_that_fit_once_a_batch_settles_go_into_the_next_batch(tmp_path, release, test_key):
    """A reply far below max_tokens leaves most of its reservation unspent: what did not fit beside the
    items in flight is sent in a later batch once they settle, as a synchronous call waits for its turn."""
    max_tokens = 64  # the replies are 14 tokens: an item costs about a fifth of its worst case
    with BatchServer() as server:
        probe = settings(tmp_path / "p", capped(server.url, release, tmp_path / "cache", max_tokens=max_tokens))
        worst = answer_worst(probe, "What failed? [q0]", max_tokens)
        cap = (worst * Decimal("2.5")).quantize(Decimal("1e-9"))
        cfg = settings(tmp_path / "a", [*capped(server.url, release, tmp_path / "cache", max_tokens=max_tokens),
                                        "stage=answer", f"budget.max_usd={cap}"])
        result = run(cfg)
    batches = list(server.items.values())
    assert len(batches) > 1 and len(batches[0]) == 2  # two worst cases fit at first, the rest waited
    spent = Decimal(0)
    for batch in batches:  # each batch was reserved beside what the earlier ones really cost
        assert spent + len(batch) * worst <= cap
        spent += sum((billed(body) for _, body in batch), Decimal(0))
    assert spent <= cap and total_recorded(Path(cfg.out_dir)) <= cap
    answers = rows(Path(cfg.out_dir), "responses.json")
    sent = sum(len(b) for b in batches)
    assert sent + sum(r["status"] == AnswerStatus.BUDGET_EXHAUSTED for r in answers) == N
    assert sent > 2 and sum(r["status"] == AnswerStatus.ANSWERED for r in answers) == sent
    assert abs(Decimal(str(result.stats["cost"]["total_usd"])) - spent) < Decimal("1e-8")


def test_an_open_batch_under_a_cap_is_polled_whole_or_left_for_a_later_run(tmp_path, release, test_key):
    """A killed run's pending batch: collecting it closes its record, so a cap that cannot hold all of
    its items holds back all of them (the batch stays open), and a rerun with room polls it: no second batch."""
    cache = tmp_path / "cache"
    with BatchServer() as server:
        server.hold.set()
        first = settings(tmp_path / "a", [*capped(server.url, release, cache), "stage=answer",
                                          "batch.max_wait_h=0.00001"])
        run(first)  # the batch outlives the wait: it stays open in the batch ledger
        assert [r["reason"] for r in rows(Path(first.out_dir), "responses.json")] == ["batch_timeout"] * N
        server.hold.clear()
        polls = server.polls
        cap = (answer_worst(first, "What failed? [q0]") * Decimal("2.5")).quantize(Decimal("1e-9"))
        second = settings(tmp_path / "b", [*capped(server.url, release, cache), "stage=answer",
                                           f"budget.max_usd={cap}"])
        held = run(second)
        assert server.polls == polls and list(server.batches) == ["batch_1"]  # neither polled nor sent again
        answers = rows(Path(second.out_dir), "responses.json")
        assert [r["status"] for r in answers] == [AnswerStatus.BUDGET_EXHAUSTED] * N and held.exit_code == EXIT_BUDGET
        third = settings(tmp_path / "c", [*capped(server.url, release, cache), "stage=answer", "budget.max_usd=1"])
        assert run(third).exit_code == 0
    assert list(server.batches) == ["batch_1"], "a second batch was created for items already sent"
    assert [r["status"] for r in rows(Path(third.out_dir), "responses.json")] == [AnswerStatus.ANSWERED] * N


def test_a_rerun_with_a_higher_cap_batches_only_the_items_held_back(tmp_path, release, test_key):
    cache = tmp_path / "cache"
    with BatchServer() as server:
        probe = settings(tmp_path / "p", capped(server.url, release, cache))
        cap = (answer_worst(probe, "What failed? [q0]") * Decimal("3.5")).quantize(Decimal("1e-9"))
        first = settings(tmp_path / "a", [*capped(server.url, release, cache), "stage=answer",
                                          f"budget.max_usd={cap}"])
        assert run(first).exit_code == EXIT_BUDGET
        paid_first = {key for key, _ in sent_items(server)}
        held = {r["question_id"] for r in rows(Path(first.out_dir), "responses.json")
                if r["status"] == AnswerStatus.BUDGET_EXHAUSTED}
        assert len(paid_first) == 3 and len(held) == N - 3
        batches_first = len(server.batches)
        second = settings(tmp_path / "b", [*capped(server.url, release, cache), "stage=answer", "budget.max_usd=1"])
        rerun = run(second)
    assert rerun.exit_code == 0, rerun.headline
    again = sent_items(server)[len(paid_first):]
    assert len(server.batches) == batches_first + 1
    assert not {key for key, _ in again} & paid_first  # nothing re-paid
    assert {QID.search(prompt_of(body)).group(1) for _, body in again} == held  # only those held back
    answers = {r["question_id"]: r for r in rows(Path(second.out_dir), "responses.json")}
    assert all(r["status"] == AnswerStatus.ANSWERED for r in answers.values())
    assert {q for q, r in answers.items() if not r["cached"]} == held  # the held-back were never cached
    spent = sum((billed(body) for _, body in again), Decimal(0))
    assert abs(Decimal(str(rerun.stats["cost"]["total_usd"])) - spent) < Decimal("1e-8")


def test_a_run_cap_and_an_endpoint_cap_hold_over_batched_answers_and_judgments(tmp_path, release, test_key):
    with BatchServer() as server:
        judges = {"j1": judge(server.url, "judge-one")}
        probe = settings(tmp_path / "p", capped(server.url, release, tmp_path / "cache"), judges=judges)
        answer_cap = (answer_worst(probe, "What failed? [q0]") * Decimal("3.5")).quantize(Decimal("1e-9"))
        # The run's cap leaves room for the three answers the model's cap lets through (they cost
        # 7/8 of their worst case) and two judgments, not three: the judge is held back by the run's
        # cap, the model by its own.
        run_cap = (answer_cap + judge_worst() * Decimal("1.5")).quantize(Decimal("1e-9"))
        cfg = settings(tmp_path / "a", [*capped(server.url, release, tmp_path / "cache", "judge_panel.batch=true"),
                                        f"model.max_usd={answer_cap}", f"budget.max_usd={run_cap}"], judges=judges)
        result = run(cfg)
    answers_sent, judged = sent_items(server, "test-model"), sent_items(server, "judge-one")
    answer_spend = sum((billed(b) for _, b in answers_sent), Decimal(0))
    judge_spend = sum((billed(b) for _, b in judged), Decimal(0))
    assert len(answers_sent) == 3 and len(judged) == 2
    assert answer_spend <= answer_cap and answer_spend + judge_spend <= run_cap
    run_dir = Path(cfg.out_dir)
    assert total_recorded(run_dir) <= run_cap
    assert abs(Decimal(str(result.stats["cost"]["total_usd"])) - answer_spend - judge_spend) < Decimal("1e-8")
    answers, judgments = rows(run_dir, "responses.json"), rows(run_dir, "judgments.json")
    held_answers = [r for r in answers if r["status"] == AnswerStatus.BUDGET_EXHAUSTED]
    held_judgments = [j for j in judgments if j["status"] == AnswerStatus.BUDGET_EXHAUSTED]
    assert len(held_answers) == N - 3 and all("model.max_usd" in r["error"] for r in held_answers)
    assert len(held_judgments) == 3 - len(judged) and all("budget.max_usd" in j["error"] for j in held_judgments)
    assert all(j["batched"] for j in judgments if j["status"] == "scored")
    assert result.stats["cost"]["not_sent_budget"] == len(held_answers) + len(held_judgments)
    assert result.exit_code == EXIT_BUDGET


class BothJudgesPending(BatchServer):
    """Every batch stays in progress until both judges' batches exist (the safety net: a timer)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold.set()
        self.both_pending = False

    def openai_create(self, call: Call) -> Reply:
        reply = super().openai_create(call)
        routes = {body["model"] for batch in self.items.values() for _, body in batch}
        if {"judge-one", "judge-two"} <= routes and self.hold.is_set():
            self.both_pending = all(b["status"] != "completed" for b in self.batches.values())
            self.hold.clear()
        return reply


def test_items_in_pending_batches_and_synchronous_calls_share_one_cap(tmp_path, release, test_key):
    """Synchronous answers, then two judges' batches pending at once: what was in flight together,
    at its worst case, fit the cap beside what was already spent, and the spend never passed it."""
    with BothJudgesPending() as server:
        judges = {"j1": judge(server.url, "judge-one"), "j2": judge(server.url, "judge-two")}
        sync_answer = {"model": "test-model", "messages": [
            {"role": "user", "content": answer_prompt("What failed? [q0]", DOC)}]}
        # Room for every answer, then eight judgments' worst cases of twelve: the first judge's six
        # and two of the second's go into batches pending together; the rest cannot fit once they settle.
        cap = (N * billed(sync_answer, batched=False) + judge_worst() * Decimal("8.3")).quantize(Decimal("1e-9"))
        cfg = settings(tmp_path / "a", [*capped(server.url, release, tmp_path / "cache", model_batch=False),
                                        f"budget.max_usd={cap}"], judges=judges)
        safety = threading.Timer(120, server.hold.clear)  # never needed when the cap shares out as it should
        safety.start()
        try:
            result = run(cfg)
        finally:
            safety.cancel()
    assert server.both_pending, "the two judges' batches were never pending together"
    # Answers were sent synchronously, each reserved and settled against the same cap.
    assert len(server.sync_calls) == N
    synchronous = sum((billed(c.body, batched=False) for c in server.sync_calls), Decimal(0))
    first_batches: dict[str, list] = {}
    for batch in server.items.values():
        first_batches.setdefault(batch[0][1]["model"], batch)
    # Admitted in panel order; which of the two creates reach the server first is the event loop's choice.
    assert {model: len(b) for model, b in first_batches.items()} == {"judge-one": N, "judge-two": 2}
    in_flight = sum((judge_worst(prompt_of(body)) for batch in first_batches.values() for _, body in batch),
                    Decimal(0))
    assert synchronous + in_flight <= cap  # reserved before submission: in flight together, within the cap
    judged = sent_items(server)
    spent = synchronous + sum((billed(body) for _, body in judged), Decimal(0))
    assert spent <= cap and total_recorded(Path(cfg.out_dir)) <= cap
    assert abs(Decimal(str(result.stats["cost"]["total_usd"])) - spent) < Decimal("1e-8")
    judgments = rows(Path(cfg.out_dir), "judgments.json")
    held = [j for j in judgments if j["status"] == AnswerStatus.BUDGET_EXHAUSTED]
    assert len(judged) == N + 2 and len(held) == N - 2  # every judgment was sent or held back
    assert all(j["judge"] == "j2" and "budget.max_usd" in j["error"] for j in held)
    assert result.exit_code == EXIT_BUDGET


# ---------------------------------------------------------------------- the ledger alone


def test_an_outcome_settled_when_it_arrived_is_counted_once():
    """Batch mode settles an item's outcome when its result arrives; the pipeline's call later finds
    the same outcome ready and settles it again: it must come back unchanged, paid once."""
    import asyncio
    from fractions import Fraction

    from wildtrace.core.cost import Price
    from wildtrace.core.records import CallResult, Usage
    from wildtrace.runtime.spend.cap import Ledger

    async def go() -> None:
        book = Ledger.build({"model": (Price(1.0, 10.0, batch_discount=0.5), None)}, 0.01)
        first, second = (book.ticket("model", 1000 - TEMPLATE_TOKENS, 200, batched=True) for _ in range(2))
        assert first.reserve_now() is True and book.committed() == Fraction(3, 2000)
        assert second.reserve_now() is True
        third = book.ticket("model", 1000 - TEMPLATE_TOKENS, 200, batched=True)
        assert book.ticket("model", 20_000, 200, batched=True).reserve_now() is False  # never fits: refused
        assert third.reserve_now() is True  # 0.0045 of 0.01
        later = [book.ticket("model", 1000 - TEMPLATE_TOKENS, 200, batched=True) for _ in range(4)]
        assert [t.reserve_now() for t in later] == [True, True, True, None]  # the last fits once they settle
        arrived = CallResult(True, "x", None, None, "stop", Usage(400, 100), 1, 0.1, 200, {}, batched=True)
        settled = book.settle_ahead("model", arrived, first)
        assert settled.cost_usd == pytest.approx(0.0007)
        picked_up = book.ticket("model", 1000 - TEMPLATE_TOKENS, 200)
        assert book.settle("model", settled, picked_up) is settled  # the pipeline's settle: unchanged
        assert book.stats()["endpoints"]["model"]["calls_paid"] == 1 and book.spent_usd() == pytest.approx(0.0007)
        assert book.not_sent() == 1
    asyncio.run(go())


def test_items_sent_again_after_a_batch_that_may_have_billed_reserve_again(tmp_path, release, test_key):
    """A batch the provider no longer knows (two 404s) may still have run and billed: its items' reservations
    stay spent, and sending them again needs a reservation of its own, which a cap that is full refuses."""
    from test_batch import BatchServerWithFaults

    with BatchServerWithFaults() as server:
        server.lost_polls = 2
        probe = settings(tmp_path / "p", capped(server.url, release, tmp_path / "cache"))
        cap = (answer_worst(probe, "What failed? [q0]") * Decimal("2.5")).quantize(Decimal("1e-9"))
        cfg = settings(tmp_path / "a", [*capped(server.url, release, tmp_path / "cache"), "stage=answer",
                                        f"budget.max_usd={cap}"])
        result = run(cfg)
    assert list(server.batches) == ["batch_1"]  # the lost batch's items were not sent (and paid) again
    assert sum((billed(body) for _, body in sent_items(server)), Decimal(0)) <= cap
    answers = rows(Path(cfg.out_dir), "responses.json")
    assert [r["status"] for r in answers] == [AnswerStatus.BUDGET_EXHAUSTED] * N
    assert result.exit_code == EXIT_BUDGET and result.stats["cost"]["at_most_usd"] > 0
