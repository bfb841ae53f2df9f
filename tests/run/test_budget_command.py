"""The spend cap bounds the command, not the process: a run killed (SIGKILL) and resumed with the same cap,
and calls whose attempts time out and are retried, never pass the cap by the endpoint's own usage figures;
the headline's figure is at least what the endpoint billed; the resume hint's cap, followed, finishes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal

from conftest import TEST_KEY_ENV, settings
from servers.loopback import Call, LoopbackServer, Reply
from test_budget import DOC, MAX_TOKENS, PRICE, N_TASKS, overrides, release, worst_case  # noqa: F401 - fixture

from wildtrace.runtime.run.execute import EXIT_BUDGET, run


def usage_of(call: Call) -> dict:
    """Usage as close to the worst case as a real endpoint may report: a token per byte, the whole budget out."""
    return {"prompt_tokens": len(call.raw), "completion_tokens": MAX_TOKENS}


def billed(calls: list[Call]) -> Decimal:
    """What the endpoint's own usage figures add up to, for every request it received (each may be billed)."""
    total = Decimal(0)
    for call in calls:
        u = usage_of(call)
        total += (u["prompt_tokens"] * Decimal(str(PRICE["input_per_mtok"]))
                  + u["completion_tokens"] * Decimal(str(PRICE["output_per_mtok"]))) / 1_000_000
    return total


def reply(call: Call, delay_s: float = 0.0) -> Reply:
    return Reply(200, {"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "The seal was worn."}, "finish_reason": "stop"}],
        "usage": usage_of(call)}, delay_s=delay_s)


def test_a_run_killed_and_resumed_with_the_same_cap_stays_under_it(tmp_path, release):  # noqa: F811
    tasks, corpus = release
    cap = round(worst_case(tasks, corpus) * 7.5, 6)
    env = {**os.environ, TEST_KEY_ENV: "sk-test-command-cap"}
    with LoopbackServer(lambda call: reply(call, 0.4)) as server:
        command = [sys.executable, "-m", "wildtrace", f"root={tmp_path / 'out'}", "mlflow.enabled=false",
                   "progress=false", *overrides(server.url, tasks, corpus, tmp_path / "cache", "stage=answer"),
                   f"budget.max_usd={cap}"]
        first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while len(server.completed) < 3 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
        killed_after = len(server.calls)
        assert 3 <= killed_after < N_TASKS
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        resumed = len(server.calls)
        time.sleep(0.5)  # replies still being written by the server are billed too
        assert billed(server.calls) <= Decimal(str(cap)), (killed_after, resumed)  # by the endpoint's figures
        assert second.returncode == EXIT_BUDGET, second.stderr[-2000:]
        assert "BUDGET CAP REACHED" in second.stdout and "its earlier runs included" in second.stdout
        hint = re.search(r"resume with a higher cap: (.+) \(this command has paid at most \$([\d.]+) so far",
                         second.stdout)
        assert hint and Decimal(hint[2]) >= billed(server.calls) - Decimal("1e-4")
        raised = re.search(r"budget\.max_usd=([\d.]+)", hint[1])
        assert raised and float(raised[1]) > cap
        third = subprocess.run([*command[:-1], f"budget.max_usd={raised[1]}"], env=env, capture_output=True,
                               text=True, timeout=300)
    assert third.returncode == 0, third.stdout[-2000:]  # the hint's cap lets the command finish
    assert billed(server.calls) <= Decimal(raised[1])


def test_timeouts_forcing_retries_never_take_the_spend_past_the_cap(tmp_path, release):  # noqa: F811
    """Answers that take 2.5 s against timeout_s=1: every attempt may be billed, so each reserves its own
    worst case, and the headline's figure is at least what the endpoint billed."""
    tasks, corpus = release
    per_attempt = worst_case(tasks, corpus)
    cap = round(per_attempt * 3.5, 6)
    with LoopbackServer(lambda call: reply(call, 2.5)) as server:
        result = run(settings(tmp_path / "a", overrides(server.url, tasks, corpus, tmp_path / "cache", "stage=answer",
                                                        "dataset.limit=2", "model.timeout_s=1", "retry.max_retries=5",
                                                        "retry.backoff_base_s=0", "retry.backoff_max_s=0",
                                                        f"budget.max_usd={cap}")))
        time.sleep(3)  # the server finishes (and bills) the replies the client gave up on
        sent = list(server.calls)
    assert len(sent) == 3  # the two first attempts and one retry fit; old code sent 12
    assert billed(sent) <= Decimal(str(cap))
    cost = result.stats["cost"]
    assert cost["total_usd"] == 0.0 and Decimal(str(cost["at_most_usd"])) >= billed(sent)
    shown = re.search(r"^cost: at least \$([\d.]+), at most \$([\d.]+)", result.headline, re.M)
    assert shown and Decimal(shown[2]) >= billed(sent) - Decimal("1e-4"), result.headline
    assert cost["endpoints"]["model"]["attempts_cost_unknown"] == 3
    assert result.exit_code == EXIT_BUDGET


