"""Experiments recognised from the runs: sweeps, judge-panel ablations and reruns.

A replicate group (runs equal but for their replicate indices) is a *point*. Two points of
one model that differ in exactly one setting belong to a sweep of that key; points that
differ only in the judge panel's composition (one panel's judges a subset of the other's)
form an ablation; a point with two or more runs is a rerun set. A multirun's own swept
overrides (``RunData.swept``) name its sweep where they exist.

Labels are stable: a point is named by its model and what its own settings change against
the spec's defaults (temperature 0.1, the model's default budget, no reasoning effort, the
panel file's judges) and its own other overrides, never by what else is in the store.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wildtrace.core.prompts import RESPONSE_LIMIT
from wildtrace.report.statistics import stats
from wildtrace.report.statistics.stats import DEFAULT_BOOTSTRAP, Bootstrap
from wildtrace.report.labels import deviations
from wildtrace.report.tables import (Group, RunData, _comparable_config, _pct, _sha, averaged, cost_columns, drift,
                                     gradings, universe)

log = logging.getLogger(__name__)

#: Settings of the panel's composition: points differing only in these are an ablation.
PANEL_KEYS = ("judge_panel.name", "judge_panel.judges")
#: Keys that are never swept: a different model is a leaderboard row; other data another report.
NOT_SWEPT = ("model.name", "_tasks_sha256")
#: Finish reasons that mean the budget cut the answer (OpenAI, Anthropic, Gemini spellings).
CUT = ("length", "max_tokens", "MAX_TOKENS")
@dataclass
class Experiment:
    """Points of one model that differ in one thing: a sweep's key, a panel's judges, or nothing (reruns)."""

    kind: str  #: "sweep", "ablation" or "rerun"
    key: str  #: the swept key; "judge_panel.judges" for an ablation; "" for reruns
    model: str  #: the model's name
    points: list[tuple[Any, Group]] = field(default_factory=list)  #: (value, point), values in order
    reference: Group | None = None  #: the point the others are compared with (the baseline's value)

    @property
    def name(self) -> str:
        """A stable name: what it varies, for which model."""
        if self.kind == "rerun":
            return f"rerun · {self.points[0][1].label}"
        return f"{self.kind} of {self.key} · {self.model}"


# --------------------------------------------------------------------------- settings


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and prefix not in ("model.caps",):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = json.dumps(value, sort_keys=True, default=str)


def settings_of(run: RunData) -> dict[str, str]:
    """The run's settings as dotted keys (values as JSON), without replicate indices; the budget is
    the one sent; the panel's composition is one key and each judge's own settings another."""
    c = _comparable_config(run)
    decoding = c.setdefault("decoding", {})
    decoding.pop("replicate", None)
    decoding["max_tokens"] = c.pop("_effective_max_tokens", decoding.get("max_tokens"))
    panel = c.setdefault("judge_panel", {})
    panel.pop("replicate", None)
    judges = panel.pop("judges", {}) or {}
    out: dict[str, str] = {}
    _flatten(c, "", out)
    out["judge_panel.judges"] = json.dumps(sorted(judges))
    for judge, spec in judges.items():
        out[f"judge_panel.judge.{judge}"] = json.dumps(spec, sort_keys=True, default=str)
    return out


def _differ(a: dict[str, str], b: dict[str, str]) -> set[str]:
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def _is_panel_key(key: str) -> bool:
    return key in PANEL_KEYS or key.startswith("judge_panel.judge.")


def judges_of(group: Group) -> list[str]:
    """The point's judges, sorted."""
    return sorted((group.runs[0].config.get("judge_panel") or {}).get("judges") or {})


# --------------------------------------------------------------------------- recognition


def _order(value: str) -> tuple:
    parsed = json.loads(value)
    return (0, float(parsed), "") if isinstance(parsed, (int, float)) and not isinstance(parsed, bool) \
        else (1, 0.0, str(parsed))


def _swept_name(points: Sequence[Group], key: str) -> str:
    """The multirun's own override name for this sweep where every point's runs carry one."""
    names = [set(r.swept) for g in points for r in g.runs]
    common = set.intersection(*names) if names and all(names) else set()
    covering = sorted(n for n in common if key == n or key.startswith(n + "."))
    return covering[0] if covering else key


