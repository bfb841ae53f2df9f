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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wildtrace.core import records as R
from wildtrace.core import views
from wildtrace.report import stats
from wildtrace.report.stats import Bootstrap

#: Config keys that name where or when a run happened, not what it did.
RUN_SPECIFIC = ("out_dir", "progress", "root", "cache", "mlflow", "responses")
#: The settings a one-setting comparison may differ in (label → how to read it).
COMPARED = ("temperature", "max_tokens", "panel", "reasoning_effort")


@dataclass
class RunData:
    """One benchmark run, read back from MLflow or a run directory."""

    run_id: str  #: the MLflow run id, or the run directory's path
    source: str  #: where it was read: "mlflow" or "run_dir"
    config: dict  #: config.json (the resolved settings, key names only)
    stats: dict  #: run_stats.json
    scores: dict  #: scores.json (headline, counts, a row per task with each judge's verdict)
    responses: list[dict] | None = None  #: responses.json rows, when read
    #: tasks_of's result, kept: every table needs it and core.views.task_scores is not cheap
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


def base_key(run: RunData) -> str:
    """Hash of the config without replicates and the COMPARED settings (and the panel's judges)."""
    c = _comparable_config(run)
    for key in ("replicate", "temperature", "max_tokens", "reasoning_effort"):
        c["decoding"].pop(key, None)
    c.pop("judge_panel", None)
    c.pop("_effective_max_tokens", None)
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
    """Replicate groups, each labelled by its model and the settings that tell groups apart."""
    groups: dict[str, Group] = {}
    for run in runs:
        groups.setdefault(replicate_key(run), Group(replicate_key(run), [])).runs.append(run)
    out = list(groups.values())
    _label(out)
    return out


def _judges_split_a_panel(by_model: dict[str, list[dict]]) -> bool:
    """True when two rows of one model share a panel name but not its judges (a dropped judge)."""
    return any(len({s["judges"] for s in same if s["panel"] == panel}) > 1
               for same in by_model.values() for panel in {s["panel"] for s in same})


def _label(groups: list[Group]) -> None:
    """Name each group by its model and the settings that tell two rows of one model apart."""
    shown = ("route", "panel", "judges", "temperature", "max_tokens", "reasoning_effort", "release")
    settings = [setting(g.runs[0]) for g in groups]
    by_model: dict[str, list[dict]] = {}
    for s in settings:
        by_model.setdefault(s["model"], []).append(s)
    # a setting is shown when it tells apart two rows of the same model
    varying = [k for k in shown if any(len({str(s[k]) for s in same}) > 1 for same in by_model.values())]
    if "panel" in varying and "judges" in varying and not _judges_split_a_panel(by_model):
        varying.remove("judges")  # the panel's name already says which judges
    short = {"temperature": "t", "max_tokens": "mt", "reasoning_effort": "effort"}
    seen: dict[str, int] = {}
    for group, s in zip(groups, settings):
        parts = [s["model"]] + [f"{short.get(k, k)}={s[k]}" for k in varying]
        label = " · ".join(parts)
        seen[label] = seen.get(label, 0) + 1
        group.label = label if seen[label] == 1 else f"{label} #{seen[label]}"


# --------------------------------------------------------------------------- per run


def answer_status(run: RunData) -> dict[str, str]:
    """Each task's answer status: responses.json where read, else from scores.json's rows."""
    from_responses = {r["question_id"]: r.get("status") for r in run.responses or []
                      if isinstance(r, dict) and isinstance(r.get("question_id"), str)
                      and r.get("status") in (R.ANSWERED, R.FAILED, R.OUT_OF_CONTEXT)}
    out = {}
    for row in run.scores.get("tasks", []):
        status = row.get("status")
        if status in (R.SCORED, R.UNSCORED):
            status = R.ANSWERED
        out[row["question_id"]] = from_responses.get(row["question_id"], status)
    return out


def judgments_of(run: RunData, unit_prefix: str = "") -> pd.DataFrame:
    """Long (task, judge) rows from scores.json: question_id, judge, status, score."""
    rows = [{views.QID: unit_prefix + str(t["question_id"]), views.JUDGE: judge, views.STATUS: v.get("status"),
             views.SCORE: v.get("score"), views.TOTAL: v.get("total"), views.REASON: v.get("reason")}
            for t in run.scores.get("tasks", []) for judge, v in (t.get("judges") or {}).items()]
    return views.judgments_frame(rows)


def tasks_of(run: RunData) -> pd.DataFrame:
    """The run's task scores, recomputed by ``core.views.task_scores`` (once per run)."""
    if run.tasks_cache is None:
        run.tasks_cache = views.task_scores(answer_status(run), judgments_of(run))
    return run.tasks_cache


