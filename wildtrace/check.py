"""``python -m wildtrace.check [overrides]``: does a paid run work? One small request per endpoint.

Takes the same overrides as a run (``model=…``, ``judge_panel=…``, ``access=gateway …``) and
sends each endpoint of the run's stage one few-word prompt with the run's real settings.
First, before any paid call, each endpoint's own model list is asked whether it holds the
route (runtime/checks/catalog.py; one line per endpoint): a route the list lacks, or lists as shut
down, fails the check and is not called; an endpoint without a list says "no model list".
Then prints a table (endpoint, route, the model that answered, status, latency, whether
temperature was accepted, the provider's message) and, beside it, the whole run's estimated
cost (``python -m wildtrace.estimate``'s total); exits 1 if any endpoint failed or was
answered by a model its ``served_model`` rule refuses, 2 on a config or key error
(docs/reference/entry-points.md). Its job log goes under ``<root>/checks/`` (conf/check.yaml), not ``runs/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import hydra
from omegaconf import DictConfig

from hydra.core.hydra_config import HydraConfig

from wildtrace.app import CONF_DIR, check_command_line, route_console_to_stderr, settings_of
from wildtrace.config import ConfigError, WildtraceConfig, register
from wildtrace.config.checks import retired_problems
from wildtrace.exitcodes import ExitCode, error, fail

register()


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="check")
def _check(dict_cfg: DictConfig) -> None:
    from wildtrace.runtime.net import served
    from wildtrace.runtime.checks.preflight import listing_lines, model_lists, preflight, table
    from wildtrace.runtime.run.plan import retry_policy, samplings, stage_specs
    from wildtrace.runtime.run.execute import key_needs
    from wildtrace.runtime.net.secrets import MissingKeyError, install_log_filter, read_keys, redact

    install_log_filter()
    # stdout: the listing and the table; logs and errors: stderr (docs/reference/entry-points.md)
    route_console_to_stderr()
    cfg, problems = settings_and_problems(dict_cfg, list(HydraConfig.get().overrides.task))
    if cfg is None:
        fail("wildtrace-check", "\n  ".join(problems))
    try:
        answer, judge = samplings(cfg)
        specs = [(s, answer if s.label == "model" else judge) for s in stage_specs(cfg)]
        rules = served.policies(cfg)
    except ConfigError as exc:
        fail("wildtrace-check", "\n  ".join([*problems, str(exc)]))
    try:
        keys = read_keys(key_needs([s for s, _ in specs]))
    except MissingKeyError as exc:
        problems.append(str(exc))
    if problems:  # every problem of the config at once, not one per try
        fail("wildtrace-check", "\n  ".join(problems))
    # A check is one quick request per endpoint: at most one retry, and a short wait for it.
    retry = retry_policy(dataclasses.replace(cfg.retry, max_retries=min(cfg.retry.max_retries, 1),
                                             retry_after_max_s=min(cfg.retry.retry_after_max_s, 10)))
    listed = asyncio.run(model_lists([(s, keys.get(s.api_key_env or "")) for s, _ in specs]))
    for line in listing_lines([s for s, _ in specs], listed):
        print(redact(line), flush=True)
    checks = asyncio.run(preflight([(s, keys.get(s.api_key_env or ""), sampling) for s, sampling in specs], retry,
                                   rules, listed))
    print(redact(table(checks)))
    print(estimate_line(cfg))
    failed = [c.endpoint for c in checks if not c.ok]
    if failed:
        error("wildtrace-check", f"{len(failed)} of {len(checks)} endpoints failed: {', '.join(failed)}")
        raise SystemExit(ExitCode.RUN_FAILED)
    print(f"wildtrace-check: all {len(checks)} endpoints answered")


#: A stand-in for an unset base URL, so the check goes on to find the config's other problems.
UNSET_URL = "http://unset.invalid/v1"
#: The validation error of an unset base URL, and the node it names.
_UNSET = re.compile(r"^(\S+)\.base_url is empty")
#: The most unset URLs filled in one check (the model, the judges, the gateway).
MAX_UNSET = 16


def settings_and_problems(dict_cfg: DictConfig, overrides: list[str]) -> tuple[WildtraceConfig | None, list[str]]:
    """The run's settings (None when they cannot be made) and every problem found on the way: each unset base
    URL (filled with a stand-in so the check goes on), then each retired route; the missing keys come after."""
    from omegaconf import OmegaConf

    problems: list[str] = []
    for _ in range(MAX_UNSET):
        try:
            cfg = settings_of(dict_cfg, overrides)
            break
        except ConfigError as exc:
            problems.append(str(exc))
            unset = _UNSET.match(str(exc))
            if unset is None:
                return None, problems
            OmegaConf.update(dict_cfg, f"{unset.group(1)}.base_url", UNSET_URL, force_add=True)
    else:
        return None, problems
    return cfg, problems + retired_problems(cfg, Path(CONF_DIR))


def estimate_line(cfg: WildtraceConfig) -> str:
    """The whole run's estimated cost (python -m wildtrace.estimate's total), or why there is none."""
    from wildtrace.core.tasks import DatasetError
    from wildtrace.estimate import estimate, total_line

    try:
        return total_line(estimate(cfg))
    except (DatasetError, OSError) as exc:  # the check is about endpoints: a missing dataset does not fail it
        return f"estimate: unavailable ({exc})"


def main() -> None:
    """Console script and ``python -m wildtrace.check``."""
    check_command_line("wildtrace-check")
    _check()


if __name__ == "__main__":
    main()
