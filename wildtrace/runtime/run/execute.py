"""One job from validated settings to run files: the importable heart behind the CLI.

Order matters: everything that can fail on input (dataset, responses file, storage, base
URLs, keys) fails before the first request; every outcome is cached the moment it arrives;
the run files are written at the end (whole, or — after SIGINT/SIGTERM or a failing store —
what the run had, marked partial); an observer hears the run's events and may track them.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import hashlib
import json
import logging
import shlex
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wildtrace import __version__
from wildtrace.config import ConfigError, EndpointConfig, WildtraceConfig, batch_labels, effective_max_tokens, price_of
from wildtrace.config.checks import spec_warnings
from wildtrace.core import views
from wildtrace.core.events import RunEnd, RunObserver, RunStart
from wildtrace.core.prompts import PROMPTS_VERSION, judge_prompt, prompts_sha256
from wildtrace.core.records import RunStatus
from wildtrace.core.tasks import oddities
from wildtrace.providers.base import EndpointSpec
from wildtrace.providers.registry import provider_class
from wildtrace.runtime.spend.cap import BudgetError, Journal, Ledger
from wildtrace.runtime.store.cache import JOURNAL, Cache, StorageError, check_writable, journals_under
from wildtrace.runtime.store.dataset import Dataset
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.files import write_json
from wildtrace.exitcodes import SIGNAL_EXIT, ExitCode
from wildtrace.runtime.batch import BatchSettings
from wildtrace.runtime.run.pipeline import Counters, Outcome, Stop, Survey, execute, survey
from wildtrace.runtime.run.plan import Plan, build_plan
from wildtrace.runtime.run.prompt_cache import PromptCacheTally
from wildtrace.runtime.run.responses import scrub_answers
from wildtrace.runtime.net.secrets import install_log_filter, read_keys, redact
from wildtrace.runtime.run.progress import _Progress
from wildtrace.runtime.run.summary import (_kept_without_run_files, all_failed, config_prefix, cost_lines, headline,
                                       money, raised_caps, served_model_warnings)
from wildtrace.runtime.net import served

log = logging.getLogger("wildtrace")

#: Exit statuses (wildtrace/exitcodes.py): a finished run, an endpoint whose every call failed or a
#: store that failed, a finished run that MLflow did not log (with ``mlflow.required``; upload logs
#: it later), a spend cap that kept calls from being sent (docs/providers/cost.md), and a stop by signal.
EXIT_OK, EXIT_FAILED, EXIT_NOT_LOGGED = ExitCode.OK, ExitCode.RUN_FAILED, ExitCode.NOT_LOGGED
EXIT_BUDGET = ExitCode.BUDGET
EXIT_SIGNAL = SIGNAL_EXIT


@dataclass
class RunResult:
    """Where the run wrote its files, its headline numbers (None for stage=answer), and how it ended."""

    out_dir: Path
    summary: dict | None
    stats: dict
    outcome: Outcome
    exit_code: int = EXIT_OK
    headline: str = ""


def key_needs(specs: Sequence[EndpointSpec]) -> list[tuple[str, str, str]]:
    """(config key, variable, endpoint name) for each endpoint that needs a key, as ``read_keys`` takes them."""
    return [(key_config(s), s.api_key_env, s.name) for s in specs
            if not provider_class(s.provider).local and s.api_key_env]


def endpoint_configs(cfg: WildtraceConfig) -> dict[str, EndpointConfig]:
    """label → the endpoint's config: "model" and each judge key."""
    return {"model": cfg.model, **cfg.judge_panel.judges}


#: Settings that change neither what a command sends nor what it pays for: the same command with
#: other values of these is the same command (its spend cap counts what every run of it paid).
NOT_THE_COMMAND = frozenset({"root", "out_dir", "progress", "progress_every_s", "stop_grace_s", "mlflow", "budget",
                             "estimate", "batch", "retry", "max_response_mb", "stage"})
#: An endpoint's settings of that kind (where and how fast it is called, its price and cap).
NOT_THE_ENDPOINT = frozenset({"max_concurrency", "timeout_s", "max_call_s", "price", "max_usd", "batch",
                              "served_model", "retired", "api_key_env", "base_url_env", "name"})
