"""One job from validated settings to run files: the importable heart behind the CLI.

Order matters: everything that can fail on input (dataset, responses file, keys) fails
before the first request; every outcome is cached the moment it arrives; the run files
are written whole at the end; MLflow trouble never costs the results.
"""

from __future__ import annotations

import asyncio
import datetime
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from wildtrace import __version__
from wildtrace.config import EndpointConfig, WildtraceConfig, caps_of, effective_max_tokens

from wildtrace.core import views
from wildtrace.core.prompts import PROMPTS_VERSION, prompts_sha256
from wildtrace.providers.base import EndpointSpec, Sampling
from wildtrace.runtime.cache import Cache
from wildtrace.runtime.dataset import Dataset, load_dataset
from wildtrace.runtime.outputs import write_json
from wildtrace.runtime.pipeline import Counters, Outcome, Plan, execute, make_caller, read_keys
from wildtrace.runtime.responses import load_responses
from wildtrace.runtime.retry import RetryPolicy


@dataclass
class RunResult:
    """Where the run wrote its files, and its headline numbers (None for stage=answer)."""

    out_dir: Path
    summary: dict | None
    stats: dict
    outcome: Outcome


def endpoint_spec(label: str, e: EndpointConfig, budget_field: str = "max_tokens") -> EndpointSpec:
    """An endpoint config (the model's or a judge's) as the spec the runtime calls."""
    return EndpointSpec(label=label, name=e.name, provider=e.provider, route=e.route, base_url=e.base_url,
                        api_key_env=e.api_key_env, max_concurrency=e.max_concurrency, timeout_s=e.timeout_s,
                        send_temperature=e.send_temperature, budget_field=budget_field, extra_body=e.extra_body)


def model_spec(cfg: WildtraceConfig) -> EndpointSpec:
    """The model under test as an endpoint."""
    return endpoint_spec("model", cfg.model, cfg.model.budget_field)


def judge_specs(cfg: WildtraceConfig) -> list[EndpointSpec]:
    """The panel's judges as endpoints, in config order."""
    return [endpoint_spec(key, judge) for key, judge in cfg.judge_panel.judges.items()]


def build_scores(cfg: WildtraceConfig, dataset: Dataset, outcome: Outcome) -> dict:
    """scores.json: the headline views and counts, per-judge means, and a row per task."""
    judgments = views.judgments_frame(j.to_dict() for j in outcome.judgments)
    tasks = views.task_scores({a["question_id"]: a["status"] for a in outcome.answers}, judgments)
    summary = views.summarize(tasks, judgments)
    per_judge: dict[str, dict[str, dict]] = {}
    for j in outcome.judgments:
        per_judge.setdefault(j.question_id, {})[j.judge] = {"status": j.status, "total": j.total, "score": j.score,
                                                           "reason": j.reason}
    meta = {t.question_id: t.meta for t in dataset.tasks}
    rows = []
    for row in tasks.to_dict("records"):
        qid = row["question_id"]
        score = row["score"]
        rows.append({"question_id": qid, "status": row["status"],
                     "score": None if score is None or score != score else float(score),
                     "judges": per_judge.get(qid, {}),
                     **{k: meta[qid][k] for k in ("paradigm", "context_tier") if k in meta[qid]}})
    return {**summary, "model": {"name": cfg.model.name, "route": cfg.model.route},
            "judge_panel": cfg.judge_panel.name, "dataset": cfg.dataset.name, "tasks": rows}


def git_commit() -> str:
    """The harness's git commit (with -dirty), or "unknown" outside a checkout."""
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
    return {
        "name": cfg.dataset.name,
        "tasks": str(dataset.tasks_path.resolve()),
        "corpus": str(dataset.corpus_dir.resolve()),
        "tasks_sha256": dataset.tasks_sha256,
        "n_tasks": len(dataset.tasks),
        "freeze_id": ",".join(sorted({str(m["freeze_id"]) for m in metas if "freeze_id" in m})) or None,
        "release_version": ",".join(sorted({str(m["release_version"]) for m in metas if "release_version" in m})) or None,
    }


def headline(cfg: WildtraceConfig, summary: dict | None, outcome: Outcome, out_dir: Path) -> str:
    """The lines printed at the end of a run."""
    c = outcome.counters
    lines = [f"wildtrace {__version__}: model={cfg.model.name} panel={cfg.judge_panel.name} "
             f"dataset={cfg.dataset.name} ({len(outcome.answers)} tasks, stage={cfg.stage})"]
    if summary is not None:
        scored = "n/a" if summary["scored"] is None else f"{summary['scored']:.2f}%"
        overall = "n/a" if summary["overall"] is None else f"{summary['overall']:.2f}%"
        lines.append(f"overall (All view): {overall}   scored: {scored} (n={summary['n_scored']})")
        lines.append(f"scored {summary['n_scored']} · unscored {summary['n_unscored']} · failed {summary['n_failed']}"
                     f" · out of context {summary['n_out_of_context']} · missing {summary['n_missing']}"
                     f" · of {summary['n_total']}")
    else:
        lines.append(f"answered {c.answered} · failed {c.failed} · out of context {c.out_of_context}")
    lines.append(f"run dir: {out_dir}")
    return "\n".join(lines)


