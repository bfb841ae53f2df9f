"""Pacing at a rate limit: how much of a tokens-per-window limit a run uses, and how many 429s it meets.

Each configuration starts a loopback endpoint on 127.0.0.1 that admits ``10`` prompts' tokens a
window — in fixed windows, or a bucket that refills continuously — and answers 429 past it,
with OpenAI's ``x-ratelimit-*`` headers, Anthropic's ``anthropic-ratelimit-*`` ones (RFC 3339
resets; input and output windows apart) or none at all. Answers stream: the status and headers
come at once, the body after the latency. Every prompt is about 1,000 tokens (OpenAI's window
also counts each request's ``max_tokens``, 100). wildtrace's own ``Endpoint`` sends them (the
default retry rule), one job or two jobs on one key (sharing a cache folder, unless ``--apart``).

``achieved/limit`` is the time a client that knew the limit exactly would take (each request sent
the moment the limit admits it, in order, one latency for the last answer) over the run's time,
from the endpoint's first request to the last answer: the share of the limit's rate the run used.

    python benchmarks/ratelimit.py                       # every configuration, all at once (~7 min)
    python benchmarks/ratelimit.py --windows 1 6         # some windows only
    python benchmarks/ratelimit.py --limits bucket --jobs 1   # some limits, one job only
    python benchmarks/ratelimit.py --headers none        # endpoints that send no rate headers only
    python benchmarks/ratelimit.py --jobs 2 --apart       # two jobs, each its own cache folder (nothing shared)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from servers.loopback import LoopbackServer  # noqa: E402
from servers.ratelimited import Limit  # noqa: E402

from wildtrace.providers.base import EndpointSpec, Sampling  # noqa: E402
from wildtrace.providers.registry import make_provider  # noqa: E402
from wildtrace.runtime.net.endpoint import Endpoint  # noqa: E402
from wildtrace.runtime.net.ratelimit import Cost, estimate_tokens  # noqa: E402
from wildtrace.runtime.net.retry import RetryPolicy  # noqa: E402
from wildtrace.runtime.store.cache import Cache  # noqa: E402

PROMPTS_A_WINDOW = 10
PROMPT_CHARS = 3300  # ~1,000 tokens by the spec's 3.3 characters a token
MAX_TOKENS = 100


@dataclass(frozen=True)
class Config:
    window_s: float
    latency: float  # × the window
    dialect: str
    bucket: bool
    tasks: int
    concurrency: int
    jobs: int = 1


async def job(url: str, prompts: list[str], concurrency: int, cache_dir: Path) -> int:
    """One job's endpoint sending every prompt; how many calls failed. Jobs with the same
    ``cache_dir`` share the key's budget there, as a sweep's jobs sharing a cache folder do."""
    spec = EndpointSpec(label="model", name="bench", provider="openai", route="bench", base_url=f"{url}/v1",
                        api_key_env="WILDTRACE_BENCH_KEY", max_concurrency=concurrency, timeout_s=600.0, stream=True)
    provider = make_provider(spec)
    endpoint = Endpoint(provider, "sk-bench", RetryPolicy(), cache=Cache(cache_dir))
    sampling = Sampling(temperature=0.0, max_tokens=MAX_TOKENS)
    try:
        results = await asyncio.gather(*(endpoint.call(provider.build_request(p, sampling), 0,
                                                       Cost(estimate_tokens(len(p), False), MAX_TOKENS))
                                         for p in prompts))
    finally:
        await endpoint.aclose()
    return sum(not r.ok for r in results)


def measure(config: Config, apart: bool = False) -> dict:
    """One configuration: its endpoint, its jobs (each its own thread and event loop, one cache folder
    unless ``apart``), its figures."""
    per_prompt = estimate_tokens(PROMPT_CHARS, False) + (MAX_TOKENS if config.dialect == "openai" else 0)
    limit = Limit(PROMPTS_A_WINDOW * per_prompt, config.window_s, config.bucket, config.dialect,
                  config.latency * config.window_s)
    failed: list[int] = []
    with LoopbackServer(limit) as server, tempfile.TemporaryDirectory(prefix="wt-ratelimit-") as folder:
        share = config.tasks // config.jobs
        runs = [threading.Thread(target=lambda j=j: failed.append(asyncio.run(job(
            server.url, [f"{j}.{i} " + "w" * PROMPT_CHARS for i in range(share)], config.concurrency,
            Path(folder) / (f"job{j}" if apart else "cache")))))
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


def configurations(windows: list[float], limits: list[str], jobs: list[int],
                   dialects: tuple[str, ...] = ("openai", "anthropic", "none")) -> list[Config]:
    found = []
    for window in windows:
        tasks = 40 if window >= 60 else 200
        for latency, concurrency in ((0.1, 8), (2.0, 24)):
            for dialect in dialects:
                for bucket in [b for b in (False, True) if ("bucket" if b else "fixed") in limits and 1 in jobs]:
                    found.append(Config(window, latency, dialect, bucket, tasks, concurrency))
        if 2 in jobs and "fixed" in limits:
            for dialect in dialects:
                found.append(Config(window, 0.1, dialect, False, tasks, 8, jobs=2))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=float, nargs="+", default=[1.0, 6.0, 60.0])
    parser.add_argument("--limits", nargs="+", choices=["fixed", "bucket"], default=["fixed", "bucket"])
    parser.add_argument("--jobs", type=int, nargs="+", choices=[1, 2], default=[1, 2])
    parser.add_argument("--headers", nargs="+", choices=["openai", "anthropic", "none"],
                        default=["openai", "anthropic", "none"])
    parser.add_argument("--apart", action="store_true", help="each job its own cache folder: nothing shared")
    parser.add_argument("--deadline", type=float, default=1800.0,
                        help="seconds to wait for every configuration; those not done by then print as such")
    args = parser.parse_args()
    configs = configurations(args.windows, args.limits, args.jobs, tuple(args.headers))
    figures: dict[Config, dict] = {}
    threads = [threading.Thread(target=lambda c=c: figures.__setitem__(c, measure(c, args.apart)), daemon=True)
               for c in configs]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + args.deadline
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
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
