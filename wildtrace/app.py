"""The thin Hydra entry point: compose → convert once → run → print the headline."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from wildtrace.config import ConfigError, register, to_settings

register()

#: The config tree sits at the project's top level (conf/), beside the package; an
#: absolute path keeps Hydra from looking for it as a Python module.
CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def _job(dict_cfg: DictConfig) -> float | None:
    from wildtrace.core.tasks import DatasetError
    from wildtrace.runtime.cache import StorageError
    from wildtrace.runtime.run import run
    from wildtrace.runtime.secrets import MissingKeyError

    from hydra.types import RunMode

    from wildtrace.tracking.sweep import read_parent

    hydra_cfg = HydraConfig.get()
    parent = read_parent(hydra_cfg.sweep.dir) if hydra_cfg.mode == RunMode.MULTIRUN else None
    for noisy in ("httpx", "httpcore"):  # one INFO line per request drowns the progress bar
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        settings = to_settings(dict_cfg)
        settings.out_dir = hydra_cfg.runtime.output_dir
        result = run(settings, overrides=list(hydra_cfg.overrides.task), parent_run_id=parent)
    except (ConfigError, DatasetError, MissingKeyError, StorageError) as exc:
        print(f"wildtrace: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if result.exit_code:
        raise SystemExit(result.exit_code)
    return result.summary["overall"] if result.summary else None


def main() -> None:
    """Console script and ``python -m wildtrace``."""
    _job()


if __name__ == "__main__":
    main()
