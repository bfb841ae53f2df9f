"""The report's tables from runs read back: pure functions over plain data and DataFrames.

A run is what a job wrote (config.json, run_stats.json, scores.json, responses.json).
Task scores are recomputed with ``core.views`` from each run's per-judge rows, so the
report's numbers are the runs' own. Runs are grouped: identical runs count once,
runs that differ only in a replicate index are one leaderboard row (their mean), and
groups that differ in exactly one setting are compared task by task.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wildtrace.core import frames, views
from wildtrace.core.judging import ReplyReason
from wildtrace.core.records import AnswerStatus, JudgmentStatus, TaskStatus
from wildtrace.report.statistics import noise
from wildtrace.report.statistics import stats
from wildtrace.report.labels import RUN_SPECIFIC, label_groups
from wildtrace.report.statistics.stats import DEFAULT_BOOTSTRAP, Bootstrap



@dataclass
class RunData:
    """One benchmark run, read back from MLflow or a run directory."""

    run_id: str  #: the MLflow run id, or the run directory's path
    source: str  #: where it was read: "mlflow" or "run_dir"
    config: dict  #: config.json (the resolved settings, key names only)
    stats: dict  #: run_stats.json
    scores: dict  #: scores.json (headline, counts, a row per task with each judge's verdict)
    responses: list[dict] | None = None  #: responses.json rows, when read
    #: judgments.json slimmed (sources.slim_judgments): question_id, judge, status, points per rubric item
    judgments: list[dict] | None = None
    rubrics: dict[str, list[str]] = field(default_factory=dict)  #: question_id → rubric criteria, when read
    #: the keys its multirun swept (its own sweep overrides, e.g. decoding.temperature), when it was one
    swept: list[str] = field(default_factory=list)
    #: tasks_of's result, kept: every table needs it and core.frames.task_scores is not cheap
    tasks_cache: pd.DataFrame | None = field(default=None, repr=False, compare=False)


@dataclass
class Group:
    """Runs with the same settings but for replicate indices: one leaderboard row."""

    key: str  #: hash of the config without the replicate indices
    runs: list[RunData]  #: the runs, oldest first
    label: str = ""  #: a readable, unique name in this report (model and what tells it apart)


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def setting(run: RunData) -> dict[str, Any]:
    """What a reader compares runs by (old runs may lack reasoning_effort: None)."""
    c, s = run.config, run.stats
    judges = c.get("judge_panel", {}).get("judges", {})
    return {
        "model": c["model"]["name"], "route": c["model"]["route"],
        "panel": c["judge_panel"]["name"], "judges": ",".join(sorted(judges)),
        "temperature": c["decoding"].get("temperature"), "max_tokens": s.get("effective_max_tokens"),
        "reasoning_effort": c["decoding"].get("reasoning_effort"),
        "release": (s.get("dataset") or {}).get("release_version"),
        "replicate_decoding": c["decoding"].get("replicate", 0),
        "replicate_judge_panel": c["judge_panel"].get("replicate", 0),
    }


def _comparable_config(run: RunData) -> dict:
    """The config without run-specific keys and data paths, plus the data's hash and the budget sent."""
    c = {k: copy.deepcopy(v) for k, v in run.config.items() if k not in RUN_SPECIFIC}
    dataset = c.get("dataset", {})
    for path_key in ("tasks", "corpus"):
        dataset.pop(path_key, None)
    c.get("model", {}).pop("family", None)  # a label for the judge-family check, not what the run was asked
    for spec in (c.get("judge_panel", {}).get("judges") or {}).values():
        if isinstance(spec, dict):
            spec.pop("family", None)
    c["_tasks_sha256"] = (run.stats.get("dataset") or {}).get("tasks_sha256")
    c["_effective_max_tokens"] = run.stats.get("effective_max_tokens")
    return c


def config_signature(run: RunData) -> str:
    """Hash of what the run was asked to do (not where or when)."""
    return _sha(_comparable_config(run))


def outcome_signature(run: RunData) -> str:
    """Hash of the run's per-task outcomes (status, score, each judge's verdict)."""
    rows = [{k: t.get(k) for k in ("question_id", "status", "score", "judges")} for t in run.scores.get("tasks", [])]
    return _sha(sorted(rows, key=lambda r: str(r["question_id"])))


def replicate_key(run: RunData) -> str:
    """Hash of the config without the replicate indices: runs sharing it are replicates."""
    c = _comparable_config(run)
    c["decoding"].pop("replicate", None)
    c["judge_panel"].pop("replicate", None)
    return _sha(c)


