"""The whole harness at full scale: the first run's and a cached rerun's time end to end, peak RSS, store
growth and the rerun's requests, each against its target (``TARGETS``); wall over the ideal and MLflow's
share of it beside them.

Generates (once, cached by seed) a synthetic release shaped like strict481 — 481 tasks
over 214 documents, about 230 MB, English and Chinese, lengths spread like the release's
``doc_token_estimate`` (see synthetic.py) — then runs ``wildtrace.runtime.run.execute.run`` with
MLflow on (a SQLite store in a temporary root) and the cache on, against a loopback
OpenAI-compatible endpoint in its own process: the model (qwen3-max's caps, so some
tasks are out of context) and three judges on the same server by route. Then it runs the
finished run again. Each harness run is a fresh interpreter, so CPU and peak RSS are the
harness's own.

    python benchmarks/scale.py                           # full size: 2 s answers, 0.5 s judges, C=32 / 16
    python benchmarks/scale.py --tasks 60 --latency-answer 0.5 --latency-judge 0.1 --concurrency 8 --json out.json

What it prints, and how each figure is defined:

- wall / ideal. The ideal is what no client can beat: the answer waves
  ceil(N_in_scope / C) · L_answer, plus the last wave's judges ceil(last / C_judge) ·
  L_judge (or, when judging is the bottleneck, L_answer + ceil(N_in_scope / C_judge) ·
  L_judge, whichever is larger). Wall is the ``run()`` call, from dataset load to return
  (MLflow included). Pipeline / ideal is the same for the pipeline alone (the harness's
  own ``wall_s``).
- harness CPU per request: the worker process's CPU time (user + system, all threads)
  during ``run()`` plus all of its MLflow logging process's, over the requests the endpoint
  received; also up to the endpoint's last reply only (the worker process's own, without
  the logging process: the calls' cost).
- peak RSS: the worker process's ``ru_maxrss`` plus its MLflow logging process's (both
  peaks as if at once: an upper bound, and what the target reads); beside it, the largest
  sum of the two seen by sampling both every 50 ms.
- MLflow's share of the wall: a sampler looks at the main thread's stack every 5 ms, each
  sample standing for the time since the previous one; it counts when any frame is in
  ``mlflow``, ``opentelemetry`` or ``wildtrace/tracking``. Logging done off the main thread costs nothing here
  unless the run waits for it. "tail" is the time from the endpoint's last reply to run()'s return.
- store growth: the MLflow store (``mlflow.db*`` + ``mlartifacts/``) after each run. The
  target reads "two full runs grow the store by < 25 % of the corpus" as: the second full
  run (the rerun, on a store that already holds the first) adds less than a quarter of the
  corpus. Documents stored once per store (or not at all for the published release)
  pass; a copy per run fails. The first run's own growth is printed beside it.
- rerun: the finished run again, as a new process with the same config and cache; its
  end-to-end time (interpreter start to exit) and the requests the endpoint received.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The worktree's package first (an editable install elsewhere must not be what is measured).
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from servers.loopback import Call, LoopbackServer, Reply, chat  # noqa: E402
from synthetic import Release, ReleaseShape, ensure_release  # noqa: E402
from wildtrace.core.records import LogStatus  # noqa: E402

log = logging.getLogger("wildtrace.bench.scale")
KEY_ENV = "WILDTRACE_TEST_KEY"  # the name tests/conftest.py's judge entries read
JUDGE_ROUTES = {"claude_sonnet": "bench-judge-claude", "qwen": "bench-judge-qwen", "gemini_flash": "bench-judge-gemini"}
FULL = ReleaseShape()
SAMPLE_EVERY_S = 0.005
#: Every this-many stack samples, the process CPU time is noted too (to split CPU at the last reply).
CPU_EVERY = 10


@dataclass(frozen=True)
class Target:
    """One pass/fail line: the report's value at ``key`` against ``limit``."""

    name: str  #: what is printed
    key: str  #: dotted path into the report
    op: str  #: "<=" | "<" | "=="
    limit: float  #: the bound


