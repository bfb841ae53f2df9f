"""Multirun: one parent MLflow run per sweep, a child per job, the children's table on the parent.

The parent is created in the launching process (``on_multirun_start``) and its id is left in
the sweep directory, where every job — in-process, joblib worker or submitit process — finds
it. Each child refreshes the parent's table when it has logged itself. The parent is closed
by the launching process: FINISHED at ``on_multirun_end``, or — when a job's failure ends
the sweep early (Hydra then skips ``on_multirun_end``; a job's ``SystemExit`` stops even the
basic launcher's loop) — FAILED from an exit hook, so no parent is ever left RUNNING
(short of the launcher being killed with SIGKILL). Either way the sweep ends with a summary
of its jobs read from their run directories.
"""

from __future__ import annotations

import atexit
import json
import logging
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from wildtrace.core.records import LogStatus, RunStatus
from wildtrace.tracking.runs.parent import SWEEP_KEYS_TAG, SWEEP_TAG, refresh_parent
from wildtrace.tracking.store import client_for, default_artifact_location, get_or_create_experiment

PARENT_FILE = "mlflow_parent.json"
#: MLflow's limit on a run name.
NAME_CHARS = 250
log = logging.getLogger("wildtrace.sweep")


def parent_file(sweep_dir: str | Path) -> Path:
    """Where a sweep's parent run id is kept."""
    return Path(sweep_dir) / PARENT_FILE


def read_parent(sweep_dir: str | Path) -> str | None:
    """The sweep's parent run id, if the callback made one."""
    path = parent_file(sweep_dir)
    return json.loads(path.read_text())["run_id"] if path.exists() else None


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _job_overrides(job_dir: Path) -> str:
    stats = _read(job_dir / "run_stats.json") or {}
    if stats.get("overrides"):
        return " ".join(stats["overrides"])
    from omegaconf import OmegaConf

    path = job_dir / ".hydra" / "overrides.yaml"
    return " ".join(map(str, OmegaConf.load(path))) if path.exists() else ""


def job_dirs(sweep_dir: str | Path) -> list[Path]:
    """A sweep's job folders (0, 1, …), in job order."""
    root = Path(sweep_dir)
    folders = [p for p in root.iterdir() if p.is_dir() and p.name.isdigit()] if root.is_dir() else []
    return sorted(folders, key=lambda p: int(p.name))


def job_rows(sweep_dir: str | Path) -> list[dict]:
    """A row per job folder of a sweep: overrides, overall, scored, MLflow run id, or that it failed."""
    rows = []
    for job_dir in job_dirs(sweep_dir):
        scores = _read(job_dir / "scores.json") or {}
        marker = _read(job_dir / "mlflow.json") or {}
        done = (job_dir / "responses.json").exists()
        stats = (_read(job_dir / "run_stats.json") or {}) if done else {}
        status = stats.get("status", RunStatus.FINISHED) if done else RunStatus.FAILED
        logged = marker.get("status") in (LogStatus.LOGGED, LogStatus.PARTIAL)
        rows.append({"job": int(job_dir.name), "overrides": _job_overrides(job_dir), "status": status,
                     "overall": scores.get("overall"), "scored": scores.get("scored"),
                     "run_id": marker.get("run_id") if logged else None})
    return rows


def _pct(value: Any) -> str:
    return "—" if value is None else f"{value:.2f}%"


def summary_text(rows: list[dict], parent_run_id: str | None) -> str:
    """The multirun's closing table: one line per job, then the parent run id."""
    lines = [f"multirun: {len(rows)} jobs",
             f"{'job':>3}  {'status':<8} {'overall':>8} {'scored':>8}  run id / overrides"]
    for r in rows:
        lines.append(f"{r['job']:>3}  {r['status']:<8} {_pct(r['overall']):>8} {_pct(r['scored']):>8}  "
                     f"{r['run_id'] or '(not logged)'}  {r['overrides']}")
    lines.append(f"mlflow parent run: {parent_run_id or '(none)'}")
    return "\n".join(lines)


