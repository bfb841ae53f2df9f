"""The answer phase as a user runs it: ``python -m wildtrace``, MLflow and the cache on, streamed.

``benchmarks/throughput.py`` measures ``run()`` in-process with MLflow and the cache off; this
measures the path a user takes: a fresh ``python -m wildtrace`` process (Hydra, the logging
process, the cache, streaming) against a keep-alive loopback server in its own process. The
figure is ``run_stats.json``'s ``wall_s`` (the pipeline) over the ideal ``ceil(N / C) · L``,
with the CLI's CPU time (its logging process's included) beside it.

    python benchmarks/cli.py                    # 64 tasks, 0.25 s, concurrency 16, three runs
    python benchmarks/cli.py --runs 5 --override mlflow.enabled=false
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_task, write_release  # noqa: E402
from servers.loopback import Call, LoopbackServer, Reply, chat_stream  # noqa: E402

KEY_ENV = "WILDTRACE_BENCH_KEY"
ANSWER = "The seal was worn and the pump failed at 03:14."


def responder(call: Call) -> Reply:
    """Every answer streamed, as the model's endpoint streams it."""
    return chat_stream(ANSWER)


def serve(pipe: Connection, latency_s: float) -> None:
    """The loopback endpoint in its own process (its CPU is not the harness's); reports its call count."""
    with LoopbackServer(responder, latency_s=latency_s) as server:
        pipe.send(server.url)
        pipe.recv()
        pipe.send(len(server.calls))


def one_run(url: str, tasks: int, concurrency: int, extra: list[str]) -> dict:
    """One ``python -m wildtrace`` process over a fresh release, root and cache: its figures."""
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        release = [make_task(f"b{i}", f"What failed? #{i}", "doc.txt") for i in range(tasks)]
        document = "The seal was worn. The pump failed at 03:14. " * 200
        tasks_file, corpus = write_release(tmp, release, {"doc.txt": document})
        overrides = ["model=custom", "model.route=bench-model", f"model.base_url={url}/v1",
                     f"model.api_key_env={KEY_ENV}",
                     f"model.max_concurrency={concurrency}", "model.stream=true", f"dataset.tasks={tasks_file}",
                     f"dataset.corpus={corpus}", "stage=answer", f"root={tmp / 'outputs'}", "mlflow.enabled=true",
                     "cache.enabled=true", f"hydra.run.dir={tmp / 'run'}", *extra]
        env = {**os.environ, KEY_ENV: "sk-bench", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "wildtrace", *overrides], env=env, capture_output=True,
                              text=True, check=False)
        end_to_end = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"python -m wildtrace exited {done.returncode}:\n{done.stderr[-3000:]}")
        stats = json.loads(next((tmp / "run").rglob("run_stats.json")).read_text())
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"pipeline_s": round(stats["wall_s"], 3), "end_to_end_s": round(end_to_end, 2), "cpu_s": round(cpu, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--override", action="append", default=[], help="a Hydra override for every run")
    args = parser.parse_args(argv)
    ideal = math.ceil(args.tasks / args.concurrency) * args.latency
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(theirs, args.latency), daemon=True)
    server.start()
    url = ours.recv()
    runs = []
    for _ in range(args.runs):
        figures = one_run(url, args.tasks, args.concurrency, args.override)
        runs.append({**figures, "ratio": round(figures["pipeline_s"] / ideal, 3)})
    ours.send("stop")
    calls = ours.recv()
    server.join(timeout=10)
    print(json.dumps({"tasks": args.tasks, "latency_s": args.latency, "concurrency": args.concurrency,
                      "ideal_s": ideal, "requests": calls, "runs": runs, "load": round(os.getloadavg()[0], 2)},
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
