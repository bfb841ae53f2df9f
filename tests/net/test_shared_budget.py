"""Jobs on one key share its budget through the cache folder: the state file's rules on a fake
clock, the file under two holders and a SIGKILL, and two jobs against a real rate-limited endpoint."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from servers.loopback import LoopbackServer
from servers.ratelimited import Limit

from wildtrace.providers.base import EndpointSpec, Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.runtime.net.ratelimit import AdaptiveLimit, Cost, Window, estimate_tokens
from wildtrace.runtime.net.retry import RetryPolicy
from wildtrace.runtime.store.shared_budget import (FOLDER, SETTLE, Figure, SharedBudget, State, decode, encode,
                                                 endpoint_id, learn, prune, reserve, rolled, throttled,
                                                 windowed)
from wildtrace.runtime.store.cache import Cache

T0 = 1_764_000_000.0  # a wall time
S6 = 6 * SETTLE  # a 6 s window is taken as whole again this long after its stated reset


def tokens(n: int) -> dict[str, int]:
    return {"tokens": n, "requests": 1, "input-tokens": n, "output-tokens": 0}


def figured(remaining: float, sent_at: float = T0, reset_in: float = 6.0, limit: float = 10_000) -> State:
    """A state that has one figure of the ``tokens`` window, said at ``sent_at``."""
    state = State()
    learn(state, sent_at, {"tokens": Window(limit, remaining, reset_in)}, sent_at)
    return state


# --------------------------------------------------------------------------------------
# The rules, on a fake clock
# --------------------------------------------------------------------------------------

def test_two_jobs_never_spend_the_same_remaining_budget():
    """The provider says 3,000 are left: the first job's 2,000 fit, the second's 2,000 wait for the reset."""
    state = figured(3000, reset_in=6.0)
    assert reserve(state, tokens(2000), T0 + 1) == 0.0  # job A, written down
    assert reserve(state, tokens(2000), T0 + 2) == pytest.approx(4.0 + S6)  # job B: until the window is whole
    assert reserve(state, tokens(1000), T0 + 2) == 0.0  # what is left still fits a smaller one
    assert reserve(state, tokens(1), T0 + 2) == pytest.approx(4.0 + S6)
    assert reserve(state, tokens(2000), T0 + 6 + S6) == 0.0  # whole again


@pytest.mark.parametrize(("sent_at", "remaining", "wait"), [
    (T0 + 2, 9000, pytest.approx(3.0 + S6)),  # a later send's figure: the earlier one still leaves the least
    (T0 + 2, 500, pytest.approx(3.0 + S6)),  # a later send's figure leaving less than the earlier one
    (T0 - 1, 0, pytest.approx(3.0 + S6)),  # an earlier send's figure, arrived late: it leaves the least
    (T0 + 0.5, 4000, pytest.approx(3.0 + S6)),  # a figure that missed a send made before it (it arrived later)
])
def test_the_least_room_the_latest_figures_leave_is_taken(sent_at, remaining, wait):
    """3,000 left at T0, then 2,000 sent at T0 + 1: 1,000 left, whatever a reordered figure says."""
    state = figured(3000)
    reserve(state, tokens(2000), T0 + 1)
    learn(state, sent_at, {"tokens": Window(10_000, remaining, 3.0)}, T0 + 3)  # the same window: whole at T0 + 6
    assert reserve(state, tokens(2000), T0 + 3) == wait
    assert reserve(state, tokens(500), T0 + 3) == (0.0 if remaining >= 500 else pytest.approx(3.0 + S6))


def test_a_figure_past_its_reset_is_whole_again_each_window():
    figure = Figure(0, T0, 10_000, T0 + 6)
    assert rolled(figure, 6.0, T0 + 5) is figure
    assert rolled(figure, 6.0, T0 + 6) == Figure(10_000, T0 + 6, 10_000, T0 + 12)
    assert rolled(figure, 6.0, T0 + 20) == Figure(10_000, T0 + 18, 10_000, T0 + 24)
    assert rolled(Figure(0, T0, None, T0 + 6), 6.0, T0 + 20).remaining == 0  # no size stated: nothing to fill
    assert rolled(Figure(0, T0, 10_000, None), 6.0, T0 + 7) == Figure(10_000, T0 + 6, 10_000, T0 + 12)


def test_a_send_larger_than_a_whole_window_goes_when_it_is_whole():
    state = figured(10_000, reset_in=6.0)
    assert reserve(state, tokens(12_000), T0 + 0.5) == 0.0
    assert reserve(state, tokens(12_000), T0 + 1) == pytest.approx(5.0 + S6)
    assert reserve(state, tokens(12_000), T0 + 6 + S6) == 0.0


def test_a_throttle_pauses_every_job():
    state = figured(10_000)
    throttled(state, T0, 2.0, 0.0, T0 + 1)
    assert reserve(state, tokens(1), T0 + 1) == pytest.approx(2.0)
    assert reserve(state, tokens(1), T0 + 3) == 0.0
    assert state.held == {}  # a window's length unknown: nothing learned of what it holds


def test_a_reset_is_taken_a_little_after_it_is_stated():
    """A reset stated to the millisecond may come a little later at the provider: the sends
    waiting for it go a sixty-fourth of a window after it, not at it."""
    state = figured(0, reset_in=60.0)
    assert reserve(state, tokens(1), T0 + 1) == pytest.approx(59.0 + 60 * SETTLE)
    assert reserve(state, tokens(1), T0 + 60) > 0.0
    assert reserve(state, tokens(1), T0 + 60 + 60 * SETTLE) == 0.0


def test_without_headers_what_a_window_holds_is_learned_from_every_jobs_sends():
    """Two jobs sent 4 requests of 1,000 tokens in the 2 s before a refused one: a window of 2 s
    holds 3,600 tokens (a tenth below), counted over every job's sends, and grows with each send."""
    state = State()
    for t in (T0 - 3, T0 - 1.5, T0 - 1.0, T0 - 0.5, T0 - 0.2):  # the first is older than the window
        state.sends.append([t, 1000, 1, 1000, 0])
    throttled(state, T0, 0.5, 2.0, T0 + 0.1)
    assert state.held == {"input-tokens": pytest.approx(3600), "requests": pytest.approx(3.6)}
    assert state.held_s == 2.0
    assert reserve(state, tokens(1000), T0 + 0.6) == pytest.approx(0.4)  # 3 in the window: until T0 - 1.0 leaves it
    assert reserve(state, tokens(1000), T0 + 1.5) == 0.0  # one left in the window
    assert state.held["input-tokens"] == pytest.approx(3600 + 20)
    assert decode(encode(state)) == state


