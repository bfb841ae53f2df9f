"""The thin Hydra entry point: check names → compose → check keys → convert once → run → print the headline."""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from wildtrace.config import ConfigError, DecodingConfig, WildtraceConfig, register, to_settings
from wildtrace.config.checks import (check_known_keys, check_launcher, check_override_names, check_override_secrets,
                                    check_overrides, check_reserved, check_retired, check_settings_secrets)
from wildtrace.core.events import RunObserver
from wildtrace.exitcodes import fail
from wildtrace.config.panel_files import check_panel_drops

if TYPE_CHECKING:
    from wildtrace.runtime.run.execute import RunResult

register()

log = logging.getLogger("wildtrace")
#: The headline's logger: its record goes to the job log (app.log); the terminal gets the printed text.
HEADLINE_LOG = "wildtrace.headline"
_PACKAGE_DIR = Path(__file__).resolve().parent


def find_conf_dir(package_dir: Path = _PACKAGE_DIR) -> Path:
    """The Hydra config tree: ``wildtrace/conf`` in an installed wheel, else ``conf/`` at the checkout's top.

    The repository keeps ``conf/`` at its top level; the build copies it into the package
    (setup.py maps ``wildtrace.conf`` onto ``conf/``), so a non-editable install carries it.
    An editable install or a checkout has no ``wildtrace/conf`` and reads the top-level one.
    """
    for candidate in (package_dir / "conf", package_dir.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"wildtrace: no Hydra config tree (conf/config.yaml) in {package_dir} or beside it")


#: Absolute, so Hydra does not look for the tree as a Python module.
CONF_DIR = str(find_conf_dir())


class _NotHeadline(logging.Filter):
    """Keeps the headline record off the terminal handlers (the headline is printed there already)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the headline's record."""
        return record.name != HEADLINE_LOG


def route_console_to_stderr(root: logging.Logger | None = None) -> None:
    """Point Hydra's console handler at stderr: stdout carries only the headline (pipes, ``| tee``).

    Hydra's default job logging writes INFO to stdout and to ``<run dir>/<job>.log``; process
    messages belong on stderr and in that file, so the file handler is left as it is.
    """
    for handler in (root or logging.getLogger()).handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            if handler.stream is sys.stdout:
                handler.setStream(sys.stderr)
            if not any(isinstance(f, _NotHeadline) for f in handler.filters):
                handler.addFilter(_NotHeadline())