def meta_of(runs: Iterable[RunData]) -> pd.DataFrame:
    """question_id → paradigm, context_tier (from the runs' task rows)."""
    rows = {}
    for run in runs:
        for t in run.scores.get("tasks", []):
            rows.setdefault(t["question_id"], {views.QID: t["question_id"], views.PARADIGM: t.get(views.PARADIGM),
                                               views.TIER: t.get(views.TIER)})
    return pd.DataFrame(list(rows.values()), columns=[views.QID, views.PARADIGM, views.TIER])


def task_matrix(group: Group) -> pd.DataFrame:
    """Tasks × runs of the group: the score, NaN where the run did not score the task."""
    columns = {}
    for run in group.runs:
        frame = tasks_of(run)
        scores = frame[views.SCORE].astype(float).where(frame[views.STATUS] == R.SCORED)
        columns[run.run_id] = pd.Series(scores.values, index=frame[views.QID])
    return pd.DataFrame(columns).sort_index()


def _counts(run: RunData) -> dict[str, int]:
    statuses = tasks_of(run)[views.STATUS].value_counts()
    return {"n_tasks": int(statuses.sum()), "n_scored": int(statuses.get(R.SCORED, 0)),
            "n_out_of_context": int(statuses.get(R.OUT_OF_CONTEXT, 0)), "n_failed": int(statuses.get(R.FAILED, 0))}


def cost_columns(runs: Sequence[RunData], overall: float | None) -> dict[str, float | None]:
    """USD a run's outcomes cost (paid, or paid earlier when cached; mean over replicates) and USD per point
    of the All view. Unknown (a price missing, or runs from before costs were recorded) stays None."""
    costs = [(r.stats.get("cost") or {}).get("results_usd") for r in runs]
    if not costs or any(c is None for c in costs):
        return {"cost_usd": None, "usd_per_point": None}
    cost = float(np.mean(costs))
    return {"cost_usd": cost, "usd_per_point": cost / overall if overall else None}


def _count(value: float) -> int | float:
    """A count averaged over replicates: whole when they agree (the usual case), else the mean."""
    return int(value) if float(value).is_integer() else float(value)


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


# --------------------------------------------------------------------------- tables


def leaderboard(groups: Sequence[Group], boot: Bootstrap = Bootstrap()) -> pd.DataFrame:
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
            "n_runs": len(g.runs), "overall_sd": o["sd"], "overall_min": o["min"], "overall_max": o["max"],
            **{k: _count(counts[k]) for k in ("n_scored", "n_out_of_context", "n_failed", "n_tasks")},
            **cost_columns(g.runs, o["mean"]),
        })
    frame = pd.DataFrame(rows)
    return frame.sort_values("overall", ascending=False, kind="stable").reset_index(drop=True) if len(frame) else frame


def _group_frame(g: Group) -> pd.DataFrame:
    """The group as one task_scores-shaped frame: scored where every replicate scored, mean score."""
    m = task_matrix(g)
    all_scored = m.notna().all(axis=1)
    return pd.DataFrame({views.QID: m.index, views.STATUS: np.where(all_scored, R.SCORED, R.UNSCORED),
                         views.SCORE: m.mean(axis=1).where(all_scored).values})


def matched(groups: Sequence[Group]) -> pd.DataFrame:
    """The spec's robustness check: each row's mean over the tasks every row scored (%)."""
    out = views.matched_panel({g.label: _group_frame(g) for g in groups})
    out["matched"] = out["matched"].map(_pct)
    return out


def breakdowns(groups: Sequence[Group], by: str) -> pd.DataFrame:
    """Both views (%) per value of ``by`` (paradigm, context_tier) per row, replicates averaged."""
    meta = meta_of(r for g in groups for r in g.runs)
    parts = []
    for g in groups:
        frames = [views.breakdown(tasks_of(r), meta, by) for r in g.runs]
        mean = pd.concat(frames).groupby(by, dropna=False, sort=True).mean(numeric_only=True).reset_index()
        for column in ("n", "n_scored"):
            mean[column] = mean[column].map(_count).astype(object)
        mean.insert(0, "model", g.label)
        parts.append(mean)
    if not parts:
        return pd.DataFrame(columns=["model", by, "all", "scored", "n", "n_scored"])
    out = pd.concat(parts, ignore_index=True)
    out["all"], out["scored"] = out["all"].map(_pct), out["scored"].map(_pct)
    return out