def test_what_a_window_holds_grows_by_a_share_of_itself_until_a_throttle_follows_its_learning():
    """A job's first success after the first throttle, 2 s after the first send: every job's 4
    sends not refused are what a window of 2 s holds (a tenth below), and each send grows it by a
    tenth of itself (the search may have made the window look twice as long) until a throttle
    measures it again; from then on by a fiftieth of each send."""
    state = State()
    for t in (T0, T0 + 0.5, T0 + 1.0, T0 + 1.5):
        state.sends.append([t, 1000, 1, 1000, 0])
    windowed(state, T0 + 2.0, 2.0, T0 + 2.0)
    assert (state.held["input-tokens"], state.held_s, state.ramping) == (pytest.approx(3600), 2.0, True)
    assert reserve(state, tokens(1000), T0 + 4.0) == 0.0
    assert state.held["input-tokens"] == pytest.approx(3960)
    throttled(state, T0 + 4.5, 0.5, 2.0, T0 + 4.5)  # one send in the 2 s before: 900
    assert reserve(state, tokens(1000), T0 + 7.0) == 0.0
    assert (state.held["input-tokens"], state.ramping) == (pytest.approx(900 + 20), False)
    assert decode(encode(state)) == state


def test_windows_without_a_figure_do_not_hold_a_send_and_each_window_counts_its_units():
    state = State()
    assert reserve(state, tokens(5000), T0) == 0.0
    learn(state, T0, {"requests": Window(2, 1, 6.0)}, T0 + 0.5)  # the send at T0 was the first of 2 requests
    assert reserve(state, tokens(5000), T0 + 1) == 0.0  # the second
    assert reserve(state, tokens(1), T0 + 2) == pytest.approx(4.5 + S6)  # none left until T0 + 0.5 + 6


def test_pruned_sends_are_those_every_figure_counts():
    state = figured(3000)
    for t in (T0 - 2, T0 + 1, T0 + 2):
        state.sends.append([t, 1, 1, 1, 0])
    prune(state, T0 + 3)
    assert [s[0] for s in state.sends] == [T0 + 1, T0 + 2]
    prune(state, T0 + 7)  # rolled: the window whole again at T0 + 6 counts both
    assert state.sends == [] and state.figures["tokens"][0].sent_at == pytest.approx(T0 + 6 + S6)


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '{"v": 99}', '{"v": 1, "figures": {"tokens": [1]}}',
                                  '{"v": 1, "figures": {}, "window_s": {}, "paused_until": "x", "sends": []}'])