def baselines(groups: Sequence[Group]) -> dict[str, Group]:
    """model → its baseline point: the spec's decoding and the full panel (no deviation), most
    judges, most runs, oldest; where no point has no deviation, the one with fewest."""
    out: dict[str, Group] = {}
    by_model: dict[str, list[Group]] = {}
    for g in groups:
        by_model.setdefault(str(g.runs[0].config["model"]["name"]), []).append(g)
    for model, points in sorted(by_model.items()):
        out[model] = min(points, key=lambda g: (len(deviations(g.runs[0])), -len(judges_of(g)), -len(g.runs),
                                                 min(str(r.stats.get("run_date")) for r in g.runs), g.key))
    return out


def recognise(groups: Sequence[Group]) -> list[Experiment]:
    """Sweeps, ablations and rerun sets among the points, in a stable order."""
    found: list[Experiment] = []
    flat = {g.key: settings_of(g.runs[0]) for g in groups}
    base = baselines(groups)
    keys = sorted({k for s in flat.values() for k in s if not _is_panel_key(k) and k not in NOT_SWEPT})
    for key in keys:
        buckets: dict[str, list[Group]] = {}
        for g in groups:
            rest = {k: v for k, v in flat[g.key].items() if k != key}
            buckets.setdefault(_sha(rest), []).append(g)
        for members in buckets.values():
            values = {flat[g.key].get(key, "null") for g in members}
            if len(values) < 2:
                continue
            model = str(members[0].runs[0].config["model"]["name"])
            points = sorted(((flat[g.key].get(key, "null"), g) for g in members), key=lambda p: _order(p[0]))
            reference_value = flat[base[model].key].get(key, "null") if model in base else None
            reference = next((g for v, g in points if v == reference_value), points[0][1])
            found.append(Experiment("sweep", _swept_name([g for _, g in points], key), model,
                                    [(json.loads(v), g) for v, g in points], reference))
    for g in groups:  # ablations: the fullest panel with every point whose judges are a subset of it
        variants = [h for h in groups if h is not g and set(judges_of(h)) < set(judges_of(g))
                    and all(_is_panel_key(k) for k in _differ(flat[g.key], flat[h.key]))]
        fuller = [h for h in groups if h is not g and set(judges_of(g)) < set(judges_of(h))
                  and all(_is_panel_key(k) for k in _differ(flat[g.key], flat[h.key]))]
        if variants and not fuller:
            model = str(g.runs[0].config["model"]["name"])
            points = [(",".join(judges_of(h)), h) for h in [g, *sorted(variants, key=lambda h: judges_of(h))]]
            found.append(Experiment("ablation", "judge_panel.judges", model, points, g))
    for g in groups:
        if len(g.runs) >= 2:
            found.append(Experiment("rerun", "", str(g.runs[0].config["model"]["name"]), [(None, g)], g))
    kinds = {"sweep": 0, "ablation": 1, "rerun": 2}
    return sorted(found, key=lambda e: (kinds[e.kind], e.key, e.model, e.name))


# --------------------------------------------------------------------------- answers


def answer_columns(group: Group) -> dict[str, float | None]:
    """What the budget did to a point's answers (responses.json; None where it was not read):
    the share cut by the budget (finish reason length/max_tokens/MAX_TOKENS), mean output and
    reasoning tokens, and the share longer than the characters the judge sees."""
    rows = [r for run in group.runs for r in run.responses or [] if isinstance(r, dict)
            and r.get("status") == "answered"]
    if not rows:
        return {"truncated_pct": None, "mean_output_tokens": None, "mean_reasoning_tokens": None,
                "over_judge_limit_pct": None, "n_answers": 0}

    def mean_usage(field_name: str) -> float | None:
        values = [(r.get("usage") or {}).get(field_name) for r in rows]
        known = [float(v) for v in values if isinstance(v, (int, float))]
        return float(np.mean(known)) if known else None

    return {"truncated_pct": 100.0 * float(np.mean([r.get("finish_reason") in CUT for r in rows])),
            "mean_output_tokens": mean_usage("completion_tokens"),
            "mean_reasoning_tokens": mean_usage("reasoning_tokens"),
            "over_judge_limit_pct": 100.0 * float(np.mean([len(str(r.get("response") or "")) > RESPONSE_LIMIT
                                                           for r in rows])),
            "n_answers": len(rows)}