#: A judge prompt's answer, not known yet, at this many bytes a token of the model's budget (the resume hint).
ANSWER_BYTES_PER_TOKEN = 4


def command_identity(cfg: WildtraceConfig) -> str:
    """What makes two runs "the same command" for the spend cap: the settings that make the requests (and so
    the cache keys) — the model and judges as called, decoding, the panel, the dataset, the answers judged —
    and the cache folder; not where the run files go, the caps, the pacing or the logging (docs/providers/cost.md)."""
    config = {k: v for k, v in config_dict(cfg).items() if k not in NOT_THE_COMMAND}
    config["model"] = {k: v for k, v in config["model"].items() if k not in NOT_THE_ENDPOINT}
    config["judge_panel"] = {**config["judge_panel"], "batch": None,
                             "judges": {key: {k: v for k, v in judge.items() if k not in NOT_THE_ENDPOINT}
                                        for key, judge in config["judge_panel"]["judges"].items()}}
    config["cache"] = str(Path(cfg.cache.dir).resolve())
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:32]


def spend_journal(cfg: WildtraceConfig) -> Journal | None:
    """The command's spend journal under the cache folder; None with the cache disabled (the cap is then the
    process's alone)."""
    if not cfg.cache.enabled:
        return None
    return Journal(Path(cfg.cache.dir) / "spend" / f"{command_identity(cfg)}.jsonl")


def make_ledger(cfg: WildtraceConfig, specs: Sequence[EndpointSpec], needed: Sequence[str] = (),
                journal: Journal | None = None) -> Ledger:
    """The run's prices and caps (and the command's earlier spend, from ``journal``); a cap over an endpoint
    in ``needed`` with no price fails here (exit 2)."""
    configs = endpoint_configs(cfg)
    ledger = Ledger.build({s.label: (price_of(configs[s.label]), configs[s.label].max_usd)
                           for s in specs}, cfg.budget.max_usd, journal)
    try:
        ledger.check(needed, {s.label: config_prefix(s.label) for s in specs})
    except BudgetError as exc:
        raise ConfigError(str(exc)) from None
    return ledger


def key_config(spec: EndpointSpec) -> str:
    """The config key that names an endpoint's key variable."""
    return "model.api_key_env" if spec.label == "model" else f"judge_panel.judges.{spec.label}.api_key_env"


def build_scores(cfg: WildtraceConfig, dataset: Dataset, outcome: Outcome) -> dict:
    """scores.json: the headline views and counts, per-judge means, and a row per task."""
    judgments = [j.to_dict() for j in outcome.judgments]
    tasks = views.task_rows({a["question_id"]: a["status"] for a in outcome.answers}, judgments)
    summary = views.summarize(tasks, judgments)
    per_judge: dict[str, dict[str, dict]] = {}
    for j in outcome.judgments:
        per_judge.setdefault(j.question_id, {})[j.judge] = {"status": j.status, "total": j.total, "score": j.score,
                                                           "reason": j.reason}
    meta = {t.question_id: t.meta for t in dataset.tasks}
    rows = []
    for row in tasks:
        qid = row["question_id"]
        score = row["score"]
        rows.append({"question_id": qid, "status": row["status"],
                     "score": None if score is None else float(score),
                     "judges": per_judge.get(qid, {}),
                     **{k: meta[qid][k] for k in ("paradigm", "context_tier") if k in meta[qid]}})
    return {**summary, "partial": outcome.stopped is not None,
            "model": {"name": cfg.model.name, "route": cfg.model.route},
            "judge_panel": cfg.judge_panel.name, "dataset": cfg.dataset.name, "tasks": rows}


@functools.cache
def git_commit() -> str:
    """The harness's git commit (with -dirty), or "unknown" outside a checkout: looked up once a process.

    The code a process runs is the code it imported, so a sweep's later jobs need not ask git again.
    """
    try:
        return _ask_git()
    except Exception:  # noqa: BLE001 - the commit is provenance, never a reason for a run to fail
        return "unknown"