#: The targets in docs/reference/performance.md: first run and cached rerun no slower, end to end,
#: than inspect_ai on the same release (33.8 s and 14.9 s, measured at 0.05 s latency and C=32:
#: ``--latency-answer 0.05 --latency-judge 0.05 --concurrency 32``), both processes' peak RSS.
TARGETS = (
    Target("first run end to end (s), inspect_ai 33.8", "first.process_s", "<=", 33.8),
    Target("cached rerun end to end (s), inspect_ai 14.9", "rerun.process_s", "<=", 14.9),
    Target("peak RSS of both processes (MB)", "ratios.peak_rss_mb", "<=", 400),
    Target("rerun requests", "rerun.requests", "==", 0),
    Target("store growth of the second full run / corpus", "ratios.store_growth_over_corpus", "<", 0.25),
)


# --- the endpoint (its own process) ---------------------------------------------------------

def make_responder(latency_answer: float, latency_judge: float,
                   stats: dict, lock: threading.Lock) -> Callable[[Call], Reply]:
    """A judge reply in the spec's shape for the judges' routes, an answer for any other (the model)."""
    judge_routes = set(JUDGE_ROUTES.values())

    def respond(call: Call) -> Reply:
        is_answer = call.route not in judge_routes
        delay = latency_answer if is_answer else latency_judge
        with lock:
            stats["answers" if is_answer else "judges"] += 1
            stats["last_reply_end"] = max(stats["last_reply_end"], time.time() + delay)
        prompt = call.prompt
        usage = {"prompt_tokens": len(prompt) // 3, "completion_tokens": 200 if is_answer else 30}
        if is_answer:
            reply = chat("The pump failed because the alarm had been muted; the seal was worn. " * 8, usage=usage)
        else:
            total = 20 + zlib.crc32(call.raw) % 61
            reply = chat(f'{{"points_awarded":[{total}],"total":{total}}}', usage=usage)
        reply.delay_s = delay
        return reply

    return respond


def _serve(latency_answer: float, latency_judge: float, pipe: Any) -> None:
    """The endpoint's process: a remote API does not share the client's interpreter (or GIL)."""
    stats = {"answers": 0, "judges": 0, "last_reply_end": 0.0}
    lock = threading.Lock()
    with LoopbackServer(make_responder(latency_answer, latency_judge, stats, lock)) as server:
        pipe.send(server.url)
        while pipe.recv() != "stop":
            with lock:
                pipe.send({**stats, "peak_in_flight": server.max_in_flight})
            server.calls.clear()  # the bodies are big; the counts above are what is kept
        with lock:
            pipe.send({**stats, "peak_in_flight": server.max_in_flight})


@contextmanager
def endpoint(latency_answer: float, latency_judge: float) -> Iterator[tuple[str, Callable[[], dict]]]:
    """Start the loopback endpoint in a child process; yields (url, stats())."""
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.Process(target=_serve, args=(latency_answer, latency_judge, child),
                                      daemon=True)
    process.start()

    def stats() -> dict:
        parent.send("stats")
        return parent.recv()

    try:
        yield parent.recv(), stats
    finally:
        parent.send("stop")
        parent.recv()
        process.join(timeout=10)


# --- one harness run (a fresh interpreter) --------------------------------------------------

def _tracking_prefixes() -> tuple[str, ...]:
    """Source folders whose frames count as MLflow time (found without importing them)."""
    import importlib.util

    found = [str(ROOT / "wildtrace" / "tracking")]
    for name in ("mlflow", "opentelemetry"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found.extend(spec.submodule_search_locations)
    return tuple(found)


def _rss_mb(pid: int) -> float:
    """A process's resident memory now (0 when it is gone or /proc is not there)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0


class StackSampler:
    """How much of the wall time the main thread spends inside given source folders.

    Each sample stands for the time since the previous one: while the main thread holds the
    GIL (CPU-bound Python) the sampler wakes late, so counting samples alone would
    under-weight exactly that time. ``cpu_trace`` notes (time.time(), process CPU s) as it goes.
    """

    def __init__(self, prefixes: tuple[str, ...], every_s: float = SAMPLE_EVERY_S, pids: tuple[int, ...] = ()) -> None:
        """``pids``: processes whose resident memory is summed with this one's at each CPU note."""
        self.prefixes, self.every_s, self.pids = prefixes, every_s, (os.getpid(), *pids)
        self.peak_rss_together_mb = 0.0  # the largest sum seen (Linux /proc only; 0 elsewhere)
        self.samples = 0
        self.seen_s = self.inside_s = 0.0
        self.cpu_trace: list[tuple[float, float]] = []
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stack-sampler", daemon=True)

    def _in_prefixes(self, frame: Any) -> bool:
        while frame is not None:
            if frame.f_code.co_filename.startswith(self.prefixes):
                return True
            frame = frame.f_back
        return False

    def _loop(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.every_s):
            frame = sys._current_frames().get(self._main)
            now = time.perf_counter()
            self.samples += 1
            self.seen_s += now - last
            self.inside_s += (now - last) if self._in_prefixes(frame) else 0.0
            last = now
            if self.samples % CPU_EVERY == 0:
                self.cpu_trace.append((time.time(), time.process_time()))
                self.peak_rss_together_mb = max(self.peak_rss_together_mb, sum(map(_rss_mb, self.pids)))

    def __enter__(self) -> StackSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def share(self) -> float:
        """Fraction of the sampled time spent inside the prefixes."""
        return self.inside_s / self.seen_s if self.seen_s else 0.0


def harness_settings(spec: dict) -> Any:
    """The run's settings by Hydra compose (tests/conftest.py's helpers), as the spec file says."""
    from conftest import openai_judge, settings

    # The model entry gives the caps (and route, budget); the wire format is always OpenAI's here.
    overrides = [f"model={spec['model']}", "model.provider=openai", f"model.base_url={spec['url']}/v1",
                 f"model.api_key_env={KEY_ENV}", f"model.max_concurrency={spec['concurrency']}",
                 "dataset.name=synthetic-scale", "judge_panel.name=bench-three",
                 f"dataset.tasks={spec['tasks']}", f"dataset.corpus={spec['corpus']}",
                 "mlflow.enabled=true", "cache.enabled=true", *spec["overrides"]]
    judges = {key: {**openai_judge(spec["url"], route), "max_concurrency": spec["judge_concurrency"]}
              for key, route in JUDGE_ROUTES.items()}
    cfg = settings(Path(spec["root"]), overrides, judges=judges)
    cfg.out_dir = spec["out_dir"]
    return cfg


def _logged(out_dir: Path) -> bool:
    marker = out_dir / "mlflow.json"
    return marker.exists() and json.loads(marker.read_text()).get("status") == LogStatus.LOGGED


def worker(spec_path: Path) -> None:
    """Run the harness once as the spec file says; write the measurements next to it."""
    from wildtrace.tracking.process import prestart

    prestart()  # as the entry point's main() does, before the config is composed
    import resource

    from wildtrace.app import observer_for
    from wildtrace.memory import return_large_buffers
    from wildtrace.runtime.run.execute import run

    return_large_buffers()  # as the entry point's job does
    spec = json.loads(spec_path.read_text())
    cfg = harness_settings(spec)
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_at_start = time.process_time()
    started = time.perf_counter()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    observer = observer_for(cfg)
    logger = getattr(observer, "process", None)
    with StackSampler(_tracking_prefixes(), pids=(logger.pid,) if logger is not None else ()) as sampler:
        result = run(cfg, observer=observer)  # as the entry point composes it
    wall = time.perf_counter() - started
    ended_at = time.time()
    after = resource.getrusage(resource.RUSAGE_SELF)
    # MLflow logs from a child process: its CPU and memory are the harness's too (waited for
    # here, after the wall time was taken, so that getrusage can count it).
    if logger is not None:
        logger.wait(60)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (children.ru_utime - children_before.ru_utime) + (children.ru_stime - children_before.ru_stime)
    statuses: dict[str, int] = {}
    for row in result.outcome.answers:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    measured = {
        "wall_s": wall, "pipeline_s": result.outcome.wall_s, "ended_at": ended_at,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) + child_cpu,
        "logger_cpu_s": child_cpu,
        # Both processes at their peaks at once: an upper bound of the harness's footprint.
        "peak_rss_mb": (after.ru_maxrss + (children.ru_maxrss if logger is not None else 0)) * 1024 / 1e6,
        "logger_peak_rss_mb": children.ru_maxrss * 1024 / 1e6 if logger is not None else 0.0,
        "peak_rss_together_mb": sampler.peak_rss_together_mb,
        "mlflow_share": sampler.share, "mlflow_s": sampler.share * wall,
        "samples": sampler.samples, "cpu_at_start": cpu_at_start, "cpu_trace": sampler.cpu_trace,
        "statuses": statuses, "judgments": len(result.outcome.judgments),
        "harness_requests": result.stats["requests"], "cache_hits": result.stats["cache_hits"],
        "mlflow_logged": _logged(Path(spec["out_dir"])),
    }
    spec_path.with_suffix(".result.json").write_text(json.dumps(measured))


def run_harness(spec: dict, work: Path, label: str) -> dict:
    """One harness run in a fresh interpreter; adds its end-to-end process time."""
    spec_path = work / f"{label}.spec.json"
    spec_path.write_text(json.dumps(spec))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, KEY_ENV: "sk-bench-not-a-key", "PYTHONPATH": path}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", str(spec_path)], env=env,
                          stdout=sys.stderr, stderr=sys.stderr, check=False, timeout=3600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the {label} harness run exited with {done.returncode} (its output is above)")
    measured = json.loads(spec_path.with_suffix(".result.json").read_text())
    return {**measured, "process_s": elapsed}


