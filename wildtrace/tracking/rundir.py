"""A run directory read back, and what MLflow gets from it: params, tags, metrics, tables.

No MLflow here: plain data in, plain data out, so these are tested without a store and the
end of a run and ``upload`` compute the same things.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wildtrace.core import views
from wildtrace.core.caps import CapKind
from wildtrace.core.records import AnswerRecord, AnswerStatus, RunStatus, TaskStatus
from wildtrace.files import write_json
from wildtrace.tracking import readable
from wildtrace.tracking.runs.parent import SWEEP_KEYS_TAG, SWEEP_TAG, SWEPT_PREFIX

if TYPE_CHECKING:  # the run's own process reads its folder too and never loads pandas (about 90 MB)
    import pandas as pd

#: What names the command a run folder belongs to (its rerun, where it ran, its resolved settings):
#: written before the run's first request, so a folder killed whole can still be finished.
COMMAND_FILE = "command.json"
RUN_FILES = ("scores.json", "responses.json", "judgments.json", "run_stats.json", "config.json")
MAX_PARAM_CHARS = 6000
MAX_TAG_CHARS = 5000
#: MLflow's run type tag and the value its own evaluation runs carry (``mlflow.utils.mlflow_tags``:
#: MLFLOW_RUN_TYPE, MLFLOW_RUN_TYPE_GENAI_EVALUATE; a test holds them to MLflow's).
RUN_TYPE_TAG, RUN_TYPE = "mlflow.runType", "genai_evaluate"
#: An override that changes the panel's membership (an ablation keeps the panel's name):
#: ``~judge_panel.judges.x``, ``+judge_panel.judges.x=…``, ``judge_panel.judges=…``.
_MEMBERSHIP = re.compile(r"^(?:~judge_panel\.judges\.[^.=]+(?:=.*)?|\+{1,2}judge_panel\.judges\.[^.=]+=.*"
                         r"|judge_panel\.judges=.*)$")
#: How a setting reads in a run's name (``<the key's last part>=<value>`` otherwise).
SHORT = {"decoding.temperature": "t={}", "decoding.max_tokens": "mt={}", "decoding.replicate": "answer replicate {}",
         "judge_panel.replicate": "judge replicate {}"}
#: Overrides that are not a setting of the run's result (where it goes, how it shows) or that the
#: name says anyway (the choice of model, panel, dataset; their own settings are named).
NOT_IN_NAME = ("root", "mlflow", "hydra", "out_dir", "progress")
GROUPS = ("model", "judge_panel", "dataset")
#: The longest run of differences a run's name starts with (the runs table shows the start).
NAME_DIFF_CHARS = 60


@dataclass
class RunDir:
    """A run directory, read back (old directories lack the newer optional fields)."""

    path: Path
    """The run directory, absolute."""
    config: dict
    """config.json: the resolved settings (key names only)."""
    stats: dict
    """run_stats.json (empty when the run stopped before writing it)."""
    scores: dict | None
    """scores.json, or None for stage=answer."""
    responses: list[dict]
    """responses.json rows."""
    judgments: list[dict]
    """judgments.json rows."""

    @property
    def mlflow(self) -> dict:
        """The run's mlflow settings."""
        return self.config["mlflow"]

    @property
    def status(self) -> str:
        """"finished" or "partial", as run_stats.json says (old runs: finished)."""
        return str(self.stats.get("status") or RunStatus.FINISHED)