def _ask_git() -> str:
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if commit.returncode != 0:
        return "unknown"
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def dataset_identity(cfg: WildtraceConfig, dataset: Dataset) -> dict:
    """What names the data a run used: file, sha256, and the release's freeze and version."""
    metas = [t.meta for t in dataset.tasks]

    def distinct(key: str) -> str | None:  # every value the tasks carry for key, joined; None if none carries one
        return ",".join(sorted({str(m[key]) for m in metas if key in m})) or None

    return {
        "name": cfg.dataset.name,
        "tasks": str(dataset.tasks_path.resolve()),
        "corpus": str(dataset.corpus_dir.resolve()),
        "tasks_sha256": dataset.tasks_sha256,
        "n_tasks": len(dataset.tasks),
        "freeze_id": distinct("freeze_id"),
        "release_version": distinct("release_version"),
    }


def resume_command(overrides: Sequence[str]) -> str:
    """The command that reruns this job: the same overrides, served from the cache where it can."""
    return " ".join(["python -m wildtrace", *map(shlex.quote, overrides)])


def uncached_stats(cache: Cache) -> dict:
    """run_stats ``uncached``: outcomes the cache refused, the journal holding them, and how many it could not."""
    return {"outcomes": cache.uncached, "journal": str(cache.journal) if cache.journaled else None,
            "lost": cache.uncached - cache.journaled}


async def _execute(plan: Plan, counters: Counters, progress: _Progress, observer: RunObserver,
                   signals: list[int]) -> Outcome:
    stop = Stop()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        signals.append(signum)
        name = signal.Signals(signum).name
        if len(signals) == 1:
            log.warning("%s: stopping — no new requests; in-flight calls have %ss to finish (again to stop now)",
                        name, plan.grace_s)
            stop.request(name)
        else:
            stop.hurry()

    installed = []
    for signum in EXIT_SIGNAL:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no such support
            pass
    endpoints = ([plan.model] if plan.model else []) + plan.judges
    try:
        return await execute(plan, counters, progress, observer, stop)
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
        progress.close(counters)
        await asyncio.gather(*(e.aclose() for e in endpoints))


@contextmanager
def deferred_signals(signals: list[int]) -> Iterator[None]:
    """While the run files are written and tracked, a SIGINT/SIGTERM waits (a second one interrupts)."""
    previous = {}

    def handler(signum: int, frame: object) -> None:
        signals.append(signum)
        if sum(1 for s in signals if s == signum) > 1:
            raise KeyboardInterrupt
        log.warning("%s: finishing the run files and tracking first (again to interrupt)", signal.Signals(signum).name)

    try:
        for signum in EXIT_SIGNAL:
            previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread: nothing to defer
        pass
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def plan_run(cfg: WildtraceConfig) -> tuple[Plan, Survey]:
    """What ``run`` would send, found as ``run`` finds it (dataset, stage, caps, cache, replicates), sending nothing.

    The estimate's entry: the same plan, the same survey, no keys read and no folder written.
    """
    plan = build_plan(cfg)
    return plan, survey(plan, Cache(Path(cfg.cache.dir), cfg.cache.enabled))


def batch_settings(cfg: WildtraceConfig, out_dir: Path) -> BatchSettings | None:
    """Batch mode's settings, or None when no endpoint of the stage is batched."""
    labels = batch_labels(cfg)
    if not labels:
        return None
    shared = Path(cfg.cache.dir) / "batches" if cfg.cache.enabled else None
    return BatchSettings(labels, cfg.batch.poll_s, cfg.batch.max_wait_h, out_dir, shared)