def test_the_journal_counts_other_runs_and_skips_a_torn_line(tmp_path):
    """Two runs of one command share the journal: each counts the other's settled costs and, for a reservation
    never settled (its process died), its worst case; a line torn by a kill is ended and skipped."""
    from fractions import Fraction

    from wildtrace.runtime.spend.cap import Journal

    path = tmp_path / "spend" / "c.jsonl"
    first = Journal(path)
    paid = first.add("model", reserve=Fraction(3, 1000))
    first.add("model", reserve=Fraction(3, 1000))  # never settled: the process dies
    first.add("model", paid=Fraction(1, 1000), entry=paid)
    first.flush()
    with open(path, "ab") as fh:
        fh.write(b'{"id": "x-1", "label": "model", "reserve": "9')  # a kill mid-append
    second = Journal(path)
    assert second.others() == {"model": Fraction(4, 1000)}  # $0.001 paid + $0.003 at its worst case
    second.add("judge", paid=Fraction(2, 1000))
    second.flush()
    third = Journal(path)
    assert third.others() == {"model": Fraction(4, 1000), "judge": Fraction(2, 1000)}
    assert path.read_bytes().count(b"\n") == 5  # the torn line ended by the next writer, then skipped


SAME_COMMAND = ["budget.max_usd=5", "model.max_usd=2", "stage=answer", "retry.max_retries=1", "model.timeout_s=5",
                "model.max_concurrency=2", "progress=false", "batch.poll_s=5", "model.price.input_per_mtok=9",
                "mlflow.enabled=true"]
OTHER_COMMAND = ["decoding.temperature=0.5", "decoding.max_tokens=100", "decoding.replicate=1", "dataset.limit=3",
                 "model.route=other", "model.base_url=http://127.0.0.1:1/v1", "judge_panel.max_tokens=99",
                 "+model.extra_body.seed=1"]


def test_the_same_command_is_the_settings_that_make_its_requests_and_the_cache_folder(tmp_path):
    """Caps, stage, pacing, timeouts, prices and logging leave the command the same (its cap counts every run
    of it); what changes a request, or another cache folder, makes another command."""
    from wildtrace.runtime.run.execute import command_identity

    base = ["model=custom", "model.route=test-model", "model.base_url=http://127.0.0.1:9/v1",
            "model.price.input_per_mtok=1", "model.price.output_per_mtok=1"]
    identity = command_identity(settings(tmp_path, base))
    for override in SAME_COMMAND:
        assert command_identity(settings(tmp_path, [*base, override])) == identity, override
    for override in OTHER_COMMAND:
        assert command_identity(settings(tmp_path, [*base, override])) != identity, override
    assert command_identity(settings(tmp_path, [*base, f"cache.dir={tmp_path / 'other'}"])) != identity


def test_attempts_that_never_left_are_not_counted_against_the_cap(tmp_path, release):  # noqa: F811
    """An endpoint nobody answers (connection refused): no attempt left, so nothing counts against the cap and
    every call fails as the transport error it is, never as budget_exhausted."""
    import socket

    tasks, corpus = release
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    cap = round(worst_case(tasks, corpus) * 1.5, 6)
    result = run(settings(tmp_path / "a", overrides(url, tasks, corpus, tmp_path / "cache", "stage=answer",
                                                    "dataset.limit=3", "retry.max_retries=1",
                                                    "retry.backoff_base_s=0", "retry.backoff_max_s=0",
                                                    f"budget.max_usd={cap}")))
    cost = result.stats["cost"]
    assert cost["not_sent_budget"] == 0 and cost["at_most_usd"] == 0.0 and cost["command_usd"] == 0.0
    assert result.stats["failures"] == {"model:retries_exhausted": 3}  # each attempt a refused connection