# --- the measurement ------------------------------------------------------------------------

def ideal_seconds(n: int, concurrency: int, latency_answer: float, judge_concurrency: int,
                  latency_judge: float) -> float:
    """No client beats this: the answer waves plus the last wave's judges (or the judges' own bound)."""
    if n <= 0:
        return 0.0
    waves = math.ceil(n / concurrency)
    last_wave = n - (waves - 1) * concurrency
    answer_bound = waves * latency_answer + math.ceil(last_wave / judge_concurrency) * latency_judge
    judge_bound = latency_answer + math.ceil(n / judge_concurrency) * latency_judge
    return max(answer_bound, judge_bound)


def in_scope_count(release: Release, model: str) -> int:
    """Tasks whose document fits the model's caps (what the model is actually sent)."""
    from conftest import compose_config
    from wildtrace.core.caps import Caps, decide

    caps_cfg = compose_config([f"model={model}"]).model.caps
    caps = Caps(en=caps_cfg.en, cjk=caps_cfg.cjk)
    by_id = {d.corpus_id: d for d in release.documents}
    return sum(decide(by_id[c].chars, by_id[c].ideographs, caps).in_scope for c in release.task_docs)


def cpu_until(trace: list[list[float]], at_start: float, moment: float) -> float | None:
    """Process CPU spent from run()'s start to ``moment`` (the last note at or before it)."""
    before = [cpu for t, cpu in trace if t <= moment]
    return before[-1] - at_start if before else None