def run(cfg: WildtraceConfig, overrides: Sequence[str] = (), parent_run_id: str | None = None,
        observer: RunObserver | None = None) -> RunResult:
    """Execute one job. Raises DatasetError / ConfigError / MissingKeyError / StorageError before any request.

    ``parent_run_id``: the sweep's parent run, when this job is one of a multirun; ``observer``
    hears the run's events (the entry point hands in MLflow tracking).
    """
    install_log_filter()
    observer = observer or RunObserver()
    out_dir = Path(cfg.out_dir or Path(cfg.root) / "runs" / "adhoc").resolve()
    plan = build_plan(cfg)
    dataset, specs = plan.dataset, plan.specs
    check_writable(out_dir, "the run directory")
    cache = Cache(Path(cfg.cache.dir), cfg.cache.enabled, journal=out_dir / JOURNAL)
    if cfg.cache.enabled:
        check_writable(Path(cfg.cache.dir), "the cache folder (cache.dir)")
        if read := cache.read_journals(journals_under(Path(cfg.root), out_dir)):
            log.info("%d outcome(s) an earlier run could not cache read from its journal (%s)", read, JOURNAL)

    plan_counts = survey(plan, cache)
    ledger = make_ledger(cfg, specs, [s.label for s in specs if plan_counts.needs(s.label)], spend_journal(cfg))
    keys = read_keys(key_needs([s for s in specs if plan_counts.needs(s.label)]))
    plan.given_answers = scrub_answers(plan.given_answers)  # a key echoed into an answers file is not sent on
    log.info("%s", plan_counts.describe([s.label for s in specs if s.label != "model"]))
    counters = Counters(prompt_cache=PromptCacheTally({label: a.price for label, a in ledger.accounts.items()
                                                       if a.price is not None}))

    def on_retry(label: str) -> None:
        counters.retries += 1

    plan = plan.connect(keys, cache, on_retry, ledger, batch_settings(cfg, out_dir))
    endpoints = plan.endpoints
    warnings = [{"code": code, "message": message} for code, message in spec_warnings(cfg)]
    warnings += [o.to_dict() for o in oddities(dataset.tasks, {f: d.chars for f, d in dataset.documents.items()})]
    for w in warnings:
        log.warning("%s", w["message"])
    run_date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    config = config_dict(cfg)
    observer.run_started(RunStart(out_dir=str(out_dir), config=config, n_tasks=len(dataset.tasks),
                                  run_date=run_date, parent_run_id=parent_run_id))
    signals: list[int] = []
    progress = _Progress(len(dataset.tasks), cfg.progress, cfg.progress_every_s, endpoints, ledger)
    try:
        outcome = asyncio.run(_execute(plan, counters, progress, observer, signals))
    finally:
        ledger.close()
    _judges_left(plan, outcome, ledger)

    with deferred_signals(signals):
        result = _write(cfg, dataset, outcome, out_dir, endpoints, counters, overrides, run_date, warnings, config,
                        ledger, cache)
        status = RunStatus.PARTIAL if outcome.stopped else RunStatus.FINISHED
        run_id = observer.run_finished(RunEnd(out_dir=str(out_dir), status=status))
        unlogged = cfg.mlflow.enabled and run_id is None
        if cfg.mlflow.enabled:
            result.headline += f"\nmlflow: {'run ' + run_id if run_id else 'NOT logged'} at {cfg.mlflow.tracking_uri}"
    result.exit_code = _exit_code(outcome, counters, signals, ledger, unlogged and cfg.mlflow.required)
    if unlogged:
        result.headline += (f" (see above); log it later with python -m wildtrace.upload {out_dir}"
                            + ("; exit status 3 (mlflow.required)" if result.exit_code == EXIT_NOT_LOGGED else ""))
    if outcome.stopped:
        result.headline += f"\nresume with: {resume_command(overrides)}"
    elif ledger.not_sent():
        cost = result.stats["cost"]
        result.headline += (f"\nresume with a higher cap: {resume_command(raised_caps(cfg, ledger, overrides))} "
                            f"(this command has paid at most {money(cost['command_usd'])} so far; the calls left "
                            f"cost at most {money(cost['left_usd'])} at one attempt each)")
    result.headline = redact(result.headline)  # the entry point prints it, last (app.show_headline)
    return result