# --------------------------------------------------------------------------- tables


def score_interval(per_task: np.ndarray, boot: Bootstrap) -> tuple[float | None, float | None]:
    """The interval of a mean task score: below stats.SMALL_N tasks a t interval (or BCa, as
    ``boot.small_n`` says), else the percentile bootstrap over tasks."""
    if len(per_task) < stats.SMALL_N:
        return stats.small_n_interval(per_task, boot)
    return stats.all_interval(per_task, boot)


def _round(frame: pd.DataFrame) -> pd.DataFrame:
    """Scores and differences to 0.1 pp, shares to 0.1 %, p-values and tau to 4 digits."""
    out = frame.copy()
    for column in out.columns:
        digits = 1 if column.endswith(("_pct", "_pp", "_tokens")) else 4
        if column.startswith(("n_", "tasks_for_", "rank")):  # counts stay whole (a None made the column float)
            out[column] = pd.Series([int(v) if isinstance(v, float) and v == v else None if isinstance(v, float)
                                     else v for v in out[column]], index=out.index, dtype=object)
            continue
        out[column] = pd.Series([round(v, digits) if isinstance(v, float) and v == v
                                 else None if isinstance(v, float) else v for v in out[column]],
                                index=out.index, dtype=object)
    return out


#: The gaps (pp) the power columns say how many tasks would separate.
POWER_GAPS_PP = (1, 2, 5)


def power_columns(d: dict | None) -> dict[str, float | int | None]:
    """What this comparison could see: the gap (pp) a paired t at 5 % finds with 80 % power given
    its tasks and per-task difference sd, and the tasks it would need for 1, 2 and 5 pp."""
    sd = None if d is None else d.get("sd_diff")
    n = 0 if d is None else int(d["n"])
    out: dict[str, float | int | None] = {"detectable_pp": None if sd is None else _pct(stats.detectable_gap(n, sd))}
    for gap in POWER_GAPS_PP:
        out[f"tasks_for_{gap}pp"] = None if sd is None else stats.tasks_needed(gap / 100.0, sd)
    return out


def replicate_noise(g: Group, tasks: Sequence[str]) -> np.ndarray | None:
    """Per task, the variance of the point's replicate mean from its distinct gradings (sample
    variance / their number); None when no task has two."""
    cells = [[v for answer in task for v in answer] for task in gradings(g, tasks)]
    if not any(len(c) >= 2 for c in cells):
        return None
    return np.array([float(np.var(c, ddof=1)) / len(c) if len(c) >= 2 else 0.0 for c in cells])


def noise_share(reference: Group, point: Group, tasks: Sequence[str]) -> float | None:
    """The share (%) of the per-task difference's variance that the two points' replicate noise
    (judges, answers) explains: mean over tasks of both sides' replicate-mean variances over the
    sample variance of the differences. None without replicates or a difference that varies."""
    sides = [replicate_noise(g, tasks) for g in (reference, point)]
    if all(side is None for side in sides):
        return None
    diff = (averaged(point, tasks) - averaged(reference, tasks)).to_numpy()
    total = float(np.var(diff, ddof=1)) if len(diff) >= 2 else 0.0
    if total == 0.0:
        return None
    return 100.0 * float(sum(side.mean() for side in sides if side is not None)) / total


