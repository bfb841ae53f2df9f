"""What a run says when it ends: the headline, its failure and cost lines, where what was received is kept,
and the overrides that raise a spend cap far enough to finish."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

from wildtrace import __version__
from wildtrace.config import WildtraceConfig
from wildtrace.runtime.net import served
from wildtrace.runtime.spend.cap import Ledger
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.runtime.run.pipeline import Counters, Outcome


def config_prefix(label: str) -> str:
    """The config key an endpoint's settings live under."""
    return "model" if label == "model" else f"judge_panel.judges.{label}"


def served_model_warnings(endpoints: dict[str, Endpoint],
                          rules: dict[str, served.ServedPolicy] | None = None) -> list[tuple[str, str]]:
    """(code, message) for each endpoint whose responses name a model its served_model rule does not accept."""
    rules = rules if rules is not None else {label: served.ServedPolicy(served.default_pattern(
        e.provider.spec.route), "warn", route=e.provider.spec.route) for label, e in endpoints.items()}
    return served.warnings(rules, {label: e.served_models for label, e in endpoints.items()},
                           {label: e.provider.spec.route for label, e in endpoints.items()})


def failure_lines(counters: Counters) -> list[str]:
    """Failures by endpoint and reason, with each endpoint's dominant error."""
    lines = []
    for label, calls in counters.calls.items():
        failed = sum(n for (lbl, _), n in counters.failures.items() if lbl == label)
        if not failed:
            continue
        reasons = ", ".join(f"{reason} {n}" for (lbl, reason), n in counters.failures.most_common() if lbl == label)
        dominant, _ = counters.errors[label].most_common(1)[0]
        lines.append(f"{label}: {failed}/{calls} calls failed ({reasons}): {dominant}")
    return lines


def all_failed(counters: Counters) -> list[str]:
    """Endpoints that made calls and saw every one of them fail."""
    return [label for label, calls in counters.calls.items()
            if calls and sum(n for (lbl, _), n in counters.failures.items() if lbl == label) == calls]


def headline(cfg: WildtraceConfig, summary: dict | None, outcome: Outcome, out_dir: Path, stats: dict) -> str:
    """The lines printed at the end of a run."""
    c = outcome.counters
    n_tasks = stats["dataset"]["n_tasks"]
    lines = [f"wildtrace {__version__}: model={cfg.model.name} panel={cfg.judge_panel.name} "
             f"dataset={cfg.dataset.name} ({n_tasks} tasks, stage={cfg.stage}, replicate "
             f"decoding={cfg.decoding.replicate} judges={cfg.judge_panel.replicate})"]
    if outcome.stopped:
        lines.append(f"STOPPED ({outcome.stopped}): {len(outcome.answers)} of {n_tasks} tasks finished; the numbers "
                     f"below cover those only (partial). {kept_line(cfg, stats['uncached'])}")
    if summary is not None:
        scored = "n/a" if summary["scored"] is None else f"{summary['scored']:.2f}%"
        overall = "n/a" if summary["overall"] is None else f"{summary['overall']:.2f}%"
        lines.append(f"overall (All view): {overall}   scored: {scored} (n={summary['n_scored']})")
        lines.append(f"scored {summary['n_scored']} · unscored {summary['n_unscored']} · failed {summary['n_failed']}"
                     f" · out of context {summary['n_out_of_context']} · missing {summary['n_missing']}"
                     + (f" · budget_exhausted {summary['n_budget_exhausted']}"
                        if summary.get("n_budget_exhausted") else "") + f" · of {summary['n_total']}")
    else:
        lines.append(f"answered {c.answered} · failed {c.failed} · out of context {c.out_of_context}"
                     + (f" · budget_exhausted {c.budget_exhausted}" if c.budget_exhausted else ""))
    calls = sum(c.calls.values())
    lines.append(f"calls: {calls} ({stats['cache_hits']} from the cache, {sum(stats['requests'].values())} requests "
                 f"sent, {stats['retries']} retries)")
    lines.extend(failure_lines(c))
    lines.extend(f"warning: {w['message']}" for w in stats["warnings"])
    lines.append(f"run dir: {out_dir}")
    return "\n".join(lines)