def logs_to_stdout(logger: logging.Logger) -> bool:
    """Whether an INFO record of ``logger`` already reaches standard output (Hydra's console handler)."""
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if (isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) is sys.stdout
                    and handler.level <= logging.INFO):
                return True
        current = current.parent if current.propagate else None
    return False


#: Overrides that say where a sweep goes, not what it runs: left out of the parent's name.
PLACES = ("root", "mlflow", "hydra", "out_dir", "progress")


def sweep_keys(overrides: list[str]) -> list[str]:
    """The keys a multirun sweeps (``a=1,2``, ``a=range(…)``, ``a=choice(…)``), as Hydra's parser reads them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - Hydra refuses the line itself; the name is not the place to say so
        return []
    return [o.get_key_element().lstrip("~+") for o in parsed if o.is_sweep_override()]


def sweep_name(overrides: list[str]) -> str:
    """The parent run's name: the swept overrides first, since they tell sweeps apart, then the other
    settings (not where it goes: root, mlflow, hydra); past NAME_CHARS the tail is cut with "…"."""
    swept = set(sweep_keys(overrides))
    settings = [o for o in overrides if o.lstrip("~+").split("=", 1)[0].split(".")[0] not in PLACES]
    ordered = ([o for o in settings if o.lstrip("~+").split("=", 1)[0] in swept]
               + [o for o in settings if o.lstrip("~+").split("=", 1)[0] not in swept])
    name = "sweep · " + " ".join(ordered)
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"


class MlflowSweepCallback(Callback):
    """Hydra callback: a parent run around a multirun, closed whatever happens. Never raises."""

    def __init__(self) -> None:
        """No state until a multirun starts."""
        self._parent: str | None = None
        self._uri: str | None = None
        self._sweep_dir: str | None = None
        self._closed = False

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Create the parent run, leave its id in the sweep directory, arm the exit hook."""
        HydraConfig.instance().set_config(config)  # callbacks run before Hydra sets it
        self._sweep_dir = str(HydraConfig.get().sweep.dir)
        atexit.register(self._at_exit)
        if not config.mlflow.enabled:
            return
        try:
            uri = config.mlflow.tracking_uri
            client = client_for(uri)
            location = default_artifact_location(uri, config.mlflow.artifact_location, config.root)
            experiment_id = get_or_create_experiment(client, config.mlflow.experiment, location)
            task = list(HydraConfig.get().overrides.task)
            run = client.create_run(experiment_id, run_name=sweep_name(task),
                                    tags={SWEEP_TAG: "parent", SWEEP_KEYS_TAG: ",".join(sweep_keys(task)),
                                          "hydra.overrides": " ".join(task)})
            Path(self._sweep_dir).mkdir(parents=True, exist_ok=True)
            parent_file(self._sweep_dir).write_text(json.dumps({"run_id": run.info.run_id, "tracking_uri": uri}))
            self._parent, self._uri = run.info.run_id, uri
        except Exception as exc:  # noqa: BLE001 - a sweep must run even when MLflow is down
            log.warning("MLflow: no parent run for this sweep (%s: %s)", type(exc).__name__, exc)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Every job ran: close the parent FINISHED and print the summary."""
        self._close("FINISHED")

    def _at_exit(self) -> None:
        """The sweep ended without on_multirun_end (a job failed): close the parent FAILED."""
        self._close("FAILED")

    def _close(self, status: str) -> None:
        if self._closed or self._sweep_dir is None:
            return
        self._closed = True
        if self._parent and self._uri:
            try:
                refresh_parent(client_for(self._uri), self._parent, close=status, job_dirs=job_dirs(self._sweep_dir))
            except Exception as exc:  # noqa: BLE001
                log.warning("MLflow: could not close the sweep's parent run %s (%s)", self._parent, exc)
        text = summary_text(job_rows(self._sweep_dir), self._parent)
        log.info("%s", text)
        if not logs_to_stdout(log):
            print(text, flush=True)  # the multirun's headline, once on the terminal
