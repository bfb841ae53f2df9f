"""benchmarks/throughput.py and floor.py: every call made and stored, none faster than the ideal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPT = BENCHMARKS / "floor.py"


def test_the_throughput_benchmark_with_the_cache_on_a_slow_disk_stores_every_outcome():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "throughput.py"), "--tasks", "4", "--latency", "0.02",
                           "--concurrency", "2", "--cache", "--fsync-delay", "0.01"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answers, judged = (json.loads(line) for line in done.stdout.splitlines())
    # answers only: 4 calls, each stored; then each answer and its three judgments
    assert (answers["judges"], answers["calls"], answers["stored"]) == (0, 4, 4), answers
    assert (judged["judges"], judged["calls"], judged["stored"]) == (3, 16, 16), judged
    # each endpoint's bound, never above it (a run this short is all slow start: without rate headers, a
    # streamed endpoint's first second of sends goes one after another's head, so it may stay at one)
    assert 1 <= answers["peak_in_flight"] <= 2 and judged["peak_in_flight"] <= 2 * (1 + 3)
    for row in (answers, judged):
        assert row["cache"] is True and row["fsync_delay_s"] == 0.01
        assert row["wall_s"] >= 0.04 and row["ratio"] >= 1.0, row  # two waves of answers, each at least the latency


def test_the_floor_benchmark_runs_each_client_in_turn_and_reports_against_the_ideal(tmp_path):
    out = tmp_path / "floor.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--tasks", "6", "--latency", "0.05", "--concurrency", "3",
                           "--rounds", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert printed[:-1] == result["runs"] and printed[-1] == {k: v for k, v in result.items() if k != "runs"}
    # in turn, round by round
    assert [r["client"] for r in result["runs"]] == ["raw", "httpx", "wildtrace"] * 2
    for row in result["runs"]:
        # every request reached the endpoint, never above the bound (the bare clients at it; wildtrace's
        # 0.3-s run is all slow start: its sends go one after another's head), and no client beat the
        # ideal: each slot's two requests wait the latency one after the other
        assert (row["calls"], row["ideal_s"]) == (6, 0.1) and 1 <= row["peak_in_flight"] <= 3, row
        if row["client"] != "wildtrace":
            assert row["peak_in_flight"] == 3, row
        assert row["wall_s"] >= 0.1 and abs(row["ratio"] - row["wall_s"] / 0.1) < 0.006, row  # both rounded
    medians = result["median_ratio"]
    for kind in ("raw", "httpx", "wildtrace"):
        ratios = sorted(r["ratio"] for r in result["runs"] if r["client"] == kind)
        assert abs(medians[kind] - (ratios[0] + ratios[1]) / 2) <= 1e-4
    assert abs(result["over_httpx"] - (medians["wildtrace"] - medians["httpx"])) <= 2e-4  # each rounded to 4 places
    assert abs(result["over_raw"] - (medians["wildtrace"] - medians["raw"])) <= 2e-4
