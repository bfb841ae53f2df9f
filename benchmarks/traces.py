"""What MLflow's SQL store costs per trace, as wildtrace stores them: wall and CPU time per trace.

Builds ``--traces`` traces shaped like a judged task's (a root, the caps decision, the answer
and two judges' spans, two feedbacks) and stores them into a fresh SQLite store the way the
trace exporter does: each trace's info through MLflow's trace client, then a batch of 100
traces' spans in one ``log_spans``. Prints the wall and
CPU time per trace of each half. This is what a trace costs when it is stored (481 of them at
full size on a first run). Then what a cached rerun pays instead for the same tasks, whose
traces are stored already: one search of the experiment's stored traces (``stored_contents``)
and ``link_traces_to_run`` in batches of 100.

    python benchmarks/traces.py                  # 300 traces, twice
    python benchmarks/traces.py --traces 481 --repeat 3
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "tracking")]

from test_tracking_traces import fresh_store, tasks  # noqa: E402
from wildtrace.tracking.store import client_for  # noqa: E402
from wildtrace.tracking.traces import (BATCH, CONTENT, LINK_BATCH, TraceTarget, build_trace,  # noqa: E402
                                      start_traces, stored_contents, tracing_client)


def measure(n: int) -> dict[str, float]:
    """Store n traces into a fresh store; seconds of wall and CPU for the infos and for the spans."""
    with tempfile.TemporaryDirectory() as tmp:
        uri, target = fresh_store(Path(tmp))
        client = tracing_client(uri)
        traces = [build_trace(d, target) for d in tasks(n)]
        took = {"infos_wall": 0.0, "infos_cpu": 0.0, "spans_wall": 0.0, "spans_cpu": 0.0}
        for i in range(0, n, BATCH):
            chunk = traces[i:i + BATCH]
            wall, cpu = time.perf_counter(), time.process_time()
            failed = start_traces(client, [t.info for t in chunk])
            if failed:
                raise SystemExit(f"{len(failed)} trace infos not stored: {failed[0][1]}")
            took["infos_wall"] += time.perf_counter() - wall
            took["infos_cpu"] += time.process_time() - cpu
            wall, cpu = time.perf_counter(), time.process_time()
            client.log_spans(target.experiment_id, [s for t in chunk for s in t.data.spans])
            took["spans_wall"] += time.perf_counter() - wall
            took["spans_cpu"] += time.process_time() - cpu
        took.update(link(uri, target, traces))
        return took


def link(uri: str, target: TraceTarget, traces: list) -> dict[str, float]:
    """A rerun's tasks linked to the stored traces: seconds of wall for the search and for the links."""
    runs = client_for(uri)
    rerun = dataclasses.replace(target, run_id=runs.create_run(target.experiment_id).info.run_id)
    wall = time.perf_counter()
    stored = stored_contents(tracing_client(uri), rerun)
    ids = [stored[t.info.tags[CONTENT]].trace_id for t in traces]
    searched = time.perf_counter()
    for i in range(0, len(ids), LINK_BATCH):
        runs.link_traces_to_run(ids[i:i + LINK_BATCH], rerun.run_id)
    return {"search_wall": searched - wall, "link_wall": time.perf_counter() - searched}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=int, default=300)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    for _ in range(args.repeat):
        t = measure(args.traces)
        per = {k: 1000 * v / args.traces for k, v in t.items()}
        print(f"{args.traces} traces: infos {t['infos_wall']:.2f} s ({per['infos_cpu']:.2f} ms CPU a trace), "
              f"spans {t['spans_wall']:.2f} s ({per['spans_cpu']:.2f} ms CPU a trace), "
              f"together {per['infos_cpu'] + per['spans_cpu']:.2f} ms CPU a trace; "
              f"linked instead: search {t['search_wall']:.2f} s, links {t['link_wall']:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