def judge_agreement(runs: Sequence[RunData]) -> dict[str, Any]:
    """Pooled over runs (a unit = one run's task): per judge mean, bias, unavailable rate;
    per pair Pearson, Spearman, mean |a − b| and n; Krippendorff's alpha (interval)."""
    long = pd.concat([judgments_of(r, unit_prefix=f"{r.run_id}/") for r in runs], ignore_index=True) \
        if runs else views.judgments_frame([])
    if not len(long):
        return {"judges": {}, "pairs": {}, "krippendorff_alpha_interval": None, "n_units": 0}
    ok = long[long[views.STATUS] == R.JUDGED]
    table = ok.pivot_table(index=views.QID, columns=views.JUDGE, values=views.SCORE, aggfunc="mean")
    panel = table.mean(axis=1)
    judges = views.judge_means(long)
    for judge, row in judges.items():
        col = table[judge] if judge in table else pd.Series(dtype=float)
        bias = (col - panel).dropna()
        row["bias"] = float(bias.mean()) if len(bias) else None
    pairs = views.agreement(long)
    for key, row in pairs.items():
        a, b = key.split("~")
        both = table[[a, b]].dropna() if a in table and b in table else pd.DataFrame(columns=[a, b])
        row.pop("corr")  # recomputed: views' std() > 0 test lets a constant float side through
        row["pearson"] = stats.pearson(both[a], both[b]) if len(both) else None
        row["spearman"] = stats.spearman(both[a], both[b]) if len(both) else None
    alpha = stats.krippendorff_interval(table.T.to_numpy()) if table.shape[1] >= 2 else None
    return {"judges": judges, "pairs": pairs, "krippendorff_alpha_interval": alpha, "n_units": int(len(table)),
            "n_runs": len(runs)}


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


def _compared_value(g: Group, name: str) -> Any:
    s = setting(g.runs[0])
    return f"{s['panel']} ({s['judges']})" if name == "panel" else s[name]


def _order(value: Any) -> tuple:
    return (0, float(value), "") if isinstance(value, (int, float)) else (1, 0.0, str(value))


def _compare(a: Group, b: Group, name: str, boot: Bootstrap) -> dict:
    """One paired comparison; a is the lower setting, so diff = b − a reads "raising it changes by"."""
    if _order(_compared_value(b, name)) < _order(_compared_value(a, name)):
        a, b = b, a
    ma, mb = task_matrix(a).fillna(0.0).mean(axis=1), task_matrix(b).fillna(0.0).mean(axis=1)
    common = ma.index.intersection(mb.index)
    d = stats.paired_difference(ma[common].to_numpy(), mb[common].to_numpy(), boot)
    return {"setting": name, "a": a.label, "b": b.label, "value_a": _compared_value(a, name),
            "value_b": _compared_value(b, name), "overall_a": _pct(float(ma[common].mean())),
            "overall_b": _pct(float(mb[common].mean())), "diff_pp": _pct(d["mean_diff"]),
            "ci_low_pp": _pct(d["ci_low"]), "ci_high_pp": _pct(d["ci_high"]), "n_tasks": d["n"]}


def comparisons(groups: Sequence[Group], boot: Bootstrap = Bootstrap()) -> pd.DataFrame:
    """Pairs of rows that differ in exactly one COMPARED setting: paired per-task difference
    of the All-view score (b − a, percentage points) with its bootstrap interval."""
    rows = []
    for i, first in enumerate(groups):
        for second in groups[i + 1:]:
            if base_key(first.runs[0]) != base_key(second.runs[0]):
                continue
            differ = [n for n in COMPARED if str(_compared_value(first, n)) != str(_compared_value(second, n))]
            if len(differ) == 1:
                rows.append(_compare(first, second, differ[0], boot))
    return pd.DataFrame(rows)


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


@dataclass
class Report:
    """Every table of one report."""

    leaderboard: pd.DataFrame
    matched: pd.DataFrame
    paradigms: pd.DataFrame
    tiers: pd.DataFrame
    agreement: dict
    replicates: pd.DataFrame
    replicate_tasks: pd.DataFrame
    comparisons: pd.DataFrame
    provenance: pd.DataFrame
    boot: Bootstrap
    n_runs_read: int
    duplicates: dict[str, str] = field(default_factory=dict)


def build(runs: Sequence[RunData], boot: Bootstrap = Bootstrap()) -> Report:
    """All tables from the runs read: dedupe, group, then each section."""
    kept, duplicates = dedupe(runs)
    groups = group_runs(kept)
    reps, rep_tasks = replicates(groups)
    return Report(leaderboard=leaderboard(groups, boot), matched=matched(groups),
                  paradigms=breakdowns(groups, views.PARADIGM), tiers=breakdowns(groups, views.TIER),
                  agreement=judge_agreement(kept), replicates=reps, replicate_tasks=rep_tasks,
                  comparisons=comparisons(groups, boot), provenance=provenance(groups, duplicates), boot=boot,
                  n_runs_read=len(runs), duplicates=duplicates)