def dedupe(runs: Iterable[RunData]) -> tuple[list[RunData], dict[str, str]]:
    """Identical runs (same config and same outcomes) count once: the oldest is kept.

    Returns the kept runs and {duplicate run id: kept run id}.
    """
    kept: dict[tuple[str, str], RunData] = {}
    duplicates: dict[str, str] = {}
    for run in sorted(runs, key=lambda r: (str(r.stats.get("run_date")), r.run_id)):
        key = (config_signature(run), outcome_signature(run))
        if key in kept:
            duplicates[run.run_id] = kept[key].run_id
        else:
            kept[key] = run
    return list(kept.values()), duplicates


def group_runs(runs: Sequence[RunData]) -> list[Group]:
    """Replicate groups, each with its stable label (experiments.label_groups)."""
    groups: dict[str, Group] = {}
    for run in runs:
        groups.setdefault(replicate_key(run), Group(replicate_key(run), [])).runs.append(run)
    out = list(groups.values())
    label_groups(out)
    return out


# --------------------------------------------------------------------------- per run


def answer_status(run: RunData) -> dict[str, str | None]:
    """Each task's answer status: responses.json where read, else from scores.json's rows (None if it has none)."""
    from_responses = {r["question_id"]: r["status"] for r in run.responses or []
                      if isinstance(r, dict) and isinstance(r.get("question_id"), str)
                      and r.get("status") in (AnswerStatus.ANSWERED, AnswerStatus.FAILED, AnswerStatus.OUT_OF_CONTEXT)}
    out: dict[str, str | None] = {}
    for row in run.scores.get("tasks", []):
        status = row.get("status")
        if status in (TaskStatus.SCORED, TaskStatus.UNSCORED):
            status = AnswerStatus.ANSWERED
        out[row["question_id"]] = from_responses.get(row["question_id"], status)
    return out


def judgments_of(run: RunData, unit_prefix: str = "") -> pd.DataFrame:
    """Long (task, judge) rows from scores.json: question_id, judge, status, score."""
    rows = [{views.QID: unit_prefix + str(t["question_id"]), views.JUDGE: judge, views.STATUS: v.get("status"),
             views.SCORE: v.get("score"), views.TOTAL: v.get("total"), views.REASON: v.get("reason")}
            for t in run.scores.get("tasks", []) for judge, v in (t.get("judges") or {}).items()]
    return frames.judgments_frame(rows)


def tasks_of(run: RunData) -> pd.DataFrame:
    """The run's task scores, recomputed by ``core.frames.task_scores`` (once per run)."""
    if run.tasks_cache is None:
        run.tasks_cache = frames.task_scores(answer_status(run), judgments_of(run))
    return run.tasks_cache


def meta_of(runs: Iterable[RunData]) -> pd.DataFrame:
    """question_id → paradigm, context_tier (from the runs' task rows)."""
    rows: dict[Any, dict[str, Any]] = {}
    for run in runs:
        for t in run.scores.get("tasks", []):
            rows.setdefault(t["question_id"], {views.QID: t["question_id"], views.PARADIGM: t.get(views.PARADIGM),
                                               views.TIER: t.get(views.TIER)})
    return pd.DataFrame(list(rows.values()), columns=[views.QID, views.PARADIGM, views.TIER])


#: Row names of the tasks a stopped run never reached (the All view counts them 0).
NOT_REACHED = "(not reached {})"


def dataset_size(runs: Iterable[RunData]) -> int:
    """The dataset's task count the runs were asked for (run_stats.json), 0 when none says."""
    sizes = [(r.stats.get("dataset") or {}).get("n_tasks") for r in runs]
    return max([int(n) for n in sizes if isinstance(n, int) and not isinstance(n, bool)], default=0)


def universe(runs: Sequence[RunData]) -> list[str]:
    """Every task the runs hold, plus a placeholder for each task of the dataset none of them
    reached: a stopped run is zero-filled to the dataset's task count, never divided by the
    tasks it finished."""
    seen = sorted({str(t["question_id"]) for r in runs for t in r.scores.get("tasks", [])})
    return seen + [NOT_REACHED.format(i) for i in range(1, dataset_size(runs) - len(seen) + 1)]