def sweeps_frame(experiments: Iterable[Experiment], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """sweeps.csv: a row per (model, key, value): the score and its interval, the paired
    difference from the reference point (the baseline's value) with its t interval, Holm's
    adjusted p across the sweep's points, and what the budget did to the answers."""
    rows = []
    for e in experiments:
        if e.kind != "sweep" or e.reference is None:
            continue
        tasks = universe([r for _, g in e.points for r in g.runs])
        ref = averaged(e.reference, tasks).to_numpy()
        tests = []
        for _, g in e.points:
            own = averaged(g, tasks).to_numpy()
            tests.append(None if g is e.reference else stats.paired_t(own - ref, boot.level))
        adjusted = stats.holm([None if d is None else d["p_value"] for d in tests])
        for (value, g), d, p in zip(e.points, tests, adjusted, strict=True):
            own = averaged(g, tasks).to_numpy()
            low, high = score_interval(own, boot)
            overall = float(own.mean()) if len(own) else None
            rows.append({
                "experiment": e.name, "model": e.model, "key": e.key, "value": value, "point": g.label,
                "reference": g is e.reference, "n_runs": len(g.runs), "n_tasks": len(own),
                "overall_pct": _pct(overall), "ci_low_pct": _pct(low), "ci_high_pct": _pct(high),
                "diff_pp": None if d is None else _pct(d["mean_diff"]),
                "diff_ci_low_pp": None if d is None else _pct(d["ci_low"]),
                "diff_ci_high_pp": None if d is None else _pct(d["ci_high"]),
                "p_value": None if d is None else d["p_value"], "p_holm": p,
                "distinguishable": None if p is None else bool(p < 1.0 - boot.level),
                "small_n": len(own) < stats.SMALL_N, **power_columns(d),
                "diff_noise_share_pct": None if d is None else noise_share(e.reference, g, tasks),
                **answer_columns(g), **cost_columns(g.runs, _pct(overall)),
                "judge_drift": drift(e.reference, g),
            })
    frame = _round(pd.DataFrame(rows))
    if rows:  # each value as the config has it (max_tokens 64, not the 64.0 a column of mixed numbers makes)
        frame["value"] = pd.Series([r["value"] for r in rows], index=frame.index, dtype=object)
    return frame


def rank_intervals(points: Sequence[Group], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """Per point: its rank (1 = best; ties share the better rank) with a bootstrap interval over
    tasks, and P(rank 1)."""
    if not points:
        return pd.DataFrame(columns=["rank", "rank_ci_low", "rank_ci_high", "p_rank1_pct"])
    tasks = universe([r for g in points for r in g.runs])
    m = np.column_stack([averaged(g, tasks).to_numpy() for g in points])
    rng = np.random.default_rng(boot.seed)
    idx = rng.integers(0, m.shape[0], size=(boot.resamples, m.shape[0]))
    means = np.stack([m[i].mean(axis=0) for i in idx]) if m.shape[0] else np.zeros((boot.resamples, len(points)))
    ranks = 1 + (means[:, None, :] > means[:, :, None]).sum(axis=2)  # ranks[d, j]: points above j in draw d
    own = stats.ranks(m.mean(axis=0))
    tail = 100.0 * (1.0 - boot.level) / 2.0
    return pd.DataFrame({"rank": own, "rank_ci_low": np.percentile(ranks, tail, axis=0, method="lower"),
                         "rank_ci_high": np.percentile(ranks, 100 - tail, axis=0, method="higher"),
                         "p_rank1_pct": 100.0 * (ranks == 1).mean(axis=0)})


def documents_of(runs: Iterable[RunData]) -> dict[str, str]:
    """question_id → its document (responses.json's corpus file, else its sha256), where read."""
    out: dict[str, str] = {}
    for run in runs:
        for r in run.responses or []:
            doc = r.get("document") if isinstance(r, dict) else None
            if isinstance(doc, dict) and (doc.get("corpus_file") or doc.get("sha256")):
                out.setdefault(str(r.get("question_id")), str(doc.get("corpus_file") or doc.get("sha256")))
    return out


def document_columns(own: np.ndarray, tasks: Sequence[str], documents: dict[str, str],
                     boot: Bootstrap) -> dict[str, Any]:
    """With ``boot.by_document``: the score's interval resampling documents (from SMALL_N tasks; a
    t interval below) and its design effect; a task whose document is unknown is its own."""
    found = stats.cluster_interval(own, [documents.get(q, q) for q in tasks], boot)
    low, high = found["ci_low"], found["ci_high"]
    if len(own) < stats.SMALL_N:
        low, high = stats.small_n_interval(own, boot)
    return {"ci_low_pct": _pct(low), "ci_high_pct": _pct(high), "n_documents": found["n_clusters"],
            "design_effect": found["design_effect"]}


def baseline_board(groups: Sequence[Group], boot: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """The leaderboard of the baseline setting: one row per model, its settings as columns."""
    base = baselines(groups)
    points = [base[m] for m in sorted(base)]
    ranks = rank_intervals(points, boot)
    tasks = universe([r for g in points for r in g.runs])
    documents = documents_of(r for g in points for r in g.runs) if boot.by_document else {}
    rows = []
    for g, (_, rank) in zip(points, ranks.iterrows(), strict=True):
        run = g.runs[0]
        c = run.config
        own = averaged(g, tasks).to_numpy()
        low, high = score_interval(own, boot)
        rows.append({
            "model": c["model"]["name"], "point": g.label, "panel": c["judge_panel"].get("name"),
            "judges": ",".join(judges_of(g)), "temperature": c["decoding"].get("temperature"),
            "max_tokens": run.stats.get("effective_max_tokens"),
            "reasoning_effort": c["decoding"].get("reasoning_effort"),
            "caps_en_chars": (c["model"].get("caps") or {}).get("en"),
            "caps_cjk_chars": (c["model"].get("caps") or {}).get("cjk"), "n_runs": len(g.runs),
            "overall_pct": _pct(float(own.mean())) if len(own) else None, "ci_low_pct": _pct(low),
            "ci_high_pct": _pct(high), "small_n": len(own) < stats.SMALL_N, "n_tasks": len(own),
            "rank": int(rank["rank"]), "rank_ci_low": int(rank["rank_ci_low"]),
            "rank_ci_high": int(rank["rank_ci_high"]), "p_rank1_pct": rank["p_rank1_pct"],
            "not_spec_setting": "; ".join(deviations(run)),
            **(document_columns(own, tasks, documents, boot) if boot.by_document else {}),
        })
    frame = pd.DataFrame(rows)
    if len(frame):
        frame = frame.sort_values(["overall_pct", "model"], ascending=[False, True], kind="stable")
    return _round(frame.reset_index(drop=True))


def _kendall_with_interval(full: np.ndarray, variant: np.ndarray, boot: Bootstrap) -> tuple:
    """Kendall τ between the models' means under two panels, with a percentile interval over tasks."""
    tau = stats.kendall_tau(full.mean(axis=0), variant.mean(axis=0))
    if tau is None:
        return None, None, None
    rng = np.random.default_rng(boot.seed)
    draws = []
    for _ in range(boot.resamples):
        i = rng.integers(0, full.shape[0], full.shape[0])
        value = stats.kendall_tau(full[i].mean(axis=0), variant[i].mean(axis=0))
        draws.append(np.nan if value is None else value)
    low, high = stats.percentile_interval(np.asarray(draws, dtype=float), boot.level)
    return tau, low, high


def tau_absence(n_models: int, tau: float | None) -> str:
    """Why an ablation's Kendall τ is empty ("" when it is shown)."""
    if tau is not None:
        return ""
    if n_models < 2:
        return f"fewer than 2 models ablated this way ({n_models}): τ compares the models' rankings"
    return "the models tie under one of the panels: no ranking to compare"


def ablations_frame(experiments: Sequence[Experiment], boot: Bootstrap = DEFAULT_BOOTSTRAP,
                    top: int = 3) -> pd.DataFrame:
    """ablations.csv: a row per (model, variant): its score beside the full panel's, the paired
    difference, the model's rank under each panel, Kendall τ of the models' ranking against
    the full panel's (over the models ablated the same way) and the tasks that moved most."""
    ablations = [e for e in experiments if e.kind == "ablation" and e.reference is not None]
    # the ranking a variant gives: over every model that has the same variant (the same judges dropped)
    by_variant: dict[str, list[tuple[Experiment, Group]]] = {}
    for e in ablations:
        for value, g in e.points[1:]:
            by_variant.setdefault(str(value), []).append((e, g))
    rows = []
    for variant, members in sorted(by_variant.items()):
        tasks = universe([r for e, g in members for r in [*g.runs, *(e.reference.runs if e.reference else [])]])
        full = np.column_stack([averaged(e.reference, tasks).to_numpy() for e, _ in members if e.reference])
        var = np.column_stack([averaged(g, tasks).to_numpy() for _, g in members])
        tau, tau_low, tau_high = _kendall_with_interval(full, var, boot)
        full_rank, var_rank = stats.ranks(full.mean(axis=0)), stats.ranks(var.mean(axis=0))
        for j, (e, g) in enumerate(members):
            assert e.reference is not None
            d = stats.paired_t(var[:, j] - full[:, j], boot.level)
            moved = pd.Series(var[:, j] - full[:, j], index=tasks).abs().sort_values(ascending=False, kind="stable")
            dropped = sorted(set(judges_of(e.reference)) - set(judges_of(g)))
            rows.append({
                "experiment": e.name, "model": e.model, "variant": variant, "dropped": ",".join(dropped),
                "full_panel": ",".join(judges_of(e.reference)), "n_tasks": len(tasks),
                "full_overall_pct": _pct(float(full[:, j].mean())), "overall_pct": _pct(float(var[:, j].mean())),
                "diff_pp": _pct(d["mean_diff"]), "diff_ci_low_pp": _pct(d["ci_low"]),
                "diff_ci_high_pp": _pct(d["ci_high"]), "p_value": d["p_value"], "small_n": d["small_n"],
                "rank_full": int(full_rank[j]), "rank_variant": int(var_rank[j]),
                "rank_change": int(full_rank[j] - var_rank[j]), "n_models": len(members),
                "tau": tau, "tau_ci_low": tau_low, "tau_ci_high": tau_high,
                "tau_not_shown": tau_absence(len(members), tau),
                "tasks_moved_most": "; ".join(f"{q} ({100.0 * (var[k, j] - full[k, j]):+.1f} pp)"
                                              for q, k in ((q, tasks.index(q)) for q in moved.index[:top])
                                              if moved[q] > 0),
            })
    return _round(pd.DataFrame(rows))


def reruns_frame(experiments: Sequence[Experiment], noise_rows: Sequence[dict]) -> pd.DataFrame:
    """reruns.csv: a row per rerun set: the replicate spread of its score, the variance split
    (pp², expected mean squares) and the row's sd they imply."""
    by_label = {r["model"]: r for r in noise_rows}
    rows = []
    for e in experiments:
        if e.kind != "rerun":
            continue
        g = e.points[0][1]
        tasks = universe(g.runs)
        per_run = [_pct(float(averaged(Group(g.key, [r]), tasks).mean())) for r in g.runs]
        spread = stats.spread(per_run)
        split = by_label.get(g.label, {})
        row: dict[str, Any] = {
            "experiment": e.name, "model": e.model, "point": g.label, "n_runs": len(g.runs),
            "decoding_replicates": ",".join(sorted({str(r.config["decoding"].get("replicate", 0)) for r in g.runs})),
            "judge_replicates": ",".join(sorted({str(r.config["judge_panel"].get("replicate", 0))
                                                 for r in g.runs})),
            "overall_pct": spread["mean"], "run_sd_pp": spread["sd"], "run_min_pct": spread["min"],
            "run_max_pct": spread["max"], "n_distinct_answers": split.get("n_distinct_answers"),
            "n_distinct_gradings": split.get("n_distinct_gradings"),
        }
        for source in ("tasks", "answers", "judges"):
            lo, hi = (split.get("ci_pp2") or {}).get(source, (None, None))
            row.update({f"var_{source}_pp2": (split.get("var_pp2") or {}).get(source),
                        f"var_{source}_ci_low_pp2": lo, f"var_{source}_ci_high_pp2": hi})
        row["negative_estimate"] = ", ".join(split.get("negative") or [])
        row["row_sd_pp"] = split.get("row_sd_pp")
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in [c for c in frame.columns if c.endswith("_pp2")]:
        frame[column] = [None if v is None or v != v else round(float(v), 2) for v in frame[column]]
    return _round(frame)


def log_warnings_for_partial(runs: Iterable[RunData]) -> None:
    """A stopped run is zero-filled to its dataset's task count: say so, once per run."""
    for run in runs:
        n = (run.stats.get("dataset") or {}).get("n_tasks")
        held = len(run.scores.get("tasks", []))
        if isinstance(n, int) and held < n:
            log.warning("report: %s holds %d of the dataset's %d tasks (stopped or partial); the All view counts "
                        "the %d it never reached as 0", run.run_id, held, n, n - held)
