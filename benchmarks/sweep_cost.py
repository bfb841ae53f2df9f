"""What a six-call sweep pays for its input, against loopback servers that cache prompts as OpenAI,
Anthropic and Gemini document it (tests/servers/prefix_cache.py).

Runs ``python -m wildtrace -m decoding.temperature=0.1,0.4,0.7 decoding.replicate=0,1`` (six calls a
task, Hydra's jobs one after another) once per provider shape, and prints the input billed over the
six jobs in units of one point's uncached input: 6.0 with no prompt cache; the floor the prices allow
is 1.5 where a write costs nothing extra and a read 0.1x (the first call at the input price, five
repeats at a tenth), 1.75 for Anthropic's 5-minute cache (the first call writes at 1.25x). Each point
is also run on its own against the same shape caching nothing: every job's answers and scores.json
must be that run's. The estimate's range (before anything is sent) must hold the billed cost (the
loopbacks' tokenizer packs 4 bytes a token, the estimate's low end 4 characters, its high end 3.3). Exits
1, naming what failed, when a shape is not within 0.1 of its floor, an answer or score differs, or
the range misses the cost.

    python benchmarks/sweep_cost.py [--tasks 2]
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
    """(input billed, input if every token missed) in USD, from one job's run_stats: misses at the input
    price, reads at the cached price, writes at the write price (the hour's at its own)."""
    row = stats["prompt_cache"]["endpoints"].get("model")
    if row is None:
        return Fraction(0), Fraction(0)
    f = lambda v: Fraction(repr(float(v or 0)))  # noqa: E731
    written, cached, total = row["cache_write_tokens"], row["cached_input_tokens"], row["input_tokens"]
    hour = row["cache_write_1h_tokens"]
    miss = total - cached - written
    billed = (miss * f(price["input_per_mtok"]) + cached * f(price["cached_input_per_mtok"])
              + (written - hour) * f(price.get("cache_write_per_mtok"))
              + hour * f(price.get("cache_write_1h_per_mtok"))) / 1_000_000
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


def release(work: Path, tasks: int) -> list[str]:
    """The tasks and corpus (one shared document) as overrides."""
    tasks_path, corpus = write_release(work, [make_task(f"q{i}", f"What failed? [q{i}]", "doc.txt")
                                              for i in range(tasks)], {"doc.txt": DOCUMENT})
    return [f"dataset.tasks={tasks_path}", f"dataset.corpus={corpus}"]


def shape_overrides(shape: str, url: str, data: list[str]) -> list[str]:
    """The model file and the loopback's address for a shape, the release, offline judges."""
    model, extra = SHAPES[shape]
    return [f"model={model}", *[e.format(url=url) for e in extra], f"model.api_key_env={KEY_ENV}",
            "model.stream=false", *data, "judge_panel=offline"]


def outcome(run_dir: Path) -> dict:
    """What a job produced that a prompt cache must not change: each task's answer, and scores.json."""
    answers = {r["question_id"]: r.get("response") for r in json.loads((run_dir / "responses.json").read_text())}
    return {"answers": answers, "scores": json.loads((run_dir / "scores.json").read_text())}


def point_of(run_dir: Path) -> tuple[float, int]:
    """The job's (temperature, replicate), from its config.json."""
    decoding = json.loads((run_dir / "config.json").read_text())["decoding"]
    return decoding["temperature"], decoding["replicate"]


def uncached(shape: str, tasks: int, work: Path) -> dict[tuple[float, int], dict]:
    """Each point run on its own (no sweep: no repeats sent ahead, no hint) against a provider that caches
    nothing: the outcomes the sweep's jobs must match."""
    from conftest import settings
    from wildtrace.runtime.run.execute import run

    data = release(work, tasks)
    out = {}
    with LoopbackServer(PrefixCache(shape, hold=False)) as server:
        for temperature, replicate in POINTS:
            cfg = settings(work / f"t{temperature}-r{replicate}", [
                *shape_overrides(shape, server.url, data), f"decoding.temperature={temperature}",
                f"decoding.replicate={replicate}"])
            result = run(cfg)
            if result.exit_code:
                raise SystemExit(f"{shape}: the uncached run failed:\n{result.headline}")
            out[(temperature, replicate)] = outcome(Path(cfg.out_dir))
    return out


def sweep(shape: str, tasks: int, work: Path) -> dict:
    """One provider shape's six-job sweep: the ratio billed / one point's uncached input, the outcomes."""
    data = release(work, tasks)
    with LoopbackServer(PrefixCache(shape)) as server:
        overrides = shape_overrides(shape, server.url, data)
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
    billed = every_miss = Fraction(0)
    cost = 0.0
    sent: list[int] = []  # calls each job sent (job 0 sends each task's repeats right after its own answer)
    outcomes = {}
    for path in jobs:
        stats = json.loads(path.read_text())
        price = json.loads((path.parent / "config.json").read_text())["model"]["price"]
        b, u = billed_input(stats, price)
        billed, every_miss = billed + b, every_miss + u
        cost += stats["cost"]["endpoints"]["model"]["cost_usd"]
        sent.append(stats["prompt_cache"]["endpoints"].get("model", {}).get("calls", 0))
        outcomes[point_of(path.parent)] = outcome(path.parent)
    one_point = every_miss / len(jobs)
    return {"shape": shape, "jobs": len(jobs), "calls": calls, "billed": float(billed / one_point),
            "uncached": float(every_miss / one_point), "floor": floor_of(price), "outcomes": outcomes,
            "cost": cost, "estimate": (low, high), "sent": sent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2)
    args = parser.parse_args()
    print(f"{'shape':<10} {'jobs':>4} {'calls':>5} {'billed input':>13} {'uncached':>9} {'floor':>6}  within 0.1  "
          "same as uncached  model cost in the estimate's range")
    failed: list[str] = []
    for shape in SHAPES:
        with tempfile.TemporaryDirectory(prefix=f"sweep-cost-{shape}-") as tmp:
            row = sweep(shape, args.tasks, Path(tmp) / "sweep")
            alone = uncached(shape, args.tasks, Path(tmp) / "alone")
        near = abs(row["billed"] - row["floor"]) <= 0.1
        same = row["outcomes"] == alone
        low, high = row["estimate"]
        held = low <= row["cost"] <= high
        failed += [f"{shape}: {what}" for what, ok in (("billed input not within 0.1 of the floor", near),
                                                        ("answers or scores differ from the uncached run", same),
                                                        ("the estimate's range misses the billed cost", held))
                   if not ok]
        print(f"{shape:<10} {row['jobs']:>4} {row['calls']:>5} {row['billed']:>12.3f}x {row['uncached']:>8.2f}x "
              f"{row['floor']:>5.2f}x  {'yes' if near else 'NO':<10}  {'yes' if same else 'NO':<16}  "
              f"${row['cost']:.5f} in ${low:.5f}–${high:.5f}: {'yes' if held else 'NO'}; "
              f"calls sent by job: {row['sent']}; answers: "
              f"{sorted({a for o in row['outcomes'].values() for a in o['answers'].values() if a})}")
    if failed:
        raise SystemExit("; ".join(failed))


if __name__ == "__main__":
    main()