def task_matrix(group: Group, tasks: Sequence[str] | None = None) -> pd.DataFrame:
    """Tasks × runs of the group: the score, NaN where the run did not score the task (or never
    reached it); rows are ``tasks`` (default the group's own universe)."""
    columns = {}
    for run in group.runs:
        frame = tasks_of(run)
        scores = frame[views.SCORE].astype(float).where(frame[views.STATUS] == TaskStatus.SCORED)
        columns[run.run_id] = pd.Series(scores.values, index=frame[views.QID].astype(str))
    return pd.DataFrame(columns).reindex(list(tasks) if tasks is not None else universe(group.runs))


def averaged(group: Group, tasks: Sequence[str] | None = None) -> pd.Series:
    """The All view's per-task score of a group: unscored 0, the mean over its replicates."""
    return task_matrix(group, tasks).fillna(0.0).mean(axis=1)


def paired(a: Group, b: Group, level: float = stats.LEVEL) -> dict:
    """b − a on the per-task, replicate-averaged All-view scores over both rows' task universe
    (a paired t: the tasks are the one resampling unit; replicates are averaged, not resampled)."""
    tasks = universe([*a.runs, *b.runs])
    d = stats.paired_t((averaged(b, tasks) - averaged(a, tasks)).to_numpy(), level)
    return d


def _counts(run: RunData) -> dict[str, int]:
    """Task counts of one run: n_tasks is the dataset's (a stopped run's unreached tasks are in
    n_not_reached); n_unscored counts the tasks every judge failed on (0 in the All view, flagged)."""
    statuses = tasks_of(run)[views.STATUS].value_counts()
    held = int(statuses.sum())
    total = max(held, dataset_size([run]))
    return {"n_tasks": total, "n_scored": int(statuses.get(TaskStatus.SCORED, 0)),
            "n_out_of_context": int(statuses.get(TaskStatus.OUT_OF_CONTEXT, 0)),
            "n_failed": int(statuses.get(TaskStatus.FAILED, 0)),
            "n_unscored": int(statuses.get(TaskStatus.UNSCORED, 0)), "n_not_reached": total - held}


def cost_columns(runs: Sequence[RunData], overall: float | None) -> dict[str, float | None]:
    """USD a run's outcomes cost (paid, or paid earlier when cached; mean over replicates) and USD per point
    of the All view. Unknown (a price missing, or runs from before costs were recorded) stays None."""
    costs = [(r.stats.get("cost") or {}).get("results_usd") for r in runs]
    known = [c for c in costs if c is not None]
    if not costs or len(known) < len(costs):
        return {"cost_usd": None, "usd_per_point": None}
    cost = float(np.mean(known))
    return {"cost_usd": cost, "usd_per_point": cost / overall if overall else None}


def _count(value: float) -> int | float:
    """A count averaged over replicates: whole when they agree (the usual case), else the mean."""
    return int(value) if float(value).is_integer() else float(value)


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


# --------------------------------------------------------------------------- tables