async def _execute(plan: Plan, counters: Counters, show_progress: bool) -> Outcome:
    from tqdm import tqdm

    bar = tqdm(total=len(plan.dataset.tasks), desc="tasks", unit="task", disable=None if show_progress else True,
               file=sys.stderr)

    def progress(c: Counters, task_done: bool) -> None:
        if task_done:
            bar.update(1)
        bar.set_postfix(c.as_postfix(), refresh=False)

    try:
        return await execute(plan, counters, progress)
    finally:
        bar.close()
        callers = ([plan.model] if plan.model else []) + plan.judges
        await asyncio.gather(*(c.endpoint.endpoint.aclose() for c in callers))


def run(cfg: WildtraceConfig, overrides: Sequence[str] = (), parent_run_id: str | None = None) -> RunResult:
    """Execute one job. Raises DatasetError / ConfigError / MissingKeyError before any request.

    ``parent_run_id``: the sweep's MLflow parent run, when this job is one of a multirun.
    """
    out_dir = Path(cfg.out_dir or Path(cfg.root) / "runs" / "adhoc").resolve()
    dataset = load_dataset(cfg.dataset.tasks, cfg.dataset.corpus, cfg.dataset.ids, cfg.dataset.limit)
    answering = cfg.stage in ("all", "answer")
    judging = cfg.stage in ("all", "judge")
    specs = ([model_spec(cfg)] if answering else []) + (judge_specs(cfg) if judging else [])
    keys = read_keys(specs)
    given = load_responses(cfg.responses, {t.question_id for t in dataset.tasks}) if cfg.stage == "judge" else None

    cache = Cache(Path(cfg.cache.dir), cfg.cache.enabled)
    counters = Counters()

    def on_retry(label: str) -> None:
        counters.retries += 1

    retry = RetryPolicy(cfg.retry.max_retries, cfg.retry.backoff_base_s, cfg.retry.backoff_max_s,
                        cfg.retry.retry_after_max_s)
    callers = {s.label: make_caller(s, keys[s.label], retry, cache, on_retry) for s in specs}
    plan = Plan(
        dataset=dataset,
        caps=caps_of(cfg.model),
        answer_sampling=Sampling(cfg.decoding.temperature, effective_max_tokens(cfg.model, cfg.decoding)),
        judge_sampling=Sampling(cfg.judge_panel.temperature, cfg.judge_panel.max_tokens),
        answer_replicate=cfg.decoding.replicate,
        judge_replicate=cfg.judge_panel.replicate,
        model=callers.get("model"),
        judges=[callers[s.label] for s in specs if s.label != "model"],
        given_answers=given,
    )
    outcome = asyncio.run(_execute(plan, counters, cfg.progress))

    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "responses.json", outcome.answers)
    summary = None
    if judging:
        write_json(out_dir / "judgments.json", [j.to_dict() for j in outcome.judgments])
        scores = build_scores(cfg, dataset, outcome)
        write_json(out_dir / "scores.json", scores)
        summary = {k: v for k, v in scores.items() if k != "tasks"}
    stats = {
        "harness_version": __version__,
        "git_commit": git_commit(),
        "run_date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "dataset": dataset_identity(cfg, dataset),
        "stage": cfg.stage,
        "prompts_version": PROMPTS_VERSION,
        "prompts_sha256": prompts_sha256(),
        "wall_s": outcome.wall_s,
        "retries": counters.retries,
        "cache_hits": sum(c.endpoint.hits for c in callers.values()),
        "requests": {label: c.endpoint.endpoint.requests_sent for label, c in callers.items()},
        "overrides": list(overrides),
        "effective_max_tokens": effective_max_tokens(cfg.model, cfg.decoding),
    }
    write_json(out_dir / "run_stats.json", stats)
    write_json(out_dir / "config.json", config_dict(cfg))
    text = headline(cfg, summary, outcome, out_dir)
    if cfg.mlflow.enabled:
        from wildtrace.tracking.mlflow_logger import log_run_dir_safely

        run_id = log_run_dir_safely(out_dir, parent_run_id=parent_run_id)
        text += f"\nmlflow: {'run ' + run_id if run_id else 'NOT logged (see above)'} at {cfg.mlflow.tracking_uri}"
    print(text)  # last, so the headline is what a user sees when the run ends
    return RunResult(out_dir=out_dir, summary=summary, stats=stats, outcome=outcome)


def config_dict(cfg: WildtraceConfig) -> dict:
    """The settings as plain data (holds key NAMES only, never keys)."""
    return asdict(cfg)



