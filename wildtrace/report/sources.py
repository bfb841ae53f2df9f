"""Where the report's runs come from: an MLflow store, or run directories on disk.

Both give RunData from the same files a job writes (judgments.json only as the per-item
points and rubric criteria the noise tables need). Sweep parents (tag
``wildtrace.sweep=parent``), reports (``wildtrace.kind=report``) and runs without
scores.json (stage=answer) are not benchmark runs and are skipped, each with a reason.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from wildtrace.core.prompts import JUDGE_RESPONSE, JUDGE_RUBRIC
from wildtrace.report.tables import RunData

log = logging.getLogger(__name__)

#: The files a run writes that the report reads (responses.json is optional).
FILES = ("config.json", "run_stats.json", "scores.json", "responses.json", "judgments.json")
#: A multirun child's tag naming the keys its sweep varied, comma-separated (tracking.parent.SWEEP_KEYS_TAG).
SWEPT_TAG = "wildtrace.sweep.keys"
NOT_BENCHMARK = {"wildtrace.sweep": "parent", "wildtrace.kind": "report"}
#: A run file larger than this is not read (a report must not be made to load anything).
MAX_FILE_BYTES = 512 * 1024 * 1024


def _read_json(path: Path) -> Any:
    if not path.exists() or path.stat().st_size > MAX_FILE_BYTES:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        log.warning("report: %s is unreadable (%s); skipped", path, exc)
        return None


def _number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _task_row_ok(row: Any) -> bool:
    if not isinstance(row, dict) or not isinstance(row.get("question_id"), str):
        return False
    judges = row.get("judges", {})
    return isinstance(judges, dict) and all(isinstance(v, dict) and _number_or_none(v.get("score"))
                                            for v in judges.values())


def malformed(config: Any, scores: Any) -> str | None:
    """Why these files are not a judged run the report can read (None when they are)."""
    if not isinstance(config, dict) or not isinstance(scores, dict) or not isinstance(scores.get("tasks"), list):
        return "no config.json and scores.json with task rows (not a judged run)"
    for section, keys in (("model", ("name", "route", "caps")), ("decoding", ("temperature",)),
                          ("judge_panel", ("name",))):
        if not isinstance(config.get(section), dict) or any(k not in config[section] for k in keys):
            return f"config.json has no {section} with {', '.join(keys)}"
    if not all(_task_row_ok(row) for row in scores["tasks"]):
        return "scores.json has a task row of the wrong shape"
    return None


#: A rubric line of the judge prompt: ``P{i} ({points}pts): {criterion}`` (core.prompts.rubric_lines).
_RUBRIC_LINE = re.compile(r"^P(\d{1,4}) \([^)\n]{1,40}pts\): (.*)$")


def rubric_of(prompt: Any) -> list[str]:
    """The criteria of a judge prompt, in order ([] when it is not one): read for display only."""
    if not isinstance(prompt, str):
        return []
    _, sep, rest = prompt.partition(JUDGE_RUBRIC)
    rubric, sep2, _ = rest.partition(JUDGE_RESPONSE)
    if not sep or not sep2:
        return []
    out: list[str] = []
    for line in rubric.splitlines():
        match = _RUBRIC_LINE.match(line)
        if match and int(match.group(1)) == len(out) + 1:
            out.append(match.group(2))
    return out


def _points(parsed: Any) -> list[float] | None:
    """points_awarded as numbers, or None when the reply has no such list."""
    points = parsed.get("points_awarded") if isinstance(parsed, dict) else None
    if not isinstance(points, list) or not all(_number_or_none(p) and p is not None for p in points):
        return None
    return [float(p) for p in points]


def slim_judgments(rows: Any) -> tuple[list[dict], dict[str, list[str]]]:
    """judgments.json reduced to what the report reads: (question_id, judge, status, points) rows
    and each task's rubric criteria (from the first prompt that has them). Bad rows are dropped."""
    if not isinstance(rows, list):
        return [], {}
    slim, rubrics = [], {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("question_id"), str) \
                or not isinstance(row.get("judge"), str):
            continue
        qid = row["question_id"]
        slim.append({"question_id": qid, "judge": row["judge"], "status": row.get("status"),
                     "points": _points(row.get("parsed"))})
        if qid not in rubrics:
            criteria = rubric_of(row.get("prompt"))
            if criteria:
                rubrics[qid] = criteria
    return slim, rubrics