def leaderboard(groups: Sequence[Group], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """A row per group: both views (%), bootstrap intervals over tasks, the replicate spread, counts."""
    rows = []
    for g in groups:
        s = setting(g.runs[0])
        m = task_matrix(g).to_numpy()
        per_run_all = [stats.all_value(m[:, [i]]) for i in range(m.shape[1])]
        per_run_scored = [stats.scored_value(m[:, [i]]) for i in range(m.shape[1])]
        o, sc = stats.spread([_pct(v) for v in per_run_all]), stats.spread([_pct(v) for v in per_run_scored])
        (olo, ohi), (slo, shi) = stats.all_interval(m, boot), stats.scored_interval(m, boot)
        counts = pd.DataFrame([_counts(r) for r in g.runs]).mean()
        rows.append({
            "model": g.label, "route": s["route"], "panel": s["panel"], "release": s["release"],
            "run_date": max(str(r.stats.get("run_date")) for r in g.runs),
            "overall": o["mean"], "overall_ci_low": _pct(olo), "overall_ci_high": _pct(ohi),
            "scored": sc["mean"], "scored_ci_low": _pct(slo), "scored_ci_high": _pct(shi),
            "n_runs": len(g.runs), "small_n": m.shape[0] < stats.SMALL_N,
            "overall_sd": o["sd"], "overall_min": o["min"], "overall_max": o["max"],
            **{k: _count(counts[k]) for k in ("n_scored", "n_out_of_context", "n_failed", "n_unscored",
                                              "n_not_reached", "n_tasks")},
            **cost_columns(g.runs, o["mean"]),
        })
    frame = pd.DataFrame(rows)
    return frame.sort_values("overall", ascending=False, kind="stable").reset_index(drop=True) if len(frame) else frame


def _group_frame(g: Group) -> pd.DataFrame:
    """The group as one task_scores-shaped frame: scored where every replicate scored, mean score."""
    m = task_matrix(g)
    all_scored = m.notna().all(axis=1)
    return pd.DataFrame({views.QID: m.index, views.STATUS: np.where(all_scored, TaskStatus.SCORED, TaskStatus.UNSCORED),
                         views.SCORE: m.mean(axis=1).where(all_scored).values})


def matched(groups: Sequence[Group]) -> pd.DataFrame:
    """The spec's robustness check: each row's mean over the tasks every row scored (%)."""
    out = frames.matched_panel({g.label: _group_frame(g) for g in groups})
    out["matched"] = out["matched"].map(_pct)
    return out


#: The spec's CJK rule, as the run recorded it per task (responses.json caps.cap_kind) → the language shown.
LANGUAGES = {"en": "English", "cjk": "Chinese"}


def languages(groups: Sequence[Group], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """The All view per language (English / Chinese by the spec's CJK rule, as each run's caps
    recorded it) per point: n tasks, the mean of the replicate-averaged task scores (%) and its
    t interval (below stats.SMALL_N tasks as ``boot.small_n`` says: t or BCa). Tasks whose language
    no responses.json says are "unknown"."""
    rows = []
    for g in groups:
        kinds = {str(r["question_id"]): LANGUAGES.get(str((r.get("caps") or {}).get("cap_kind")), "unknown")
                 for run in g.runs for r in run.responses or [] if isinstance(r, dict) and "question_id" in r}
        scores = averaged(g)
        by_language = pd.Series([kinds.get(str(q), "unknown") for q in scores.index], index=scores.index)
        for language, part in scores.groupby(by_language, sort=True):
            values = part.to_numpy()
            low, high = stats.small_n_interval(values, boot) if len(values) < stats.SMALL_N \
                else stats.mean_interval(list(values), boot.level)
            rows.append({"model": g.label, "language": language, "n": len(part), "all_pct": _pct(float(part.mean())),
                         "ci_low_pct": _pct(low), "ci_high_pct": _pct(high), "small_n": len(part) < stats.SMALL_N})
    return pd.DataFrame(rows, columns=["model", "language", "n", "all_pct", "ci_low_pct", "ci_high_pct", "small_n"])


def breakdowns(groups: Sequence[Group], by: str) -> pd.DataFrame:
    """Both views (%) per value of ``by`` (paradigm, context_tier) per row, replicates averaged."""
    meta = meta_of(r for g in groups for r in g.runs)
    parts = []
    for g in groups:
        per_run = [frames.breakdown(tasks_of(r), meta, by) for r in g.runs]
        mean = pd.concat(per_run).groupby(by, dropna=False, sort=True).mean(numeric_only=True).reset_index()
        for column in ("n", "n_scored"):
            mean[column] = mean[column].map(_count).astype(object)
        mean.insert(0, "model", g.label)
        parts.append(mean)
    if not parts:
        return pd.DataFrame(columns=["model", by, "all", "scored", "n", "n_scored"])
    out = pd.concat(parts, ignore_index=True)
    out["all"], out["scored"] = out["all"].map(_pct), out["scored"].map(_pct)
    return out


def judge_agreement(runs: Sequence[RunData], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> dict[str, Any]:
    """Pooled over runs, a unit = one distinct answer (its replicates averaged per judge): per
    judge mean, bias, unavailable rate; per pair Pearson, Spearman, mean |a − b| and n;
    Krippendorff's alpha (interval metric) with a bootstrap interval over units; ICC(3,k), the
    reliability of the panel's mean (a judge's constant offset is not disagreement there)."""
    long = pd.concat([_by_answer(r) for r in runs], ignore_index=True) if runs else frames.judgments_frame([])
    if len(long):  # a grading served from the cache (an ablation, identical answers) is one grading
        long = long.drop_duplicates([views.QID, views.JUDGE, JUDGE_REPLICATE]).drop(columns=[JUDGE_REPLICATE])
    if not len(long):
        return {"judges": {}, "pairs": {}, "krippendorff_alpha_interval": None, "n_units": 0}
    ok = long[long[views.STATUS] == JudgmentStatus.SCORED]
    # a unit is one distinct answer; a judge's replicates (and cached copies) of it are averaged
    table = ok.pivot_table(index=views.QID, columns=views.JUDGE, values=views.SCORE, aggfunc="mean")
    panel = table.mean(axis=1)
    judges = frames.judge_means(long)
    for judge, row in judges.items():
        col = table[judge] if judge in table else pd.Series(dtype=float)
        bias = (col - panel).dropna()
        row["bias"] = float(bias.mean()) if len(bias) else None
    pairs = frames.agreement(long)
    for key, row in pairs.items():
        a, b = key.split("~")
        both = table[[a, b]].dropna() if a in table and b in table else pd.DataFrame(columns=[a, b])
        row.pop("corr")  # recomputed: views' std() > 0 test lets a constant float side through
        row["pearson"] = stats.pearson(both[a], both[b]) if len(both) else None
        row["spearman"] = stats.spearman(both[a], both[b]) if len(both) else None
    units = table.T.to_numpy()
    alpha = stats.krippendorff_interval(units) if table.shape[1] >= 2 else None
    low, high = stats.krippendorff_bootstrap(units, boot) if alpha is not None else (None, None)
    icc = stats.icc_consistency_average(table.to_numpy()) if table.shape[1] >= 2 else None
    return {"judges": judges, "pairs": pairs, "krippendorff_alpha_interval": alpha,
            "krippendorff_alpha_ci": [low, high], "icc_3k": icc, "n_units": len(table),
            "n_complete_units": int(table.notna().all(axis=1).sum()), "n_runs": len(runs)}


def _by_answer(run: RunData) -> pd.DataFrame:
    """judgments_of with the unit a distinct answer: the answers' settings (no decoding replicate)
    and the answer bytes, so replicates and cached copies of one answer are one unit."""
    c = _comparable_config(run)
    c.pop("judge_panel", None)
    replicate = c.get("decoding", {}).pop("replicate", 0)
    base, shas = _sha(c)[:16], _answer_shas(run)
    long = judgments_of(run)
    long[views.QID] = [f"{base}/{q}/{shas.get(str(q)) or f'decoding replicate {replicate}'}"
                       for q in long[views.QID]]
    long[JUDGE_REPLICATE] = run.config["judge_panel"].get("replicate", 0)
    return long


#: The long frame's column of the judge replicate a grading belongs to.
JUDGE_REPLICATE = "judge_replicate"


def _varies(g: Group) -> str:
    d = {setting(r)["replicate_decoding"] for r in g.runs}
    j = {setting(r)["replicate_judge_panel"] for r in g.runs}
    return "+".join(name for name, values in (("decoding", d), ("judge_panel", j)) if len(values) > 1)


def replicates(groups: Sequence[Group]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """For groups of two or more replicates: the overall's spread, and the per-task spread."""
    summary, per_task = [], []
    for g in groups:
        if len(g.runs) < 2:
            continue
        m = task_matrix(g)
        filled = m.fillna(0.0)  # the All view's per-task score
        overall = stats.spread([_pct(stats.all_value(m[[c]].to_numpy())) for c in m.columns])
        task_sd = filled.std(axis=1, ddof=1)
        summary.append({"model": g.label, "replicate": _varies(g), "n_runs": len(g.runs),
                        "overall_mean": overall["mean"], "overall_sd": overall["sd"], "overall_min": overall["min"],
                        "overall_max": overall["max"], "overall_range": overall["range"],
                        "task_sd_mean": float(task_sd.mean()),
                        "task_range_max": float((filled.max(axis=1) - filled.min(axis=1)).max())})
        for qid, row in filled.iterrows():
            s = stats.spread(list(row.values))
            per_task.append({"model": g.label, views.QID: qid,
                             **{k: s[k] for k in ("n", "mean", "sd", "min", "max", "range")}})
    return pd.DataFrame(summary), pd.DataFrame(per_task)


def comparison_columns(d: dict, holm_p: float | None = None) -> dict:
    """A paired t's result as report columns (pp; p-values; the verdict in words)."""
    p = d["p_value"] if holm_p is None else holm_p
    return {"diff_pp": _pct(d["mean_diff"]), "ci_low_pp": _pct(d["ci_low"]), "ci_high_pp": _pct(d["ci_high"]),
            "sd_diff_pp": _pct(d["sd_diff"]), "n_tasks": d["n"], "p_value": d["p_value"],
            "distinguishable": None if p is None else bool(p < 1.0 - LEVEL_FOR_WORDS),
            "small_n": d["small_n"]}


#: The level the words "distinguishable" are read at (two-sided 5 %).
LEVEL_FOR_WORDS = 0.95


def provenance(groups: Sequence[Group], duplicates: dict[str, str]) -> pd.DataFrame:
    """What the spec says a fresh run must report, per run: route, endpoint date, context
    policy, decoding, panel — plus the data, the harness commit and where it was read."""
    rows = []
    for g in groups:
        for r in g.runs:
            c, s = r.config, setting(r)
            judges = c["judge_panel"].get("judges", {})
            rows.append({
                "model": g.label, "run_id": r.run_id, "source": r.source, "route": s["route"],
                "endpoint_date": r.stats.get("run_date"),
                "context_policy": f"native caps en={c['model']['caps']['en']} cjk={c['model']['caps']['cjk']} chars",
                "decoding": f"t={s['temperature']} max_tokens={s['max_tokens']} effort={s['reasoning_effort']} "
                            f"replicate={s['replicate_decoding']}",
                "panel": f"{s['panel']}: " + ", ".join(f"{k}={v.get('route')}" for k, v in sorted(judges.items()))
                         + f"; t={c['judge_panel'].get('temperature')} replicate={s['replicate_judge_panel']}",
                "release": s["release"], "tasks_sha256": str((r.stats.get("dataset") or {}).get("tasks_sha256"))[:12],
                "git_commit": str(r.stats.get("git_commit"))[:12],
                "duplicates": ", ".join(d for d, k in duplicates.items() if k == r.run_id),
            })
    return pd.DataFrame(rows)


def prompt_cache(groups: Sequence[Group]) -> pd.DataFrame:
    """What the providers' prompt caches did, per run and endpoint, as run_stats.json's ``prompt_cache`` says:
    the input tokens sent, those read from and written to the cache, the hit rate (the share of input read,
    %) and the USD saved (every input token a miss, less the bill; a write counts against it)."""
    rows = []
    for g in groups:
        for r in g.runs:
            for endpoint, row in ((r.stats.get("prompt_cache") or {}).get("endpoints") or {}).items():
                rows.append({"model": g.label, "run_id": r.run_id, "endpoint": endpoint, "calls": row.get("calls"),
                             "input_tokens": row.get("input_tokens"),
                             "cached_input_tokens": row.get("cached_input_tokens"),
                             "cache_write_tokens": row.get("cache_write_tokens"),
                             "hit_rate_pct": _pct(row.get("hit_rate")), "saved_usd": row.get("saved_usd")})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- judge noise
#: Judge reasons that mean the reply came back but held no usable total (core.judging).
PARSE_FAILURES = (ReplyReason.EMPTY_REPLY, ReplyReason.NO_NUMERIC_TOTAL)


def _answers_key(run: RunData) -> str:
    """Hash of what produced the run's answers: the config without the judge panel (the decoding
    replicate kept, so each answer set is its own)."""
    c = _comparable_config(run)
    c.pop("judge_panel", None)
    return _sha(c)


def _judge_key(run: RunData, judge: str) -> str:
    """Hash of one judge's own settings: its endpoint and the panel's sampling (not its fellow judges)."""
    panel = run.config.get("judge_panel", {})
    return _sha({"judge": (panel.get("judges") or {}).get(judge), "temperature": panel.get("temperature"),
                 "max_tokens": panel.get("max_tokens")})


def _answer_shas(run: RunData) -> dict[str, str]:
    """question_id → sha256 of the answer text, where responses.json was read (the answer bytes)."""
    return {r["question_id"]: hashlib.sha256(r["response"].encode("utf-8")).hexdigest()[:16]
            for r in run.responses or [] if isinstance(r, dict) and isinstance(r.get("question_id"), str)
            and isinstance(r.get("response"), str)}


def _unit_keys(run: RunData) -> Callable[[str, str], str]:
    """(judge, question_id) → the unit: the same answer bytes graded by the same judge with the
    same settings. The run's hashes are taken once (a release's worth of rows would rehash them)."""
    answers, shas, judges = _answers_key(run)[:16], _answer_shas(run), {}

    def unit(judge: str, qid: str) -> str:
        if judge not in judges:
            judges[judge] = _judge_key(run, judge)[:16]
        return f"{answers}/{judges[judge]}/{qid}/{shas.get(qid, '')}"
    return unit


def judge_replicate_frames(runs: Sequence[RunData]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Long frames for intra-rater reliability: (unit, judge, replicate, score) from scores.json and
    (unit, judge, replicate, question_id, item, points) from judgments.json where it was read.
    A run repeating another's (unit, judge, replicate) — an ablation graded from the cache — counts once."""
    scores, items = [], []
    for run in runs:
        rep = run.config["judge_panel"].get("replicate", 0)
        unit = _unit_keys(run)
        for t in run.scores.get("tasks", []):
            for judge, v in (t.get("judges") or {}).items():
                score = v.get("score") if v.get("status") == JudgmentStatus.SCORED else None
                scores.append({noise.UNIT: unit(judge, t["question_id"]), noise.JUDGE: judge,
                               noise.REPLICATE: rep, noise.SCORE: np.nan if score is None else float(score)})
        for j in run.judgments or []:
            if j.get("status") == JudgmentStatus.SCORED and j.get("points"):
                key = unit(j["judge"], j["question_id"])
                items += [{noise.UNIT: key, noise.JUDGE: j["judge"], noise.REPLICATE: rep,
                           noise.QID: j["question_id"], noise.ITEM: k, noise.POINTS: p}
                          for k, p in enumerate(j["points"], start=1)]
    keys = [noise.UNIT, noise.JUDGE, noise.REPLICATE]
    score_frame = pd.DataFrame(scores, columns=[*keys, noise.SCORE]).drop_duplicates(keys)
    item_frame = pd.DataFrame(items, columns=[*keys, noise.QID, noise.ITEM, noise.POINTS]) \
        .drop_duplicates([*keys, noise.ITEM])
    return score_frame, item_frame


def criteria_of(runs: Iterable[RunData]) -> dict[str, list[str]]:
    """question_id → rubric criteria, from the first run that has them."""
    out: dict[str, list[str]] = {}
    for run in runs:
        for qid, criteria in run.rubrics.items():
            out.setdefault(qid, criteria)
    return out


def judge_failures(runs: Sequence[RunData]) -> dict[str, dict[str, int]]:
    """Per judge: calls, and the unavailable ones split into parse failures (a reply with no
    usable total) and call failures (no reply: HTTP, transport, refusal …). All stay in the
    denominator of unavailable_rate."""
    out: dict[str, dict[str, int]] = {}
    for run in runs:
        for t in run.scores.get("tasks", []):
            for judge, v in (t.get("judges") or {}).items():
                row = out.setdefault(judge, {"n_calls": 0, "n_parse_failures": 0, "n_call_failures": 0})
                row["n_calls"] += 1
                if v.get("status") != JudgmentStatus.SCORED:
                    row["n_parse_failures" if v.get("reason") in PARSE_FAILURES else "n_call_failures"] += 1
    return out


def with_judge_noise(agreement: dict[str, Any], runs: Sequence[RunData],
                     boot: Bootstrap = DEFAULT_BOOTSTRAP) -> tuple[dict[str, Any], pd.DataFrame]:
    """judge_agreement plus each judge against itself ("intra_rater", "intra_rater_items") and
    its failure counts; and the per-item flip table."""
    scores, items = judge_replicate_frames(runs)
    per_item, flips = noise.item_flips(items, criteria_of(runs))
    for judge, counts in judge_failures(runs).items():
        if judge in agreement.get("judges", {}):
            agreement["judges"][judge].update(counts)
    return {**agreement, "intra_rater": noise.intra_rater(scores, boot), "intra_rater_items": per_item}, flips


def judge_splits(runs: Sequence[RunData], top: int = 20) -> pd.DataFrame:
    """The rubric items the panel splits on most (a unit = one run's grading of one task)."""
    rows = [{noise.UNIT: f"{run.run_id}/{j['question_id']}", noise.JUDGE: j["judge"], noise.QID: j["question_id"],
             noise.ITEM: k, noise.POINTS: p}
            for run in runs for j in run.judgments or [] if j.get("status") == JudgmentStatus.SCORED and j.get("points")
            for k, p in enumerate(j["points"], start=1)]
    frame = pd.DataFrame(rows, columns=[noise.UNIT, noise.JUDGE, noise.QID, noise.ITEM, noise.POINTS])
    return noise.judge_splits(frame, criteria_of(runs), top)


def gradings(g: Group, tasks: Sequence[str] | None = None) -> list[list[list[float]]]:
    """Per task, per distinct answer, its distinct gradings (All-view scores, unscored 0).

    An answer is its bytes (responses.json; the decoding replicate where it was not read); a
    grading is one judge replicate of that answer. Answer replicates that came back
    byte-identical were graded once (the judge cache's key is the prompt and the judge
    replicate): their copies are the same grading and count once.
    """
    m = task_matrix(g, tasks).fillna(0.0)
    shas = [_answer_shas(r) for r in g.runs]
    out = []
    for qid, row in m.iterrows():
        answers: dict[str, dict[int, float]] = {}
        for run, sha, value in zip(g.runs, shas, row.to_numpy(), strict=True):
            answer = sha.get(str(qid)) or f"decoding replicate {setting(run)['replicate_decoding']}"
            answers.setdefault(answer, {}).setdefault(setting(run)["replicate_judge_panel"], float(value))
        out.append([list(grades.values()) for grades in answers.values()])
    return out


def noise_rows(groups: Sequence[Group], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> list[dict]:
    """noise.json's rows: for each row with replicates, the variance components (pp², expected
    mean squares) of one grading's task score from tasks, answers and judges with bootstrap
    intervals over tasks; a negative estimate kept and flagged; the sd of the row's score."""
    rows = []
    for g in groups:
        if len(g.runs) < 2:
            continue
        cells = gradings(g)
        rows.append({"model": g.label, "n_runs": len(g.runs), **noise.split(cells, boot)})
    return rows


def judge_identity(run: RunData) -> dict[str, Any]:
    """What a judge's verdicts depend on besides the answer: per judge its route, served model(s)
    and settings, and the judge prompt's digest."""
    panel = run.config.get("judge_panel", {})
    served = run.stats.get("served_models") or {}
    judges = {}
    for label, spec in (panel.get("judges") or {}).items():
        spec = spec if isinstance(spec, dict) else {}
        judges[label] = {"route": spec.get("route"), "served": ",".join(map(str, served.get(label) or [])),
                         "settings": _sha({**{k: v for k, v in spec.items() if k not in ("route", "name", "family")},
                                           "temperature": panel.get("temperature"),
                                           "max_tokens": panel.get("max_tokens")})}
    return {"judges": judges, "prompt": run.stats.get("prompts_sha256")}


def drift(a: Group, b: Group) -> str:
    """How the judges of two rows (or of the runs within either) differ other than by membership:
    served model, route, settings, prompt digest. "" when they do not."""
    found: list[str] = []
    ids = [judge_identity(r) for r in a.runs + b.runs]
    prompts = {i["prompt"] for i in ids if i["prompt"]}
    if len(prompts) > 1:
        found.append("judge prompt digest")
    shared = set.intersection(*(set(i["judges"]) for i in ids)) if ids else set()
    for judge in sorted(shared):
        for key, words in (("served", "served model"), ("route", "route"), ("settings", "settings")):
            values = {i["judges"][judge][key] for i in ids if i["judges"][judge][key] not in (None, "")}
            if len(values) > 1:
                found.append(f"{words} of {judge} ({' vs '.join(sorted(map(str, values)))})"
                             if key != "settings" else f"{words} of {judge}")
    return "; ".join(found)


def with_replicate_drift(groups: Sequence[Group], summary: pd.DataFrame) -> pd.DataFrame:
    """replicates plus judge_drift: how the judges of one row's runs differ (a served model that
    moved between reruns, say), "" when they do not."""
    if summary.empty:
        return summary
    by_label = {g.label: g for g in groups}
    out = summary.copy()
    out["judge_drift"] = [drift(by_label[m], by_label[m]) for m in out["model"]]
    return out


def leaderboard_gaps(groups: Sequence[Group], board: pd.DataFrame, boot: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """Each pair of adjacent leaderboard rows: upper − lower, a paired t over the per-task,
    replicate-averaged scores, its p-value Holm-adjusted across the leaderboard's gaps."""
    columns = ["rank", "upper", "lower", "gap_pp", "ci_low_pp", "ci_high_pp", "sd_diff_pp", "n_tasks", "p_value",
               "p_holm", "distinguishable", "small_n", "judge_drift"]
    if len(board) < 2:
        return pd.DataFrame(columns=columns)
    by_label = {g.label: g for g in groups}
    tests = []
    # neighbours: the second column is one shorter, so the last row pairs with nothing
    for upper, lower in zip(board["model"], board["model"].iloc[1:], strict=False):
        tests.append((upper, lower, paired(by_label[lower], by_label[upper], boot.level)))
    adjusted = stats.holm([d["p_value"] for _, _, d in tests])
    rows = []
    for rank, ((upper, lower, d), p) in enumerate(zip(tests, adjusted, strict=True), start=1):
        cols = comparison_columns(d, p)
        rows.append({"rank": rank, "upper": upper, "lower": lower, "gap_pp": cols.pop("diff_pp"), **cols,
                     "p_holm": p, "judge_drift": drift(by_label[lower], by_label[upper])})
    return pd.DataFrame(rows, columns=columns)