class RunDirCheck(Callback):
    """Checks the folder Hydra is about to make for the run (or the sweep) before it makes it.

    Hydra creates ``hydra.run.dir`` before the job starts, so a file in its place, a NUL
    byte or a name too long ended in Hydra's traceback (exit 1). Here it is the same one-line
    error, exit 2, as any other bad setting. The folder is made by the check (Hydra's
    ``${now:…}`` is resolved once per composed config, so it is the folder Hydra uses).
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before a single run."""
        self._check(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before a sweep (its jobs' folders are made inside this one)."""
        self._check(config, "hydra.sweep.dir")

    @staticmethod
    def _check(config: DictConfig, key: str) -> None:
        from wildtrace.runtime.store.cache import StorageError, check_writable

        folder = Path(str(OmegaConf.select(config, key))).absolute()
        MADE[:] = missing_folders(folder)
        try:
            check_writable(folder, f"the run directory ({key})")
        except StorageError as exc:
            route_console_to_stderr()  # Hydra's own logging, set up before the job's, writes to stdout
            fail("wildtrace", exc)


#: The folders this process made for its run: the run folder and each parent that did not exist,
#: deepest first (RunDirCheck fills it). A refused command removes these and nothing else.
MADE: list[Path] = []


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and each of its parents that does not exist yet, deepest first (empty: it exists)."""
    out = []
    try:
        for path in (folder, *folder.parents):
            if path.exists():
                break
            out.append(path)
    except (OSError, ValueError):  # a name the OS cannot take: nothing will be made
        return []
    return out


def prepare(dict_cfg: DictConfig, overrides: list[str] | None = None, refuse_retired: bool = True) -> WildtraceConfig:
    """The composed config as validated settings: unknown keys (also ``+key=`` additions) fail first.

    A retired first-party route (docs/providers/routes.md) fails before any request; an entry point that
    sends nothing (the estimate) passes ``refuse_retired=False`` and gets a warning instead.
    """
    settings = settings_of(dict_cfg, overrides)
    try:
        check_retired(settings, Path(CONF_DIR))
    except ConfigError as exc:
        if refuse_retired:
            raise
        logging.getLogger("wildtrace").warning("%s. A run of this config would be refused before any request; "
                                               "it is estimated all the same", exc)
    return settings


def settings_of(dict_cfg: DictConfig, overrides: list[str] | None = None) -> WildtraceConfig:
    """Every check of ``prepare`` but the retired routes: known keys, the schema, no credential, no reserved key."""
    check_overrides(overrides or [])
    check_known_keys(dict_cfg)
    settings = to_settings(dict_cfg)
    check_settings_secrets(settings)  # a key in a config file's URL, or in the variable a URL is read from
    check_reserved(settings)  # a judge keyed "model" would take the model's endpoint
    return settings


def command_line_overrides(argv: list[str] | None = None) -> tuple[list[str], bool]:
    """The overrides of a Hydra command line, as Hydra's own parser splits them from its flags, and whether
    they are this config tree's (not when the command reads another: ``--config-dir``, ``--config-path``,
    ``--config-name``, ``hydra.searchpath``).
    """
    from hydra._internal.utils import get_args_parser

    known, _ = get_args_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    overrides = list(known.overrides or [])
    other_tree = bool(known.config_dir or known.config_path or known.config_name) or any(
        o.lstrip("+~").startswith("hydra.searchpath") for o in overrides)
    return overrides, not other_tree


def check_command_line(prog: str, schema_cls: type = WildtraceConfig, conf_dir: Path | None = Path(CONF_DIR),
                       argv: list[str] | None = None) -> None:
    """Before Hydra composes (and writes ``.hydra/``, ``multirun.yaml``, the job log): an override that would
    put a credential in the config, or a mistyped group or key, exits 2 (the nearest valid name for a typo).

    Hydra's own answer to ``judge_pannel=offline`` is "To append to your config use +judge_pannel=…"
    (exit 1): the `+` would only add a key the schema then refuses.
    """
    overrides, ours = command_line_overrides(argv)
    try:
        check_override_secrets(overrides)  # whatever the tree: Hydra writes every override down
        if not ours:
            return
        check_override_names(overrides, schema_cls, conf_dir)
        check_launcher(overrides)
        if conf_dir is not None:  # an ablation file that drops a judge its parent lacks (Hydra: exit 1)
            check_panel_drops(overrides, conf_dir)
    except ConfigError as exc:
        fail(prog, exc)


def discard_rejected(run_dir: Path, made: list[Path] | None = None) -> None:
    """Remove a run folder this process made that holds only what was written before the job refused its input.

    A refused command ran nothing: a folder of ``.hydra/``, ``command.json`` and the job log under ``runs/`` would
    look like a run to ``wildtrace.report`` (and to a reader). The error is on stderr. Only the
    folders in ``made`` (default: those RunDirCheck made) go: a folder that was there before the
    command (``hydra.run.dir=.``, the folder the user stands in) and a folder with anything
    else in it (run files) are left alone; a parent goes only when this made it and it is empty.
    """
    import shutil

    made = MADE if made is None else made
    run_dir = run_dir.absolute()
    if run_dir not in made:
        return
    try:
        entries = list(run_dir.iterdir())
    except OSError:
        return
    if not all(e.name in (".hydra", "command.json") or (e.is_file() and e.suffix == ".log") for e in entries):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in made[made.index(run_dir) + 1:]:  # the day's folder, when this run made it and was its only one
        with contextlib.suppress(OSError):
            parent.rmdir()


def observer_for(settings: WildtraceConfig, parent_run_id: str | None = None) -> RunObserver:
    """What hears the run's events: MLflow tracking (from a child process) when it is on.

    The entry point composes the layers: runtime and tracking never import each other.
    A local store that cannot be opened is found here, before any request: a ConfigError
    (exit 2) naming the path when ``mlflow.required``, else one warning and an unlogged run.
    """
    from wildtrace.tracking.process import ProcessObserver, discard_prestarted

    if not settings.mlflow.enabled:
        discard_prestarted()
        return RunObserver()
    from wildtrace.tracking.store import StoreUnusable, check_store

    m = settings.mlflow
    try:
        check_store(m.tracking_uri)
    except StoreUnusable as exc:
        if m.required:
            raise ConfigError(f"mlflow.tracking_uri: {exc} (mlflow.required=false runs unlogged, "
                              "mlflow.enabled=false without MLflow)") from None
        from wildtrace.tracking.runs.observer import UnloggedObserver

        discard_prestarted()
        text = str(exc)
        log.warning("%s; the run goes on unlogged (mlflow.required=false)", text[:1].upper() + text[1:])
        return UnloggedObserver(text, parent_run_id)
    return ProcessObserver(m.tracking_uri, m.experiment, m.artifact_location, m.log_documents, parent_run_id)


def name_command(settings: WildtraceConfig, overrides: list[str]) -> None:
    """Write ``command.json`` in the run folder before the first request: a folder whose process group is
    killed whole (Slurm, the OOM killer) still says what reruns it, from where (``wildtrace.upload`` prints it)."""
    from wildtrace.runtime.store.cache import StorageError
    from wildtrace.runtime.run.execute import config_dict, resume_command
    from wildtrace.tracking.rundir import COMMAND_FILE, write_command

    run_dir = Path(str(settings.out_dir))
    try:
        write_command(run_dir, resume_command(overrides), overrides, config_dict(settings))
    except OSError as exc:
        raise StorageError(exc.errno or 5, f"cannot write {run_dir / COMMAND_FILE}: {exc.strerror or exc}") from None


def show_headline(result: RunResult) -> None:
    """Print the run's headline (stdout's only text), then log it, so the job log ends with it too."""
    print(result.headline, flush=True)
    logging.getLogger(HEADLINE_LOG).info("%s", result.headline)


def _decoding_sweeps(sweep_dir: Path) -> list[tuple[str, list[Any]]]:
    """The sweep's ``decoding.*`` sweeps as (field, values), from the ``multirun.yaml`` Hydra writes in
    the sweep folder before the first job (none without it)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    path = sweep_dir / "multirun.yaml"
    if not path.is_file():
        return []
    task = OmegaConf.select(OmegaConf.load(path), "hydra.overrides.task") or []
    return [(o.key_or_group.removeprefix("decoding."), list(o.sweep_iterator()))
            for o in OverridesParser.create().parse_overrides([str(t) for t in task])
            if o.is_sweep_override() and o.key_or_group.startswith("decoding.")]