def test_a_state_file_that_cannot_be_read_is_a_fresh_state(text):
    assert decode(text) == State()


def test_a_state_file_reads_back_as_written():
    state = figured(3000)
    state.paused_until = T0 + 1
    reserve(state, tokens(2000), T0 + 0.5)
    assert decode(encode(state)) == state


def test_the_state_file_is_named_by_the_key_variables_name_never_the_key():
    one = endpoint_id("https://api.openai.com/v1", "gpt-5", "OPENAI_API_KEY")
    assert one == endpoint_id("https://api.openai.com/v1/", "gpt-5", "OPENAI_API_KEY")
    assert one != endpoint_id("https://api.openai.com/v1", "gpt-5", "OPENAI_API_KEY_2")
    assert one != endpoint_id("https://api.openai.com/v1", "gpt-5-mini", "OPENAI_API_KEY")
    assert len(one) == 32 and "sk-" not in one


# --------------------------------------------------------------------------------------
# The file, between holders
# --------------------------------------------------------------------------------------

class Wall:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def test_two_holders_of_one_folder_see_each_others_sends(tmp_path):
    wall = Wall()
    a, b = SharedBudget(tmp_path, "e", wall), SharedBudget(tmp_path, "e", wall)  # two descriptors: two locks
    assert a.reserve(Cost(2000).against) == (0.0, T0) and not a.path.exists()  # nothing said: nothing written
    a.learn(T0, {"tokens": Window(10_000, 3000, 6.0)})  # the figure for that send, said at once
    wall.t += 0.5
    assert a.reserve(Cost(2000).against) == (0.0, T0 + 0.5)
    wall.t += 0.5
    assert b.reserve(Cost(2000).against) == (pytest.approx(5.0 + S6), T0 + 1)
    b.throttled(T0 + 1, 10.0)
    assert a.reserve(Cost(1).against)[0] == pytest.approx(10.0)
    assert not list(tmp_path.glob(".tmp-*"))
    a.close(), b.close()


def test_once_a_throttle_was_met_every_send_is_written_down(tmp_path):
    """Without headers, the next throttle measures what a window holds from every job's sends: they
    are written down from the first throttle on, its pause over or not."""
    wall = Wall()
    shared = SharedBudget(tmp_path, "e", wall)
    shared.throttled(T0, 0.5)
    wall.t += 1  # the pause is over
    assert shared.reserve(Cost(1000).against) == (0.0, T0 + 1)
    assert [send[0] for send in shared.read().sends] == [T0 + 1]
    shared.close()


def test_a_folder_that_refuses_shares_nothing_and_says_so(tmp_path, caplog):
    (tmp_path / "file").write_text("")
    shared = SharedBudget(tmp_path / "file" / FOLDER, "e", Wall())
    assert shared.reserve(Cost(1).against) == (0.0, T0)  # nothing said yet: nothing written
    assert shared.refused is None
    shared.learn(T0, {"tokens": Window(10_000, 0, 6.0)})
    assert shared.reserve(Cost(1).against) == (0.0, T0)
    assert shared.refused is not None and "paces alone" in caplog.text


