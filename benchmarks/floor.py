"""How close any client gets to the ideal here, beside how close wildtrace gets: the floor of the day.

throughput.py's ratio (wall over ceil(N/C)·L) moves by a fifth within a morning on this
machine, and part of what is over the ideal belongs to no harness: the loopback endpoint's
own threads, the loop's wake-ups, the connections' first round trips. This benchmark puts
three clients in turn against the same kind of endpoint (its own process, the same latency),
with the same N requests of the same body at the same bound C, each opening fresh
connections as a run does:

- ``raw``: asyncio's own streams and a few lines of HTTP/1.1 — what this machine allows;
- ``httpx``: one httpx client with its own pool of C connections, made as wildtrace's endpoints
  make theirs (runtime/net/client.py), C workers sending through it — the floor of the HTTP stack
  wildtrace is built on;
- ``wildtrace``: the whole ``run()`` of throughput.py, answers only.

Rounds run the three in turn so that the machine's drift falls on all of them alike.

    python benchmarks/floor.py                          # 64 tasks, 0.25 s, concurrency 16, 3 rounds
    python benchmarks/floor.py --rounds 5 --json floor.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import DOCUMENT, endpoint, measure
from wildtrace.core.prompts import answer_prompt
from wildtrace.runtime.net.client import make_client


def body(i: int) -> bytes:
    """An answer request as throughput.py's run sends it, near enough: its route, prompt and size."""
    return json.dumps({"model": "bench-model", "max_tokens": 8192, "temperature": 0.0,
                       "messages": [{"role": "user", "content": answer_prompt(f"What failed? #{i}", DOCUMENT)}]},
                      ensure_ascii=False).encode()


async def _raw_worker(host: str, port: int, work: asyncio.Queue[bytes], target: str) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while not work.empty():
            content = work.get_nowait()
            writer.write(b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                         b"Authorization: Bearer sk-bench\r\nContent-Length: %d\r\n\r\n"
                         % (target.encode(), host.encode(), port, len(content)) + content)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")]
            if not head.startswith(b"HTTP/1.1 200") or len(lengths) != 1:
                raise RuntimeError(f"the raw client reads only 200s with a Content-Length: {head[:200]!r}")
            json.loads(await reader.readexactly(int(lengths[0])))
    finally:
        writer.close()


async def _httpx_worker(client: httpx.AsyncClient, url: str, work: asyncio.Queue[bytes]) -> None:
    while not work.empty():
        content = work.get_nowait()
        async with client.stream("POST", url, content=content,
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
                                 ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"httpx client: status {response.status_code}")
            json.loads(await response.aread())


async def _clients(kind: str, url: str, tasks: int, concurrency: int) -> None:
    work: asyncio.Queue[bytes] = asyncio.Queue()
    for i in range(tasks):
        work.put_nowait(body(i))
    target = url + "/v1/chat/completions"
    if kind == "raw":
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        await asyncio.gather(*(_raw_worker(parts.hostname, parts.port, work, "/v1/chat/completions")
                               for _ in range(concurrency)))
    else:
        async with make_client(60.0, concurrency) as shared:
            await asyncio.gather(*(_httpx_worker(shared, target, work) for _ in range(concurrency)))


def client(kind: str, tasks: int, latency: float, concurrency: int) -> dict:
    """One bare client's run: wall time from the first request's making to the last body's decoding."""
    with endpoint(latency) as (url, server):
        started = time.perf_counter()
        asyncio.run(_clients(kind, url, tasks, concurrency))
        wall = time.perf_counter() - started
    ideal = math.ceil(tasks / concurrency) * latency
    return {"client": kind, "calls": server["calls"], "peak_in_flight": server["peak_in_flight"],
            "wall_s": round(wall, 4), "ideal_s": ideal, "ratio": round(wall / ideal, 4)}


def harness(tasks: int, latency: float, concurrency: int) -> dict:
    """throughput.py's answers-only run, in the same shape."""
    row = measure(tasks, latency, concurrency, 0)
    return {"client": "wildtrace", "calls": row["calls"], "peak_in_flight": row["peak_in_flight"],
            "wall_s": row["wall_s"], "ideal_s": row["ideal_s"], "ratio": row["ratio"]}


RUNNERS: dict[str, Callable[[int, float, int], dict]] = {
    "raw": lambda n, lat, c: client("raw", n, lat, c),
    "httpx": lambda n, lat, c: client("httpx", n, lat, c),
    "wildtrace": harness,
}


def rounds(tasks: int, latency: float, concurrency: int, count: int) -> dict:
    """A warm-up of each client, then ``count`` rounds of the three in turn; every run, and each client's median."""
    for run_one in RUNNERS.values():
        run_one(concurrency, 0.01, concurrency)
    runs = [RUNNERS[kind](tasks, latency, concurrency) for _ in range(count) for kind in RUNNERS]
    medians = {kind: statistics.median(r["ratio"] for r in runs if r["client"] == kind) for kind in RUNNERS}
    return {"tasks": tasks, "latency_s": latency, "concurrency": concurrency, "runs": runs,
            "median_ratio": {kind: round(value, 4) for kind, value in medians.items()},
            "over_httpx": round(medians["wildtrace"] - medians["httpx"], 4),
            "over_raw": round(medians["wildtrace"] - medians["raw"], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the whole result here too")
    args = parser.parse_args()
    result = rounds(args.tasks, args.latency, args.concurrency, args.rounds)
    for row in result["runs"]:
        print(json.dumps(row))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