def store_bytes(outputs: Path) -> int:
    """Size of the MLflow store: the SQLite files and the artifact folder."""
    return sum(p.stat().st_size for p in outputs.glob("mlflow.db*")) + tree_bytes(outputs / "mlartifacts")


def stored_traces(outputs: Path) -> int | None:
    """Traces in the MLflow store (its SQLite file, read directly), or None when there is no store."""
    import sqlite3

    db = outputs / "mlflow.db"
    if not db.exists():
        return None
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT count(*) FROM trace_info").fetchone()[0]


def tree_bytes(path: Path) -> int:
    """Total size of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def git_commit() -> str:
    """The measured harness's commit, with -dirty when its code or config (not the benchmark) changed."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "wildtrace", "conf"],
                           capture_output=True, text=True)
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "") if head.returncode == 0 else "unknown"


def shape_from(args: argparse.Namespace) -> ReleaseShape:
    """The release shape for the flags: docs and size scale with --tasks unless given."""
    docs = args.docs or max(1, round(FULL.docs * args.tasks / FULL.tasks))
    total_mb = args.corpus_mb if args.corpus_mb is not None else FULL.total_mb * docs / FULL.docs
    return ReleaseShape(tasks=args.tasks, docs=docs, total_mb=total_mb, seed=args.seed)


