"""``python -m wildtrace.estimate [overrides]``: what a run would cost, before it sends anything.

Takes the same overrides as a run and plans it exactly as the run does (``run.plan_run``:
caps, out-of-context tasks, cache hits, replicates, stage), then prices every call still
to send (docs/providers/cost.md):

- input tokens from the prompt's characters: 3.3 characters a token for English documents,
  1.5 for CJK ones (the spec's ratios, the same the rate pacing uses);
- output tokens as a range: a typical reply (``estimate.answer_tokens``,
  ``estimate.judge_tokens``) up to the completion budget (``max_tokens``);
- a judge call of an answer not known yet holds that answer in its prompt: low, a typical
  answer; high, a full ``max_tokens`` one;
- a call whose input crosses the endpoint's long-context tier is priced at the tier;
- an answer whose prompt the sweep sends again (``prompt_repeats`` above 1) may be read from the
  provider's prompt cache: low, all its input read at the cached price (a repeat that hits); high,
  all of it missed, or written where a write costs more (the first call of a marked prompt).

Prints one row per endpoint and the total, and writes ``estimate.json`` in its output
folder. No key is read and no request is sent. Exit 2 on a config or data error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from wildtrace.app import CONF_DIR, check_command_line, prepare, route_console_to_stderr
from wildtrace.exitcodes import fail
from wildtrace.config import ConfigError, WildtraceConfig, batch_labels, price_of, register
from wildtrace.core.caps import CHARS_PER_TOKEN, tokens_of
from wildtrace.core.cost import Billable, Price, exact_cost, in_tier, worst_cost
from wildtrace.runtime.run.pipeline import PlannedCall

register()

def _usd(price: Price | None, input_tokens: int, output_tokens: int, batched: bool = False,
         cached: int = 0) -> float | None:
    exact = exact_cost(price, Billable(input_tokens, cached, output_tokens), batched)
    return None if exact is None else float(exact)


def _worst_usd(price: Price | None, input_tokens: int, output_tokens: int, batched: bool = False) -> float | None:
    exact = worst_cost(price, Billable(input_tokens, 0, output_tokens), batched)
    return None if exact is None else float(exact)


def price_calls(calls: Iterable[PlannedCall], prices: Mapping[str, Price | None], typical: Mapping[str, int],
                answer_max_tokens: int, batched: frozenset[str] = frozenset(),
                repeated: frozenset[str] = frozenset()) -> dict:
    """estimate.json from the planned calls: per endpoint and the total (USD None where a price is missing).

    ``typical``: label → a typical reply's output tokens; ``answer_max_tokens``: the answers'
    budget, the longest answer a pending judge call may hold; ``batched``: the endpoints sent
    through a batch API, priced with their ``batch_discount`` (unknown where it has none);
    ``repeated``: the endpoints whose prompts the sweep sends again (low: read from the provider's cache).
    """
    rows: dict[str, dict] = {label: {"calls": 0, "input_tokens": 0, "input_tokens_max": 0, "output_tokens_min": 0,
                                     "output_tokens_max": 0, "tier_calls": 0, "cache_read_tokens": 0,
                                     "usd_min": 0.0, "usd_max": 0.0}
                             for label in prices}
    answer_typical = typical.get("model", 0)
    for call in calls:
        row, price = rows[call.label], prices[call.label]
        low_in = high_in = tokens_of(call.prompt_chars, call.cjk)
        if call.answer_pending:
            low_in, high_in = low_in + answer_typical, high_in + answer_max_tokens
        low_out = min(typical.get(call.label, 0), call.max_tokens)
        row["calls"] += 1
        row["input_tokens"] += low_in
        row["input_tokens_max"] += high_in
        row["output_tokens_min"] += low_out
        row["output_tokens_max"] += call.max_tokens
        row["tier_calls"] += int(price is not None and in_tier(price, low_in))
        b = call.label in batched
        reads = low_in if call.label in repeated and price is not None and \
            price.cached_input_per_mtok is not None else 0
        row["cache_read_tokens"] += reads
        for key, usd in (("usd_min", _usd(price, low_in, low_out, b, reads)),
                         ("usd_max", _worst_usd(price, high_in, call.max_tokens, b) if call.label in repeated
                          else _usd(price, high_in, call.max_tokens, b))):
            row[key] = None if usd is None or row[key] is None else row[key] + usd
    for row in rows.values():
        for key in ("usd_min", "usd_max"):
            row[key] = None if row[key] is None else round(row[key], 6)
    total = {key: (None if any(r[key] is None for r in rows.values()) else round(sum(r[key] for r in rows.values()), 6))
             for key in ("usd_min", "usd_max")}
    for key in ("usd_min", "usd_max"):  # what the priced endpoints alone come to, when some have no price
        total[f"priced_{key}"] = round(sum(r[key] for r in rows.values() if r[key] is not None), 6)
    return {"endpoints": rows, "total": total}


def estimate(cfg: WildtraceConfig) -> dict:
    """Plan the run as ``run`` would and price what it still has to send."""
    from wildtrace.runtime.run.execute import endpoint_configs, plan_run

    plan, survey = plan_run(cfg)
    specs, configs, answer = plan.specs, endpoint_configs(cfg), plan.answer_sampling
    prices = {s.label: price_of(configs[s.label]) for s in specs}
    typical = {s.label: cfg.estimate.answer_tokens if s.label == "model" else cfg.estimate.judge_tokens for s in specs}
    repeated = frozenset({"model"} if cfg.prompt_repeats > 1 else ())
    out = price_calls(survey.planned, prices, typical, answer.max_tokens, batch_labels(cfg), repeated)
    out["missing_prices"] = {s.label: f"{'model' if s.label == 'model' else 'judge_panel.judges.' + s.label}.price."
                             + prices[s.label].missing()[0] for s in specs if prices[s.label].missing()}
    out["plan"] = {"answers_to_request": survey.answers_to_request, "answers_cached": survey.answers_cached,
                   "out_of_context": survey.out_of_context, "judge_calls_cached": survey.judge_calls_cached,
                   "judge_calls_pending_answers": survey.judge_calls_pending}
    out["assumptions"] = {"chars_per_token": CHARS_PER_TOKEN, "typical_output_tokens": typical}
    return out


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def render(est: dict) -> str:
    """The estimate as an aligned table and a total line."""
    header = ("endpoint", "calls", "input tokens", "cache reads", "output tokens", "tier calls", "USD low",
              "USD high")
    rows = [header]
    for label, r in est["endpoints"].items():
        wider = r["input_tokens_max"] != r["input_tokens"]
        inputs = f"{r['input_tokens']:,}" + (f"–{r['input_tokens_max']:,}" if wider else "")
        reads = f"0–{r['cache_read_tokens']:,}" if r["cache_read_tokens"] else "0"
        rows.append((label, f"{r['calls']:,}", inputs, reads, f"{r['output_tokens_min']:,}–{r['output_tokens_max']:,}",
                     f"{r['tier_calls']:,}", _money(r["usd_min"]), _money(r["usd_max"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.append(total_line(est))
    lines.extend(f"price unknown: {label} has no {key} (the total stays unknown until it is set)"
                 for label, key in est.get("missing_prices", {}).items())
    return "\n".join(lines)


def total_line(est: dict) -> str:
    """One line: the run's estimated cost, low to high."""
    t = est["total"]
    calls = sum(r["calls"] for r in est["endpoints"].values())
    text = (f"estimate: {_money(t['usd_min'])} – {_money(t['usd_max'])} for the calls still to send "
            f"({calls:,} calls; nothing sent)")
    if t["usd_min"] is None:
        text += f"; the priced endpoints alone: {_money(t['priced_usd_min'])} – {_money(t['priced_usd_max'])}"
    return text


#: Stands in for a base URL nobody set: the estimate sends nothing, so it needs no host (nor key).
UNSET_BASE_URL = "http://base-url-not-set.invalid"


def fill_unset_base_urls(dict_cfg: DictConfig) -> None:
    """An endpoint whose base URL comes from an unset variable still gets priced (a run would refuse it)."""
    nodes = [dict_cfg.model, *dict_cfg.judge_panel.judges.values()]
    for node in nodes:
        if not str(node.get("base_url") or "").strip():
            node.base_url = UNSET_BASE_URL


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="estimate")
def _estimate(dict_cfg: DictConfig) -> None:
    from wildtrace.core.tasks import DatasetError

    route_console_to_stderr()
    hydra_cfg = HydraConfig.get()
    try:
        fill_unset_base_urls(dict_cfg)
        cfg = prepare(dict_cfg, list(hydra_cfg.overrides.task), refuse_retired=False)
        est = estimate(cfg)
    except (ConfigError, DatasetError) as exc:
        fail("wildtrace-estimate", exc)
    out = Path(hydra_cfg.runtime.output_dir) / "estimate.json"
    out.write_text(json.dumps(est, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(render(est))
    print(f"written: {out}")


def main() -> None:
    """Console script and ``python -m wildtrace.estimate``."""
    check_command_line("wildtrace-estimate")
    _estimate()


if __name__ == "__main__":
    main()
