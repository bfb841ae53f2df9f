"""Pacing at a rate limit: how much of a tokens-per-window limit a run uses, and how many 429s it meets.

Each configuration starts a loopback endpoint on 127.0.0.1 that admits ``10`` prompts' tokens a
window — in fixed windows, or a bucket that refills continuously — and answers 429 past it,
with OpenAI's ``x-ratelimit-*`` headers, Anthropic's ``anthropic-ratelimit-*`` ones (RFC 3339
resets; input and output windows apart) or none at all. Answers stream: the status and headers
come at once, the body after the latency. Every prompt is about 1,000 tokens (OpenAI's window
also counts each request's ``max_tokens``, 100). wildtrace's own ``Endpoint`` sends them (the
default retry rule), one job or two jobs on one key.

``achieved/limit`` is the time a client that knew the limit exactly would take (each request sent
the moment the limit admits it, in order, one latency for the last answer) over the run's time,
from the endpoint's first request to the last answer: the share of the limit's rate the run used.

    python benchmarks/ratelimit.py                       # every configuration, all at once (~7 min)
    python benchmarks/ratelimit.py --windows 1 6         # some windows only
    python benchmarks/ratelimit.py --limits bucket --jobs 1   # some limits, one job only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from servers.loopback import Call, LoopbackServer, Reply  # noqa: E402

from wildtrace.providers.base import EndpointSpec, Sampling  # noqa: E402
from wildtrace.providers.registry import make_provider  # noqa: E402
from wildtrace.runtime.net.endpoint import Endpoint  # noqa: E402
from wildtrace.runtime.net.ratelimit import Cost, estimate_tokens  # noqa: E402
from wildtrace.runtime.net.retry import RetryPolicy  # noqa: E402

PROMPTS_A_WINDOW = 10
PROMPT_CHARS = 3300  # ~1,000 tokens by the spec's 3.3 characters a token
MAX_TOKENS = 100
#: The output window Anthropic reports beside the input one: wide enough never to bind here.
OUTPUT_LIMIT = 10**7


def _sse(data: dict | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def streamed_answer(latency_s: float) -> Reply:
    """Status and headers at once, the first event with them, the rest after the latency."""
    first = _sse({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}]})
    rest = (_sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            + _sse({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 1}}) + _sse("[DONE]"))
    return Reply(200, chunks=[first, rest], chunk_delay_s=latency_s, content_type="text/event-stream")


@dataclass
class Limit:
    """The endpoint's rule: ``capacity`` tokens a ``window_s`` window, fixed or refilling continuously."""

    capacity: float
    window_s: float
    bucket: bool
    dialect: str  # openai, anthropic, none
    latency_s: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: float | None = None
    level: float = 0.0  # a bucket's tokens, or a fixed window's used tokens
    at: float = 0.0  # when ``level`` was last brought up to date
    admitted: int = 0
    rejected: int = 0
    costs: list[int] = field(default_factory=list)

    def cost(self, call: Call) -> int:
        """What a request takes: its prompt's tokens (and, at OpenAI, its max_tokens)."""
        tokens = estimate_tokens(len(call.prompt), False)
        return tokens + int(call.body.get("max_tokens") or 0) if self.dialect == "openai" else tokens

    def _left(self, now: float) -> tuple[float, float]:
        """Tokens left now and seconds until the limit is whole again."""
        assert self.started is not None
        if self.bucket:
            rate = self.capacity / self.window_s
            self.level = min(self.capacity, self.level + (now - self.at) * rate)
            self.at = now
            return self.level, (self.capacity - self.level) / rate
        window = math.floor((now - self.started) / self.window_s)
        if window != self.at or self.at == self.started:
            self.at, self.level = window, 0.0
        return self.capacity - self.level, (window + 1) * self.window_s - (now - self.started)

    def headers(self, left: float, reset_s: float) -> dict[str, str]:
        if self.dialect == "openai":
            return {"x-ratelimit-limit-tokens": str(int(self.capacity)), "x-ratelimit-remaining-tokens": str(int(left)),
                    "x-ratelimit-reset-tokens": f"{max(1, math.ceil(reset_s * 1000))}ms"}
        if self.dialect == "anthropic":
            reset = (datetime.now(UTC) + timedelta(seconds=reset_s)).isoformat(timespec="milliseconds")
            return {"anthropic-ratelimit-input-tokens-limit": str(int(self.capacity)),
                    "anthropic-ratelimit-input-tokens-remaining": str(int(left)),
                    "anthropic-ratelimit-input-tokens-reset": reset.replace("+00:00", "Z"),
                    "anthropic-ratelimit-output-tokens-limit": str(OUTPUT_LIMIT),
                    "anthropic-ratelimit-output-tokens-remaining": str(OUTPUT_LIMIT),
                    "anthropic-ratelimit-output-tokens-reset": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
        return {}

    def __call__(self, call: Call) -> Reply:
        cost = self.cost(call)
        with self.lock:
            now = time.monotonic()
            if self.started is None:
                self.started = self.at = now
                self.level = self.capacity if self.bucket else 0.0
            left, reset_s = self._left(now)
            if cost > left:
                self.rejected += 1
                headers = self.headers(left, reset_s)
                if self.dialect == "openai":
                    headers["retry-after-ms"] = str(max(1, math.ceil(reset_s * 1000)))
                elif self.dialect == "anthropic":
                    headers["retry-after"] = str(max(1, math.ceil(reset_s)))
                return Reply(429, {"error": {"message": "Rate limit reached for tokens per min (TPM)",
                                             "type": "tokens", "code": "rate_limit_exceeded"}}, headers)
            self.level += -cost if self.bucket else cost
            self.admitted += 1
            self.costs.append(cost)
            headers = self.headers(left - cost, reset_s if not self.bucket else (self.capacity - self.level)
                                   / (self.capacity / self.window_s))
        reply = streamed_answer(self.latency_s)
        reply.headers.update(headers)
        return reply

    def ideal_s(self) -> float:
        """A client that knew the limit: every request the moment it is admitted, in order, then one latency."""
        if not self.bucket:
            window, used = 0, 0.0
            for cost in self.costs:
                if used + cost > self.capacity:
                    window, used = window + 1, 0.0
                used += cost
            return window * self.window_s + self.latency_s
        rate, level, t = self.capacity / self.window_s, self.capacity, 0.0
        for cost in self.costs:
            if level < cost:
                t += (cost - level) / rate
                level = cost
            level -= cost
        return t + self.latency_s


@dataclass(frozen=True)
class Config:
    window_s: float
    latency: float  # × the window
    dialect: str
    bucket: bool
    tasks: int
    concurrency: int
    jobs: int = 1


async def job(url: str, prompts: list[str], concurrency: int) -> int:
    """One job's endpoint sending every prompt; how many calls failed."""
    spec = EndpointSpec(label="model", name="bench", provider="openai", route="bench", base_url=f"{url}/v1",
                        api_key_env="WILDTRACE_BENCH_KEY", max_concurrency=concurrency, timeout_s=600.0, stream=True)
    provider = make_provider(spec)
    endpoint = Endpoint(provider, "sk-bench", RetryPolicy())
    sampling = Sampling(temperature=0.0, max_tokens=MAX_TOKENS)
    try:
        results = await asyncio.gather(*(endpoint.call(provider.build_request(p, sampling), 0,
                                                       Cost(estimate_tokens(len(p), False), MAX_TOKENS))
                                         for p in prompts))
    finally:
        await endpoint.aclose()
    return sum(not r.ok for r in results)


def measure(config: Config) -> dict:
    """One configuration: its endpoint, its jobs (each its own thread and event loop), its figures."""
    per_prompt = estimate_tokens(PROMPT_CHARS, False) + (MAX_TOKENS if config.dialect == "openai" else 0)
    limit = Limit(PROMPTS_A_WINDOW * per_prompt, config.window_s, config.bucket, config.dialect,
                  config.latency * config.window_s)
    failed: list[int] = []
    with LoopbackServer(limit) as server:
        share = config.tasks // config.jobs
        runs = [threading.Thread(target=lambda j=j: failed.append(asyncio.run(job(
            server.url, [f"{j}.{i} " + "w" * PROMPT_CHARS for i in range(share)], config.concurrency))))
            for j in range(config.jobs)]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        ended = time.monotonic()
    elapsed = ended - (limit.started or ended)
    return {"achieved": limit.ideal_s() / elapsed if elapsed else 0.0,
            "share_429": limit.rejected / max(1, limit.admitted + limit.rejected), "rejected": limit.rejected,
            "admitted": limit.admitted, "failed": sum(failed), "elapsed_s": elapsed}


def configurations(windows: list[float], limits: list[str], jobs: list[int]) -> list[Config]:
    found = []
    for window in windows:
        tasks = 40 if window >= 60 else 200
        for latency, concurrency in ((0.1, 8), (2.0, 24)):
            for dialect in ("openai", "anthropic", "none"):
                for bucket in [b for b in (False, True) if ("bucket" if b else "fixed") in limits and 1 in jobs]:
                    found.append(Config(window, latency, dialect, bucket, tasks, concurrency))
        if window < 60 and 2 in jobs and "fixed" in limits:
            for dialect in ("openai", "anthropic", "none"):
                found.append(Config(window, 0.1, dialect, False, 200, 8, jobs=2))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=float, nargs="+", default=[1.0, 6.0, 60.0])
    parser.add_argument("--limits", nargs="+", choices=["fixed", "bucket"], default=["fixed", "bucket"])
    parser.add_argument("--jobs", type=int, nargs="+", choices=[1, 2], default=[1, 2])
    args = parser.parse_args()
    configs = configurations(args.windows, args.limits, args.jobs)
    figures: dict[Config, dict] = {}
    threads = [threading.Thread(target=lambda c=c: figures.__setitem__(c, measure(c))) for c in configs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=1800)
    print("| window | latency | headers | limit | jobs | tasks | concurrency | achieved/limit | 429 share | failed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in configs:
        f = figures.get(c)
        if f is None:
            print(f"| {c.window_s:g} s | {c.latency:g}× | {c.dialect} | {'bucket' if c.bucket else 'fixed'} | "
                  f"{c.jobs} | {c.tasks} | {c.concurrency} | did not finish | | |")
            continue
        print(f"| {c.window_s:g} s | {c.latency:g}× | {c.dialect} | {'bucket' if c.bucket else 'fixed'} | {c.jobs} | "
              f"{c.tasks} | {c.concurrency} | {f['achieved']:.2f} | {f['share_429']:.1%} ({f['rejected']}) | "
              f"{f['failed']} |")


if __name__ == "__main__":
    main()