def measure(args: argparse.Namespace) -> dict:
    """Generate (or reuse) the release, run it, run it again; the report as plain data."""
    shape = shape_from(args)
    started = time.perf_counter()
    release, generated = ensure_release(shape, Path(args.data_dir))
    generate_s = time.perf_counter() - started
    log.info("release %s (%s, %.1f MB, %.1f s)", release.root, "generated" if generated else "cached",
             release.corpus_bytes / 1e6, generate_s)
    n_in = in_scope_count(release, args.model)
    work = Path(tempfile.mkdtemp(prefix="wildtrace-scale-"))
    try:
        runs, store, cache_bytes = _run_twice(args, release, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report = summarize(args, shape, release, generated, generate_s, n_in, runs, store, cache_bytes)
    if args.keep:
        report["work_dir"] = str(work)
    return report


def _run_twice(args: argparse.Namespace, release: Release, work: Path) -> tuple[dict[str, dict], dict[str, int], int]:
    """The first run and its rerun on one store and cache; per-run figures, store sizes, cache size."""
    outputs = work / "outputs"
    with endpoint(args.latency_answer, args.latency_judge) as (url, server_stats):
        spec = {"model": args.model, "url": url, "concurrency": args.concurrency,
                "judge_concurrency": args.judge_concurrency, "tasks": str(release.tasks_path),
                "corpus": str(release.corpus_dir), "root": str(work), "overrides": args.override}
        runs: dict[str, dict] = {}
        store: dict[str, int] = {"before": store_bytes(outputs)}
        for label in ("first", "rerun"):
            before = server_stats()
            log.info("%s run …", label)
            measured = run_harness({**spec, "out_dir": str(work / "runs" / label)}, work, label)
            after = server_stats()
            measured["requests"] = (after["answers"] + after["judges"]) - (before["answers"] + before["judges"])
            measured["answer_requests"] = after["answers"] - before["answers"]
            measured["tail_s"] = measured["ended_at"] - after["last_reply_end"] if measured["requests"] else None
            measured["peak_in_flight"] = after["peak_in_flight"]
            measured["cpu_s_until_last_reply"] = cpu_until(measured.pop("cpu_trace"), measured["cpu_at_start"],
                                                           after["last_reply_end"]) if measured["requests"] else None
            runs[label] = measured
            store[label] = store_bytes(outputs)
            store[f"{label}_traces"] = stored_traces(outputs)
    return runs, store, tree_bytes(outputs / "cache")


def summarize(args: argparse.Namespace, shape: ReleaseShape, release: Release, generated: bool, generate_s: float,
              n_in: int, runs: dict[str, dict], store: dict[str, int], cache_bytes: int) -> dict:
    """The report: inputs, both runs' raw figures, and the ratios the targets read."""
    ideal = ideal_seconds(n_in, args.concurrency, args.latency_answer, args.judge_concurrency, args.latency_judge)
    first, rerun = runs["first"], runs["rerun"]
    corpus = release.corpus_bytes
    growth_first, growth_rerun = store["first"] - store["before"], store["rerun"] - store["first"]
    ratios = {
        "wall_over_ideal": first["wall_s"] / ideal if ideal else None,
        "pipeline_over_ideal": first["pipeline_s"] / ideal if ideal else None,
        "cpu_ms_per_request": 1000 * first["cpu_s"] / first["requests"] if first["requests"] else None,
        # The same up to the endpoint's last reply: the calls' own cost, without what follows them.
        "cpu_ms_per_request_calls": 1000 * first["cpu_s_until_last_reply"] / first["requests"]
        if first["requests"] and first["cpu_s_until_last_reply"] is not None else None,
        "cpu_over_wall": first["cpu_s"] / first["wall_s"],
        "peak_rss_mb": max(first["peak_rss_mb"], rerun["peak_rss_mb"]),
        "mlflow_share": first["mlflow_share"],
        "first_store_growth_over_corpus": growth_first / corpus,
        "rerun_store_growth_over_corpus": growth_rerun / corpus,
        "store_growth_over_corpus": growth_rerun / corpus,
    }
    return {
        "commit": git_commit(), "shape": asdict(shape), "release_dir": str(release.root), "generated": generated,
        "generate_s": generate_s, "corpus_bytes": corpus, "model": args.model,
        "latency_answer_s": args.latency_answer, "latency_judge_s": args.latency_judge,
        "concurrency": args.concurrency, "judge_concurrency": args.judge_concurrency, "judges": len(JUDGE_ROUTES),
        "overrides": args.override,
        "n_tasks": len(release.task_docs), "n_in_scope": n_in, "n_out_of_context": len(release.task_docs) - n_in,
        # The ideal counts on our own caps decision; the harness must have made the same one.
        "harness_agrees_on_scope": first["statuses"].get("out_of_context_scope", 0) == len(release.task_docs) - n_in,
        "ideal_s": ideal, "first": first, "rerun": rerun, "store": {**store, "cache_bytes": cache_bytes},
        "ratios": ratios,
    }


def lookup(report: dict, key: str) -> Any:
    """A dotted path into the report."""
    value: Any = report
    for part in key.split("."):
        value = value[part]
    return value


def verdicts(report: dict) -> list[dict]:
    """Each target with its measured value and PASS/FAIL (a missing value fails)."""
    checks = {"<=": lambda v, t: v <= t, "<": lambda v, t: v < t, "==": lambda v, t: v == t}
    out = []
    for target in TARGETS:
        value = lookup(report, target.key)
        passed = value is not None and checks[target.op](value, target.limit)
        out.append({**asdict(target), "value": value, "pass": passed})
    return out


def render(report: dict) -> str:
    """The printed report: context, figures, then one PASS/FAIL line per target."""
    r, f, q = report["ratios"], report["first"], report["rerun"]
    mb = 1e6
    lines = [
        f"wildtrace scale benchmark @ {report['commit']}: {report['n_tasks']} tasks, "
        f"{report['shape']['docs']} documents, "
        f"{report['corpus_bytes'] / mb:.1f} MB corpus ({'generated' if report['generated'] else 'cached'}); "
        f"model={report['model']} ({report['n_in_scope']} in scope, {report['n_out_of_context']} out of context)",
        f"endpoint: answers {report['latency_answer_s']} s at C={report['concurrency']}, {report['judges']} judges "
        f"{report['latency_judge_s']} s at C={report['judge_concurrency']} each"
        + (f"; overrides {' '.join(report['overrides'])}" if report["overrides"] else ""),
        f"first run: {f['process_s']:.2f} s end to end; run() {f['wall_s']:.2f} s vs ideal {report['ideal_s']:.2f} s "
        f"= {_num(r['wall_over_ideal'])}x "
        f"(pipeline {f['pipeline_s']:.2f} s = {_num(r['pipeline_over_ideal'])}x); {f['requests']} requests; "
        f"statuses {f['statuses']}",
        f"  harness CPU {f['cpu_s']:.2f} s = {_num(r['cpu_ms_per_request'])} ms/request "
        f"({r['cpu_over_wall']:.2f} of a core;"
        f" {f.get('logger_cpu_s', 0):.2f} s of it logging; {_num(r['cpu_ms_per_request_calls'])} ms/request up to the "
        f"last reply); peak RSS {f['peak_rss_mb']:.0f} MB ({f.get('logger_peak_rss_mb', 0):.0f} MB of it logging; "
        f"both processes sampled together every 50 ms: {f.get('peak_rss_together_mb', 0):.0f} MB)",
        f"  MLflow {f['mlflow_s']:.2f} s = {100 * f['mlflow_share']:.1f} % of wall; "
        f"run ended {_num(f['tail_s'])} s after "
        f"the last reply; logged: {f['mlflow_logged']}",
        f"rerun: {q['requests']} requests, {q['process_s']:.2f} s end to end (run() {q['wall_s']:.2f} s, pipeline "
        f"{q['pipeline_s']:.2f} s, MLflow {q['mlflow_s']:.2f} s); peak RSS {q['peak_rss_mb']:.0f} MB",
        f"store: +{(report['store']['first'] - report['store']['before']) / mb:.1f} MB first run "
        f"({100 * r['first_store_growth_over_corpus']:.0f} % of corpus), "
        f"+{(report['store']['rerun'] - report['store']['first']) / mb:.1f} MB rerun "
        f"({100 * r['rerun_store_growth_over_corpus']:.0f} %); cache {report['store']['cache_bytes'] / mb:.1f} MB",
    ]
    for v in report["verdicts"]:
        lines.append(f"{'PASS' if v['pass'] else 'FAIL'}  {v['name']}: {_num(v['value'])} {v['op']} {v['limit']}")
    return "\n".join(lines)


def _num(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (defaults: the full-size release, 2 s answers and 0.5 s judge replies)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=FULL.tasks, help="tasks (default 481)")
    p.add_argument("--docs", type=int, default=None, help="documents (default 214 scaled by --tasks)")
    p.add_argument("--corpus-mb", type=float, default=None, help="corpus size (default 230 MB scaled by --docs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--latency-answer", type=float, default=2.0, help="seconds per answer (default 2)")
    p.add_argument("--latency-judge", type=float, default=0.5, help="seconds per judge reply (default 0.5)")
    p.add_argument("--concurrency", type=int, default=32, help="the model's max_concurrency (default 32)")
    p.add_argument("--judge-concurrency", type=int, default=16, help="each judge's max_concurrency (default 16)")
    p.add_argument("--model", default="qwen3-max", help="conf/model entry whose caps apply (default qwen3-max)")
    p.add_argument("--data-dir", default=str(ROOT / "outputs" / "benchmarks" / "scale"),
                   help="where generated releases are cached")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra Hydra override for both harness runs (repeatable), e.g. mlflow.log_documents=false")
    p.add_argument("--json", dest="json_out", default=None, help="also write the report here")
    p.add_argument("--keep", action="store_true", help="keep the temporary root (store, cache, run dirs)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Measure, print, optionally write JSON; the exit code is 1 only with --strict and a miss."""
    args = parse_args(argv)
    if args.worker:
        worker(Path(args.worker))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    report = measure(args)
    report["verdicts"] = verdicts(report)
    print(render(report))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1))
    return 1 if args.strict and not all(v["pass"] for v in report["verdicts"]) else 0


if __name__ == "__main__":
    sys.exit(main())