class Clock:
    """A monotonic clock and a wall clock in step, moving only when told (two jobs on one machine)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> float:
        return T0 + self.t


def sharing(clock: Clock, folder: Path) -> AdaptiveLimit:
    """A job's limit of 8 slots on the fake clock, sharing the key's budget in ``folder``."""
    limit = AdaptiveLimit(8, clock=clock, wall=clock.wall, probe=False)
    limit.shared = SharedBudget(folder, "e", clock.wall)
    return limit


def send(limit: AdaptiveLimit, clock: Clock, status: int) -> None:
    """One attempt of 1,000 tokens let through now and answered ``status`` at once; 10 ms pass."""
    assert limit.delay_for(Cost(1000)) == 0.0
    limit.release(asyncio.run(limit.acquire(Cost(1000))), status, {})
    clock.t += 0.01


def test_without_headers_a_job_that_got_a_small_share_learns_the_endpoints_rate(tmp_path):
    """Two jobs, no rate headers: job A's nine sends and job B's one fill a window, B's second and
    A's tenth are refused. When B's search is admitted (4 s after A's first send), a window lasts
    from A's first send and holds what every job sent and was not refused (10,000 tokens, a tenth
    below), and B paces at that rate, the shared budget keeping the jobs under it together. It took
    its own share before (one send a window, 225 tokens a second), so with A done, B went on at a
    tenth of the limit: two jobs at 60 s windows did not finish in 13 minutes."""
    clock = Clock()
    a, b = sharing(clock, tmp_path), sharing(clock, tmp_path)
    for _ in range(9):
        send(a, clock, 200)
    tenth = asyncio.run(a.acquire(Cost(1000)))
    send(b, clock, 200)
    send(b, clock, 429)  # the first throttle: B searches
    a.release(tenth, 429, {})  # A's sends so far are written down with its first step on the file
    clock.t = 4.0
    send(b, clock, 200)  # B's search admitted
    window = 4.0
    assert a.shared is not None and a.shared.read().held["input-tokens"] == pytest.approx(9000)
    assert b.shared is not None and b.shared.read().held_s == pytest.approx(window)
    assert b.delay_for(Cost(1000)) == 0.0  # it was held until B's two sends left the window
    a.shared.close(), b.shared.close()
    b.shared = None  # B's own spacing alone (the file would hold it for the window A filled)
    asyncio.run(b.acquire(Cost(1000)))
    assert b.delay_for(Cost(1000)) == pytest.approx(1000 / (9000 / window))


KILLED = textwrap.dedent("""
    import sys
    from pathlib import Path
    from wildtrace.runtime.net.ratelimit import Cost, Window
    from wildtrace.runtime.store.shared_budget import SharedBudget
    shared = SharedBudget(Path(sys.argv[1]), "e")
    shared.learn(0.0, {"tokens": Window(10**12, 10**12, 3600.0)})
    print("ready", flush=True)
    while True:
        shared.reserve(Cost(1000).against)
""")


def test_a_job_killed_mid_window_leaves_the_file_usable(tmp_path):
    """A job SIGKILLed while it writes the state over and over: the file is the last whole state,
    its lock is free, and the next job goes on from it."""
    job = subprocess.Popen([sys.executable, "-c", KILLED, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline() == "ready\n"
        while len(SharedBudget(tmp_path, "e").read().sends) < 50:
            time.sleep(0.01)
    finally:
        os.kill(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
    fd = os.open(tmp_path / "e.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released by the kill
    os.close(fd)
    after = SharedBudget(tmp_path, "e")
    kept = len(after.read().sends)
    assert kept >= 50 and "tokens" in after.read().figures
    assert after.reserve(Cost(1000).against)[0] == 0.0
    assert len(after.read().sends) == kept + 1
    after.close()


# --------------------------------------------------------------------------------------
# Two jobs, one key, one cache folder, a real rate-limited endpoint
# --------------------------------------------------------------------------------------

PROMPT_CHARS = 3300  # ~1,000 tokens


async def one_job(url: str, job: int, prompts: int, cache_dir: Path) -> int:
    """A job's own endpoint (its own event loop) sending its prompts; how many calls failed."""
    spec = EndpointSpec(label="model", name="m", provider="openai", route="m", base_url=f"{url}/v1",
                        api_key_env="WILDTRACE_TEST_KEY", max_concurrency=8, timeout_s=60.0, stream=True)
    provider = make_provider(spec)
    endpoint = Endpoint(provider, "sk-test", RetryPolicy(), cache=Cache(cache_dir))
    texts = [f"{job}.{i:02d} " + "w" * PROMPT_CHARS for i in range(prompts)]
    try:
        results = await asyncio.gather(*(
            endpoint.call(provider.build_request(text, Sampling(0.0, 10)), 0,
                          Cost(estimate_tokens(len(text), False), 10)) for text in texts))
    finally:
        await endpoint.aclose()
    return sum(not r.ok for r in results)


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_two_jobs_on_one_key_stay_under_its_limit(tmp_path, dialect):
    """Two jobs, 12 prompts each, a limit of 4 prompts a 1 s window, sharing a cache folder: every
    call answered, at most 5 % of the requests refused (one in 24), and the limit never passed."""
    per_prompt = estimate_tokens(PROMPT_CHARS + 5, False) + (10 if dialect == "openai" else 0)
    limit = Limit(4 * per_prompt, 1.0, False, dialect, 0.05)
    failed: list[int] = []
    with LoopbackServer(limit) as server:
        jobs = [threading.Thread(target=lambda j=j: failed.append(asyncio.run(one_job(server.url, j, 12, tmp_path))))
                for j in range(2)]
        for job in jobs:
            job.start()
        for job in jobs:
            job.join(timeout=120)
    assert failed == [0, 0]
    assert limit.admitted == 24
    assert limit.rejected <= 0.05 * (limit.admitted + limit.rejected)
    assert (tmp_path / FOLDER).is_dir()
