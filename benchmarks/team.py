"""How long a tracking store takes to absorb one finished run: the local SQLite file against
`mlflow server` on a real PostgreSQL (and, between them, the server on a SQLite file).

    python benchmarks/scale.py --keep                 # makes a finished 481-task run: <work_dir>/runs/first
    python benchmarks/team.py <work_dir>/runs/first [--repeat 2] [--json out.json]
    python benchmarks/team.py --scale [-- SCALE_ARGS]  # benchmarks/scale.py on each store, live

Each store is fresh. Into each, ``python -m wildtrace.upload RUN_DIR --tracking-uri URI --force``
is run ``--repeat`` times, timed from the command's start to its exit (the interpreter's start
and MLflow's import included, as a user sees it); after each upload the run's traces are counted
in the store, so a figure is only reported for a complete run. The first upload into a store
also stores the run's documents (once per store, by sha256: 230 MB at full size); the later
ones send the params, metrics, files, tables and every trace with its judges' feedback only.
With ``--scale``, ``benchmarks/scale.py`` (a run and its fully cached rerun, traces streamed as
tasks finish) runs once on its default local SQLite store and once against a server on
PostgreSQL (``--override mlflow.tracking_uri=…``), and the figures that differ are printed.
PostgreSQL and the servers run on this machine (loopback), started and stopped by this script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from servers import pg  # noqa: E402  (tests/servers/pg.py: the PostgreSQL and mlflow server the tests start)

EXPERIMENT = "absorb"


def upload(run_dir: Path, uri: str) -> float:
    """Seconds for one ``wildtrace.upload --force`` of ``run_dir`` into ``uri``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "wildtrace.upload", str(run_dir), "--tracking-uri", uri,
                           "--experiment", EXPERIMENT, "--force"], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"upload into {uri} failed:\n{proc.stdout}\n{proc.stderr}")
    return seconds


def newest_run_traces(uri: str) -> int:
    """The number of traces of the newest run in the experiment (the upload just made)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    (run,) = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    count, token = 0, None
    while True:  # a server takes at most 500 a page
        page = client.search_traces(locations=[exp.experiment_id], run_id=run.info.run_id, max_results=500,
                                    include_spans=False, page_token=token)
        count += len(page)
        token = page.token
        if not token:
            return count


def stores(work: Path) -> Iterator[tuple[str, str]]:
    """(label, tracking URI) of each store, each started when it is reached and stopped after."""
    (work / "local").mkdir()
    yield "sqlite (local file)", f"sqlite:///{work / 'local' / 'mlflow.db'}"
    folder = work / "server-sqlite"
    folder.mkdir()
    with pg.mlflow_server(f"sqlite:///{folder / 'server.db'}", folder / "artifacts", folder / "server.log") as (url, _):
        yield "mlflow server on SQLite", url
    if pg.skip_reason():
        print(f"no PostgreSQL: {pg.skip_reason()}", file=sys.stderr)
        return
    with pg.postgres() as db:
        db.create_database("mlflow")
        folder = work / "server-pg"
        folder.mkdir()
        with pg.mlflow_server(db.uri("mlflow"), folder / "artifacts", folder / "server.log") as (url, _):
            yield "mlflow server on PostgreSQL", url


def scale(work: Path, label: str, extra: list[str]) -> dict:
    """One benchmarks/scale.py measurement (its JSON report); its log goes to ``work/<label>.log``."""
    out = work / f"{label}.json"
    with open(work / f"{label}.log", "w") as log:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--json", str(out), *extra],
                       stdout=log, stderr=subprocess.STDOUT)
    report = json.loads(out.read_text())
    first, rerun = report["first"], report["rerun"]
    print(f"{label}: first run wall {first['wall_s']:.1f} s (pipeline {first['pipeline_s']:.1f} s), tail after the "
          f"last reply {first['tail_s']:.1f} s, logging CPU {first['logger_cpu_s']:.1f} s, logged "
          f"{first['mlflow_logged']}; rerun run() {rerun['wall_s']:.1f} s, process {rerun['process_s']:.1f} s, "
          f"{rerun['requests']} requests, logged {rerun['mlflow_logged']}", flush=True)
    return report


def live(extra: list[str]) -> int:
    """benchmarks/scale.py on the local SQLite store, then against mlflow server on PostgreSQL."""
    reason = pg.skip_reason()
    if reason:
        raise SystemExit(f"no PostgreSQL: {reason}")
    with tempfile.TemporaryDirectory(prefix="wildtrace-team-") as tmp:
        work = Path(tmp)
        scale(work, "sqlite (local file)", extra)
        with pg.postgres() as db:
            db.create_database("mlflow")
            with pg.mlflow_server(db.uri("mlflow"), work / "artifacts", work / "server.log") as (url, _):
                scale(work, "mlflow server on PostgreSQL", [*extra, "--override", f"mlflow.tracking_uri={url}"])
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, nargs="?", help="a finished run directory (scale.py --keep: runs/first)")
    p.add_argument("--repeat", type=int, default=2, help="uploads into each store (default 2)")
    p.add_argument("--json", dest="json_out", default=None, help="also write the figures here")
    p.add_argument("--scale", nargs=argparse.REMAINDER, default=None, metavar="SCALE_ARGS",
                   help="instead: benchmarks/scale.py (with these arguments) on each store")
    args = p.parse_args(argv)
    if args.scale is not None:
        return live([a for a in args.scale if a != "--"])
    if args.run_dir is None:
        p.error("a run directory, or --scale")
    n_tasks = len(json.loads((args.run_dir / "scores.json").read_text())["tasks"])
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="wildtrace-team-") as tmp, closing(stores(Path(tmp))) as each:
        for label, uri in each:
            figures[label] = []
            for i in range(args.repeat):
                seconds = upload(args.run_dir, uri)
                traces = newest_run_traces(uri)
                if traces != n_tasks:
                    raise SystemExit(f"{label}: upload {i + 1} stored {traces} traces of {n_tasks}")
                figures[label].append(seconds)
                print(f"{label}: upload {i + 1} ({'with' if i == 0 else 'without'} the documents): "
                      f"{seconds:.2f} s, {traces} traces", flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"tasks": n_tasks, "uploads_s": figures}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