def sweep_repeats(sweep_dir: Path) -> int:
    """How many jobs of a sweep send each answer prompt: the sizes of its ``decoding.*`` sweeps multiplied."""
    return math.prod(max(1, len(values)) for _, values in _decoding_sweeps(sweep_dir))


def sweep_decodings(sweep_dir: Path, own: DecodingConfig) -> list[DecodingConfig]:
    """The sweep's other decoding points: ``own`` with each other combination of its ``decoding.*`` sweeps."""
    sweeps = _decoding_sweeps(sweep_dir)
    points = [replace(own, **dict(zip([k for k, _ in sweeps], combo, strict=True)))
              for combo in itertools.product(*(values for _, values in sweeps))]
    return [p for p in points if p != own]


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _job(dict_cfg: DictConfig) -> float | None:
    from hydra.types import RunMode

    from wildtrace.core.tasks import DatasetError
    from wildtrace.memory import return_large_buffers
    from wildtrace.runtime.store.cache import StorageError
    from wildtrace.runtime.run.execute import run
    from wildtrace.runtime.net.secrets import MissingKeyError
    from wildtrace.tracking.runs.sweep import read_parent

    return_large_buffers()  # here, not in main(): a sweep's jobs may run in worker processes of their own
    route_console_to_stderr()
    hydra_cfg = HydraConfig.get()
    parent = read_parent(hydra_cfg.sweep.dir) if hydra_cfg.mode == RunMode.MULTIRUN else None
    for noisy in ("httpx", "httpcore"):  # one INFO line per request drowns the progress bar
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        settings = prepare(dict_cfg, list(hydra_cfg.overrides.task))
        settings.out_dir = hydra_cfg.runtime.output_dir
        if hydra_cfg.mode == RunMode.MULTIRUN:
            settings.prompt_repeats = sweep_repeats(Path(hydra_cfg.sweep.dir))
            settings.sweep_decodings = sweep_decodings(Path(hydra_cfg.sweep.dir), settings.decoding)
        name_command(settings, list(hydra_cfg.overrides.task))
        result = run(settings, overrides=list(hydra_cfg.overrides.task), parent_run_id=parent,
                     observer=observer_for(settings, parent))
    except (ConfigError, DatasetError, MissingKeyError, StorageError) as exc:
        if hydra_cfg.mode != RunMode.MULTIRUN:  # a sweep's summary lists a refused job as failed: keep its folder
            discard_rejected(Path(hydra_cfg.runtime.output_dir))
        fail("wildtrace", exc)
    show_headline(result)
    if result.exit_code:
        raise SystemExit(result.exit_code)
    return result.summary["overall"] if result.summary else None


#: ``mlflow.enabled`` set false on the command line, as OmegaConf reads a bool.
MLFLOW_OFF = frozenset(f"{prefix}mlflow.enabled={v}" for prefix in ("", "++")
                       for v in ("false", "no", "off", "0"))


def prestart_wanted(argv: list[str]) -> bool:
    """Whether a command line runs one job that logs to MLflow as far as its flags say (``main`` then
    starts the logging process before Hydra composes; a wrong guess costs a process, never a result).

    Not for Hydra's own pages (``--help``, ``--cfg``, ``--info``, …), a sweep (its launcher runs
    no job itself; each job starts its own), nor ``mlflow.enabled=false`` given on the line.
    """
    from hydra._internal.utils import get_args_parser

    known, _ = get_args_parser().parse_known_args(argv)
    if known.multirun or known.help or known.hydra_help or known.cfg or known.info or known.shell_completion:
        return False
    return not any(o.replace(" ", "").lower() in MLFLOW_OFF for o in known.overrides or [])



def main() -> None:
    """Console script and ``python -m wildtrace``."""
    check_command_line("wildtrace")  # first: nothing is started or written for a refused command line
    if prestart_wanted(sys.argv[1:]):
        from wildtrace.tracking.process import prestart

        prestart()
    _job()


if __name__ == "__main__":
    main()
