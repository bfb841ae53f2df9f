"""The report's Hydra entry point: compose conf/report.yaml → read runs → write → log → print."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import MISSING, DictConfig, OmegaConf

from wildtrace.config import register
from wildtrace.report.assemble import Report

log = logging.getLogger(__name__)


@dataclass
class BootstrapConfig:
    """Percentile bootstrap over tasks."""

    resamples: int = 2000  #: resamples of the tasks
    seed: int = 0  #: numpy seed (a report is reproducible)
    level: float = 0.95  #: two-sided interval level
    #: resample documents, not tasks, for the baseline scores' intervals (tasks sharing a document move
    #: together), and print each score's design effect (that variance over the tasks' one)
    by_document: bool = False
    #: a score's interval below 30 tasks: t (a t interval) or bca (bias-corrected and accelerated bootstrap)
    small_n: str = "t"


@dataclass
class ReportSettings:
    """What to read and how to summarise it."""

    run_dirs: list[str] = field(default_factory=list)  #: run directories or globs; non-empty → MLflow is not read
    filter: str = ""  #: MLflow search filter on params/tags/metrics
    max_runs: int = 1000  #: at most this many MLflow runs
    with_responses: bool = True  #: read responses.json too
    #: read judgments.json too (per-item points: item flips, where judges split); false reads less
    with_judgments: bool = True
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)  #: interval settings


@dataclass
class ReportMlflow:
    """The store to read (unless run_dirs) and to log the report to."""

    tracking_uri: str = MISSING  #: any MLflow URI; default the harness's sqlite store
    experiment: str = "wildtrace"  #: the benchmark runs' experiment
    log_report: bool = True  #: log the report as a run tagged wildtrace.kind=report


@dataclass
class ReportConfig:
    """conf/report.yaml's schema."""

    root: str = MISSING  #: the harness's outputs folder
    mlflow: ReportMlflow = field(default_factory=ReportMlflow)  #: MLflow settings
    report: ReportSettings = field(default_factory=ReportSettings)  #: what to read and how


#: The baseline leaderboard's columns printed on stdout (baseline.csv has them all).
STDOUT_COLUMNS = ["model", "point", "panel", "judges", "temperature", "max_tokens", "n_runs", "overall_pct",
                  "ci_low_pct", "ci_high_pct", "rank", "rank_ci_low", "rank_ci_high", "p_rank1_pct"]

register()
ConfigStore.instance().store(name="report_schema", node=ReportConfig)
CONF_DIR = str(Path(__file__).resolve().parent.parent.parent / "conf")


def make_report(cfg: ReportConfig, out_dir: Path) -> tuple[Report, str | None]:
    """Read, build, write (and log): the importable heart of the command. Returns (Report, MLflow run id)."""
    from wildtrace.report import render, sources
    from wildtrace.report.statistics.stats import Bootstrap
    from wildtrace.report.assemble import build

    r = cfg.report
    if r.run_dirs:
        runs = sources.from_run_dirs(r.run_dirs, r.with_responses, r.with_judgments)
    else:
        runs = sources.from_mlflow(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, r.filter, r.max_runs,
                                   r.with_responses, r.with_judgments)
    report = build(runs, Bootstrap(r.bootstrap.resamples, r.bootstrap.seed, r.bootstrap.level,
                                 r.bootstrap.by_document, r.bootstrap.small_n))
    render.write(report, out_dir)
    run_id = None
    if cfg.mlflow.log_report and runs:
        from wildtrace.report.publish import log_report

        run_id = log_report(report, out_dir, cfg.mlflow.tracking_uri, cfg.mlflow.experiment)
    return report, run_id


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="report")
def _job(dict_cfg: DictConfig) -> None:
    from wildtrace.app import route_console_to_stderr
    from wildtrace.exitcodes import ExitCode, error

    route_console_to_stderr()  # stdout: the leaderboard; warnings and errors: stderr (docs/reference/entry-points.md)
    cfg = OmegaConf.to_object(dict_cfg)
    assert isinstance(cfg, ReportConfig)
    from wildtrace.exitcodes import fail
    from wildtrace.report.statistics.stats import SMALL_N_METHODS

    if cfg.report.bootstrap.small_n not in SMALL_N_METHODS:
        fail("wildtrace.report", f"report.bootstrap.small_n must be one of {', '.join(SMALL_N_METHODS)}, "
                                 f"got {cfg.report.bootstrap.small_n!r}")
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    report, run_id = make_report(cfg, out_dir)
    if not report.n_runs_read:
        error("wildtrace.report", "no benchmark runs found (run `python -m wildtrace` first, or pass "
              "report.run_dirs=[...])")
        raise SystemExit(ExitCode.RUN_FAILED)
    from wildtrace.report.render import markdown, tables

    print(markdown(tables(report)["baseline"][STDOUT_COLUMNS]))
    print(f"report: {out_dir / 'report.html'}")
    if run_id:
        print(f"mlflow: run {run_id} (tag wildtrace.kind=report)")


def main() -> None:
    """``python -m wildtrace.report``."""
    from wildtrace.app import check_command_line

    check_command_line("wildtrace.report", ReportConfig, None)  # a mistyped key: exit 2, did-you-mean
    _job()


if __name__ == "__main__":
    main()