def kept_line(cfg: WildtraceConfig, uncached: dict) -> str:
    """Where what was received is kept: the headline's promise, true in every case."""
    if not cfg.cache.enabled:
        return "The cache is off (cache.enabled=false): what was received is in the run files only."
    if not uncached["outcomes"]:
        return "Every outcome received is cached."
    text = (f"{uncached['outcomes']} outcome(s) received could not be cached (storage failure): they are in the "
            "run files (noted 'not cached')")
    if uncached["journal"]:
        text += f" and kept in {uncached['journal']}, which the rerun reads"
    if uncached["lost"]:
        text += f"; {uncached['lost']} of them could not be journaled either and will be paid again"
    return text + ". Everything else received is cached."


def _kept_without_run_files(cache: Cache) -> str:
    """Where the outcomes are when the run files could not be written (the error's promise, kept true)."""
    if not cache.uncached:
        return "every outcome received is in the cache"
    if cache.uncached > cache.journaled:
        return f"{cache.uncached - cache.journaled} outcome(s) received could be kept nowhere and will be paid again"
    return f"the outcomes the cache refused are in {cache.journal}"


def money(value: float | None) -> str:
    """USD for a person: unknown stays unknown."""
    return "unknown" if value is None else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def cost_lines(cost: dict) -> list[str]:
    """The headline's cost: the total and each endpoint's (at least / at most when attempts' bills are unknown),
    what earlier runs of the command paid, and what a cap held back."""
    parts = ", ".join(f"{label} {spend(row['cost_usd'], row['at_most_usd'], row['attempts_cost_unknown'])}"
                      for label, row in cost["endpoints"].items())
    lines = [f"cost: {spend(cost['total_usd'], cost['at_most_usd'], 0)} ({parts})"]
    if cost["earlier_usd"]:
        lines.append(f"this command so far, its earlier runs included: at most {money(cost['command_usd'])} "
                     f"({money(cost['earlier_usd'])} of it before this run)")
    if cost["not_sent_budget"]:
        caps = ([f"budget.max_usd={money(cost['max_usd'])}"] if cost["max_usd"] is not None else []) + \
               [f"{config_prefix(label)}.max_usd={money(row['max_usd'])}" for label, row in cost["endpoints"].items()
                if row["max_usd"] is not None]
        lines.append(f"BUDGET CAP REACHED ({', '.join(caps)}): this command spent at most "
                     f"{money(cost['command_usd'])}; {cost['not_sent_budget']} calls not sent (recorded as "
                     "budget_exhausted, never cached: a rerun with a higher cap sends only them)")
    return lines


def spend(known: float | None, at_most: float | None, unknown: int) -> str:
    """``$1.20``, or ``at least $1.20, at most $1.50`` when some attempts' bills are unknown (at their worst case)."""
    if known is None or at_most is None or at_most == known:
        return money(known)
    attempts = f" ({unknown} attempts of unknown bill at their worst case)" if unknown else ""
    return f"at least {money(known)}, at most {money(at_most)}{attempts}"


def raised_caps(cfg: WildtraceConfig, ledger: Ledger, overrides: Sequence[str]) -> list[str]:
    """The overrides with every cap that held calls back raised to what lets the command finish: what it has
    paid or may have been billed so far, plus the worst case of each call left (one attempt each)."""
    raised: dict[str, float] = {}
    if cfg.budget.max_usd is not None:
        need = sum((a.settled() + a.left for a in ledger.accounts.values()), Fraction(0))
        raised["budget.max_usd"] = max(_up(need), cfg.budget.max_usd)
    for label, account in ledger.accounts.items():
        if account.not_sent and account.cap is not None:
            raised[f"{config_prefix(label)}.max_usd"] = max(_up(account.settled() + account.left), float(account.cap))
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in raised]
    return kept + [f"{key}={value:g}" for key, value in raised.items()]


def _up(amount: Fraction) -> float:
    """USD rounded up to the next 1e-6, so a cap named this way is never short of ``amount``."""
    return math.ceil(amount * 1_000_000) / 1_000_000
