"""What a six-call sweep pays for its input, against loopback servers that cache prompts as OpenAI,
Anthropic and Gemini document it (tests/servers/prefix_cache.py).

Runs ``python -m wildtrace -m decoding.temperature=0.1,0.4,0.7 decoding.replicate=0,1`` (six calls a
task, Hydra's jobs one after another) once per provider shape, and prints the input billed over the six
jobs in units of one point's uncached input: 6.0 with no prompt cache; the floor the prices allow is
1.5 where a write costs nothing extra and a read 0.1x (the first call at the input price, five
repeats at a tenth), 1.75 for Anthropic's 5-minute cache (the first call writes at 1.25x).

    python benchmarks/sweep_cost.py [--tasks 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import make_task, write_release  # noqa: E402
from servers.loopback import LoopbackServer  # noqa: E402
from servers.prefix_cache import PrefixCache  # noqa: E402

KEY_ENV = "WILDTRACE_TEST_KEY"
SWEEP = ["decoding.temperature=0.1,0.4,0.7", "decoding.replicate=0,1"]
#: shape -> (model file, overrides). gpt-5.1 and Opus 4.6 take no temperature: sent here, so the three
#: temperatures are three requests (else the harness's own cache serves two of them: cheaper still).
SHAPES = {
    "openai": ("gpt-5.1", ["model.base_url={url}/v1", "model.send_temperature=true"]),
    "anthropic": ("claude-opus-4.6", ["model.base_url={url}", "model.send_temperature=true"]),
    "gemini": ("gemini-2.5-pro", ["model.base_url={url}"]),
}
POINTS = [(t, r) for t in (0.1, 0.4, 0.7) for r in (0, 1)]
DOCUMENT = "The seal was worn. The pump failed at 03:14. The valve held. " * 400  # ~6,000 tokens


def billed_input(stats: dict, price: dict) -> tuple[Fraction, Fraction]:
    """(input billed, input if every token missed) in USD, from one job's run_stats."""
    row = stats["prompt_cache"]["endpoints"].get("model")
    if row is None:
        return Fraction(0), Fraction(0)
    f = lambda v: Fraction(repr(float(v or 0)))  # noqa: E731
    written, cached, total = row["cache_write_tokens"], row["cached_input_tokens"], row["input_tokens"]
    miss = total - cached - written
    billed = (miss * f(price["input_per_mtok"]) + cached * f(price["cached_input_per_mtok"])
              + written * f(price.get("cache_write_per_mtok"))) / 1_000_000
    return billed, total * f(price["input_per_mtok"]) / 1_000_000


def floor_of(price: dict) -> float:
    """Six calls of one prompt in units of one uncached call: the first at the write price (the input
    price where a write costs nothing extra), five repeats at the read price."""
    write = price.get("cache_write_per_mtok") or price["input_per_mtok"]
    return (write + 5 * price["cached_input_per_mtok"]) / price["input_per_mtok"]


def estimated(shape: str, overrides: list[str], work: Path) -> tuple[float, float]:
    """The estimate's range for the model's calls of the six points, before anything is sent."""
    from conftest import settings
    from wildtrace.estimate import estimate

    low = high = 0.0
    for temperature, replicate in POINTS:
        cfg = settings(work / "estimate", [*overrides, f"decoding.temperature={temperature}",
                                           f"decoding.replicate={replicate}", "estimate.answer_tokens=12"])
        cfg.prompt_repeats = len(POINTS)
        row = estimate(cfg)["endpoints"]["model"]
        low, high = low + row["usd_min"], high + row["usd_max"]
    return low, high


def sweep(shape: str, tasks: int, work: Path) -> dict:
    """One provider shape's six-job sweep: the ratio billed / one point's uncached input, and the answers."""
    model, extra = SHAPES[shape]
    tasks_path, corpus = write_release(work, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt")
                                              for i in range(tasks)], {"doc.txt": DOCUMENT})
    with LoopbackServer(PrefixCache(shape)) as server:
        overrides = [f"model={model}", *[e.format(url=server.url) for e in extra], f"model.api_key_env={KEY_ENV}",
                     "model.stream=false", f"dataset.tasks={tasks_path}", f"dataset.corpus={corpus}",
                     "judge_panel=offline"]
        os.environ[KEY_ENV] = "sk-loopback"
        low, high = estimated(shape, overrides, work)
        args = [sys.executable, "-m", "wildtrace", "-m", *SWEEP, *overrides, "mlflow.enabled=false", "progress=false",
                f"root={work / 'outputs'}"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT,
                              env={**os.environ, KEY_ENV: "sk-loopback"})
        if done.returncode:
            raise SystemExit(f"{shape}: the sweep failed:\n{done.stderr[-3000:]}")
        calls = len(server.calls)
    jobs = sorted((work / "outputs" / "multirun").glob("*/*/*/run_stats.json"))
    billed = uncached = Fraction(0)
    cost = 0.0
    sent: list[int] = []  # calls each job sent (job 0 sends each task's repeats right after its own answer)
    answers: set[str] = set()
    for path in jobs:
        stats = json.loads(path.read_text())
        price = json.loads((path.parent / "config.json").read_text())["model"]["price"]
        b, u = billed_input(stats, price)
        billed, uncached = billed + b, uncached + u
        cost += stats["cost"]["endpoints"]["model"]["cost_usd"]
        sent.append(stats["prompt_cache"]["endpoints"].get("model", {}).get("calls", 0))
        answers |= {r.get("response") or "" for r in json.loads((path.parent / "responses.json").read_text())}
    one_point = uncached / len(jobs)
    return {"shape": shape, "jobs": len(jobs), "calls": calls, "billed": float(billed / one_point),
            "uncached": float(uncached / one_point), "floor": floor_of(price), "answers": sorted(answers),
            "cost": cost, "estimate": (low, high), "sent": sent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=3)
    args = parser.parse_args()
    print(f"{'shape':<10} {'jobs':>4} {'calls':>5} {'billed input':>13} {'uncached':>9} {'floor':>6}  within 0.1  "
          "model cost in the estimate's range")
    for shape in SHAPES:
        with tempfile.TemporaryDirectory(prefix=f"sweep-cost-{shape}-") as tmp:
            row = sweep(shape, args.tasks, Path(tmp))
        ok = abs(row["billed"] - row["floor"]) <= 0.1
        print(f"{shape:<10} {row['jobs']:>4} {row['calls']:>5} {row['billed']:>12.3f}x {row['uncached']:>8.2f}x "
              f"{row['floor']:>5.2f}x  {'yes' if ok else 'NO':<10}  ${row['cost']:.5f} in "
              f"${row['estimate'][0]:.5f}–${row['estimate'][1]:.5f}: "
              f"{'yes' if row['estimate'][0] <= row['cost'] <= row['estimate'][1] else 'NO'}; "
              f"calls sent by job: {row['sent']}; answers: {row['answers']}")


if __name__ == "__main__":
    main()