def _write(cfg: WildtraceConfig, dataset: Dataset, outcome: Outcome, out_dir: Path, endpoints: dict[str, Endpoint],
           counters: Counters, overrides: Sequence[str], run_date: str, warnings: list[dict], config: dict,
           ledger: Ledger, cache: Cache) -> RunResult:
    """The run files: responses, judgments (everything received), scores (finished tasks), stats, config."""
    judging = cfg.stage in ("all", "judge")
    rules = served.policies(cfg)
    warnings = warnings + [{"code": c, "message": m} for c, m in served_model_warnings(endpoints, rules)]
    try:
        write_json(out_dir / "responses.json", outcome.received_answers)
        summary = None
        if judging:
            write_json(out_dir / "judgments.json", [j.to_dict() for j in outcome.received_judgments])
            scores = build_scores(cfg, dataset, outcome)
            write_json(out_dir / "scores.json", scores)
            summary = {k: v for k, v in scores.items() if k != "tasks"}
        stats: dict[str, Any] = {
            "harness_version": __version__,
            "git_commit": git_commit(),
            "run_date": run_date,
            "status": RunStatus.PARTIAL if outcome.stopped else RunStatus.FINISHED,
            "stopped": outcome.stopped,
            "dataset": dataset_identity(cfg, dataset),
            "stage": cfg.stage,
            "prompts_version": PROMPTS_VERSION,
            "prompts_sha256": prompts_sha256(),
            "wall_s": outcome.wall_s,
            "retries": counters.retries,
            "cache_hits": sum(e.hits for e in endpoints.values()),
            "requests": {label: e.requests_sent for label, e in endpoints.items()},
            "failures": {f"{label}:{reason}": n for (label, reason), n in counters.failures.items()},
            "served_models": {label: sorted(e.served_models) for label, e in endpoints.items() if e.served_models},
            "served_model_rules": {label: {"expect": r.expect, "on_mismatch": r.on_mismatch, "derived": r.derived}
                                   for label, r in rules.items() if label in endpoints},
            "temperature_dropped": [label for label, e in endpoints.items() if e.temperature_dropped],
            # endpoint → the documented output limit it was sent once it rejected the spec's budget (retry.next_step)
            "budget_lowered": {label: e.budget_lowered for label, e in endpoints.items()
                               if e.budget_lowered is not None},
            "warnings": warnings,
            "uncached": uncached_stats(cache),
            "overrides": list(overrides),
            "effective_max_tokens": effective_max_tokens(cfg.model, cfg.decoding),
            "cost": ledger.stats(),
            "prompt_cache": counters.prompt_cache.stats(),
        }
        write_json(out_dir / "run_stats.json", stats)
        write_json(out_dir / "config.json", config)
    except OSError as exc:
        raise StorageError(exc.errno or 5, f"cannot write the run files in {out_dir}: {exc.strerror or exc}; "
                           f"{_kept_without_run_files(cache)}: rerun the same command") from None
    text = headline(cfg, summary, outcome, out_dir, stats)
    cache_line = counters.prompt_cache.line()
    text = text.replace(f"\nrun dir: {out_dir}", "".join(f"\n{line}" for line in cost_lines(stats["cost"]))
                        + (f"\n{cache_line}" if cache_line else "") + f"\nrun dir: {out_dir}")
    return RunResult(out_dir=out_dir, summary=summary, stats=stats, outcome=outcome, headline=text)


def _exit_code(outcome: Outcome, counters: Counters, signals: list[int], ledger: Ledger,
               unlogged: bool = False) -> int:
    """Signals first, then a failed or stopped run, a spend cap that held calls back, a run MLflow did not log."""
    if signals:
        return EXIT_SIGNAL.get(signal.Signals(signals[0]), ExitCode.SIGINT)
    if outcome.stopped or all_failed(counters):
        return EXIT_FAILED
    if ledger.not_sent():
        return EXIT_BUDGET
    return EXIT_NOT_LOGGED if unlogged else EXIT_OK


def _judges_left(plan: Plan, outcome: Outcome, ledger: Ledger) -> None:
    """Count, as left to send, the judge calls of the answers the cap kept back (their prompts will hold an
    answer of up to the model's budget): for the resume hint's cap."""
    held = {a["question_id"] for a in outcome.answers if a.get("status") == "budget_exhausted"}
    if not held or not plan.judges:
        return
    answer_bytes = ANSWER_BYTES_PER_TOKEN * plan.answer_sampling.max_tokens
    for task in plan.dataset.tasks:
        if task.question_id in held:
            size = len(judge_prompt(task.question_text, task.rubric, "").encode("utf-8")) + answer_bytes
            for judge in plan.judges:
                ledger.expect(judge.label, size, plan.judge_sampling.max_tokens)


def config_dict(cfg: WildtraceConfig) -> dict:
    """The settings as plain data (holds key NAMES only, never keys)."""
    return asdict(cfg)