def _from_files(run_id: str, source: str, folder: Path, with_responses: bool,
                with_judgments: bool = True) -> RunData | None:
    config, stats, scores = (_read_json(folder / name) for name in FILES[:3])
    reason = malformed(config, scores)
    if reason:
        log.warning("report: %s: %s; skipped", run_id, reason)
        return None
    responses = _read_json(folder / "responses.json") if with_responses else None
    judgments, rubrics = slim_judgments(_read_json(folder / "judgments.json")) if with_judgments else ([], {})
    return RunData(run_id=run_id, source=source, config=config, stats=stats if isinstance(stats, dict) else {},
                   scores=scores, responses=responses if isinstance(responses, list) else None,
                   judgments=judgments or None, rubrics=rubrics)


def expand(patterns: Sequence[str]) -> list[Path]:
    """Run directories from paths and globs (sorted, each once); a glob matching nothing is logged."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        matches = sorted(glob.glob(str(Path(pattern).expanduser()))) or []
        if not matches:
            log.warning("report: %s matches no directory", pattern)
        for match in matches:
            path = Path(match).resolve()
            if path.is_dir():
                found[path] = None
    return list(found)


def swept_keys(overrides: Any) -> list[str]:
    """The keys a multirun swept: its overrides whose value is a choice list (``a=x,y``, ``range(…)``)."""
    out = []
    for override in overrides if isinstance(overrides, list) else []:
        key, sep, value = str(override).partition("=")
        if sep and ("," in value or value.startswith(("range(", "choice(", "glob("))) \
                and not value.startswith(("[", "{", "'", '"')):
            out.append(key.lstrip("+~"))
    return sorted(out)


def _swept_of(folder: Path) -> list[str]:
    """The multirun's swept keys, from the sweep folder's multirun.yaml (a job's parent folder)."""
    path = folder.parent / "multirun.yaml"
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    return swept_keys(((data.get("hydra") or {}).get("overrides") or {}).get("task"))


def from_run_dirs(patterns: Sequence[str], with_responses: bool = True,
                  with_judgments: bool = True) -> list[RunData]:
    """RunData for every judged run directory the patterns name; the id is the MLflow run id if logged."""
    runs = []
    for folder in expand(patterns):
        marker = _read_json(folder / "mlflow.json")
        run_id = marker.get("run_id") if isinstance(marker, dict) and marker.get("run_id") else str(folder)
        run = _from_files(str(run_id), "run_dir", folder, with_responses, with_judgments)
        if run is not None:
            run.swept = _swept_of(folder)
            runs.append(run)
    return runs


def _is_benchmark(tags: dict[str, str]) -> bool:
    return not any(tags.get(k) == v for k, v in NOT_BENCHMARK.items())


def from_mlflow(tracking_uri: str, experiment: str, filter_string: str = "", max_runs: int = 1000,
                with_responses: bool = True, with_judgments: bool = True) -> list[RunData]:
    """Finished benchmark runs of ``experiment`` matching ``filter_string`` (MLflow's search
    syntax on params/tags/metrics), their run files downloaded as artifacts."""
    # One progress bar per downloaded file would bury the report's output.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        log.warning("report: no experiment %r at %s", experiment, tracking_uri)
        return []
    found_runs = client.search_runs([found.experiment_id], filter_string=filter_string or "",
                                    max_results=max_runs, order_by=["attributes.start_time ASC"])
    runs = []
    for mlrun in found_runs:
        if mlrun.info.status != "FINISHED" or not _is_benchmark(mlrun.data.tags):
            continue
        with tempfile.TemporaryDirectory(prefix="wildtrace-report-") as tmp:
            names = [*FILES[:3], *(["responses.json"] if with_responses else []),
                     *(["judgments.json"] if with_judgments else [])]
            present = {a.path for a in client.list_artifacts(mlrun.info.run_id)}
            for name in names:
                if name in present:
                    client.download_artifacts(mlrun.info.run_id, name, tmp)
            run = _from_files(mlrun.info.run_id, "mlflow", Path(tmp), with_responses, with_judgments)
        if run is not None:
            run.swept = sorted(k for k in mlrun.data.tags.get(SWEPT_TAG, "").split(",") if k)
            runs.append(run)
    return runs