def _load(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else default


def write_command(run_dir: Path, command: str, overrides: Sequence[str], config: Mapping[str, Any]) -> None:
    """``command.json``: the command that reruns this job, the folder it ran in (a relative ``root`` or
    path is read from there), its overrides and its resolved settings (key names only, never keys)."""
    write_json(run_dir / COMMAND_FILE, {"command": command, "cwd": os.getcwd(), "overrides": list(overrides),
                                        "config": dict(config)})


def read_command(run_dir: Path) -> dict:
    """``command.json`` of a run folder ({} when absent or unreadable)."""
    try:
        data = json.loads((run_dir / COMMAND_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_run_dir(path: str | Path) -> RunDir:
    """Load the files a run wrote; a folder without config.json is not a run directory."""
    path = Path(path).resolve()
    if not (path / "config.json").exists() or not (path / "responses.json").exists():
        raise FileNotFoundError(f"{path}: not a wildtrace run directory (no config.json / responses.json)")
    return RunDir(path, _load(path / "config.json"), _load(path / "run_stats.json", {}), _load(path / "scores.json"),
                  _load(path / "responses.json", []), _load(path / "judgments.json", []))


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested mapping → {"a.b.c": "value"} (the config holds key NAMES only, never keys)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = str(value)[:MAX_PARAM_CHARS]
    return out


def metric_name(*parts: str) -> str:
    """A legal MLflow metric key from parts joined by "/" (MLflow's charts group by the first part);
    a part keeps letters, digits, _ - . and space."""
    return "/".join(re.sub(r"[^A-Za-z0-9_\-. ]", "_", str(p)) for p in parts)


def tag_part(text: Any) -> str:
    """A warning code or endpoint label as one part of a tag key (letters, digits, _ - only)."""
    return re.sub(r"[^A-Za-z0-9_\-]", "_", str(text))


def temperature_sent(config: Mapping, stats: Mapping) -> bool:
    """Whether the model under test really received a temperature.

    False when its config omits it (spec §2) or the run dropped it (the endpoint refused it).
    """
    return bool(config["model"].get("send_temperature", True)) and "model" not in stats.get("temperature_dropped", [])


def short_time(run_date: str | None) -> str:
    """"12-01 10:00:05" from an ISO date; empty when there is none."""
    try:
        return datetime.datetime.fromisoformat(str(run_date)).strftime("%m-%d %H:%M:%S")
    except ValueError:
        return ""


def judges_of(config: Mapping) -> str:
    """The panel's composition: its judges' keys, sorted, comma-joined (an ablation's differs)."""
    return ",".join(sorted(config["judge_panel"].get("judges") or {}))


def override_key(override: str) -> str:
    """``~a.b``, ``+a.b=1``, ``++a.b=1``, ``a.b=1`` → ``a.b``."""
    return override.lstrip("~+").split("=", 1)[0]


def _setting_text(key: str, config: Mapping, stats: Mapping) -> str | None:
    """How one setting reads in a run's name, None for what the name does not show."""
    if key in SHORT:
        group, name = key.split(".")
        value: Any = config[group].get(name)
        if key == "decoding.temperature" and not temperature_sent(config, stats):
            value = "—"
        if key == "decoding.max_tokens":
            value = stats.get("effective_max_tokens") or value or "auto"
        return SHORT[key].format(value)
    if key.split(".")[0] in NOT_IN_NAME or key in GROUPS:
        return None
    flat = flatten(config)
    return f"{key.rsplit('.', 1)[-1]}={flat[key]}" if key in flat else None


def differences(config: Mapping, stats: Mapping, swept: Sequence[str] = ()) -> list[str]:
    """What sets this run apart, shortest first-read form: the swept keys first, then the settings its
    overrides changed (``t=0.4``, ``judges=balanced,lenient``, ``judge replicate 2``, ``en=100000``)."""
    overrides = [str(o) for o in stats.get("overrides") or []]
    keys = list(dict.fromkeys([*swept, *(override_key(o) for o in overrides)]))
    parts = []
    if any(_MEMBERSHIP.match(o) for o in overrides):
        parts.append(f"judges={judges_of(config)}")
    for key in keys:
        if key.startswith("judge_panel.judges"):
            continue  # membership, said once above (a judge's own setting is in the params)
        text = _setting_text(key, config, stats)
        if text:
            parts.append(text)
    return parts


def run_name(config: Mapping, stats: Mapping, run_date: str | None, swept: Sequence[str] = ()) -> str:
    """What differs · model · panel · time: the start of the name, which MLflow's runs table shows,
    says what tells this run from its neighbours (``differences``; cut at NAME_DIFF_CHARS).

    ``t=—`` when the temperature was not sent: a temperature sweep over such a model must not
    look like several settings. Every setting is a param and the ones experiments vary are
    tags too (``base_tags``), so the name need not hold what did not change.
    """
    diff = " ".join(differences(config, stats, swept))
    if len(diff) > NAME_DIFF_CHARS:
        diff = diff[:NAME_DIFF_CHARS - 1] + "…"
    parts = [diff, str(config["model"]["name"]), str(config["judge_panel"]["name"]), short_time(run_date)]
    return " · ".join(p for p in parts if p)


def params_of(rd: RunDir) -> dict[str, str]:
    """The resolved configuration, dotted, plus the effective budget and the temperature really sent."""
    config = {k: v for k, v in rd.config.items() if k not in ("out_dir", "progress")}
    params = flatten(config)
    params["decoding.effective_max_tokens"] = str(rd.stats.get("effective_max_tokens"))
    params["decoding.temperature_sent"] = str(temperature_sent(rd.config, rd.stats)).lower()
    params.update(panel_settings(rd.config))
    return params


def panel_settings(config: Mapping) -> dict[str, str]:
    """``judge_panel.judges`` (the composition, sorted, comma-joined) and ``judge_panel.n_judges``:
    an ablation keeps the panel's name, these tell it from the full panel."""
    return {"judge_panel.judges": judges_of(config),
            "judge_panel.n_judges": str(len(config["judge_panel"].get("judges") or {}))}


def base_tags(config: Mapping, out_dir: str, parent_run_id: str | None) -> dict[str, str]:
    """The tags a run has from its first moment (before any file exists): where it is, what it ran,
    the settings experiments vary (the panel's composition among them) and MLflow's run type."""
    tags = {
        RUN_TYPE_TAG: RUN_TYPE,
        "wildtrace.run_dir": str(out_dir),
        "wildtrace.stage": config.get("stage"),
        "model.route": config["model"]["route"],
        "judge_panel.name": config["judge_panel"]["name"],
        **panel_settings(config),
        "decoding.temperature": config["decoding"].get("temperature"),
        "decoding.max_tokens": config["decoding"].get("max_tokens") or "auto",
        "dataset.name": config.get("dataset", {}).get("name"),
        "replicate.decoding": str(config["decoding"]["replicate"]),
        "replicate.judge_panel": str(config["judge_panel"]["replicate"]),
        "context_policy": (f"native caps en={config['model']['caps']['en']} cjk={config['model']['caps']['cjk']} "
                           "chars; cjk if >20 of U+4E00-U+9FFF in first 4000 chars; "
                           "len>cap → out_of_context_scope = 0"),
    }
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
        tags[SWEEP_TAG] = "child"
    return {k: str(v) for k, v in tags.items() if v is not None}


def trace_tags(config: Mapping, stats: Mapping) -> dict[str, str]:
    """The run's settings on each of its traces, to filter them by: temperature (``—`` when not sent),
    max_tokens (``auto``: the model's default budget, where the config sets none and the run has not
    said it yet), both replicates, the panel and its judges."""
    d, panel = config["decoding"], config["judge_panel"]
    return {"decoding.temperature": str(d["temperature"] if temperature_sent(config, stats) else "—"),
            "decoding.max_tokens": str(stats.get("effective_max_tokens") or d.get("max_tokens") or "auto"),
            "decoding.replicate": str(d["replicate"]), "judge_panel.replicate": str(panel["replicate"]),
            "judge_panel.name": str(panel["name"]), **panel_settings(config)}


def swept_tags(config: Mapping, stats: Mapping, swept: Sequence[str]) -> dict[str, str]:
    """A sweep child's value of each swept key (``sweep.<key>``), as its override gave it, and the keys."""
    given = {override_key(o): str(o).split("=", 1)[1] for o in stats.get("overrides") or [] if "=" in str(o)}
    flat = flatten(config)
    tags = {f"{SWEPT_PREFIX}{k}": given.get(k, flat.get(k)) for k in swept}
    tags[SWEEP_KEYS_TAG] = ",".join(swept)
    return {k: str(v)[:MAX_TAG_CHARS] for k, v in tags.items() if v is not None}


def warning_tags(stats: Mapping) -> dict[str, str]:
    """run_stats warnings as ``wildtrace.warning.<code>``, served models, temperatures dropped."""
    tags: dict[str, str] = {}
    for w in stats.get("warnings", []) or []:
        if isinstance(w, Mapping) and w.get("code"):
            tags[f"wildtrace.warning.{tag_part(w['code'])}"] = str(w.get("message", ""))[:MAX_TAG_CHARS]
    served = stats.get("served_models", {}) or {}
    for label, models in served.items():
        key = "model.served" if label == "model" else f"judge.{tag_part(label)}.served"
        tags[key] = ",".join(map(str, models))[:MAX_TAG_CHARS]
    for label in stats.get("temperature_dropped", []) or []:
        tags[f"temperature.sent.{tag_part(label)}"] = "false"
    lowered = stats.get("budget_lowered", {}) or {}
    for label, limit in (lowered.items() if isinstance(lowered, Mapping) else ()):
        tags[f"budget.lowered.{tag_part(label)}"] = str(limit)[:MAX_TAG_CHARS]  # the documented limit sent
    return tags


def tags_of(rd: RunDir, parent_run_id: str | None, swept: Sequence[str] = ()) -> dict[str, str]:
    """Provenance: harness, data, date, context policy, overrides, replicates, warnings; a sweep
    child's swept keys and values (``swept``: the sweep's keys)."""
    s, d = rd.stats, rd.stats.get("dataset", {})
    tags = {
        **base_tags(rd.config, str(rd.path), parent_run_id),
        "wildtrace.version": s.get("harness_version"),
        "wildtrace.git_commit": s.get("git_commit"),
        "wildtrace.prompts_sha256": s.get("prompts_sha256"),
        "wildtrace.status": rd.status,
        "run_date": s.get("run_date"),
        "dataset.name": d.get("name"),
        "dataset.tasks_sha256": d.get("tasks_sha256"),
        "dataset.freeze_id": d.get("freeze_id"),
        "dataset.release_version": d.get("release_version"),
        "hydra.overrides": " ".join(s.get("overrides", [])),
    }
    tags.update(warning_tags(s))
    if swept:
        tags.update(swept_tags(rd.config, s, swept))
    return {k: str(v)[:MAX_TAG_CHARS] for k, v in tags.items() if v is not None}


def _frames(rd: RunDir) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The columns the views read, and no others: the judge prompts and replies are most of a
    run's rows (a frame of them all took 16 MB at full scale)."""
    import pandas as pd

    from wildtrace.core import frames
    judgments = frames.judgments_frame({k: j.get(k) for k in (views.QID, views.JUDGE, views.STATUS, views.SCORE)}
                                       for j in rd.judgments)
    columns = (views.QID, views.STATUS, views.SCORE, views.PARADIGM, views.TIER)
    languages = {r["question_id"]: language_of(r.get("caps")) for r in rd.responses}
    tasks = pd.DataFrame([{**{k: t[k] for k in columns if k in t}, LANGUAGE: languages.get(t[views.QID])}
                          for t in (rd.scores or {}).get("tasks", [])])
    return tasks, judgments


#: The task's language, English or Chinese by the spec's CJK rule (``core.caps``).
LANGUAGE = "language"


def language_of(caps: Mapping | None) -> str | None:
    """English or Chinese by the caps decision's kind (the spec's CJK rule); None without a decision."""
    kind = (caps or {}).get("cap_kind")
    return None if kind is None else ("Chinese" if kind == CapKind.CJK else "English")


def _score_metrics(s: Mapping) -> dict[str, Any]:
    m: dict[str, Any] = {f"{k}_pct": readable.percent(s[k]) for k in ("overall", "scored") if s.get(k) is not None}
    for key in ("n_total", "n_scored", "n_out_of_context", "n_failed", "n_unscored", "n_missing",
                "n_budget_exhausted"):
        if s.get(key) is not None:
            m[key] = s[key]
    for judge, row in s.get("judges", {}).items():
        for key in ("mean", "unavailable_rate", "n"):
            if row.get(key) is not None:
                m[metric_name("judge", judge, key)] = row[key] if key == "n" else readable.fraction(row[key])
    return m


def _breakdown_metrics(rd: RunDir) -> dict[str, Any]:
    from wildtrace.core import frames  # pandas: loaded where MLflow's metrics are made, not in the run's process

    m: dict[str, Any] = {}
    tasks, judgments = _frames(rd)
    for pair, row in frames.agreement(judgments).items():
        for key in ("mad", "corr"):
            if row[key] is not None:
                m[metric_name("agreement", pair.replace("~", "__"), key)] = readable.fraction(row[key])
    if not len(tasks):
        return m
    for column, label in ((views.PARADIGM, "paradigm"), (views.TIER, "tier"), (LANGUAGE, LANGUAGE)):
        if column not in tasks:
            continue
        for row in frames.breakdown(tasks[[views.QID, views.STATUS, views.SCORE]], tasks, column).to_dict("records"):
            if not isinstance(row[column], str):  # a task without the attribute (NaN)
                continue
            for key in ("all", "scored"):
                if row[key] is not None and row[key] == row[key]:
                    m[metric_name(label, row[column], f"{key}_pct")] = readable.percent(100.0 * row[key])
    return m


def metrics_of(rd: RunDir) -> dict[str, float]:
    """Headline, counts, per judge, agreement, per paradigm and tier, tokens, requests, time;
    rounded for reading in MLflow (``tracking.readable``: the run's files keep full precision)."""
    m = {**_score_metrics(rd.scores or {}), **_breakdown_metrics(rd)}
    for usage in views.token_totals(rd.responses).values():
        for key, value in usage.items():
            m[metric_name("tokens", "model", key)] = value
    for judge, usage in views.token_totals(rd.judgments, "judge").items():
        for key, value in usage.items():
            m[metric_name("tokens", "judge", judge, key)] = value
    for label, count in rd.stats.get("requests", {}).items():
        m[metric_name("requests", label)] = count
    for key in ("retries", "cache_hits"):
        if key in rd.stats:
            m[key] = rd.stats[key]
    if "wall_s" in rd.stats:
        m["wall_s"] = readable.seconds(rd.stats["wall_s"])
    m.update(cost_metrics(rd.stats.get("cost") or {}))
    m.update(prompt_cache_metrics(rd.stats.get("prompt_cache") or {}))
    return {k: float(v) for k, v in m.items()}


def cost_metrics(cost: Mapping) -> dict[str, float]:
    """``cost_usd`` (the run) and ``cost_usd.<endpoint>``; an unknown cost is no metric, never a 0."""
    m: dict[str, float] = {}
    if isinstance(cost.get("total_usd"), (int, float)):
        m["cost_usd"] = readable.usd(cost["total_usd"])
    for label, row in (cost.get("endpoints") or {}).items():
        if isinstance(row, Mapping) and isinstance(row.get("cost_usd"), (int, float)):
            m[metric_name("cost_usd", label)] = readable.usd(row["cost_usd"])
    if isinstance(cost.get("not_sent_budget"), int) and cost["not_sent_budget"]:
        m["not_sent_budget"] = cost["not_sent_budget"]
    return m


#: A run_stats ``prompt_cache`` row's keys, each one metric per endpoint, rounded by its unit.
PROMPT_CACHE_ROUNDING: dict[str, Callable[[Any], Any]] = {
    "input_tokens": int, "cached_input_tokens": int, "cache_write_tokens": int, "cache_write_1h_tokens": int,
    "hit_rate": readable.fraction, "saved_usd": readable.usd}


def prompt_cache_metrics(block: Mapping) -> dict[str, float]:
    """What the providers' prompt caches did, per endpoint (``prompt_cache/<endpoint>/input_tokens``,
    ``cached_input_tokens``, ``cache_write_tokens`` and of them ``cache_write_1h_tokens``, ``hit_rate``:
    the share of input tokens read from the cache, 0–1; ``saved_usd``) and the run's
    ``prompt_cache/saved_usd``; an unknown saving is no metric, never a 0."""
    m: dict[str, float] = {}
    for label, row in (block.get("endpoints") or {}).items():
        for key, rounding in PROMPT_CACHE_ROUNDING.items():
            value = row.get(key) if isinstance(row, Mapping) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                m[metric_name("prompt_cache", label, key)] = rounding(value)
    if isinstance(block.get("saved_usd"), (int, float)):
        m[metric_name("prompt_cache", "saved_usd")] = readable.usd(block["saved_usd"])
    return m


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str)


def task_table(rd: RunDir, document_uris: Mapping[str, str] | None = None) -> pd.DataFrame:
    """A row per task: caps decision, document and prompt by reference, raw answer and provider JSON, score.

    ``document_uris``: sha256 → where the document is stored once (see tracking.documents).
    """
    import pandas as pd
    scores = {t["question_id"]: t for t in (rd.scores or {}).get("tasks", [])}
    uris = document_uris or {}
    rows = []
    for r in rd.responses:
        caps, doc = r.get("caps") or {}, r.get("document") or {}
        score = scores.get(r["question_id"], {})
        rows.append({
            "question_id": r["question_id"], "status": r["status"], "reason": r.get("reason"),
            "paradigm": score.get("paradigm"), "context_tier": score.get("context_tier"),
            "corpus_file": doc.get("corpus_file"), "document_sha256": doc.get("sha256"),
            "document_uri": uris.get(doc.get("sha256") or ""),
            "doc_chars": caps.get("doc_chars"), "ideographs": caps.get("ideographs"), "cap_kind": caps.get("cap_kind"),
            "cap": caps.get("cap"), "scope": caps.get("scope"), "prompt_sha256": r.get("prompt_sha256"),
            "prompt": r.get("prompt_ref"), "response": r.get("response"), "reasoning": r.get("reasoning"),
            "finish_reason": r.get("finish_reason"), "served_model": r.get("served_model"),
            "cached": r.get("cached"), "attempts": r.get("attempts"), "error": r.get("error"),
            "raw": _json(r.get("raw")), "cost_usd": r.get("cost_usd"), "task_status": score.get("status"),
            "score": score.get("score"),
        })
    return pd.DataFrame(rows)


def judgment_table(rd: RunDir) -> pd.DataFrame:
    """A row per (task, judge): the full judge prompt, raw reply, parsed JSON, total, score or why not."""
    import pandas as pd
    return pd.DataFrame([{
        "question_id": j["question_id"], "judge": j["judge"], "status": j["status"], "reason": j.get("reason"),
        "total": j.get("total"), "score": j.get("score"), "prompt": j.get("prompt"), "reply": j.get("reply"),
        "parsed": _json(j.get("parsed")), "error": j.get("error"), "attempts": j.get("attempts"),
        "cached": j.get("cached"), "served_model": j.get("served_model"), "cost_usd": j.get("cost_usd"),
    } for j in rd.judgments])


def task_status_of(answer: AnswerRecord, score_row: Mapping | None) -> TaskStatus | AnswerStatus:
    """A task's status for its trace: scores.json's, else the answer's (stage=answer writes no scores)."""
    if score_row and score_row.get("status"):
        return TaskStatus(score_row["status"])
    return answer.status
