"""Throughput against the ideal for a given latency and concurrency.

A loopback endpoint answers every request after a fixed latency. With N calls, bound C
and latency L, no client can beat ceil(N / C) * L for the answers; with judges pipelined
(each judge endpoint has its own bound C), the ideal adds one more latency for the last
wave's judges. The ratio wall / ideal is what we report (1.00 is perfect).

    python benchmarks/throughput.py                 # 64 tasks, 0.25 s, concurrency 16
    python benchmarks/throughput.py --tasks 128 --latency 0.1 --concurrency 32
    python benchmarks/throughput.py --cache --fsync-delay 0.05   # the cache on, a disk whose fsync takes 50 ms

``--fsync-delay S`` stands in for a slow disk (a network filesystem under a team's shared
cache): every ``os.fsync`` of this process sleeps S seconds first.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_task, openai_judge, settings, write_release  # noqa: E402
from servers.loopback import Call, LoopbackServer, Reply, chat  # noqa: E402
from wildtrace.runtime.run.execute import run  # noqa: E402

KEY_ENV = "WILDTRACE_TEST_KEY"
#: Every task's document (floor.py's bare clients send the same prompt).
DOCUMENT = "The seal was worn. The pump failed at 03:14. " * 200


def responder(call: Call) -> Reply:
    """Answers for the model, a fixed grade for judges."""
    if call.route == "bench-model":
        return chat("The seal was worn and the pump failed at 03:14.")
    return chat('{"points_awarded":[50],"total":50}')


def _serve(latency: float, pipe) -> None:
    """The endpoint's own process: a remote API does not share the client's interpreter (or GIL)."""
    with LoopbackServer(responder, latency_s=latency) as server:
        pipe.send(server.url)
        pipe.recv()  # until told to stop
        pipe.send({"calls": len(server.calls), "peak_in_flight": server.max_in_flight})


@contextmanager
def endpoint(latency: float):
    """Start the loopback endpoint in a child process; yields (url, stats dict filled on exit)."""
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.Process(target=_serve, args=(latency, child), daemon=True)
    process.start()
    stats: dict = {}
    try:
        yield parent.recv(), stats
    finally:
        parent.send("stop")
        stats.update(parent.recv())
        process.join(timeout=10)


def measure(tasks: int, latency: float, concurrency: int, judges: int, cache: bool = False) -> dict:
    """One run, the cache off unless ``cache`` (a fresh one); returns wall time, ideal and ratio."""
    os.environ.setdefault(KEY_ENV, "sk-bench")
    with tempfile.TemporaryDirectory() as tmp_name, endpoint(latency) as (url, server):
        tmp = Path(tmp_name)
        tasks_path, corpus = write_release(
            tmp, [make_task(f"b{i}", f"What failed? #{i}", "doc.txt") for i in range(tasks)],
            {"doc.txt": DOCUMENT})
        panel = {f"j{k}": {**openai_judge(url, f"bench-judge-{k}"), "max_concurrency": concurrency}
                 for k in range(judges)}
        overrides = ["model=custom", "model.route=bench-model", f"model.base_url={url}/v1",
                     f"model.api_key_env={KEY_ENV}", f"model.max_concurrency={concurrency}",
                     f"dataset.tasks={tasks_path}", f"dataset.corpus={corpus}",
                     f"cache.enabled={str(cache).lower()}", f"cache.dir={tmp / 'cache'}",
                     f"stage={'all' if judges else 'answer'}"]
        cfg = settings(tmp, overrides, judges=panel if judges else None)
        started = time.perf_counter()
        result = run(cfg)
        wall = time.perf_counter() - started
        stored = len(list((tmp / "cache").glob("??/*.json")))  # the outcomes the cache holds
    calls, peak = server["calls"], server["peak_in_flight"]
    ideal = math.ceil(tasks / concurrency) * latency + (latency if judges else 0.0)
    return {"tasks": tasks, "judges": judges, "cache": cache, "latency_s": latency, "concurrency": concurrency,
            "calls": calls, "stored": stored,
            "peak_in_flight": peak, "wall_s": round(wall, 3), "pipeline_s": round(result.outcome.wall_s, 3),
            "ideal_s": round(ideal, 3), "ratio": round(wall / ideal, 3)}


def main() -> None:
    """Answer-only and answer + three judges, as the peers were measured."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cache", action="store_true", help="the cache on (a fresh one each run)")
    parser.add_argument("--fsync-delay", type=float, default=0.0, metavar="S", help="every fsync sleeps S s first")
    args = parser.parse_args()
    if args.fsync_delay > 0:
        slow_fsync(args.fsync_delay)
    # Warm the process once (first-use imports inside httpx/anyio, thread pool start): the
    # ratio is about throughput, not interpreter start-up.
    measure(args.concurrency, 0.01, args.concurrency, 3, args.cache)
    for judges in (0, 3):
        print(json.dumps({**measure(args.tasks, args.latency, args.concurrency, judges, args.cache),
                          "fsync_delay_s": args.fsync_delay}))


def slow_fsync(delay_s: float) -> None:
    """A disk whose every fsync takes ``delay_s`` longer (the GIL released meanwhile, as a real fsync does)."""
    real = os.fsync

    def fsync(fd: int) -> None:
        time.sleep(delay_s)
        real(fd)

    os.fsync = fsync


if __name__ == "__main__":
    main()
