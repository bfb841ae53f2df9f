"""``python -m wildtrace.check [overrides]``: does a paid run work? One small request per endpoint.

Takes the same overrides as a run (``model=…``, ``judge_panel=…``, ``access=gateway …``) and
sends each endpoint of the run's stage one few-word prompt with the run's real settings.
First, before any paid call, each endpoint's own model list is asked whether it holds the
route (runtime/catalog.py; one line per endpoint): a route the list lacks, or lists as shut
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

import hydra
from omegaconf import DictConfig

from hydra.core.hydra_config import HydraConfig

from wildtrace.app import CONF_DIR, check_command_line, prepare, route_console_to_stderr
from wildtrace.config import ConfigError, WildtraceConfig, register
from wildtrace.exitcodes import ExitCode, error, fail

register()


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="check")
def _check(dict_cfg: DictConfig) -> None:
    from wildtrace.runtime import served
    from wildtrace.runtime.preflight import listing_lines, model_lists, preflight, table
    from wildtrace.runtime.plan import retry_policy, samplings, stage_specs
    from wildtrace.runtime.run import key_needs
    from wildtrace.runtime.secrets import MissingKeyError, install_log_filter, read_keys, redact

    install_log_filter()
    # stdout: the listing and the table; logs and errors: stderr (docs/reference/entry-points.md)
    route_console_to_stderr()
    try:
        cfg = prepare(dict_cfg, list(HydraConfig.get().overrides.task))  # the run's own checks, typos included
        answer, judge = samplings(cfg)
        specs = [(s, answer if s.label == "model" else judge) for s in stage_specs(cfg)]
        keys = read_keys(key_needs([s for s, _ in specs]))
        rules = served.policies(cfg)
    except (ConfigError, MissingKeyError) as exc:
        fail("wildtrace-check", exc)
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
